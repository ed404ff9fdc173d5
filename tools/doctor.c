/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment doctor: a preflight of this node.  Each finding is ok,
 * warn or fail, with what was seen and, where there is one, the fix for a
 * bare host, Docker, Kubernetes and systemd.  Every check tries the real
 * thing (a memfd, a child's /proc/PID/fd, a mempolicy call) rather than
 * trusting a version number.  What the library itself reads (host files
 * under the host root, the memory cgroup's room, the HugeTLB pools, the
 * accelerator runtimes and each device's NUMA node) comes from the library
 * (private.h), so doctor reports what create() would see.  Exit status: 1
 * when any check fails.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <numa.h>
#include <numaif.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "cli.h"

#include "base/linux-compat.h"

enum status { OK, WARN, FAIL };
static const char *const status_names[] = { "ok", "warn", "fail" };

struct finding {
	const char *check;
	enum status status;
	char value[768]; /* room for create's whole reason (every VMM backend's) */
	char fix[512];
};

#define MAX_FINDINGS 32
static struct finding findings[MAX_FINDINGS];
static int nfindings;

static struct finding *add(const char *check, enum status status, const char *fix, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static struct finding *add(const char *check, enum status status, const char *fix, const char *fmt, ...)
{
	struct finding *f = &findings[nfindings < MAX_FINDINGS - 1 ? nfindings++ : nfindings];
	va_list ap;

	f->check = check;
	f->status = status;
	va_start(ap, fmt);
	vsnprintf(f->value, sizeof(f->value), fmt, ap);
	va_end(ap);
	snprintf(f->fix, sizeof(f->fix), "%s", fix ? fix : "");
	return f;
}

static void check_kernel(void)
{
	struct utsname u;
	int major = 0, minor = 0;
	void *p;
	bool populate;

	uname(&u);
	sscanf(u.release, "%d.%d", &major, &minor);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	populate = p != MAP_FAILED && madvise(p, 4096, MADV_POPULATE_WRITE) == 0;
	if (p != MAP_FAILED)
		munmap(p, 4096);
	add("kernel", populate ? OK : WARN,
	    populate
		    ? NULL
		    : "upgrade to Linux 5.14 or later for MADV_POPULATE_WRITE (commit falls back to touching pages, slower)",
	    "Linux %s; MADV_POPULATE_WRITE %s", u.release, populate ? "yes" : "no");
}

static void check_memfd(void)
{
	int fd = memfd_create("mooncake-segment-doctor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int err = errno, seals = -1;

	if (fd >= 0) {
		seals = fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
		close(fd);
	}
	if (fd < 0)
		add("memfd", FAIL,
		    "allow memfd_create in the seccomp profile (Docker: a custom --security-opt seccomp=PROFILE; "
		    "Kubernetes: seccompProfile RuntimeDefault allows it on current runtimes)",
		    "memfd_create failed: %s", strerror(err));
	else
		add("memfd", seals == 0 ? OK : WARN,
		    seals == 0 ? NULL : "a kernel with memfd sealing (3.17+)",
		    "memfd_create works; sealing %s", seals == 0 ? "works" : "refused");
}

/* The peer access test could not run: say which step failed and why, with the
 * fix when it is the open-file limit (every rank holds descriptors too). */
static void peer_access_untested(const char *step, int err)
{
	struct rlimit r = { 0, 0 };

	getrlimit(RLIMIT_NOFILE, &r);
	if (err == EMFILE || err == ENFILE)
		add("peer access", FAIL,
		    "raise the open-file limit: ulimit -n 65536 (Docker: --ulimit nofile=65536; Kubernetes: the "
		    "runtime's LimitNOFILE; systemd: LimitNOFILE=65536)",
		    "could not test: %s failed: %s (%s); this process may open %llu files (RLIMIT_NOFILE, ulimit "
		    "-n), and each segment needs a few",
		    step, strerror(err), err == EMFILE ? "EMFILE" : "ENFILE", (unsigned long long)r.rlim_cur);
	else
		add("peer access", FAIL, NULL, "could not test: %s failed: %s", step, strerror(err));
}

/* The socket route's system calls, as owner and peer do them: a memfd handed
 * over an abstract Unix socket by SCM_RIGHTS (seccomp or an LSM may refuse). */
static bool socket_route_works(void)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	socklen_t len;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	char byte = 0;
	struct iovec iov = { &byte, 1 };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = control.buf,
			      .msg_controllen = sizeof(control.buf) };
	struct cmsghdr *cmsg;
	struct stat sent, got;
	int mfd = memfd_create("mooncake-segment-doctor", MFD_CLOEXEC);
	int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	int client = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), conn = -1, received = -1;
	bool works = false;

	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			  (size_t)snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1,
					   "mooncake-segment/doctor-%d", (int)getpid()));
	if (mfd >= 0 && listener >= 0 && client >= 0 && bind(listener, (struct sockaddr *)&addr, len) == 0 &&
	    listen(listener, 1) == 0 && connect(client, (struct sockaddr *)&addr, len) == 0 &&
	    (conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		memset(&control, 0, sizeof(control));
		cmsg = CMSG_FIRSTHDR(&msg);
		if (cmsg) {
			cmsg->cmsg_level = SOL_SOCKET;
			cmsg->cmsg_type = SCM_RIGHTS;
			cmsg->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cmsg), &mfd, sizeof(int));
		}
		if (cmsg && sendmsg(conn, &msg, MSG_NOSIGNAL) == 1) {
			msg.msg_controllen = sizeof(control.buf);
			if (recvmsg(client, &msg, MSG_CMSG_CLOEXEC) == 1 && (cmsg = CMSG_FIRSTHDR(&msg)) &&
			    cmsg->cmsg_type == SCM_RIGHTS)
				memcpy(&received, CMSG_DATA(cmsg), sizeof(int));
		}
	}
	works = received >= 0 && fstat(received, &got) == 0 && fstat(mfd, &sent) == 0 &&
		got.st_ino == sent.st_ino;
	for (int *fd = (int[]){ mfd, listener, client, conn, received, -2 }; *fd != -2; fd++)
		if (*fd >= 0)
			close(*fd);
	return works;
}

