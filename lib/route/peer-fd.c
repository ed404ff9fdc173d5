/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reaching another process's descriptor, and the handle bytes that say
 * where it is.  The routes, in order (doc/decisions.md):
 *
 *  1. the owner's abstract Unix socket (fd-client.c, fd-server.c), when the
 *     owner's network namespace is ours: the one route the owner grants
 *     itself (token, uid), from any PID or user namespace, whatever ptrace
 *     rules (Yama, dumpability, CAP_SYS_PTRACE) say;
 *  2. /proc/PID/fd/N, then 3. pidfd_open + pidfd_getfd: the kernel's
 *     routes, in the owner's PID namespace only, for when the socket cannot
 *     serve (another network namespace, no listener) or is refused.
 *
 * No route ever keeps a file but the one the owner published (device and
 * inode).  When every route fails, the error names the first cause that
 * holds, with its fix: another PID namespace (and another network namespace:
 * both fixes), the owner's own refusal (uid, token), the owner gone or
 * stuck, another user namespace, another user, a /proc that hides the
 * owner, Yama, dumpability.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/error.h"
#include "base/little-endian.h"
#include "host/host.h"
#include "host/procfs.h"
#include "mooncake/segment.h"
#include "fd-socket.h"
#include "private.h"
#include "route.h"

uint16_t mc_peer_fd_encode(const struct mc_peer_fd *h, uint8_t *out, size_t room)
{
	if (room < MC_PEER_FD_HANDLE_BYTES)
		return 0;
	mc_put_le32(out, h->pid);
	mc_put_le32(out + 4, h->fd);
	mc_put_le64(out + 8, h->dev);
	mc_put_le64(out + 16, h->ino);
	mc_put_le64(out + 24, h->socket_id);
	memcpy(out + 32, h->token, MC_PEER_FD_TOKEN_SIZE);
	return MC_PEER_FD_HANDLE_BYTES;
}

bool mc_peer_fd_decode(const uint8_t *in, size_t len, struct mc_peer_fd *h, size_t *used)
{
	if (len < MC_PEER_FD_HANDLE_BYTES)
		return false;
	h->pid = mc_get_le32(in);
	h->fd = mc_get_le32(in + 4);
	h->dev = mc_get_le64(in + 8);
	h->ino = mc_get_le64(in + 16);
	h->socket_id = mc_get_le64(in + 24);
	memcpy(h->token, in + 32, MC_PEER_FD_TOKEN_SIZE);
	if (used)
		*used = MC_PEER_FD_HANDLE_BYTES;
	return h->pid > 0 && h->fd <= INT32_MAX;
}

uint16_t mc_peer_fd_encode_companion(const struct mc_peer_fd *companion, uint8_t *out, size_t room)
{
	if (room < MC_PEER_FD_COMPANION_BYTES)
		return 0;
	mc_put_le32(out, companion->fd);
	mc_put_le64(out + 4, companion->dev);
	mc_put_le64(out + 12, companion->ino);
	return MC_PEER_FD_COMPANION_BYTES;
}

bool mc_peer_fd_decode_companion(const uint8_t *in, size_t len, const struct mc_peer_fd *primary,
				 struct mc_peer_fd *companion)
{
	if (len < MC_PEER_FD_COMPANION_BYTES)
		return false;
	*companion = *primary;
	companion->fd = mc_get_le32(in);
	companion->dev = mc_get_le64(in + 4);
	companion->ino = mc_get_le64(in + 12);
	return companion->fd <= INT32_MAX && companion->fd != primary->fd;
}

/* Whether this rank's /proc shows process @pid at all. */
static bool proc_shows(uint32_t pid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%u/fd", pid);
	return stat(path, &st) == 0;
}

/* Alive, not a zombie (which has no descriptors left). */
static bool process_exists(pid_t pid)
{
	char state;

	if (kill(pid, 0) != 0 && errno != EPERM)
		return false;
	state = mc_process_state(pid); /* '\0': /proc does not show it, trust kill() */
	return state != 'Z' && state != 'X';
}

int mc_peer_fd_gone(const struct mc_peer_fd *h)
{
	if (!process_exists((pid_t)h->pid))
		return mc_segment_error(
			ESRCH,
			"the owner process %u is gone before this rank "
			"mapped its pages; the owner must stay alive until every rank has completed",
			h->pid);
	return mc_segment_error(
		ESRCH,
		"the owner process %u no longer holds descriptor %u "
		"(it called finish() or destroy() before every rank completed, or the pid was reused)",
		h->pid, h->fd);
}

