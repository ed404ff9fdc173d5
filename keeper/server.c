/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper's socket and its poll loop (keeper.h).  Every
 * descriptor is non-blocking, so that no client can stall the keeper: a
 * request is one packet read whole (SOCK_SEQPACKET), a reply is sent with
 * MSG_DONTWAIT and a client that does not read its replies is closed.
 * Credentials come from SO_PEERCRED and SO_PEERGROUPS at accept, never from
 * a message.  A request is received without room for descriptors, so that
 * the kernel never installs one here (closing a client's file can block, a
 * FUSE file whose server never answers); one that carried any arrives with
 * MSG_CTRUNC and ends its connection.  Connections past --max-connections,
 * or past --max-connections-per-uid for their account (account.c: a user's
 * subordinate uids and user namespaces count with it), are refused and
 * closed at once (so that the backlog never fills), and one silent past the
 * silent timeout is closed.
 *
 * A CREATE that commits pages is parked: its segment is reserved, a
 * committer thread (committer.c) commits, and the connection is left out of
 * the input polling (polled only for its hangup) and of the silent timeout
 * until the loop, woken by the committers' eventfd, sends its reply.  A
 * CREATE of the same name meanwhile is parked behind it and handled again
 * once the commit is done.  So no request waits for another's commit.  A
 * request that needs to know who maps a segment (STAT, LIST, a release, a
 * replace) is parked the same way until the mapper scanner's thread
 * (scanner.c) has read /proc, which a tenant with many mappings can make
 * slow: the loop goes on serving everyone meanwhile, and one scan answers
 * every request parked for it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "keeper.h"

/* Linux 6.16: off, a client's sendmsg() with SCM_RIGHTS fails in the client. */
#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif

struct connection {
	int fd; /* -1: a free slot */
	struct keeper_peer peer;
	uint64_t last_heard_ns;
	/* Parked: the request that waits for the commit of generation
	 * parked_on (as its creator, or behind it), or for a mapper scan;
	 * NULL when not parked. */
	struct mc_keeper_request *parked;
	struct store_wait parked_on;
};

/* Accepts per turn of the loop: a connect flood cannot starve the clients
 * already connected, whose requests are served between turns. */
#define ACCEPTS_PER_TURN 16
/* Messages read from a refused connection before its close (a client sends
 * one request, then waits). */
#define REFUSED_DRAIN_MAX 4
/* Out of descriptors, the listener is left out of poll() this long. */
#define ACCEPT_BACKOFF_NS 100000000u

static struct connection *connections;
static size_t connection_count;
static int reserve_fd = -1; /* closed to accept-and-close a connection on EMFILE */
static uint64_t accept_paused_until_ns;
static uint64_t instance;
static uint8_t in_buffer[MC_KEEPER_MESSAGE_MAX + 1];
static uint8_t out_buffer[MC_KEEPER_MESSAGE_MAX];

static uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --- the listening socket ---------------------------------------------------- */

static int make_parent(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	if (mkdir(dir, 0755) == 0) {
		keeper_log("made the socket's directory %s (mode 0755)", dir);
		return 0;
	}
	if (errno == EEXIST)
		return 0;
	if (errno == ENOENT && make_parent(dir) == 0 && mkdir(dir, 0755) == 0)
		return 0;
	keeper_log("cannot make the socket's directory %s: %s; make it, or choose another path with --socket",
		   dir, strerror(errno));
	return -errno;
}

/* Whether a keeper answers at @addr: connect() refused means a stale socket. */
static int probe(const struct sockaddr_un *addr)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), err = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0)
		err = -EADDRINUSE;
	else if (errno != ECONNREFUSED)
		err = -errno;
	close(fd);
	return err;
}

/* Bind with the final mode under a umask, never a chmod by path after: between
 * bind and chmod another user could put something else at the path. */
static int bind_with_mode(int fd, const struct sockaddr_un *addr, mode_t mode)
{
	mode_t old = umask(~mode & 0777);
	int err = bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0 ? 0 : -errno;

	umask(old);
	return err;
}

