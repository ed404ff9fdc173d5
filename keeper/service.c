/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The service manager's side of the keeper (keeper.h): socket activation
 * and the file descriptor store of systemd, through libsystemd when
 * configure found it (HAVE_LIBSYSTEMD).
 *
 * At start, sd_listen_fds_with_names() gives the descriptors systemd passes:
 * the listening socket (FileDescriptorName=keeper in mooncake-segmentd.socket,
 * else the first listening SOCK_SEQPACKET socket) and what the previous run
 * stored (FDSTORE=1 with FDNAME=), which service_take() hands out by name.
 * What nobody took by service_ready() is an orphan: it is closed, and removed
 * from the store (FDSTOREREMOVE=1) so that its memory goes.
 *
 * Without libsystemd, or not run by a service manager, there is no passed
 * socket and no store: the keeper says once, at start, that its own restart
 * loses the kept segments, and what to do about it.
 *
 * service_start(), service_take() and service_ready() belong to the start
 * (one thread); service_store() and service_remove() only send a datagram
 * and may be called from any thread.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#if HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "keeper.h"
#include "state-format.h"

struct passed_fd {
	int fd; /* -1 once taken or closed */
	bool taken;
	char *name;
};

static struct passed_fd *passed;
static size_t passed_count;
static int listen_fd = -1;

/* What systemd accepts as FDNAME= (fdname_is_valid()): 1..255 printable
 * ASCII bytes without ':' (the separator of LISTEN_FDNAMES). */
static bool fdname_valid(const char *name)
{
	size_t n = 0;

	for (; name[n]; n++)
		if (name[n] < 0x20 || name[n] > 0x7e || name[n] == ':')
			return false;
	return n >= 1 && n <= 255;
}

#if HAVE_LIBSYSTEMD

static bool can_store;

/* A listening AF_UNIX SOCK_SEQPACKET socket. */
static bool is_keeper_socket(int fd)
{
	return sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0) > 0;
}

int service_start(void)
{
	struct passed_fd *table;
	char **names = NULL;
	const char *fdstore;
	size_t count = 0;
	int n, err = 0;

	n = sd_listen_fds_with_names(1, &names);
	if (n < 0) {
		keeper_say(KEEPER_LOG_ERR, "cannot read the descriptors systemd passed (LISTEN_FDS): %s",
			   strerror(-n));
		n = 0;
	}
	table = n > 0 ? calloc((size_t)n, sizeof(*table)) : NULL;
	for (int i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		const char *name = names && names[i] ? names[i] : "unknown";
		char *copy;

		if (listen_fd < 0 && strcmp(name, "keeper") == 0) {
			if (is_keeper_socket(fd)) {
				listen_fd = fd;
				continue;
			}
			keeper_say(KEEPER_LOG_ERR,
				   "descriptor %d named \"keeper\" is no listening SOCK_SEQPACKET socket",
				   fd);
		}
		copy = table ? strdup(name) : NULL;
		if (!copy) {
			close(fd);
			err = -ENOMEM;
			continue;
		}
		table[count].fd = fd;
		table[count].name = copy;
		count++;
	}
	passed = table;
	passed_count = count;
	/* No "keeper" (a socket unit without FileDescriptorName=): the first listening SEQPACKET socket. */
	for (size_t i = 0; listen_fd < 0 && i < passed_count; i++) {
		if (is_keeper_socket(passed[i].fd)) {
			listen_fd = passed[i].fd;
			passed[i].fd = -1;
			keeper_say(KEEPER_LOG_NOTICE,
				   "listening on the socket systemd passed as \"%s\" (fd %d)", passed[i].name,
				   listen_fd);
		}
	}
	for (int i = 0; names && i < n; i++)
		free(names[i]);
	free(names);

	/* The socket itself is told once, by main()'s "listening on" line. */
	if (passed_count)
		keeper_say(KEEPER_LOG_INFO, "%zu descriptor%s from the descriptor store of the previous run",
			   passed_count, passed_count == 1 ? "" : "s");

	/* NOTIFY_SOCKET: a service manager runs us and reads FDSTORE=1.
	 * Whether the unit allows a store cannot be asked (systemd silently
	 * drops FDSTORE=1 when FileDescriptorStoreMax= is 0), except that
	 * systemd 254 and later export the maximum as $FDSTORE. */
	fdstore = getenv("FDSTORE");
	if (!getenv("NOTIFY_SOCKET")) {
		keeper_say(KEEPER_LOG_WARNING,
			   "not run by a service manager (no NOTIFY_SOCKET): a restart of the keeper "
			   "loses every kept segment; run it as mooncake-segmentd.service to keep them");
	} else if (fdstore) {
		can_store = strtoull(fdstore, NULL, 10) > 0;
		keeper_say(can_store ? KEEPER_LOG_INFO : KEEPER_LOG_WARNING,
			   "the descriptor store holds %s descriptors (FileDescriptorStoreMax=)%s", fdstore,
			   can_store ? ": kept segments survive a restart of the keeper"
				     : ": a restart of the keeper loses every kept segment");
	} else {
		/* systemd before 254 does not say: trust the unit (the shipped one
		 * sets FileDescriptorStoreMax=; doc/keeper.md tells a unit of one's
		 * own to), rather than hedge on every start. */
		can_store = true;
		keeper_debug("the service manager does not say how many descriptors it stores ($FDSTORE, "
			     "systemd 254 and later): kept segments survive a restart of the keeper if its "
			     "unit sets FileDescriptorStoreMax=");
	}
	return err;
}