/* Inode of one of this process's namespaces, 0 when unknown. */
static unsigned long long namespace_inode(const char *name)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/self/ns/%s", name);
	return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* Fork a child holding a memfd and try the kernel's routes to it, as a peer
 * would, and the socket route's calls. */
static void check_peer_access(void)
{
	int pipefd[2], fd, pidfd, route_proc = 0, route_pidfd = 0;
	bool route_socket = socket_route_works();
	char path[64], scope[16] = "";
	pid_t child;

	if (pipe(pipefd) != 0) {
		peer_access_untested("pipe", errno);
		return;
	}
	child = fork();
	if (child == 0) {
		/* The descriptor, or minus the errno of memfd_create. */
		int mfd = memfd_create("mooncake-segment-doctor", MFD_CLOEXEC);

		if (mfd < 0)
			mfd = -errno;
		(void)!write(pipefd[1], &mfd, sizeof(mfd));
		pause();
		_exit(0);
	}
	if (child < 0) {
		peer_access_untested("fork", errno);
		close(pipefd[0]);
		close(pipefd[1]);
		return;
	}
	close(pipefd[1]);
	fd = -EIO; /* a child that died before writing */
	if (read(pipefd[0], &fd, sizeof(fd)) != sizeof(fd) || fd < 0) {
		close(pipefd[0]);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		peer_access_untested("the test child's memfd_create", fd < 0 ? -fd : EIO);
		return;
	}
	close(pipefd[0]);
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)child, fd);
	int opened = open(path, O_RDWR | O_CLOEXEC);

	route_proc = opened >= 0;
	if (opened >= 0) {
		close(opened);
	} else if (errno == EMFILE || errno == ENFILE) {
		/* Out of descriptors is not a refusal of the route. */
		peer_access_untested("open of /proc/PID/fd", errno);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		return;
	}
	pidfd = (int)syscall(SYS_pidfd_open, child, 0);
	if (pidfd >= 0) {
		int got = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);

		route_pidfd = got >= 0;
		if (got >= 0)
			close(got);
		close(pidfd);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	mc_read_host_line("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope));
	/* The socket serves other PID namespaces of this network namespace, so
	 * the namespaces are shown: containers that share net:[...] can share. */
	add("peer access", route_socket || route_proc || route_pidfd ? OK : FAIL,
	    route_socket || route_proc || route_pidfd
		    ? NULL
		    : "allow AF_UNIX sockets (seccomp, LSM), or run every rank as the same user in one PID namespace; "
		      "host: sysctl -w kernel.yama.ptrace_scope=1; Docker: --cap-add SYS_PTRACE (and --pid=host or "
		      "--pid=container:NAME across containers); Kubernetes: securityContext.capabilities.add "
		      "[SYS_PTRACE], shareProcessNamespace: true",
	    "a memfd: Unix socket %s, /proc/PID/fd %s, pidfd_getfd %s; ptrace_scope %s; net:[%llu] pid:[%llu] "
	    "(ranks in another PID namespace share through the socket in net:[%llu] only)",
	    route_socket ? "passes it" : "refused", route_proc ? "opens" : "refused",
	    route_pidfd ? "works" : "refused or missing", scope[0] ? scope : "n/a (no Yama)",
	    namespace_inode("net"), namespace_inode("pid"), namespace_inode("net"));
}

