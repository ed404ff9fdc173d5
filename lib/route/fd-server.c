/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The owner's side of passing a descriptor to the peers of a segment.  An
 * offer names the descriptor (pid, number, device, inode: the /proc and
 * pidfd_getfd routes of peer-fd.c) and serves it on an abstract Unix socket
 * (fd-socket.h), which reaches peers in another PID namespace of the same
 * network namespace.  The socket's name is public; the 128-bit token that
 * travels with it in the blob is the secret a peer must present, and the
 * peer's uid (SO_PEERCRED) must be the owner's or one that
 * MOONCAKE_SEGMENT_PEER_UIDS lets in: that is checked as the connection is
 * accepted, so another user's connections never take a slot.
 *
 * One thread per offer serves from offer until withdraw, so the owner's
 * create and complete never wait for a peer.  It polls the listener and
 * every connection (at most MAX_CONNECTIONS at a time, the rest wait in the
 * backlog), answers each request as soon as it is complete, and drops a peer
 * that has not sent one by its deadline: a slow or silent peer never stops
 * the others.  When accept fails for want of descriptors or memory, the
 * listener rests ACCEPT_RETRY_MS (it stays readable: polling it would
 * spin).  It calls no log callback (that could need a lock the owner's
 * thread holds while it joins this one); withdraw logs what it refused.
 *
 * fork(): the listener and the wake-up eventfd are tracked by fork.c; the
 * connections by this file's fork handlers, registered with fork.c (fork.h
 * says the order), under a lock the thread holds only around accept and
 * close.  A forked child never has the thread:
 * its withdraw frees the memory and joins nothing.  Every live offer is on
 * one list, so an offer a child inherited stays reachable until withdrawn.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/environment.h"
#include "base/error.h"
#include "base/fork.h"
#include "base/little-endian.h"
#include "base/tracked-fd.h"
#include "mooncake/segment.h"
#include "fd-socket.h"
#include "private.h"
#include "route.h"

#define MAX_CONNECTIONS	 64
#define MAX_ALLOWED_UIDS 16
/* Out of descriptors or memory: how long the listener waits before the next accept. */
#define ACCEPT_RETRY_MS 50

struct connection {
	int fd;		     /* -1: free slot */
	int64_t deadline_ms; /* CLOCK_MONOTONIC: drop the peer after this */
};

struct mc_fd_offer {
	pid_t server_pid; /* the process that made the offer: only it has the thread */
	int fd;		  /* the descriptor served (the caller's; never closed here) */
	int companion_fd; /* a second one served with it (the caller's), -1 when none */
	uint8_t token[MC_PEER_FD_TOKEN_SIZE];
	bool any_uid;
	unsigned int n_allowed;
	uid_t allowed[MAX_ALLOWED_UIDS]; /* the owner's uids, then MOONCAKE_SEGMENT_PEER_UIDS */

	int listener;
	struct mc_tracked_fd listener_tracking;
	int wake; /* eventfd: withdraw tells the thread to stop */
	struct mc_tracked_fd wake_tracking;
	pthread_t thread;
	bool serving; /* the thread runs (in this process) */

	pthread_mutex_t connections_lock; /* accept and close against fork() */
	struct connection connections[MAX_CONNECTIONS];

	/* Written by the thread only, read after it is joined. */
	unsigned int refused;
	char first_refusal[160];

	struct mc_fd_offer *next;
};

static pthread_mutex_t offers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static struct mc_fd_offer *offers;

/* --- fork(): the connections ------------------------------------------------ */

static void before_fork(void)
{
	pthread_mutex_lock(&offers_lock);
	for (struct mc_fd_offer *o = offers; o; o = o->next)
		pthread_mutex_lock(&o->connections_lock);
}

static void after_fork_in_parent(void)
{
	for (struct mc_fd_offer *o = offers; o; o = o->next)
		pthread_mutex_unlock(&o->connections_lock);
	pthread_mutex_unlock(&offers_lock);
}