bool service_can_store(void)
{
	return can_store;
}

static int notify_fd(const char *what, const char *fdname, const int *fd, unsigned int n)
{
	char message[300];
	int r;

	if (!can_store)
		return 0;
	if (!fdname_valid(fdname))
		return -EINVAL;
	snprintf(message, sizeof(message), "%s\nFDNAME=%s", what, fdname);
	r = sd_pid_notify_with_fds(0, 0, message, fd, n);
	if (r < 0) {
		keeper_say(KEEPER_LOG_ERR, "cannot send %s for \"%s\" to the service manager: %s", what,
			   fdname, strerror(-r));
		return r;
	}
	return 0;
}

int service_store(const char *fdname, int fd)
{
	if (fd < 0)
		return -EBADF;
	return notify_fd("FDSTORE=1", fdname, &fd, 1);
}

int service_remove(const char *fdname)
{
	return notify_fd("FDSTOREREMOVE=1", fdname, NULL, 0);
}

static void notify_text(const char *prefix, const char *status)
{
	char message[600];
	size_t at;

	at = (size_t)snprintf(message, sizeof(message), "%s", prefix);
	if (status && at < sizeof(message)) {
		/* One line: a newline in the status would be another assignment. */
		at += (size_t)snprintf(message + at, sizeof(message) - at, "\nSTATUS=");
		for (const char *c = status; *c && at + 1 < sizeof(message); c++)
			message[at++] = (*c >= 0x20 && *c <= 0x7e) ? *c : ' ';
		message[at] = '\0';
	}
	if (getenv("NOTIFY_SOCKET"))
		(void)sd_notify(0, message);
}

#else /* !HAVE_LIBSYSTEMD */

int service_start(void)
{
	keeper_say(KEEPER_LOG_WARNING,
		   "built without libsystemd: no socket activation and no descriptor store, so a "
		   "restart of the keeper loses every kept segment; build it with libsystemd and run it "
		   "as mooncake-segmentd.service to keep them");
	return 0;
}

bool service_can_store(void)
{
	return false;
}

int service_store(const char *fdname, int fd)
{
	(void)fdname;
	(void)fd;
	return 0;
}

int service_remove(const char *fdname)
{
	(void)fdname;
	return 0;
}

static void notify_text(const char *prefix, const char *status)
{
	(void)prefix;
	(void)status;
}

#endif

int service_listen_fd(void)
{
	return listen_fd;
}

int service_take(const char *fdname)
{
	for (size_t i = 0; i < passed_count; i++) {
		if (passed[i].fd >= 0 && strcmp(passed[i].name, fdname) == 0) {
			int fd = passed[i].fd;

			passed[i].fd = -1;
			passed[i].taken = true;
			return fd;
		}
	}
	return -1;
}

uint64_t service_stored_generation_max(void)
{
	uint64_t max = 0;

	for (size_t i = 0; i < passed_count; i++) {
		const char *name = passed[i].name, *digits = NULL;
		char *end;
		uint64_t g;

		if (passed[i].fd < 0)
			continue;
		if (strncmp(name, "pages-", 6) == 0)
			digits = name + 6;
		else if (strncmp(name, "control-", 8) == 0)
			digits = name + 8;
		if (!digits || *digits < '0' || *digits > '9')
			continue;
		errno = 0;
		g = strtoull(digits, &end, 10);
		if (errno == 0 && *end == '\0' && g > max)
			max = g;
	}
	return max;
}

/* Whether another descriptor of this name was taken: removing the name
 * from the store would remove that one too. */
static bool name_was_taken(size_t orphan)
{
	for (size_t i = 0; i < passed_count; i++)
		if (i != orphan && passed[i].taken && strcmp(passed[i].name, passed[orphan].name) == 0)
			return true;
	return false;
}

void service_ready(const char *status)
{
	for (size_t i = 0; i < passed_count; i++) {
		if (passed[i].fd < 0)
			continue;
		close(passed[i].fd);
		passed[i].fd = -1;
		if (name_was_taken(i)) {
			keeper_say(KEEPER_LOG_WARNING,
				   "closed a second stored descriptor named \"%s\"; it stays in the store "
				   "until the service stops",
				   passed[i].name);
			continue;
		}
		keeper_say(KEEPER_LOG_WARNING,
			   "closed the orphan descriptor \"%s\" (no saved state names it) and removed it "
			   "from the descriptor store",
			   passed[i].name);
		if (fdname_valid(passed[i].name))
			(void)service_remove(passed[i].name);
	}
	notify_text("READY=1", status);
}

void service_stopping(void)
{
	notify_text("STOPPING=1", NULL);
}