static void check_dev_shm(void)
{
	struct statvfs s;
	char size[32];

	if (statvfs("/dev/shm", &s) != 0) {
		add("/dev/shm", OK, NULL, "absent; not needed (segments are unnamed memfds)");
		return;
	}
	format_size((uint64_t)s.f_blocks * s.f_frsize, size, sizeof(size));
	add("/dev/shm", OK, NULL,
	    "%s; not used by mooncake-segment (unnamed memfd), so its size never limits a segment", size);
}

static void check_cgroup(void)
{
	uint64_t total = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	struct mc_memory_room room;
	char a[32], b[32], c[32], d[32], e[32];

	/* The library's reading, under the host root, as create's room check reads it. */
	if (!mc_self_cgroup_room(&room) || room.limit >= total) {
		add("memory cgroup", OK, NULL, "no limit below RAM (%s)", format_size(total, a, sizeof(a)));
		return;
	}
	add("memory cgroup", room.room < total / 4 ? WARN : OK,
	    "the owner's segment is charged to its cgroup and create refuses one that does not fit: size the "
	    "limit for it (Docker: --memory; Kubernetes: resources.limits.memory; systemd: MemoryMax=)",
	    "limit %s, usage %s of which %s clean page cache (reclaimed first), room for a segment %s (%s); RAM %s",
	    format_size(room.limit, a, sizeof(a)), format_size(room.usage, b, sizeof(b)),
	    format_size(room.cache.clean, e, sizeof(e)), format_size(room.room, c, sizeof(c)), room.where,
	    format_size(total, d, sizeof(d)));
}

static void check_memlock(void)
{
	struct rlimit r;
	char a[32];
	bool root = geteuid() == 0;

	getrlimit(RLIMIT_MEMLOCK, &r);
	if (r.rlim_cur == RLIM_INFINITY || root) {
		add("RLIMIT_MEMLOCK", OK, NULL, "%s%s",
		    r.rlim_cur == RLIM_INFINITY ? "unlimited" : format_size(r.rlim_cur, a, sizeof(a)),
		    root && r.rlim_cur != RLIM_INFINITY ? " (root: CAP_IPC_LOCK exempts it)" : "");
		return;
	}
	add("RLIMIT_MEMLOCK", WARN,
	    "raise it where ranks register memory with RDMA (CUDA registration is not bound by it): ulimit -l unlimited; "
	    "Docker: --ulimit memlock=-1; Kubernetes: the runtime's default ulimits; systemd: LimitMEMLOCK=infinity",
	    "%s", format_size(r.rlim_cur, a, sizeof(a)));
}

