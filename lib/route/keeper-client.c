/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper's client (keeper-client.h).  Blocking calls with a deadline:
 * the connection's send and receive timeouts carry it, so that a keeper
 * that is stopped, stuck or gone is an error naming the socket, never a
 * hang.  The keeper's identity is checked once, at connect (SO_PEERCRED):
 * a segment's pages are handed to and taken from root's keeper or our
 * own, never from a process another user started on the path first.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/environment.h"
#include "base/error.h"
#include "keeper-client.h"
#include "private.h"

#define FIX                                                                                             \
	"start the keeper (systemctl enable --now mooncake-segmentd.socket, or run mooncake-segmentd) " \
	"or point MOONCAKE_SEGMENT_KEEPER at its socket"

MC_PRIVATE const char *mc_keeper_socket_path(void)
{
	const char *path = mc_env("MOONCAKE_SEGMENT_KEEPER");

	return path ? path : MC_KEEPER_DEFAULT_SOCKET;
}

/* Both of the socket's timeouts to @timeout_ms (-1: none). */
static void set_timeouts(int fd, int timeout_ms)
{
	struct timeval tv = { 0, 0 };

	if (timeout_ms >= 0) {
		tv.tv_sec = timeout_ms / 1000;
		tv.tv_usec = (timeout_ms % 1000) * 1000;
		if (tv.tv_sec == 0 && tv.tv_usec == 0)
			tv.tv_usec = 1; /* 0 would mean no timeout at all */
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static int connect_error(const char *path, int err)
{
	if (err == ENOENT || err == ECONNREFUSED)
		return mc_error(ENOENT, "No node keeper answers at %s (%s): " FIX, path, strerror(err));
	if (err == EAGAIN || err == ETIMEDOUT)
		return mc_error(
			ETIMEDOUT,
			"The node keeper at %s did not accept the connection in time: it is overloaded or "
			"stuck; check it (systemctl status mooncake-segmentd) or retry",
			path);
	if (err == EACCES || err == EPERM)
		return mc_error(
			EACCES,
			"The node keeper's socket %s refuses this user (%s): its mode or group (the socket "
			"unit's SocketMode=/SocketGroup=) must let this uid connect",
			path, strerror(err));
	return mc_error(err, "Cannot connect to the node keeper at %s: %s", path, strerror(err));
}

/* The process serving the socket is root's or ours. */
static int check_keeper_identity(int fd, const char *path)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return mc_error(EPROTO, "Cannot read who serves the node keeper's socket %s: %s", path,
				strerror(errno));
	if (cred.uid != 0 && cred.uid != geteuid())
		return mc_error(
			EACCES,
			"The node keeper's socket %s is served by uid %u (pid %d), neither root nor this "
			"user (uid %u): refusing to exchange a segment's pages with it. Remove the stale "
			"socket and start the real keeper, or point MOONCAKE_SEGMENT_KEEPER at it",
			path, (unsigned)cred.uid, (int)cred.pid, (unsigned)geteuid());
	return 0;
}

MC_PRIVATE int mc_keeper_open(struct mc_keeper_conn *conn, const char *path, int timeout_ms)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int err;

	conn->fd = -1;
	conn->sequence = 0;
	if (!path)
		path = mc_keeper_socket_path();
	if (!*path || strlen(path) >= sizeof(addr.sun_path))
		return mc_error(
			EINVAL,
			"The node keeper's socket path '%s' is %s: a Unix socket path is 1 to %zu bytes; set "
			"MOONCAKE_SEGMENT_KEEPER to a shorter path",
			path, *path ? "too long" : "empty", sizeof(addr.sun_path) - 1);
	snprintf(conn->path, sizeof(conn->path), "%s", path);
	memcpy(addr.sun_path, path, strlen(path));
	conn->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (conn->fd < 0)
		return mc_error(ENOMEM, "Cannot make a socket for the node keeper: %s", strerror(errno));
	set_timeouts(conn->fd, timeout_ms);
	do
		err = connect(conn->fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 ? 0 : errno;
	while (err == EINTR);
	if (!err)
		err = -check_keeper_identity(conn->fd, path);
	else
		err = -connect_error(path, err);
	if (err) {
		mc_keeper_close(conn);
		return -err;
	}
	return 0;
}

MC_PRIVATE void mc_keeper_close(struct mc_keeper_conn *conn)
{
	if (conn->fd >= 0)
		close(conn->fd);
	conn->fd = -1;
}

static void close_fds(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/* Receive one packet into @buf (@size bytes) and its descriptors (up to 2,
 * more are closed and make *@extra true): its length or a negative errno. */
static ssize_t receive(int fd, uint8_t *buf, size_t size, int fds[2], bool *extra)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 8)];
	} control;
	struct iovec iov = { buf, size };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = control.buf,
			      .msg_controllen = sizeof(control.buf) };
	size_t got = 0;
	ssize_t n;

	do
		n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int one;

			memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (got < 2)
				fds[got] = one;
			else
				close(one);
			got++;
		}
	}
	*extra = got > 2 || (msg.msg_flags & MSG_CTRUNC);
	if (msg.msg_flags & MSG_TRUNC)
		return (ssize_t)size; /* over-long: the decoder refuses it */
	return n;
}

