/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One create at a time per memory cgroup: the owner holds this lock from its
 * room check until its last page is committed, so that two creates in one
 * cgroup cannot both pass the check and together overrun the limit (which
 * the kernel answers with the OOM killer, not an error).
 *
 * The lock is an abstract unix socket named after the cgroup directory's
 * device and inode, bound and listening while held:
 *  - its scope is the network namespace, which every process of a
 *    Kubernetes pod or a Docker container shares (the "two engines in one
 *    pod" case), with no file to create: it works on read-only root file
 *    systems, without /run/lock or /dev/shm, and across uids (no
 *    protected_regular refusals, no stale files);
 *  - the kernel drops it when its holder exits or is killed, like flock;
 *  - a waiter connects to it, learns the holder's pid (SO_PEERCRED) to log
 *    it, and sleeps in poll() until the holder closes, which resets the
 *    connection: no busy polling.
 * Processes of one cgroup in different network namespaces do not exclude each
 * other; doc/guarantees.md says so.
 *
 * Only a running member of the cgroup may make a create wait.  The name is
 * predictable, so anyone on the host could bind it first: a waiter checks
 * the holder (SO_PEERCRED, then its /proc/PID/cgroup) and goes on at once,
 * saying so, when the holder is not in the same limited memory cgroup.  A
 * holder that is stopped (SIGSTOP, a debugger, a frozen container) or that
 * this process cannot see (another PID namespace: SO_PEERCRED says pid 0)
 * is waited for one second, then passed, with a message naming what was
 * seen.  Going on without the lock is safe: the per-chunk room re-check
 * (limits.c) still keeps two commits from overrunning the limit together.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/abstract-socket.h"
#include "base/error.h"
#include "cgroup.h"
#include "base/tracked-fd.h"
#include "mooncake/segment.h"
#include "commit-lock.h"
#include "private.h"
#include "procfs.h"

/* How often a waiter says whom it waits for. */
#define WAIT_LOG_MS 10000
/* How often a waiter looks at its holder. */
#define WAIT_CHECK_MS 200

static socklen_t lock_address(const char *cgroup_dir, struct sockaddr_un *addr)
{
	struct stat st;

	if (stat(cgroup_dir, &st) != 0)
		return 0;
	return mc_abstract_address(addr, "mooncake-segment/memcg/%llx:%llx", (unsigned long long)st.st_dev,
				   (unsigned long long)st.st_ino);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

enum holder_kind {
	HOLDER_MEMBER,	 /* a running process of the cgroup: wait for it */
	HOLDER_STOPPED,	 /* a member, stopped or traced-stopped: wait a grace period */
	HOLDER_UNSEEN,	 /* pid 0 or no /proc entry: another PID namespace; a grace period */
	HOLDER_OUTSIDER, /* not charged to our limited memory cgroup: no lock at all */
};

/* The outermost limited memory cgroup of the process whose cgroup file is
 * @proc_cgroup, under this process's cgroup root; false when none applies. */
static bool outermost_cgroup(const char *proc_cgroup, char *dir, size_t size)
{
	char cgroup_root[1024];
	struct mc_memory_room room;

	mc_host_path(cgroup_root, sizeof(cgroup_root), "/sys/fs/cgroup");
	if (!mc_cgroup_memory_room(proc_cgroup, cgroup_root, &room))
		return false;
	snprintf(dir, size, "%s", room.outermost);
	return true;
}

/* Is process @pid (SO_PEERCRED's number) charged to the limited memory
 * cgroup @ours (this process's, read once per wait the same way)?  Where
 * this process's could not be read (@ours NULL) there is nothing to compare
 * with, and the holder counts as a member (as before this check). */
static bool in_our_cgroup(pid_t pid, const char *ours)
{
	char proc_cgroup[64], theirs[1280];

	if (!ours)
		return true;
	snprintf(proc_cgroup, sizeof(proc_cgroup), "/proc/%d/cgroup", (int)pid);
	return outermost_cgroup(proc_cgroup, theirs, sizeof(theirs)) && strcmp(ours, theirs) == 0;
}

static enum holder_kind classify_holder(pid_t pid, const char *ours)
{
	char state = pid > 0 ? mc_process_state(pid) : '\0';

	if (!state)
		return HOLDER_UNSEEN;
	if (!in_our_cgroup(pid, ours))
		return HOLDER_OUTSIDER;
	return state == 'T' || state == 't' ? HOLDER_STOPPED : HOLDER_MEMBER;
}

/* Why a waiter goes on without the lock, for the log. */
static void log_passed_holder(enum holder_kind kind, const struct ucred *peer, const char *cgroup_dir)
{
	if (kind == HOLDER_OUTSIDER)
		mc_log(MOONCAKE_SEGMENT_LOG_WARNING,
		       "Shared segment create ignores the commit lock of its memory cgroup (%s): pid %d (uid "
		       "%d), which holds its name, is not in that cgroup; the room is still checked before "
		       "each chunk",
		       cgroup_dir, (int)peer->pid, (int)peer->uid);
	else if (kind == HOLDER_UNSEEN)
		mc_log(MOONCAKE_SEGMENT_LOG_WARNING,
		       "Shared segment create goes on without the commit lock of its memory cgroup (%s): its "
		       "holder (pid %d as SO_PEERCRED gives it, uid %d) is in a PID namespace this process "
		       "cannot see, and it held the lock for %d ms; the room is still checked before each "
		       "chunk",
		       cgroup_dir, (int)peer->pid, (int)peer->uid, MC_COMMIT_LOCK_GRACE_MS);
	else
		mc_log(MOONCAKE_SEGMENT_LOG_WARNING,
		       "Shared segment create goes on without the commit lock of its memory cgroup (%s): "
		       "pid %d, which holds it, is stopped (resume it with kill -CONT %d); the room is "
		       "still checked before each chunk",
		       cgroup_dir, (int)peer->pid, (int)peer->pid);
}

/* Wait until the holder of @addr lets go (or a short while when it cannot be
 * reached); false when the caller should go on without the lock: the holder
 * is not in our cgroup (at once), or is stopped or unseen past the grace. */
static bool wait_for_holder(const struct sockaddr_un *addr, socklen_t len, const char *cgroup_dir,
			    uint64_t started_ns)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct pollfd p = { fd, POLLIN, 0 };
	struct ucred peer = { 0 };
	socklen_t peer_len = sizeof(peer);
	uint64_t last_log = mc_now_ns(), doubtful_since = 0, now;
	char ours[1280];
	bool ours_known;

	/* Refused or full backlog: the holder is binding or releasing right now. */
	if (fd < 0 || connect(fd, (const struct sockaddr *)addr, len) != 0) {
		if (fd >= 0)
			close(fd);
		sleep_ms(2);
		return true;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0)
		peer.pid = 0;
	ours_known = outermost_cgroup("/proc/self/cgroup", ours, sizeof(ours));
	/* The holder never accepts nor writes: the connection ends when it closes. */
	while (poll(&p, 1, WAIT_CHECK_MS) == 0) {
		enum holder_kind kind = classify_holder(peer.pid, ours_known ? ours : NULL);

		now = mc_now_ns();
		if (kind == HOLDER_MEMBER)
			doubtful_since = 0;
		else if (!doubtful_since)
			doubtful_since = now;
		if (kind == HOLDER_OUTSIDER ||
		    (doubtful_since && now - doubtful_since >= MC_COMMIT_LOCK_GRACE_MS * UINT64_C(1000000))) {
			log_passed_holder(kind, &peer, cgroup_dir);
			close(fd);
			return false;
		}
		if (now - last_log >= WAIT_LOG_MS * UINT64_C(1000000)) {
			last_log = now;
			mc_log(MOONCAKE_SEGMENT_LOG_WARNING,
			       "Shared segment create has waited %llu s for pid %d, which is committing a "
			       "segment in the same memory cgroup (%s)",
			       (unsigned long long)((now - started_ns) / 1000000000u), (int)peer.pid,
			       cgroup_dir);
		}
	}
	close(fd);
	return true;
}

bool mc_commit_lock_acquire(const char *cgroup_dir, struct mc_commit_lock *lock)
{
	struct sockaddr_un addr;
	socklen_t len = lock_address(cgroup_dir, &addr);
	uint64_t started = mc_now_ns();
	int bound, err;

	lock->fd = -1;
	if (!len)
		return false;
	for (;;) {
		/* Tracked (fork.c): a child forked by another thread must not hold the lock. */
		mc_fd_track_begin();
		lock->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bound = lock->fd >= 0 && bind(lock->fd, (const struct sockaddr *)&addr, len) == 0 &&
			listen(lock->fd, 64) == 0;
		err = errno;
		if (!bound && lock->fd >= 0) {
			close(lock->fd);
			lock->fd = -1;
		}
		mc_fd_track_end(&lock->tracking, &lock->fd);
		if (bound)
			return true;
		if (err != EADDRINUSE)
			return false; /* no lock to be had (seccomp, no AF_UNIX): the per-chunk re-check remains */
		if (!wait_for_holder(&addr, len, cgroup_dir, started))
			return false;
	}
}

void mc_commit_lock_release(struct mc_commit_lock *lock)
{
	mc_fd_close(&lock->tracking);
}