/* The whole of a small /proc file into @buf; false when unreadable. */
static bool read_small_file(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, size - 1, f);
	buf[n] = '\0';
	fclose(f);
	return n > 0;
}

/* Whether @pid is in another user namespace than this process.  A uid_map
 * reads the same from here for two processes of one namespace, and differs
 * otherwise (the map is shown relative to the reader's namespace, one's own
 * relative to its parent).  Readable by anyone, unlike /proc/PID/ns/user. */
static bool in_another_user_namespace(uint32_t pid)
{
	char path[64], mine[512], theirs[512];

	snprintf(path, sizeof(path), "/proc/%u/uid_map", pid);
	return read_small_file("/proc/self/uid_map", mine, sizeof(mine)) &&
	       read_small_file(path, theirs, sizeof(theirs)) && strcmp(mine, theirs) != 0;
}

/* The owner's real uid as this rank's user namespace sees it (the blob holds
 * the owner's own view); the blob's when /proc/PID/status is hidden. */
static uint32_t owner_uid_here(const struct mc_owner_ref *owner, uint32_t pid)
{
	char path[64], line[128];
	unsigned int uid;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/status", pid);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %u", &uid) == 1) {
			fclose(f);
			return uid;
		}
	if (f)
		fclose(f);
	return owner->uid;
}

static int access_denied_error(const struct mc_owner_ref *owner, const struct mc_peer_fd *h, const char *path,
			       int open_errno, int getfd_errno)
{
	char scope[16] = "", cause[512];
	uint32_t owner_uid = owner_uid_here(owner, h->pid);
	struct stat ns;

	/* First the causes that hold whatever this /proc shows: namespace, then user. */
	if (in_another_user_namespace(h->pid))
		snprintf(
			cause, sizeof(cause),
			"this rank runs in another user namespace than the owner (user:[%llu] here), and the "
			"kernel lets a process take another's descriptor only from the owner's user namespace "
			"(or with CAP_SYS_PTRACE over it), even for the same real user; start every rank in one "
			"user namespace (no unshare -U or per-rank --userns; Docker/Podman: the same --userns "
			"for every container of the group)",
			stat("/proc/self/ns/user", &ns) == 0 ? (unsigned long long)ns.st_ino : 0ULL);
	else if (owner_uid != (uint32_t)getuid())
		snprintf(cause, sizeof(cause),
			 "the owner runs as uid %u and this rank as uid %u; run every rank "
			 "as the same user",
			 owner_uid, (unsigned int)getuid());
	else if (open_errno == ENOENT)
		snprintf(
			cause, sizeof(cause),
			"this rank's /proc does not show the live owner (mounted with hidepid=, or the /proc of "
			"another PID namespace); mount /proc without hidepid and run the ranks in one PID namespace");
	else if (mc_read_host_line("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope)) &&
		 strtol(scope, NULL, 10) >= 2)
		snprintf(cause, sizeof(cause),
			 "kernel.yama.ptrace_scope is %s; set it to 0 or 1 "
			 "(sysctl -w kernel.yama.ptrace_scope=1)",
			 scope);
	else
		snprintf(
			cause, sizeof(cause),
			"the owner may not be dumpable (setuid, prctl(PR_SET_DUMPABLE, 0)) "
			"or a ptrace restriction applies (a container without CAP_SYS_PTRACE, an LSM); "
			"Docker: --cap-add SYS_PTRACE; Kubernetes: securityContext.capabilities.add [SYS_PTRACE]");
	return mc_segment_error(EACCES,
				"cannot open the owner's pages: %s: %s, pidfd_getfd: %s. "
				"Likely cause: %s",
				path, strerror(open_errno),
				getfd_errno ? strerror(getfd_errno) : "not available", cause);
}

/* The second route: same descriptor, through a pidfd (needs ptrace attach rights). */
static int open_through_pidfd(const struct mc_peer_fd *h, int *getfd_errno)
{
	int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)h->pid, 0);
	int fd;

	if (pidfd < 0) {
		*getfd_errno = errno;
		return -1;
	}
	fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)h->fd, 0);
	*getfd_errno = fd < 0 ? errno : 0;
	close(pidfd);
	return fd;
}

/* @fd (>= 0) if it is the published file, else closed and -ESRCH: the
 * owner may close the number and reuse it between a look and an open. */
static int keep_if_published(int fd, const struct mc_peer_fd *h)
{
	struct stat st;

	if (fd < 0 || (fstat(fd, &st) == 0 && (uint64_t)st.st_dev == h->dev && (uint64_t)st.st_ino == h->ino))
		return fd;
	close(fd);
	errno = 0;
	return mc_peer_fd_gone(h);
}