/* Above RLIMIT_FSIZE the owner's create fails (the kernel would send SIGXFSZ). */
static void check_file_size_limit(void)
{
	struct rlimit r;
	char a[32];

	getrlimit(RLIMIT_FSIZE, &r);
	if (r.rlim_cur == RLIM_INFINITY) {
		add("RLIMIT_FSIZE", OK, NULL, "unlimited");
		return;
	}
	add("RLIMIT_FSIZE", WARN,
	    "an owner cannot create a segment larger than this file size limit (the memfd is a file): "
	    "ulimit -f unlimited; systemd: LimitFSIZE=infinity; a batch scheduler's file size limit",
	    "%s: segments up to that size only", format_size((uint64_t)r.rlim_cur, a, sizeof(a)));
}

static void check_thp(void)
{
	char enabled[128] = "?", shmem[128] = "?", defrag[128] = "?";
	bool shmem_on;

	mc_read_host_line("/sys/kernel/mm/transparent_hugepage/enabled", enabled, sizeof(enabled));
	mc_read_host_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled", shmem, sizeof(shmem));
	mc_read_host_line("/sys/kernel/mm/transparent_hugepage/defrag", defrag, sizeof(defrag));
	shmem_on = !strstr(shmem, "[never]") && !strstr(shmem, "[deny]") && strchr(shmem, '[');
	add("THP", shmem_on ? OK : WARN,
	    shmem_on
		    ? NULL
		    : "for 2 MiB pages on the default path: echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled "
		      "(a host setting; containers inherit it), or use hugetlb=True with a HugeTLB pool",
	    "enabled %s; shmem_enabled %s; defrag %s", enabled, shmem, defrag);
}

/* The pools the library reads for hugetlb=true: "free" is free and not reserved. */
static void check_hugetlb(void)
{
	uint64_t sizes[8], total, available, free_total = 0;
	size_t count = mc_hugetlb_sizes(sizes, sizeof(sizes) / sizeof(sizes[0])), used = 0;
	char pools[256] = "";

	if (!count) {
		add("HugeTLB", WARN, "a kernel with CONFIG_HUGETLBFS for hugetlb=True", "no HugeTLB support");
		return;
	}
	for (size_t i = 0; i < count && i < sizeof(sizes) / sizeof(sizes[0]) && used < sizeof(pools); i++) {
		if (!mc_hugetlb_pool(sizes[i], &total, &available))
			total = available = 0;
		free_total += available;
		used += (size_t)snprintf(pools + used, sizeof(pools) - used,
					 "%s%llukB: %llu pages, %llu free", i ? "; " : "",
					 (unsigned long long)(sizes[i] >> 10), (unsigned long long)total,
					 (unsigned long long)available);
	}
	add("HugeTLB", free_total ? OK : WARN,
	    free_total
		    ? NULL
		    : "hugetlb=True needs a pool: sysctl -w vm.nr_hugepages=N (N x 2 MiB; persist in /etc/sysctl.d/); "
		      "Kubernetes: pre-allocate on the node and request hugepages-2Mi",
	    "%s", pools);
}

static void check_numa(void)
{
	void *p;
	long ret;
	unsigned long mask = 1;

	if (numa_available() < 0) {
		add("NUMA", OK, NULL, "no NUMA support in this kernel; default placement");
		return;
	}
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ret = p == MAP_FAILED ? -1 : syscall(SYS_mbind, p, 4096, MPOL_BIND, &mask, sizeof(mask) * 8, 0);
	if (p != MAP_FAILED)
		munmap(p, 4096);
	add("NUMA", ret == 0 ? OK : WARN,
	    ret == 0
		    ? NULL
		    : "placement degrades to the default: Docker: --cap-add SYS_NICE (or a seccomp profile allowing "
		      "mbind/set_mempolicy); Kubernetes: securityContext.capabilities.add [SYS_NICE]",
	    "%d node(s); mbind %s", numa_num_configured_nodes(), ret == 0 ? "allowed" : strerror(errno));
}

/* The runtime of this build named @name, as the library loads it; false when
 * this build has none of that name. */
static bool find_runtime(const char *name, struct mc_runtime_report *report)
{
	for (size_t i = 0; mc_accel_report(i, report); i++)
		if (!strcmp(report->name, name))
			return true;
	return false;
}