int server_listen(const struct keeper_config *config, bool *bound_here)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd = service_listen_fd(), err;

	*bound_here = false;
	if (fd >= 0) {
		/* A socket unit passes it blocking (NonBlocking=no): accept_all()
		 * reads the backlog until EAGAIN, so it must not block. */
		if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
			err = -errno;
			keeper_log("cannot make the passed socket non-blocking: %s", strerror(-err));
			return err;
		}
		return fd;
	}
	if (strlen(config->socket_path) >= sizeof(addr.sun_path)) {
		keeper_log("socket path %s is longer than %zu bytes; choose a shorter --socket",
			   config->socket_path, sizeof(addr.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(addr.sun_path, config->socket_path, strlen(config->socket_path) + 1);
	err = make_parent(config->socket_path);
	if (err)
		return err;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		err = -errno;
		keeper_log("cannot make a SOCK_SEQPACKET socket: %s", strerror(-err));
		return err;
	}
	err = bind_with_mode(fd, &addr, config->socket_mode);
	if (err == -EADDRINUSE) {
		err = probe(&addr);
		if (err == -EADDRINUSE) {
			keeper_log("another keeper answers at %s; stop it first, or choose another --socket",
				   config->socket_path);
			close(fd);
			return err;
		}
		if (!err) {
			/* Refused: nobody listens there, a keeper that died left it. */
			keeper_log("replacing the stale socket %s", config->socket_path);
			unlink(config->socket_path);
			err = bind_with_mode(fd, &addr, config->socket_mode);
		}
	}
	if (err) {
		keeper_log(
			"cannot bind %s: %s; check the path and its directory's permissions, or choose another "
			"--socket",
			config->socket_path, strerror(-err));
		close(fd);
		return err;
	}
	*bound_here = true;
	if (listen(fd, 128) != 0) {
		err = -errno;
		keeper_log("cannot listen on %s: %s", config->socket_path, strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

/* --- connections --------------------------------------------------------------- */

static void drop(struct connection *c)
{
	close(c->fd);
	c->fd = -1;
	/* A creator that goes leaves its commit to finish: the segment is kept. */
	free(c->parked);
	c->parked = NULL;
	free(c->peer.groups);
	c->peer.groups = NULL;
	c->peer.group_count = 0;
	connection_count--;
}

/* SO_PEERGROUPS (Linux 4.13): the peer's supplementary groups as they were
 * at connect, with no race against a reused pid.  Without it the primary
 * gid alone decides sharing by group. */
static void read_groups(int fd, struct keeper_peer *peer)
{
	socklen_t len = 32 * sizeof(gid_t);
	gid_t *groups = malloc(len);

	if (groups && getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
		gid_t *bigger = errno == ERANGE ? realloc(groups, len) : NULL;

		if (bigger)
			groups = bigger;
		if (!bigger || getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
			len = 0;
	}
	peer->groups = groups;
	peer->group_count = groups ? len / sizeof(gid_t) : 0;
}

/* Refuse descriptors at the sender where the kernel can (Linux 6.16+); on an
 * older one the option is unknown and MSG_CTRUNC alone protects the keeper. */
static void refuse_rights(int fd)
{
	int off = 0;

	if (setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off)) != 0 && errno != ENOPROTOOPT &&
	    errno != EINVAL)
		keeper_log("cannot turn SO_PASSRIGHTS off: %s", strerror(errno));
}

/* Out of descriptors: the listener stays readable, and poll() would return at
 * once for ever.  Close the connection at the head of the backlog with the
 * reserved descriptor, and leave the listener out of poll() a while. */
static void out_of_descriptors(int listen_fd, int why)
{
	static struct keeper_log_limit limit = KEEPER_LOG_LIMIT(1, 10);
	int fd;

	if (reserve_fd >= 0) {
		close(reserve_fd);
		fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			close(fd);
		reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	accept_paused_until_ns = monotonic_ns() + ACCEPT_BACKOFF_NS;
	keeper_say_limited(&limit, KEEPER_LOG_WARNING,
			   "cannot accept a connection: %s; closing new ones at once; raise the open file "
			   "limit (LimitNOFILE=, ulimit -n) or lower --max-connections",
			   strerror(why));
}

/* A connection the keeper will not serve: one ERROR of sequence 0 (no
 * request has that number, so a client reads it as the keeper's refusal of
 * the connection, not as the reply to its request), then the close.  The
 * client sees why instead of "it stopped or restarted". */
static bool send_reply(struct connection *c, struct mc_keeper_reply *rep, const int fds[2]);
static void refuse_connection(int fd, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void refuse_connection(int fd, int status, const char *fmt, ...)
{
	struct connection c = { .fd = fd };
	const int none[2] = { -1, -1 };
	struct mc_keeper_reply *rep = malloc(sizeof(*rep));
	va_list ap;
	char discard;

	if (rep) {
		memset(rep, 0, sizeof(*rep));
		rep->type = MC_KEEPER_ERROR;
		rep->sequence = 0;
		rep->status = (uint32_t)status;
		va_start(ap, fmt);
		vsnprintf(rep->text, sizeof(rep->text), fmt, ap);
		va_end(ap);
		send_reply(&c, rep, none);
		free(rep);
	}
	/* A close with the client's request unread would reset the connection,
	 * and the client would read that reset before the refusal: read what it
	 * sent.  First shut the reading side, so that the client's further sends
	 * fail (EPIPE) instead of refilling the queue, and read at most a few
	 * messages: a client that floods a refused connection gets its reset,
	 * never the serving thread. */
	shutdown(fd, SHUT_RD);
	for (int i = 0; i < REFUSED_DRAIN_MAX && recv(fd, &discard, sizeof(discard), MSG_DONTWAIT) > 0; i++)
		;
	close(fd);
}

static void accept_all(int listen_fd, const struct keeper_config *config)
{
	static struct keeper_log_limit over_uid = KEEPER_LOG_LIMIT(1, 10), over_all = KEEPER_LOG_LIMIT(1, 10),
				       unmapped = KEEPER_LOG_LIMIT(1, 10);
	int turn;

	for (turn = 0; turn < ACCEPTS_PER_TURN; turn++) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct connection *c = NULL;
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		char who[160];
		unsigned of_uid = 0;
		uid_t account;
		size_t i;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				out_of_descriptors(listen_fd, errno);
			return;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
			close(fd);
			continue;
		}
		if (user_namespace_unmapped(cred.uid, cred.gid)) {
			refuse_connection(
				fd, EACCES,
				"the keeper runs in a user namespace that does not map your uid or gid "
				"(it sees uid %u, gid %u, as it sees every unmapped one), so it cannot "
				"tell you from other users; run the keeper where your ids are mapped",
				(unsigned)cred.uid, (unsigned)cred.gid);
			keeper_say_limited(
				&unmapped, KEEPER_LOG_WARNING,
				"refused a connection of pid %d: its uid or gid is not mapped into "
				"the keeper's user namespace (seen as %u/%u)",
				(int)cred.pid, (unsigned)cred.uid, (unsigned)cred.gid);
			continue;
		}
		/* A user's subordinate uids and user namespaces share its connections. */
		account = account_of(fd, cred.uid, cred.pid);
		for (i = 0; i < config->max_connections; i++) {
			if (connections[i].fd < 0) {
				if (!c)
					c = &connections[i];
			} else if (connections[i].peer.account == account) {
				of_uid++;
			}
		}
		if (of_uid >= config->max_per_uid) {
			account_describe(who, sizeof(who), cred.uid, account);
			refuse_connection(fd, EUSERS,
					  "%s has %u connections to the keeper, the most its "
					  "--max-connections-per-uid allows; close some (a process per rank "
					  "needs one only while it creates or joins), or raise "
					  "--max-connections-per-uid",
					  who, of_uid);
			keeper_say_limited(&over_uid, KEEPER_LOG_WARNING,
					   "refused a connection of %s (pid %d): it has %u, the most "
					   "--max-connections-per-uid allows",
					   who, (int)cred.pid, of_uid);
			continue;
		}
		if (connection_count >= config->max_connections || !c) {
			refuse_connection(fd, EUSERS,
					  "the keeper serves %zu connections, its --max-connections (%s has "
					  "%u of them); retry, or raise --max-connections",
					  connection_count,
					  account_describe(who, sizeof(who), cred.uid, account), of_uid);
			keeper_say_limited(
				&over_all, KEEPER_LOG_WARNING,
				"refused a connection of uid %u (pid %d): all %zu of --max-connections "
				"are taken",
				(unsigned)cred.uid, (int)cred.pid, connection_count);
			continue;
		}
		refuse_rights(fd);
		c->fd = fd;
		c->peer.uid = cred.uid;
		c->peer.account = account;
		c->peer.gid = cred.gid;
		c->peer.pid = cred.pid;
		read_groups(fd, &c->peer);
		c->last_heard_ns = monotonic_ns();
		connection_count++;
	}
}

/* Printable ASCII only, at most MC_KEEPER_TEXT_MAX: a library's sentence may hold anything. */
static void clean_text(char *text)
{
	size_t i;

	text[MC_KEEPER_TEXT_MAX] = '\0';
	for (i = 0; text[i]; i++)
		if (text[i] < 0x20 || text[i] > 0x7e)
			text[i] = '?';
}

/* The replies that hand a segment: CREATE's and JOIN's. */
static bool hands_descriptors(uint16_t type)
{
	return type == (MC_KEEPER_CREATE | MC_KEEPER_REPLY) || type == (MC_KEEPER_JOIN | MC_KEEPER_REPLY);
}

/* Send @rep (with @fds when it is a successful CREATE or JOIN); false: close the connection. */
static bool send_reply(struct connection *c, struct mc_keeper_reply *rep, const int fds[2])
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	char why[256];
	int len, count = 0;

	clean_text(rep->text);
	/* Who the caller is here: a client in a user namespace of its own
	 * compares the owner with this, not with its own uid. */
	if (hands_descriptors(rep->type))
		rep->caller_uid = (uint32_t)c->peer.uid;
	len = mc_keeper_reply_encode(rep, out_buffer, sizeof(out_buffer), why, sizeof(why));
	if (len < 0) {
		keeper_log("cannot encode a reply to pid %d: %s", (int)c->peer.pid, why);
		return false;
	}
	iov.iov_base = out_buffer;
	iov.iov_len = (size_t)len;
	if (rep->status == 0 && hands_descriptors(rep->type))
		count = rep->descriptors;
	if (count) {
		struct cmsghdr *cmsg;

		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = CMSG_SPACE((size_t)count * sizeof(int));
		cmsg = CMSG_FIRSTHDR(&msg);
		cmsg->cmsg_level = SOL_SOCKET;
		cmsg->cmsg_type = SCM_RIGHTS;
		cmsg->cmsg_len = CMSG_LEN((size_t)count * sizeof(int));
		memcpy(CMSG_DATA(cmsg), fds, (size_t)count * sizeof(int));
	}
	if (sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == len)
		return true;
	/* EAGAIN: a client that does not read its replies; anything else: gone. */
	return false;
}

static void reply_error(struct connection *c, uint32_t sequence, int status, const char *text)
{
	struct mc_keeper_reply rep;
	const int none[2] = { -1, -1 };

	memset(&rep, 0, sizeof(rep));
	rep.type = MC_KEEPER_ERROR;
	rep.sequence = sequence;
	rep.status = (uint32_t)status;
	snprintf(rep.text, sizeof(rep.text), "%s", text);
	send_reply(c, &rep, none);
}

static bool answer(struct connection *c, const struct mc_keeper_request *req, bool behind_commit);
static bool send_or_park(struct connection *c, const struct mc_keeper_request *req, struct store_wait wait,
			 struct mc_keeper_reply *rep, const int fds[2]);

/* A create refused for a limit (--budget, --uid-budget, --max-segments,
 * --uid-max-segments) is what an operator looks for when an engine comes up
 * cold: one line, with who asked, and never a flood. */
static void log_refused_room(const struct connection *c, const struct mc_keeper_request *req,
			     const struct mc_keeper_reply *rep)
{
	static struct keeper_log_limit limit = KEEPER_LOG_LIMIT(10, 60);

	if (req->type == MC_KEEPER_CREATE && (rep->status == ENOSPC || rep->status == EMFILE))
		keeper_say_limited(&limit, KEEPER_LOG_WARNING, "refused a create of uid %u (pid %d): %s",
				   (unsigned)c->peer.uid, (int)c->peer.pid, rep->text);
}

/* Read and answer one request; false: close the connection. */
static bool serve(struct connection *c)
{
	/* No control buffer: descriptors sent are dropped by the kernel (MSG_CTRUNC). */
	struct iovec iov = { .iov_base = in_buffer, .iov_len = sizeof(in_buffer) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	static struct mc_keeper_request req;
	char why[256];
	ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	if (n == 0 && !(msg.msg_flags & MSG_CTRUNC))
		return false; /* the client closed its end */
	c->last_heard_ns = monotonic_ns();
	mc_keeper_request_decode(in_buffer, (size_t)n < sizeof(in_buffer) ? (size_t)n : sizeof(in_buffer),
				 &req, why, sizeof(why));
	if (msg.msg_flags & MSG_CTRUNC) {
		keeper_log("refused a request with descriptors from pid %d (uid %u)", (int)c->peer.pid,
			   (unsigned)c->peer.uid);
		reply_error(c, req.sequence, EPROTO, "keeper requests carry no descriptors");
		return false;
	}
	if ((msg.msg_flags & MSG_TRUNC) ||
	    mc_keeper_request_decode(in_buffer, (size_t)n, &req, why, sizeof(why)) != 0) {
		if (msg.msg_flags & MSG_TRUNC)
			snprintf(why, sizeof(why), "keeper request: over-long (more than %u bytes)",
				 (unsigned)MC_KEEPER_MESSAGE_MAX);
		reply_error(c, req.sequence, EPROTO, why);
		return false;
	}
	return answer(c, &req, false);
}

/* Answer @req, or park @c when it waits for a commit; false: close it. */
static bool answer(struct connection *c, const struct mc_keeper_request *req, bool behind_commit)
{
	static struct mc_keeper_reply rep;
	struct store_wait wait = { 0, false, 0 };
	int fds[2];

	memset(&rep, 0, sizeof(rep));
	if (req->type == MC_KEEPER_HELLO) {
		rep.type = MC_KEEPER_HELLO | MC_KEEPER_REPLY;
		rep.sequence = req->sequence;
		rep.version = MC_KEEPER_VERSION;
		rep.keeper_pid = (uint32_t)getpid();
		rep.instance = instance;
		rep.message_max = MC_KEEPER_MESSAGE_MAX;
		rep.kept = store_count();
		rep.hello_flags = service_can_store() ? MC_KEEPER_HELLO_FDSTORE : 0;
		fds[0] = fds[1] = -1;
	} else {
		wait = store_handle(req, &c->peer, behind_commit, &rep, fds);
	}
	return send_or_park(c, req, wait, &rep, fds);
}

/* Send @rep, or park @c's @req for what @wait names; false: close it. */
static bool send_or_park(struct connection *c, const struct mc_keeper_request *req, struct store_wait wait,
			 struct mc_keeper_reply *rep, const int fds[2])
{
	if (!wait.generation && !wait.scan) {
		log_refused_room(c, req, rep);
		return send_reply(c, rep, fds);
	}
	c->parked = malloc(sizeof(*c->parked));
	if (!c->parked) {
		keeper_log("out of memory to park a request of pid %d", (int)c->peer.pid);
		return false;
	}
	*c->parked = *req;
	c->parked_on = wait;
	return true;
}

/* --- commits done ------------------------------------------------------------ */

static void unpark(struct connection *c)
{
	free(c->parked);
	c->parked = NULL;
	c->parked_on = (struct store_wait){ 0, false, 0 };
	c->last_heard_ns = monotonic_ns(); /* its silence starts now */
}

/* Each commit a committer finished: its creator's reply, then the requests
 * parked behind it, handled again (which may park them anew). */
static void commits_done(const struct keeper_config *config)
{
	static struct mc_keeper_reply rep;
	struct commit_job *job;

	while ((job = committer_take_done())) {
		uint64_t generation;
		int fds[2];
		size_t i;

		memset(&rep, 0, sizeof(rep));
		generation = store_commit_done(job, &rep, fds);
		for (i = 0; i < config->max_connections; i++) {
			struct connection *c = &connections[i];

			if (c->fd < 0 || !c->parked || !c->parked_on.creator ||
			    c->parked_on.generation != generation)
				continue;
			rep.sequence = c->parked->sequence;
			unpark(c);
			if (!send_reply(c, &rep, fds))
				drop(c);
		}
		for (i = 0; i < config->max_connections; i++) {
			struct connection *c = &connections[i];
			struct mc_keeper_request *req;

			if (c->fd < 0 || !c->parked || c->parked_on.creator ||
			    c->parked_on.generation != generation)
				continue;
			req = c->parked;
			c->parked = NULL;
			unpark(c);
			if (!answer(c, req, true))
				drop(c);
			free(req);
		}
	}
}

/* A mapper scan done: the requests parked for it (or an earlier one),
 * handled again with its counts. */
static void scans_done(const struct keeper_config *config)
{
	static struct mc_keeper_reply rep;
	uint64_t done = store_scan_done();
	size_t i;

	if (!done)
		return;
	for (i = 0; i < config->max_connections; i++) {
		struct connection *c = &connections[i];
		struct mc_keeper_request *req;
		struct store_wait wait;
		int fds[2];

		if (c->fd < 0 || !c->parked || !c->parked_on.scan || c->parked_on.scan > done)
			continue;
		req = c->parked;
		c->parked = NULL;
		memset(&rep, 0, sizeof(rep));
		wait = store_handle_after_scan(req, &c->peer, c->parked_on.scan, &rep, fds);
		unpark(c);
		if (!send_or_park(c, req, wait, &rep, fds))
			drop(c);
		free(req);
	}
}

/* --- the loop -------------------------------------------------------------- */

static int wait_ms(const struct keeper_config *config, int store_ms, bool paused)
{
	uint64_t now = monotonic_ns(), silent_ns = (uint64_t)config->silent_timeout_ms * 1000000u,
		 soonest = 0;
	size_t i;
	int ms;

	for (i = 0; i < config->max_connections; i++) {
		uint64_t due;

		if (connections[i].fd < 0 || connections[i].parked)
			continue;
		due = connections[i].last_heard_ns + silent_ns;
		if (!soonest || due < soonest)
			soonest = due;
	}
	if (paused && (!soonest || accept_paused_until_ns < soonest))
		soonest = accept_paused_until_ns;
	if (!soonest)
		return store_ms;
	ms = soonest <= now ? 0 : (int)((soonest - now) / 1000000u) + 1;
	return store_ms >= 0 && store_ms < ms ? store_ms : ms;
}

static void close_silent(const struct keeper_config *config)
{
	uint64_t now = monotonic_ns(), silent_ns = (uint64_t)config->silent_timeout_ms * 1000000u;
	size_t i;

	for (i = 0; i < config->max_connections; i++)
		if (connections[i].fd >= 0 && !connections[i].parked &&
		    now - connections[i].last_heard_ns >= silent_ns)
			drop(&connections[i]);
}

int server_run(const struct keeper_config *config, int listen_fd, int signal_fd)
{
	size_t slots = config->max_connections + 4, i;
	struct pollfd *polls = calloc(slots, sizeof(*polls));
	struct connection **polled = calloc(slots, sizeof(struct connection *));
	int store_ms = store_tick(), err = 0;

	connections = calloc(config->max_connections ? config->max_connections : 1, sizeof(*connections));
	if (!polls || !polled || !connections) {
		keeper_log("out of memory for %u connections; lower --max-connections",
			   config->max_connections);
		free(polls);
		free(polled);
		free(connections);
		return -ENOMEM;
	}
	for (i = 0; i < config->max_connections; i++)
		connections[i].fd = -1;
	/* On the listener too: a connection inherits it before accept(). */
	refuse_rights(listen_fd);
	reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (getrandom(&instance, sizeof(instance), 0) != (ssize_t)sizeof(instance))
		instance = monotonic_ns() ^ ((uint64_t)getpid() << 32);

	for (;;) {
		size_t count = 0;
		uint64_t before;
		int ready;

		polls[count++] = (struct pollfd){ .fd = signal_fd, .events = POLLIN };
		/* fd -1: poll() skips the listener while accepts are paused. */
		polls[count++] =
			(struct pollfd){ .fd = monotonic_ns() < accept_paused_until_ns ? -1 : listen_fd,
					 .events = POLLIN };
		polls[count++] = (struct pollfd){ .fd = committer_fd(), .events = POLLIN };
		polls[count++] = (struct pollfd){ .fd = scanner_fd(), .events = POLLIN };
		/* A parked connection is polled for its hangup only: no input is
		 * read until its reply is sent. */
		for (i = 0; i < config->max_connections; i++)
			if (connections[i].fd >= 0) {
				polled[count] = &connections[i];
				polls[count++] =
					(struct pollfd){ .fd = connections[i].fd,
							 .events = connections[i].parked ? 0 : POLLIN };
			}
		ready = poll(polls, count, wait_ms(config, store_ms, polls[1].fd < 0));
		if (ready < 0 && errno != EINTR) {
			err = -errno;
			keeper_log("poll failed: %s", strerror(errno));
			break;
		}
		if (ready > 0 && polls[0].revents) {
			struct signalfd_siginfo info;

			if (read(signal_fd, &info, sizeof(info)) == (ssize_t)sizeof(info)) {
				keeper_log("stopping on signal %u", info.ssi_signo);
				break;
			}
		}
		if (ready > 0 && polls[2].revents)
			commits_done(config);
		if (ready > 0 && polls[3].revents)
			scans_done(config);
		before = monotonic_ns();
		for (i = 4; ready > 0 && i < count; i++) {
			struct connection *c = polled[i];

			/* Parked (or unparked by commits_done() above), it was polled for
			 * its hangup only: any event is its end. */
			if (!polls[i].revents || c->fd < 0)
				continue;
			if ((polls[i].revents & POLLIN) ? !serve(c) : true)
				drop(c);
		}
		if (ready > 0 && polls[1].revents)
			accept_all(listen_fd, config);
		/* A long commit is no client's silence: their clocks restart. */
		if (monotonic_ns() - before > (uint64_t)config->silent_timeout_ms * 500000u)
			for (i = 0; i < config->max_connections; i++)
				if (connections[i].fd >= 0 && connections[i].last_heard_ns < before)
					connections[i].last_heard_ns = monotonic_ns();
		close_silent(config);
		store_ms = store_tick();
	}
	for (i = 0; i < config->max_connections; i++)
		if (connections[i].fd >= 0)
			drop(&connections[i]);
	if (reserve_fd >= 0)
		close(reserve_fd);
	reserve_fd = -1;
	free(polls);
	free(polled);
	free(connections);
	connections = NULL;
	return err;
}