/* The /proc route, then pidfd_getfd: both need the owner's PID namespace. */
static int open_through_proc(const struct mc_owner_ref *owner, const struct mc_peer_fd *h)
{
	char path[64];
	struct stat st;
	int fd = -1, open_errno, getfd_errno = 0;

	snprintf(path, sizeof(path), "/proc/%u/fd/%u", h->pid, h->fd);
	/* Look before opening: a forged or stale handle must never make this rank
	 * open someone else's file (a device, a FIFO...), only the owner's memfd. */
	errno = 0;
	if (stat(path, &st) == 0) {
		if ((uint64_t)st.st_dev != h->dev || (uint64_t)st.st_ino != h->ino)
			return mc_peer_fd_gone(h);
		/* Not a regular file (a driver's exported descriptor): /proc cannot
		 * reopen it, pidfd_getfd duplicates it without opening anything. */
		if (S_ISREG(st.st_mode))
			fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
		else
			errno = EACCES;
	}
	if (fd >= 0)
		return keep_if_published(fd, h);
	open_errno = errno;
	/* ENOENT from a live owner: this /proc hides it (hidepid, another
	 * mount); the pidfd route does not go through /proc. */
	if (open_errno == ENOENT && !process_exists((pid_t)h->pid))
		return mc_peer_fd_gone(h);
	if (open_errno != ENOENT && open_errno != EACCES && open_errno != EPERM)
		return mc_segment_error_sys(mc_fold_errno(open_errno), open_errno, "open %s failed", path);
	fd = open_through_pidfd(h, &getfd_errno);
	if (fd >= 0)
		return keep_if_published(fd, h);
	if (getfd_errno == ESRCH || getfd_errno == EBADF)
		return mc_peer_fd_gone(h);
	if (getfd_errno == ENOSYS)
		getfd_errno = 0;
	/* No second route, but /proc shows the owner: its descriptor is just gone. */
	if (open_errno == ENOENT && proc_shows(h->pid))
		return mc_peer_fd_gone(h);
	return access_denied_error(owner, h, path, open_errno, getfd_errno);
}

#define KEEP_OWNER_ALIVE                                                                                 \
	"keep the owner alive, and let it call finish() only after every rank has completed (destroy() " \
	"implies finish())"

/* Why the socket route failed, as "cause; fix" (and the errno that goes with it). */
static int socket_cause(const struct mc_fd_client_result *r, char *cause, size_t size)
{
	switch (r->failure) {
	case MC_FD_CLIENT_NOT_LISTENING:
		snprintf(cause, size,
			 "nothing listens on the owner's socket %s: the owner called finish() or destroy() "
			 "before this rank completed, or it exited; " KEEP_OWNER_ALIVE,
			 r->socket_name);
		return ESRCH;
	case MC_FD_CLIENT_CLOSED:
		snprintf(
			cause, size,
			"the owner hung up its socket %s without an answer: it called finish() or destroy(), "
			"or exited, while this rank waited; " KEEP_OWNER_ALIVE,
			r->socket_name);
		return ESRCH;
	case MC_FD_CLIENT_IMPOSTOR:
		snprintf(
			cause, size,
			"process %d, not the owner, listens on the owner's socket %s: the owner called "
			"finish() or destroy() before this rank completed, and its name was taken; " KEEP_OWNER_ALIVE,
			r->listener_pid, r->socket_name);
		return ESRCH;
	case MC_FD_CLIENT_NO_ANSWER:
		snprintf(
			cause, size,
			"the owner did not answer on its socket %s within %d ms (it is stopped or stuck); check "
			"that the owner process runs, or raise MOONCAKE_SEGMENT_PEER_TIMEOUT_MS if it is only slow",
			r->socket_name, r->timeout_ms);
		return ETIMEDOUT;
	case MC_FD_CLIENT_REFUSED:
		if (r->status == MC_FD_REPLY_OTHER_USER) {
			snprintf(
				cause, size,
				"the owner runs as uid %u and this rank as uid %u, and the owner's socket serves "
				"its own user only; run every rank as the same user, or start the owner with "
				"MOONCAKE_SEGMENT_PEER_UIDS=%u (or =any)",
				r->owner_uid, (unsigned int)geteuid(), (unsigned int)geteuid());
			return EACCES;
		}
		if (r->status == MC_FD_REPLY_BAD_TOKEN) {
			snprintf(
				cause, size,
				"the owner refused the token this rank presented on its socket %s: the owner's "
				"blob is not the one its create() produced for this segment (forged, corrupted, or "
				"from another segment); hand complete() this round's blobs, unmodified",
				r->socket_name);
			return EACCES;
		}
		snprintf(
			cause, size,
			"the owner did not understand this rank's request on its socket %s; all ranks must run "
			"the same libmooncake-segment",
			r->socket_name);
		return EPROTO;
	case MC_FD_CLIENT_WRONG_FILE:
		snprintf(
			cause, size,
			"the owner's socket %s handed over another file than the one the owner's blob names (a "
			"forged or corrupted blob); hand complete() this round's blobs, unmodified",
			r->socket_name);
		return EPROTO;
	default:
		snprintf(cause, size, "%s", r->why);
		return EIO;
	}
}