/* The child has no server thread: close its copies of the peers' connections. */
static void after_fork_in_child(void)
{
	for (struct mc_fd_offer *o = offers; o; o = o->next) {
		for (int i = 0; i < MAX_CONNECTIONS; i++)
			if (o->connections[i].fd >= 0) {
				close(o->connections[i].fd);
				o->connections[i].fd = -1;
			}
		o->serving = false;
		pthread_mutex_unlock(&o->connections_lock);
	}
	pthread_mutex_unlock(&offers_lock);
}

static struct mc_fork_handlers fork_handlers = {
	.prepare = before_fork,
	.parent = after_fork_in_parent,
	.child = after_fork_in_child,
};

static void install_handlers(void)
{
	mc_fork_register(&fork_handlers);
}

/* --- the server thread ---------------------------------------------------- */

static void close_connection(struct mc_fd_offer *o, struct connection *c)
{
	pthread_mutex_lock(&o->connections_lock);
	close(c->fd);
	c->fd = -1;
	pthread_mutex_unlock(&o->connections_lock);
}

static bool same_token(const uint8_t *a, const uint8_t *b)
{
	uint8_t diff = 0;

	/* Every byte, whatever the first difference: no timing tells how much matched. */
	for (int i = 0; i < MC_PEER_FD_TOKEN_SIZE; i++)
		diff |= (uint8_t)(a[i] ^ b[i]);
	return diff == 0;
}

static bool uid_allowed(const struct mc_fd_offer *o, uid_t uid)
{
	if (o->any_uid)
		return true;
	for (unsigned int i = 0; i < o->n_allowed; i++)
		if (o->allowed[i] == uid)
			return true;
	return false;
}

static void note_refusal(struct mc_fd_offer *o, const struct ucred *cred, const char *why)
{
	if (o->refused++ == 0)
		snprintf(o->first_refusal, sizeof(o->first_refusal), "pid %d uid %u: %s", (int)cred->pid,
			 (unsigned int)cred->uid, why);
}