static void check_cuda(void)
{
	struct mc_runtime_report cuda;
	char devices[512] = "";
	size_t used = 0;

	if (!find_runtime("cuda", &cuda)) {
		add("CUDA driver", OK, NULL, "not in this build (host_register=True on CUDA unavailable)");
		return;
	}
	if (!cuda.loaded) {
		add("CUDA driver", OK, NULL,
		    "not loaded: %s (no NVIDIA driver: host_register=True on CUDA unavailable)", cuda.why);
		return;
	}
	if (!cuda.available) {
		add("CUDA driver", WARN,
		    "install the NVIDIA driver matching the kernel module (nvidia-smi must work); no GPU visible: "
		    "CUDA_VISIBLE_DEVICES, the container's --gpus",
		    "loads but is not usable: %s", cuda.why);
		return;
	}
	/* Each GPU's host NUMA node: where automatic placement puts a segment for it. */
	for (int i = 0; i < cuda.devices && used < sizeof(devices); i++) {
		char node[16] = "?";

		if (cuda.device[i].numa_node >= 0)
			snprintf(node, sizeof(node), "%d", cuda.device[i].numa_node);
		used += (size_t)snprintf(devices + used, sizeof(devices) - used, "%s%d: %s node %s",
					 i ? ", " : "", i, cuda.device[i].pci_bus_id, node);
	}
	add("CUDA driver", OK, NULL, "%d device(s): %s", cuda.devices, devices);
}

static void check_ascend(void)
{
	const char *home = getenv("ASCEND_HOME_PATH");
	struct mc_runtime_report acl;
	bool built = find_runtime("ascend", &acl);

	add("Ascend runtime", OK, NULL, "%s%s%s%s",
	    !built	    ? "not in this build"
	    : acl.available ? "libascendcl.so loads, with a device"
	    : acl.loaded    ? "libascendcl.so loads: "
			    : "libascendcl.so not loaded: ",
	    built && !acl.available ? acl.why : "", home ? "; ASCEND_HOME_PATH=" : "", home ? home : "");
}

/*
 * mmap=false: which VMM backend (CUDA host VMM, Ascend VMM) serves device 0
 * here, as create() itself answers: a one-rank segment of one byte, created,
 * completed, described and destroyed at once; or create's reason why none can.
 * Optional: a host without one is fine (mmap=true serves everyone).
 */
static void check_vmm(void)
{
	struct mooncake_segment_options opt;
	struct mooncake_segment *seg = NULL;
	struct mooncake_segment_info info;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	bool described;

	mooncake_segment_options_init(&opt);
	opt.mmap = false;
	opt.device_id = 0;
	if (mooncake_segment_create("doctor-probe", 1, &opt, &seg, blob) < 0) {
		add("mmap=false", OK, NULL, "unavailable on device 0: %s", mooncake_segment_last_error());
		return;
	}
	described = mooncake_segment_complete(seg, blob, sizeof(blob)) == 0 &&
		    mooncake_segment_get_info(seg, &info, sizeof(info)) == 0;
	mooncake_segment_destroy(seg);
	if (!described) {
		add("mmap=false", WARN, "report this: a one-rank segment was created but not completed",
		    "created but not usable: %s", mooncake_segment_last_error());
		return;
	}
	add("mmap=false", OK, NULL, "%s on device 0 (%s, %llu KiB granules)", info.backend,
	    info.commit_method, (unsigned long long)(info.page_size >> 10));
}

/*
 * Which mooncake.shared_segment the user's python3 imports: Mooncake's own
 * wheel installs a regular `mooncake` package that hides ours.  The
 * interpreter answers for itself (python3 -m mooncake_segment --doctor prints
 * "status<TAB>seen<TAB>fix"), so the answer honours its venv and PYTHONPATH.
 * No python3, or none with our package, is no failure: C users need neither.
 */
