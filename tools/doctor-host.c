/* SPDX-License-Identifier: Apache-2.0 */
/*
 * doctor's checks of the host itself: the kernel (MADV_POPULATE_WRITE,
 * memfd and its seals), memory (/dev/shm, the memory cgroup's room, THP,
 * the HugeTLB pools, NUMA placement) and the limits a process runs under
 * (RLIMIT_MEMLOCK, RLIMIT_FSIZE).  Each tries the real thing where it can,
 * and reads what the library reads through the library (private.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "cli.h"
#include "doctor.h"

#include "base/linux-compat.h"

void check_kernel(void)
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
	doctor_add(
		"kernel", populate ? OK : WARN,
		populate
			? NULL
			: "upgrade to Linux 5.14 or later for MADV_POPULATE_WRITE (commit falls back to touching pages, slower)",
		"Linux %s; MADV_POPULATE_WRITE %s", u.release, populate ? "yes" : "no");
}

void check_memfd(void)
{
	int fd = memfd_create("mooncake-segment-doctor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int err = errno, seals = -1;

	if (fd >= 0) {
		seals = fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
		close(fd);
	}
	if (fd < 0)
		doctor_add(
			"memfd", FAIL,
			"allow memfd_create in the seccomp profile (Docker: a custom --security-opt seccomp=PROFILE; "
			"Kubernetes: seccompProfile RuntimeDefault allows it on current runtimes)",
			"memfd_create failed: %s", strerror(err));
	else
		doctor_add("memfd", seals == 0 ? OK : WARN,
			   seals == 0 ? NULL : "a kernel with memfd sealing (3.17+)",
			   "memfd_create works; sealing %s", seals == 0 ? "works" : "refused");
}

void check_dev_shm(void)
{
	struct statvfs s;
	char size[32];

	if (statvfs("/dev/shm", &s) != 0) {
		doctor_add("/dev/shm", OK, NULL, "absent; not needed (segments are unnamed memfds)");
		return;
	}
	format_size((uint64_t)s.f_blocks * s.f_frsize, size, sizeof(size));
	doctor_add("/dev/shm", OK, NULL,
		   "%s; not used by mooncake-segment (unnamed memfd), so its size never limits a segment",
		   size);
}

void check_cgroup(void)
{
	uint64_t total = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	struct mooncake_segment_options opt;
	struct mc_memory_room room;
	uint64_t largest = 0;
	char a[32], b[32], c[32], d[32], e[32], f[32];

	/* The library's reading, under the host root, as create's room check reads it. */
	if (!mc_self_cgroup_room(&room) || room.limit >= total) {
		doctor_add("memory cgroup", OK, NULL, "no limit below RAM (%s)",
			   format_size(total, a, sizeof(a)));
		return;
	}
	/* The number create() itself accepts: the room less the kernel's overhead and charge batching. */
	mooncake_segment_options_init(&opt);
	mooncake_segment_room(&opt, &largest);
	doctor_add(
		"memory cgroup", room.room < total / 4 ? WARN : OK,
		"the owner's segment is charged to its cgroup and create refuses one that does not fit: size the "
		"limit for it (Docker: --memory; Kubernetes: resources.limits.memory; systemd: MemoryMax=)",
		"limit %s, usage %s of which %s clean page cache (reclaimed first), room %s (%s), so the largest "
		"segment create accepts is %s; RAM %s",
		format_size(room.limit, a, sizeof(a)), format_size(room.usage, b, sizeof(b)),
		format_size(room.cache.clean, e, sizeof(e)), format_size(room.room, c, sizeof(c)), room.where,
		format_size(largest, f, sizeof(f)), format_size(total, d, sizeof(d)));
}