/* One reply; descriptor @fd rides along only with MC_FD_REPLY_OK. */
static void reply(int conn, enum mc_fd_reply_status status, int fd)
{
	uint32_t uid = (uint32_t)getuid();
	/* status, three zero bytes, the owner's uid (fd-socket.h) */
	uint8_t bytes[MC_FD_REPLY_BYTES] = { (uint8_t)status };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = { bytes, sizeof(bytes) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	mc_put_le32(bytes + 4, uid);
	if (status == MC_FD_REPLY_OK) {
		struct cmsghdr *cmsg;

		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = sizeof(control.buf);
		cmsg = CMSG_FIRSTHDR(&msg);
		cmsg->cmsg_level = SOL_SOCKET;
		cmsg->cmsg_type = SCM_RIGHTS;
		cmsg->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
	}
	/* A peer that went away meanwhile only costs it its answer. */
	(void)sendmsg(conn, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* The descriptor numbered @number if this offer serves it, else -1. */
static int offered(const struct mc_fd_offer *o, uint32_t number)
{
	if (number == (uint32_t)o->fd)
		return o->fd;
	if (o->companion_fd >= 0 && number == (uint32_t)o->companion_fd)
		return o->companion_fd;
	return -1;
}

/* The peer's request is readable: answer it and hang up. */
static void answer(struct mc_fd_offer *o, struct connection *c)
{
	uint8_t request[MC_FD_REQUEST_NAMED_BYTES + 1];
	struct ucred cred = { 0, (uid_t)-1, (gid_t)-1 };
	socklen_t len = sizeof(cred);
	uint32_t magic = 0;
	ssize_t n = recv(c->fd, request, sizeof(request), MSG_DONTWAIT);
	int wanted = -1;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return; /* not there yet after all */
	if (n > 0 && getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		cred.uid = (uid_t)-1;
	if (n >= 4)
		magic = mc_get_le32(request);
	if (n == MC_FD_REQUEST_BYTES)
		wanted = o->fd;
	else if (n == MC_FD_REQUEST_NAMED_BYTES)
		wanted = offered(o, mc_get_le32(request + MC_FD_REQUEST_BYTES));
	if (n <= 0)
		; /* the peer hung up */
	else if (magic != MC_FD_REQUEST_MAGIC || wanted < 0) {
		note_refusal(o, &cred, "not a request of this protocol");
		reply(c->fd, MC_FD_REPLY_MALFORMED, -1);
	} else if (!same_token(request + 4, o->token)) {
		note_refusal(o, &cred, "wrong token");
		reply(c->fd, MC_FD_REPLY_BAD_TOKEN, -1);
	} else {
		reply(c->fd, MC_FD_REPLY_OK, wanted);
	}
	close_connection(o, c);
}

/* A peer of a user not let in is told so as soon as it is accepted, before
 * it sends anything: it never holds a slot (nor delays the others) for the
 * request deadline.  True when it was refused and hung up on. */
static bool refuse_other_user(struct mc_fd_offer *o, struct connection *c)
{
	struct ucred cred = { 0, (uid_t)-1, (gid_t)-1 };
	socklen_t len = sizeof(cred);

	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		cred.uid = (uid_t)-1;
	if (uid_allowed(o, cred.uid))
		return false;
	note_refusal(o, &cred, "another user (MOONCAKE_SEGMENT_PEER_UIDS lets users in)");
	reply(c->fd, MC_FD_REPLY_OTHER_USER, -1);
	close_connection(o, c);
	return true;
}

/* Take the waiting peers while there is room; each gets its deadline.
 * False when accept cannot take one now (EMFILE, ENFILE, ENOMEM, ENOBUFS):
 * the listener stays readable, so the caller must not poll it at once. */
static bool accept_peers(struct mc_fd_offer *o)
{
	for (int i = 0; i < MAX_CONNECTIONS; i++) {
		struct connection *c = &o->connections[i];
		int err;

		if (c->fd >= 0)
			continue;
		pthread_mutex_lock(&o->connections_lock);
		c->fd = accept4(o->listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		err = errno;
		pthread_mutex_unlock(&o->connections_lock);
		if (c->fd < 0)
			/* EAGAIN: nobody else waits; a peer that gave up: next round */
			return err == EAGAIN || err == ECONNABORTED || err == EINTR;
		if (refuse_other_user(o, c))
			continue;
		c->deadline_ms = mc_now_ms() + MC_FD_SERVER_REQUEST_DEADLINE_MS;
	}
	return true;
}

static void *serve(void *arg)
{
	struct mc_fd_offer *o = arg;
	struct pollfd fds[2 + MAX_CONNECTIONS];
	int slot_of[2 + MAX_CONNECTIONS];
	int64_t accept_again = 0; /* after accept failed: when to try again */

	for (;;) {
		int64_t now = mc_now_ms(), next = accept_again > now ? accept_again : -1;
		int n = 0, timeout, ready;
		bool room = false;

		fds[n++] = (struct pollfd){ o->wake, POLLIN, 0 };
		for (int i = 0; i < MAX_CONNECTIONS; i++) {
			struct connection *c = &o->connections[i];

			if (c->fd < 0) {
				room = true;
				continue;
			}
			if (c->deadline_ms <= now) {
				close_connection(o, c); /* silent too long: the others go first */
				room = true;
				continue;
			}
			if (next < 0 || c->deadline_ms < next)
				next = c->deadline_ms;
			slot_of[n] = i;
			fds[n++] = (struct pollfd){ c->fd, POLLIN, 0 };
		}
		if (room && accept_again <= now)
			fds[n++] = (struct pollfd){ o->listener, POLLIN, 0 };
		timeout = next < 0 ? -1 : (int)(next - now);
		ready = poll(fds, (nfds_t)n, timeout);
		if (ready < 0 && errno != EINTR)
			ready = 0; /* ENOMEM: try again; deadlines still apply */
		if (ready <= 0)
			continue;
		if (fds[0].revents)
			return NULL; /* withdraw */
		for (int k = 1; k < n; k++) {
			if (!fds[k].revents)
				continue;
			if (fds[k].fd != o->listener)
				answer(o, &o->connections[slot_of[k]]);
			else if (!accept_peers(o))
				accept_again = mc_now_ms() + ACCEPT_RETRY_MS;
		}
	}
}

/* --- offer and withdraw --------------------------------------------------- */

/* The owner's own uids, and those MOONCAKE_SEGMENT_PEER_UIDS adds ("any" or "1000,1001"). */
static int read_allowed_uids(struct mc_fd_offer *o)
{
	const char *text = mc_env("MOONCAKE_SEGMENT_PEER_UIDS");

	o->allowed[o->n_allowed++] = getuid();
	o->allowed[o->n_allowed++] = geteuid();
	if (!text)
		return 0;
	if (strcmp(text, "any") == 0) {
		o->any_uid = true;
		return 0;
	}
	for (const char *p = text;; p++) {
		size_t len = strcspn(p, ",");
		uint64_t uid;

		if (!mc_parse_decimal(p, len, &uid) || uid >= UINT32_MAX || o->n_allowed == MAX_ALLOWED_UIDS)
			return mc_segment_error(
				EINVAL,
				"MOONCAKE_SEGMENT_PEER_UIDS='%s' is not 'any' or a list "
				"of at most %d uids (digits only) separated by commas, e.g. 1000,1001; fix or "
				"unset it",
				text, MAX_ALLOWED_UIDS - 2);
		o->allowed[o->n_allowed++] = (uid_t)uid;
		p += len;
		if (!*p)
			return 0;
	}
}

static bool random_bytes(void *buf, size_t len)
{
	return getrandom(buf, len, 0) == (ssize_t)len;
}

/* Bind a listener under a fresh random name; false with @why when this process cannot serve. */
static bool open_listener(struct mc_fd_offer *o, uint64_t *id, char *why, size_t why_size)
{
	struct sockaddr_un addr;

	mc_fd_track_begin();
	o->listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	mc_fd_track_end(&o->listener_tracking, &o->listener);
	if (o->listener < 0) {
		snprintf(why, why_size, "socket(AF_UNIX): %s", strerror(errno));
		return false;
	}
	/* Random names never collide in practice; a few tries make it certain enough. */
	for (int attempt = 0; attempt < 4; attempt++) {
		if (!random_bytes(id, sizeof(*id))) {
			snprintf(why, why_size, "getrandom: %s", strerror(errno));
			return false;
		}
		if (*id == 0)
			continue;
		if (bind(o->listener, (struct sockaddr *)&addr, mc_fd_socket_address(*id, &addr)) == 0) {
			if (listen(o->listener, SOMAXCONN) == 0)
				return true;
			snprintf(why, why_size, "listen: %s", strerror(errno));
			return false;
		}
		if (errno != EADDRINUSE)
			break;
	}
	snprintf(why, why_size, "bind to an abstract Unix socket: %s", strerror(errno));
	return false;
}

/* Listener, token, eventfd and thread; false with @why when this process cannot serve. */
static bool start_serving(struct mc_fd_offer *o, struct mc_peer_fd *h, char *why, size_t why_size)
{
	sigset_t all, saved;
	uint64_t id = 0;
	int err;

	if (!random_bytes(o->token, sizeof(o->token))) {
		snprintf(why, why_size, "getrandom: %s", strerror(errno));
		return false;
	}
	if (!open_listener(o, &id, why, why_size))
		return false;
	mc_fd_track_begin();
	o->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	mc_fd_track_end(&o->wake_tracking, &o->wake);
	if (o->wake < 0) {
		snprintf(why, why_size, "eventfd: %s", strerror(errno));
		return false;
	}
	/* The thread takes no signal: the application's handlers run on its own threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	err = pthread_create(&o->thread, NULL, serve, o);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	if (err) {
		snprintf(why, why_size, "pthread_create: %s", strerror(err));
		return false;
	}
	o->serving = true;
	h->socket_id = id;
	memcpy(h->token, o->token, sizeof(h->token));
	return true;
}

static void close_descriptors(struct mc_fd_offer *o)
{
	for (int i = 0; i < MAX_CONNECTIONS; i++)
		if (o->connections[i].fd >= 0)
			close_connection(o, &o->connections[i]);
	mc_fd_close(&o->listener_tracking);
	mc_fd_close(&o->wake_tracking);
}

int mc_peer_fd_describe(int fd, struct mc_peer_fd *h)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return mc_error_sys(EIO, errno, "Shared segment fstat of the descriptor to share failed");
	memset(h, 0, sizeof(*h));
	h->pid = (uint32_t)getpid();
	h->fd = (uint32_t)fd;
	h->dev = (uint64_t)st.st_dev;
	h->ino = (uint64_t)st.st_ino;
	return 0;
}

int mc_peer_fd_offer(int fd, int companion_fd, struct mc_peer_fd *h, struct mc_peer_fd *companion,
		     struct mc_fd_offer **offer)
{
	struct mc_fd_offer *o;
	char why[160];
	int err = mc_peer_fd_describe(fd, h);

	if (!err && companion_fd >= 0)
		err = mc_peer_fd_describe(companion_fd, companion);
	if (err)
		return err;
	o = calloc(1, sizeof(*o));
	if (!o)
		return mc_segment_error(ENOMEM, "out of memory");
	o->server_pid = getpid();
	o->fd = fd;
	o->companion_fd = companion_fd;
	o->listener = o->wake = -1;
	for (int i = 0; i < MAX_CONNECTIONS; i++)
		o->connections[i].fd = -1;
	pthread_mutex_init(&o->connections_lock, NULL);
	err = read_allowed_uids(o);
	if (err) {
		pthread_mutex_destroy(&o->connections_lock);
		free(o);
		return err;
	}
	pthread_once(&handlers_once, install_handlers);
	pthread_mutex_lock(&offers_lock);
	o->next = offers;
	offers = o;
	pthread_mutex_unlock(&offers_lock);
	/* Without the socket, peers of this PID namespace still have /proc and pidfd_getfd. */
	if (!start_serving(o, h, why, sizeof(why))) {
		close_descriptors(o);
		mc_log(MOONCAKE_SEGMENT_LOG_INFO,
		       "Shared segment: cannot serve the pages over a Unix socket (%s); only ranks in this "
		       "PID namespace can map them",
		       why);
	}
	if (companion_fd >= 0) {
		companion->socket_id = h->socket_id;
		memcpy(companion->token, h->token, sizeof(companion->token));
	}
	*offer = o;
	return 0;
}

void mc_peer_fd_withdraw(struct mc_fd_offer **offer)
{
	struct mc_fd_offer *o = offer ? *offer : NULL;
	uint64_t one = 1;

	if (!o)
		return;
	*offer = NULL;
	/* In a forked child the thread is the parent's and the descriptors are closed already. */
	if (o->server_pid == getpid()) {
		if (o->serving) {
			(void)!write(o->wake, &one, sizeof(one));
			pthread_join(o->thread, NULL);
			o->serving = false;
		}
		close_descriptors(o);
		if (o->refused)
			mc_log(MOONCAKE_SEGMENT_LOG_INFO,
			       "Shared segment: refused %u connection(s) to its socket; the first: %s",
			       o->refused, o->first_refusal);
	}
	pthread_mutex_lock(&offers_lock);
	for (struct mc_fd_offer **p = &offers; *p; p = &(*p)->next)
		if (*p == o) {
			*p = o->next;
			break;
		}
	pthread_mutex_unlock(&offers_lock);
	pthread_mutex_destroy(&o->connections_lock);
	free(o);
}