static void check_python(void)
{
	const char *python = getenv("MOONCAKE_SEGMENT_PYTHON");
	char out[1024] = "", *seen, *fix, *last;
	size_t used = 0;
	int fds[2], status = 0;
	struct pollfd wait = { .events = POLLIN };
	pid_t child;

	if (!python || !*python)
		python = "python3";
	if (pipe2(fds, O_CLOEXEC) != 0) {
		add("python", WARN, NULL, "cannot run %s: %s", python, strerror(errno));
		return;
	}
	child = fork();
	if (child < 0) {
		add("python", WARN, NULL, "cannot run %s: %s", python, strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return;
	}
	if (child == 0) {
		int null = open("/dev/null", O_RDONLY);

		if (null < 0 || dup2(null, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0)
			_exit(126);
		execlp(python, python, "-m", "mooncake_segment", "--doctor", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	wait.fd = fds[0];
	while (used < sizeof(out) - 1 && poll(&wait, 1, 30000) == 1) {
		ssize_t n = read(fds[0], out + used, sizeof(out) - 1 - used);

		if (n <= 0)
			break;
		used += (size_t)n;
	}
	out[used] = '\0';
	close(fds[0]);
	kill(child, SIGKILL); /* a no-op unless it hung past the timeout or wrote too much */
	waitpid(child, &status, 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !used) {
		add("python", OK, NULL, "%s not found: only the Python binding needs it", python);
		return;
	}
	seen = strchr(out, '\t');
	fix = seen ? strchr(seen + 1, '\t') : NULL;
	if (fix && (!strncmp(out, "ok\t", 3) || !strncmp(out, "warn\t", 5))) {
		*seen++ = *fix++ = '\0';
		fix[strcspn(fix, "\n")] = '\0';
		add("python", out[0] == 'o' ? OK : WARN, fix, "%s", seen);
		return;
	}
	while (used && isspace((unsigned char)out[used - 1]))
		out[--used] = '\0';
	last = strrchr(out, '\n') ? strrchr(out, '\n') + 1 : out;
	/* Not installed for this python3 is fine (C users); installed but broken is not. */
	add("python", strstr(last, "No module named mooncake_segment") ? OK : WARN,
	    "apt install python3-mooncake-segment / dnf install python3-mooncake-segment (a venv needs "
	    "--system-site-packages), or pip install the source tarball against the system library",
	    "%s cannot import mooncake_segment: %s", python, *last ? last : "no output");
}

static void print_text(void)
{
	printf("%s doctor (%s)\n\n", PROGRAM, mooncake_segment_version());
	for (int i = 0; i < nfindings; i++) {
		printf("[%-4s] %-15s %s\n", status_names[findings[i].status], findings[i].check,
		       findings[i].value);
		if (findings[i].fix[0])
			printf("       %-15s fix: %s\n", "", findings[i].fix);
	}
}

static void print_json(void)
{
	printf("{\"version\": \"%s\", \"findings\": [", mooncake_segment_version());
	for (int i = 0; i < nfindings; i++) {
		printf("%s\n  {\"check\": ", i ? "," : "");
		json_string(stdout, findings[i].check);
		printf(", \"status\": \"%s\", \"value\": ", status_names[findings[i].status]);
		json_string(stdout, findings[i].value);
		printf(", \"fix\": ");
		json_string(stdout, findings[i].fix);
		printf("}");
	}
	printf("\n]}\n");
}

int cmd_doctor(int argc, char **argv)
{
	static const struct option options[] = { { "json", no_argument, NULL, 'j' },
						 { "help", no_argument, NULL, 'h' },
						 { NULL, 0, NULL, 0 } };
	bool json = false, failed = false;
	int c;

	while ((c = getopt_long(argc, argv, "jh", options, NULL)) != -1) {
		if (c == 'j') {
			json = true;
		} else {
			fprintf(c == 'h' ? stdout : stderr,
				"Usage: %s doctor [--json]\n\n"
				"Check this node for what shared segments need; exit 1 if a check fails.\n",
				PROGRAM);
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "%s doctor: unexpected argument '%s'; usage: %s doctor [--json]\n", PROGRAM,
			argv[optind], PROGRAM);
		return 2;
	}
	check_kernel();
	check_memfd();
	check_peer_access();
	check_dev_shm();
	check_cgroup();
	check_memlock();
	check_file_size_limit();
	check_thp();
	check_hugetlb();
	check_numa();
	check_cuda();
	check_ascend();
	check_vmm();
	check_python();
	for (int i = 0; i < nfindings; i++)
		failed = failed || findings[i].status == FAIL;
	if (json)
		print_json();
	else
		print_text();
	return failed ? 1 : 0;
}