void check_memlock(void)
{
	struct rlimit r;
	char a[32];
	bool root = geteuid() == 0;

	getrlimit(RLIMIT_MEMLOCK, &r);
	if (r.rlim_cur == RLIM_INFINITY || root) {
		doctor_add("RLIMIT_MEMLOCK", OK, NULL, "%s%s",
			   r.rlim_cur == RLIM_INFINITY ? "unlimited" : format_size(r.rlim_cur, a, sizeof(a)),
			   root && r.rlim_cur != RLIM_INFINITY ? " (root: CAP_IPC_LOCK exempts it)" : "");
		return;
	}
	doctor_add(
		"RLIMIT_MEMLOCK", WARN,
		"raise it where ranks register memory with RDMA (CUDA registration is not bound by it): ulimit -l unlimited; "
		"Docker: --ulimit memlock=-1; Kubernetes: the runtime's default ulimits; systemd: LimitMEMLOCK=infinity",
		"%s", format_size(r.rlim_cur, a, sizeof(a)));
}

/* Above RLIMIT_FSIZE the owner's create fails (the kernel would send SIGXFSZ). */
void check_file_size_limit(void)
{
	struct rlimit r;
	char a[32];

	getrlimit(RLIMIT_FSIZE, &r);
	if (r.rlim_cur == RLIM_INFINITY) {
		doctor_add("RLIMIT_FSIZE", OK, NULL, "unlimited");
		return;
	}
	doctor_add("RLIMIT_FSIZE", WARN,
		   "an owner cannot create a segment larger than this file size limit (the memfd is a file): "
		   "ulimit -f unlimited; systemd: LimitFSIZE=infinity; a batch scheduler's file size limit",
		   "%s: segments up to that size only", format_size((uint64_t)r.rlim_cur, a, sizeof(a)));
}

void check_thp(void)
{
	char enabled[128] = "?", shmem[128] = "?", defrag[128] = "?";
	bool shmem_on;

	mc_read_host_line("/sys/kernel/mm/transparent_hugepage/enabled", enabled, sizeof(enabled));
	mc_read_host_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled", shmem, sizeof(shmem));
	mc_read_host_line("/sys/kernel/mm/transparent_hugepage/defrag", defrag, sizeof(defrag));
	shmem_on = mc_host_shmem_thp_allowed(); /* as create reads it */
	doctor_add(
		"THP", shmem_on ? OK : WARN,
		shmem_on
			? NULL
			: "for 2 MiB pages on the default path: echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled "
			  "(a host setting; containers inherit it), or use hugetlb=True with a HugeTLB pool",
		"enabled %s; shmem_enabled %s; defrag %s", enabled, shmem, defrag);
}

/* The pools the library reads for hugetlb=true: "free" is free and not reserved. */
void check_hugetlb(void)
{
	uint64_t sizes[8], total, available, free_total = 0;
	size_t count = mc_hugetlb_sizes(sizes, sizeof(sizes) / sizeof(sizes[0])), used = 0;
	char pools[256] = "";

	if (!count) {
		doctor_add("HugeTLB", WARN, "a kernel with CONFIG_HUGETLBFS for hugetlb=True",
			   "no HugeTLB support");
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
	doctor_add(
		"HugeTLB", free_total ? OK : WARN,
		free_total
			? NULL
			: "hugetlb=True needs a pool: sysctl -w vm.nr_hugepages=N (N x 2 MiB; persist in /etc/sysctl.d/); "
			  "Kubernetes: pre-allocate on the node and request hugepages-2Mi",
		"%s", pools);
}

void check_numa(void)
{
	void *p;
	long ret;
	unsigned long mask = 1;

	if (numa_available() < 0) {
		doctor_add("NUMA", OK, NULL, "no NUMA support in this kernel; default placement");
		return;
	}
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ret = p == MAP_FAILED ? -1 : syscall(SYS_mbind, p, 4096, MPOL_BIND, &mask, sizeof(mask) * 8, 0);
	if (p != MAP_FAILED)
		munmap(p, 4096);
	doctor_add(
		"NUMA", ret == 0 ? OK : WARN,
		ret == 0
			? NULL
			: "placement degrades to the default: Docker: --cap-add SYS_NICE (or a seccomp profile allowing "
			  "mbind/set_mempolicy); Kubernetes: securityContext.capabilities.add [SYS_NICE]",
		"%d node(s); mbind %s", numa_num_configured_nodes(), ret == 0 ? "allowed" : strerror(errno));
}