/* A rank in another PID namespace than the owner: only the socket can reach it. */
static int other_pid_namespace_error(const struct mc_owner_ref *owner, const struct mc_peer_fd *h,
				     bool other_net_ns, const struct mc_fd_client_result *r)
{
	unsigned long long own_pid_ns = mc_host_pid_namespace(), own_net_ns = mc_host_net_namespace();
	char cause[512];
	int err;

	if (other_net_ns)
		return mc_segment_error(
			EACCES,
			"this rank runs in another PID namespace (pid:[%llu] here, "
			"pid:[%llu] there) and another network namespace (net:[%llu] here, net:[%llu] "
			"there) than the owner, so neither the owner's pid %u nor its Unix socket can be "
			"reached from here; share one of them: the PID namespace (docker run --pid=host or "
			"--pid=container:NAME; Kubernetes: one pod with shareProcessNamespace: true) or the "
			"network namespace (the containers of one Kubernetes pod share it; docker run "
			"--network=container:NAME)",
			own_pid_ns, (unsigned long long)owner->pid_namespace, own_net_ns,
			(unsigned long long)owner->net_namespace, h->pid);
	if (!h->socket_id)
		return mc_segment_error(
			EACCES,
			"this rank runs in another PID namespace than the owner "
			"(pid:[%llu] here, pid:[%llu] there), so the owner's pid %u means nothing here, and "
			"the owner does not serve its pages over a Unix socket (its log says why); run the "
			"ranks in one PID namespace (docker run --pid=host or --pid=container:NAME; "
			"Kubernetes: one pod with shareProcessNamespace: true)",
			own_pid_ns, (unsigned long long)owner->pid_namespace, h->pid);
	err = socket_cause(r, cause, sizeof(cause));
	return mc_segment_error(
		err,
		"this rank runs in another PID namespace than the owner (pid:[%llu] here, "
		"pid:[%llu] there), where only the owner's Unix socket can hand over its pages, and that "
		"failed: %s",
		own_pid_ns, (unsigned long long)owner->pid_namespace, cause);
}

int mc_peer_fd_open(const struct mc_owner_ref *owner, const struct mc_peer_fd *h)
{
	uint64_t own_pid_ns = mc_host_pid_namespace(), own_net_ns = mc_host_net_namespace();
	bool other_pid_ns = owner->pid_namespace && own_pid_ns && owner->pid_namespace != own_pid_ns;
	bool other_net_ns = owner->net_namespace && own_net_ns && owner->net_namespace != own_net_ns;
	bool same_pid_ns = owner->pid_namespace && own_pid_ns && owner->pid_namespace == own_pid_ns;
	struct mc_fd_client_result r = { .failure = MC_FD_CLIENT_OK, .status = -1 };
	bool socket_tried = false;
	char cause[512];
	int fd, err;

	/* First the socket: the route the owner grants itself (its token, its
	 * uid check), from any PID namespace of its network namespace, whatever
	 * ptrace would allow.  An abstract name means nothing in another one. */
	if (h->socket_id && !other_net_ns) {
		fd = mc_fd_client_receive(h, same_pid_ns ? h->pid : 0, owner->silent_since_ms, &r);
		if (fd >= 0)
			return fd;
		/* The user's own mistake: said, whichever route could have worked. */
		if (r.failure == MC_FD_CLIENT_BAD_SETTING)
			return mc_segment_error(EINVAL, "%s", r.why);
		socket_tried = true;
	}
	/* A pid from another PID namespace names another process here, or none. */
	if (other_pid_ns)
		return other_pid_namespace_error(owner, h, other_net_ns, &r);
	fd = open_through_proc(owner, h);
	if (fd >= 0)
		return fd;
	/* The owner's own no is the first cause, when the kernel's routes say no as well. */
	if (socket_tried && r.failure == MC_FD_CLIENT_REFUSED) {
		err = socket_cause(&r, cause, sizeof(cause));
		return mc_segment_error(err, "cannot open the owner's pages: %s", cause);
	}
	return fd;
}
