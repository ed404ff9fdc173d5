/* SPDX-License-Identifier: Apache-2.0 */
/*
 * doctor's check of the routes by which a peer reaches the owner's memfd:
 * the socket route's system calls (SCM_RIGHTS over an abstract Unix
 * socket), and a forked child's descriptor through /proc/PID/fd and
 * pidfd_getfd, as a peer would take it; with Yama's ptrace_scope and the
 * namespaces that decide who can share with whom.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "doctor.h"

#include "base/linux-compat.h"

/* The peer access test could not run: say which step failed and why, with the
 * fix when it is the open-file limit (every rank holds descriptors too). */
static void peer_access_untested(const char *step, int err)
{
	struct rlimit r = { 0, 0 };

	getrlimit(RLIMIT_NOFILE, &r);
	if (err == EMFILE || err == ENFILE)
		doctor_add(
			"peer access", FAIL,
			"raise the open-file limit: ulimit -n 65536 (Docker: --ulimit nofile=65536; Kubernetes: the "
			"runtime's LimitNOFILE; systemd: LimitNOFILE=65536)",
			"could not test: %s failed: %s (%s); this process may open %llu files (RLIMIT_NOFILE, ulimit "
			"-n), and each segment needs a few",
			step, strerror(err), err == EMFILE ? "EMFILE" : "ENFILE",
			(unsigned long long)r.rlim_cur);
	else
		doctor_add("peer access", FAIL, NULL, "could not test: %s failed: %s", step, strerror(err));
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

/* A child that holds a memfd, as an owner would: its pid, with the
 * descriptor's number in *@fd; -1 (the finding added) when it could not start. */
static pid_t fork_memfd_holder(int *fd)
{
	int pipefd[2];
	pid_t child;

	if (pipe(pipefd) != 0) {
		peer_access_untested("pipe", errno);
		return -1;
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
		return -1;
	}
	close(pipefd[1]);
	*fd = -EIO; /* a child that died before writing */
	if (read(pipefd[0], fd, sizeof(*fd)) != sizeof(*fd) || *fd < 0) {
		close(pipefd[0]);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		peer_access_untested("the test child's memfd_create", *fd < 0 ? -*fd : EIO);
		return -1;
	}
	close(pipefd[0]);
	return child;
}

/* Fork a child holding a memfd and try the kernel's routes to it, as a peer
 * would, and the socket route's calls. */
void check_peer_access(void)
{
	int fd, pidfd, route_proc = 0, route_pidfd = 0;
	bool route_socket = socket_route_works();
	char path[64], scope[16] = "";
	pid_t child = fork_memfd_holder(&fd);

	if (child < 0)
		return;
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
	doctor_add(
		"peer access", route_socket || route_proc || route_pidfd ? OK : FAIL,
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
		(unsigned long long)mc_host_net_namespace(), (unsigned long long)mc_host_pid_namespace(),
		(unsigned long long)mc_host_net_namespace());
}