static int exchange_error(const struct mc_keeper_conn *conn, const struct mc_keeper_request *req, int err)
{
	const char *type = mc_keeper_type_name(req->type);

	if (err == EAGAIN || err == EWOULDBLOCK)
		return mc_error(
			ETIMEDOUT,
			"The node keeper at %s did not answer %s in time: it is overloaded or stuck; check "
			"it (systemctl status mooncake-segmentd) or retry",
			conn->path, type);
	if (err == EPIPE || err == ECONNRESET || err == 0)
		return mc_error(
			ECONNRESET,
			"The node keeper at %s closed the connection during %s: it stopped or restarted; "
			"retry, and check its log (journalctl -u mooncake-segmentd) if it keeps happening",
			conn->path, type);
	return mc_error(err, "%s to the node keeper at %s failed: %s", type, conn->path, strerror(err));
}

/* A decoded reply answers @req, with the descriptors it announces: 0, or
 * -EPROTO with @why. */
static int check_reply(const struct mc_keeper_request *req, const struct mc_keeper_reply *rep,
		       const int fds[2], bool extra, char *why, size_t why_size)
{
	unsigned int got = (fds[0] >= 0) + (fds[1] >= 0);

	if (rep->sequence != req->sequence)
		snprintf(why, why_size, "keeper reply: sequence %u answers request %u",
			 (unsigned)rep->sequence, (unsigned)req->sequence);
	else if (rep->type != (req->type | MC_KEEPER_REPLY) && rep->type != MC_KEEPER_ERROR)
		snprintf(why, why_size, "keeper reply: %s answers %s", mc_keeper_type_name(rep->type),
			 mc_keeper_type_name(req->type));
	else if (extra || got != (rep->status == 0 ? rep->descriptors : 0u))
		snprintf(why, why_size, "keeper reply: %s carries %s%u descriptors, announces %u",
			 mc_keeper_type_name(rep->type), extra ? "more than " : "", got,
			 (unsigned)rep->descriptors);
	else
		return 0;
	return -EPROTO;
}

/* A keeper refuses a connection it will not serve (its connection limits)
 * with one ERROR of sequence 0, which no request has, then closes it
 * (doc/keeper-protocol.md): that is the error, with the keeper's sentence. */
static bool is_refusal(const struct mc_keeper_reply *rep)
{
	return rep->type == MC_KEEPER_ERROR && rep->sequence == 0;
}

static int refusal_error(const struct mc_keeper_conn *conn, const struct mc_keeper_reply *rep)
{
	return mc_error(rep->status ? (int)rep->status : EPROTO,
			"The node keeper at %s refused the connection: %s", conn->path, rep->text);
}

/* The keeper closed the connection (a send or a receive failed with @err,
 * 0 for the end): its refusal, if it left one to read (a reset is read
 * before what is queued behind it); else the usual error for @err. */
