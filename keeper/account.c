/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Whose share a client uses (keeper.h): the account uid that the per-uid
 * limits (--uid-budget, --uid-max-segments, --max-connections-per-uid,
 * --uid-max-commits) count it against.  A user may act as many uids: the
 * subordinate ranges /etc/subuid gives it (newuidmap maps them into the user
 * namespaces of rootless containers), and any uid inside a user namespace
 * it made.  Counted each as a user of its own, 16 such uids took 16 shares
 * (issue 38).  So, once per connection, at accept:
 *
 *   1. a client in a user namespace below the keeper's counts with the owner
 *      of the namespace that is a direct child of the keeper's (the user who
 *      made it, NS_GET_OWNER_UID, as the keeper sees that uid), found from
 *      the client's /proc/PID/ns/user up by NS_GET_PARENT.  Not when that
 *      owner is root: a runtime run as root gives each container a range of
 *      its own, and counting them all with root would make one share of
 *      every container of the node; those count by rule 2 or 3;
 *   2. a uid (the client's, or the owner found by rule 1) in a range of
 *      /etc/subuid counts with that range's user, unless that user is root
 *      (a root runtime's containers, as in rule 1);
 *   3. any other uid counts as itself.
 *
 * Who may use a segment is not this: access control stays by the real uid.
 * Groups have no limits, so /etc/subgid is not read.  The pid of
 * SO_PEERCRED can be reused by another process before /proc/PID is opened:
 * a pidfd of the peer (SO_PEERPIDFD, Linux 6.5) still alive after the open
 * says that /proc/PID was that process; pidfd_open() on older kernels is
 * taken at accept, so a pid reused before that goes unseen there.  The file is
 * read again when it changes (one stat() a connection); a keeper that cannot
 * read /proc falls back to rules 2 and 3 and says so, rate-limited.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "keeper.h"

/* Linux 6.5: the peer's pidfd, taken at connect(), so no pid reuse. */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* User namespaces nest 32 deep at most (user_namespaces(7)). */
#define NAMESPACE_DEPTH_MAX 33
/* Bounds on what is read of the subordinate file: a node's one is small. */
#define SUBORDINATE_FILE_MAX  (4u << 20)
#define SUBORDINATE_LINE_MAX  4096
#define SUBORDINATE_RANGE_MAX 65536

struct subordinate_range {
	uint32_t start, count, owner;
};

static const char *subordinate_path = ACCOUNT_SUBUID_DEFAULT;
static struct subordinate_range *ranges;
static size_t range_count;
static struct stat read_as; /* the file as last read (st_ino 0: absent) */
static bool own_namespace_known;
static dev_t own_namespace_dev;
static ino_t own_namespace_ino;

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* A user's name (or uid) in /etc/subuid: its uid, false when unknown.  The
 * lookup may ask NSS; it runs only when the file changed. */
static bool owner_uid(const char *name, uint32_t *uid)
{
	struct passwd pw, *found = NULL;
	char buffer[16384], *end;
	unsigned long number;

	errno = 0;
	number = strtoul(name, &end, 10);
	if (*name >= '0' && *name <= '9' && !*end && !errno && number < UINT32_MAX) {
		*uid = (uint32_t)number;
		return true;
	}
	if (getpwnam_r(name, &pw, buffer, sizeof(buffer), &found) != 0 || !found)
		return false;
	*uid = (uint32_t)found->pw_uid;
	return true;
}

/* One "name_or_uid:start:count" line; false for anything else (comments,
 * blank lines, junk, a range past the last uid). */
static bool parse_range(char *line, struct subordinate_range *range)
{
	char *name = line, *start, *count, *end;
	unsigned long long first, many;

	line[strcspn(line, "\r\n")] = '\0';
	start = strchr(line, ':');
	if (!start || start == line || *line == '#')
		return false;
	*start++ = '\0';
	count = strchr(start, ':');
	if (!count)
		return false;
	*count++ = '\0';
	errno = 0;
	first = strtoull(start, &end, 10);
	if (errno || end == start || *end)
		return false;
	many = strtoull(count, &end, 10);
	if (errno || end == count || *end || !many || first >= UINT32_MAX || many >= UINT32_MAX ||
	    first + many - 1 >= UINT32_MAX)
		return false;
	/* Root's ranges (LXD's and Incus's root:1000000:1000000000) are a root
	 * runtime's containers, each its own tenant, as rule 1 has it. */
	if (!owner_uid(name, &range->owner) || range->owner == 0)
		return false;
	range->start = (uint32_t)first;
	range->count = (uint32_t)many;
	return true;
}

static void read_subordinate_file(const struct stat *now)
{
	static struct keeper_log_limit unreadable = KEEPER_LOG_LIMIT(1, 3600);
	struct subordinate_range *read = NULL, range;
	char line[SUBORDINATE_LINE_MAX];
	size_t count = 0, skipped = 0;
	FILE *f;

	free(ranges);
	ranges = NULL;
	range_count = 0;
	read_as = *now;
	if (!now->st_ino)
		return;
	f = fopen(subordinate_path, "re");
	if (!f || now->st_size > SUBORDINATE_FILE_MAX) {
		keeper_say_limited(&unreadable, KEEPER_LOG_WARNING,
				   "cannot read %s (%s): subordinate uids count each as a user of its own",
				   subordinate_path, f ? "larger than 4 MiB" : strerror(errno));
		if (f)
			fclose(f);
		return;
	}
	read = calloc(SUBORDINATE_RANGE_MAX, sizeof(*read));
	while (read && count < SUBORDINATE_RANGE_MAX && fgets(line, sizeof(line), f)) {
		if (parse_range(line, &range))
			read[count++] = range;
		else if (line[0] && line[0] != '#' && line[0] != '\n')
			skipped++;
	}
	fclose(f);
	if (!read) {
		keeper_log("out of memory to read %s: subordinate uids count each as a user of its own",
			   subordinate_path);
		return;
	}
	if (count) {
		struct subordinate_range *fit = realloc(read, count * sizeof(*read));

		ranges = fit ? fit : read;
	} else {
		free(read);
	}
	range_count = count;
	keeper_log("counting %zu subordinate uid range(s) of %s with their users%s", count, subordinate_path,
		   skipped ? " (lines of unknown users or not name:start:count left out)" : "");
}

/* Rule 2: the user whose subordinate range holds @uid, else @uid. */
static uid_t subordinate_owner(uid_t uid)
{
	struct stat now = { 0 };
	size_t i;

	if (stat(subordinate_path, &now) != 0)
		memset(&now, 0, sizeof(now));
	if (!same_file(&now, &read_as))
		read_subordinate_file(&now);
	for (i = 0; i < range_count; i++)
		if ((uint32_t)uid >= ranges[i].start && (uint32_t)uid - ranges[i].start < ranges[i].count)
			return (uid_t)ranges[i].owner;
	return uid;
}

static bool own_namespace(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && st.st_dev == own_namespace_dev && st.st_ino == own_namespace_ino;
}

/* From the user namespace @ns (closed here) up to the one that is a direct
 * child of the keeper's: its owner in *@owner.  False when @ns is the
 * keeper's own or not below it (NS_GET_PARENT says EPERM past the
 * keeper's). */
static bool top_owner(int ns, uid_t *owner)
{
	bool known = false;

	for (int depth = 0; depth < NAMESPACE_DEPTH_MAX && !own_namespace(ns); depth++) {
		int parent = ioctl(ns, NS_GET_PARENT);

		if (parent < 0)
			break;
		if (own_namespace(parent)) {
			known = ioctl(ns, NS_GET_OWNER_UID, owner) == 0;
			close(parent);
			break;
		}
		close(ns);
		ns = parent;
	}
	close(ns);
	return known;
}

/* The peer's pidfd: SO_PEERPIDFD, else pidfd_open() of its pid.  Only the
 * first is the peer for sure: before Linux 6.5 the pid may have been reused
 * between connect() and accept(), and another process's namespace read. */
static int peer_pidfd(int fd, pid_t pid)
{
	socklen_t len = sizeof(int);
	int pidfd = -1;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0)
		return pidfd;
	if (errno != ENOPROTOOPT && errno != EINVAL)
		return -1;
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Rule 1: whether the peer at @fd (@pid) runs in a user namespace below the
 * keeper's that a user other than root made; that user in *@owner. */
static bool namespace_owner(int fd, pid_t pid, uid_t *owner)
{
	static struct keeper_log_limit unseen = KEEPER_LOG_LIMIT(1, 3600),
				       unreadable = KEEPER_LOG_LIMIT(1, 3600);
	char path[64];
	int pidfd, ns, err;

	if (!own_namespace_known)
		return false;
	if (pid <= 0) {
		keeper_say_limited(&unseen, KEEPER_LOG_NOTICE,
				   "a client's pid is not in the keeper's PID namespace: its user namespace "
				   "is unknown, so its uid is counted as /etc/subuid says, or as itself "
				   "(doc/keeper.md \"Tenants\")");
		return false;
	}
	pidfd = peer_pidfd(fd, pid);
	if (pidfd < 0)
		return false; /* gone already (ESRCH): its connection is no one's share */
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	ns = open(path, O_RDONLY | O_CLOEXEC);
	err = errno;
	/* Still alive: the pid was not reused between connect() and open(). */
	if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) != 0 && errno == ESRCH) {
		close(pidfd);
		if (ns >= 0)
			close(ns);
		return false;
	}
	close(pidfd);
	if (ns < 0) {
		keeper_say_limited(&unreadable, KEEPER_LOG_WARNING,
				   "cannot read %s (%s): a client's user namespace is unknown, so its uid is "
				   "counted as /etc/subuid says, or as itself; run the keeper as root",
				   path, strerror(err));
		return false;
	}
	return top_owner(ns, owner) && *owner != 0;
}

void account_start(const char *subuid_file)
{
	struct stat st;
	int fd = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);

	if (subuid_file)
		subordinate_path = subuid_file;
	if (fd >= 0 && fstat(fd, &st) == 0) {
		own_namespace_known = true;
		own_namespace_dev = st.st_dev;
		own_namespace_ino = st.st_ino;
	} else {
		keeper_say(KEEPER_LOG_WARNING,
			   "cannot read /proc/self/ns/user (%s): clients in user namespaces are counted by "
			   "their uids, as /etc/subuid says, not with the users who made the namespaces",
			   strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	(void)subordinate_owner(0); /* read the file now, and say what it holds */
}

uid_t account_of(int fd, uid_t uid, pid_t pid)
{
	uid_t owner;

	if (namespace_owner(fd, pid, &owner))
		uid = owner;
	return subordinate_owner(uid);
}

const char *account_describe(char *out, size_t size, uid_t uid, uid_t account)
{
	if (uid == account)
		snprintf(out, size, "uid %u", (unsigned)uid);
	else
		snprintf(
			out, size,
			"uid %u (counted with uid %u, whose subordinate range or user namespace it belongs to)",
			(unsigned)uid, (unsigned)account);
	return out;
}