static int closed_error(struct mc_keeper_conn *conn, const struct mc_keeper_request *req, int err)
{
	struct mc_keeper_reply *rep = malloc(sizeof(*rep));
	uint8_t *buf = malloc(MC_KEEPER_MESSAGE_MAX + 1);
	int fds[2] = { -1, -1 }, ret;
	bool extra = false;
	char why[256];
	ssize_t n = rep && buf ? receive(conn->fd, buf, MC_KEEPER_MESSAGE_MAX + 1, fds, &extra) : -ENOMEM;

	close_fds(fds, 2);
	if (n > 0 && mc_keeper_reply_decode(buf, (size_t)n, rep, why, sizeof(why)) == 0 && is_refusal(rep))
		ret = refusal_error(conn, rep);
	else
		ret = exchange_error(conn, req, err);
	free(rep);
	free(buf);
	return ret;
}

int mc_keeper_send(struct mc_keeper_conn *conn, struct mc_keeper_request *req, int timeout_ms)
{
	uint8_t *buf = malloc(MC_KEEPER_MESSAGE_MAX);
	char why[256];
	ssize_t n;
	int len, err;

	if (!buf)
		return mc_error(ENOMEM, "No memory for a message to the node keeper");
	req->sequence = ++conn->sequence;
	len = mc_keeper_request_encode(req, buf, MC_KEEPER_MESSAGE_MAX, why, sizeof(why));
	if (len < 0) {
		free(buf);
		return mc_error(-len, "A request to the node keeper is not valid: %s", why);
	}
	set_timeouts(conn->fd, timeout_ms);
	do
		n = send(conn->fd, buf, (size_t)len, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	err = n < 0 ? errno : 0;
	free(buf);
	if (err == EPIPE || err == ECONNRESET)
		return closed_error(conn, req, err);
	return err ? exchange_error(conn, req, err) : 0;
}

int mc_keeper_wait_reply(struct mc_keeper_conn *conn, const struct mc_keeper_request *req, int timeout_ms)
{
	struct pollfd p = { .fd = conn->fd, .events = POLLIN };
	int64_t deadline = timeout_ms < 0 ? -1 : mc_now_ms() + timeout_ms;
	int ready;

	do {
		int64_t left = deadline < 0 ? -1 : deadline - mc_now_ms();

		if (deadline >= 0 && left < 0)
			left = 0;
		ready = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
	} while ((ready < 0 && errno == EINTR) || (ready == 0 && (deadline < 0 || mc_now_ms() < deadline)));
	if (ready < 0)
		return exchange_error(conn, req, errno);
	if (ready == 0)
		return exchange_error(conn, req, EAGAIN);
	return 0;
}

int mc_keeper_receive(struct mc_keeper_conn *conn, const struct mc_keeper_request *req,
		      struct mc_keeper_reply *rep, int fds[2])
{
	uint8_t *buf = malloc(MC_KEEPER_MESSAGE_MAX + 1);
	char why[256];
	bool extra = false;
	ssize_t n;
	int err;

	fds[0] = fds[1] = -1;
	if (!buf)
		return mc_error(ENOMEM, "No memory for a message from the node keeper");
	n = receive(conn->fd, buf, MC_KEEPER_MESSAGE_MAX + 1, fds, &extra);
	if (n <= 0) {
		free(buf);
		close_fds(fds, 2);
		return closed_error(conn, req, (int)-n);
	}
	err = mc_keeper_reply_decode(buf, (size_t)n, rep, why, sizeof(why));
	free(buf);
	if (!err && is_refusal(rep)) {
		close_fds(fds, 2);
		return refusal_error(conn, rep);
	}
	if (!err)
		err = check_reply(req, rep, fds, extra, why, sizeof(why));
	if (err) {
		close_fds(fds, 2);
		return mc_error(
			EPROTO,
			"The node keeper at %s answered %s with a message this library cannot use (%s): "
			"it speaks another version, or it is not a keeper",
			conn->path, mc_keeper_type_name(req->type), why);
	}
	return 0;
}

MC_PRIVATE int mc_keeper_exchange(struct mc_keeper_conn *conn, struct mc_keeper_request *req,
				  struct mc_keeper_reply *rep, int fds[2], int timeout_ms)
{
	int err;

	fds[0] = fds[1] = -1;
	err = mc_keeper_send(conn, req, timeout_ms);
	if (!err)
		err = mc_keeper_wait_reply(conn, req, timeout_ms);
	if (!err)
		err = mc_keeper_receive(conn, req, rep, fds);
	return err;
}
