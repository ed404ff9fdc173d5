/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The peer's side of the socket route (fd-socket.h): connect to the owner's
 * abstract Unix socket, present the token, receive the descriptor by
 * SCM_RIGHTS and keep it only if it is the file the owner published (device
 * and inode); in the owner's PID namespace, send the token only to a
 * listener that is the owner's process.  The wait for the owner is bounded (MOONCAKE_SEGMENT_PEER_TIMEOUT_MS,
 * 10 s by default), so a stopped or stuck owner is an error, never a hang,
 * and fork() is let in while this thread waits (a child forked meanwhile
 * closes its copy of the connection, so that the owner's late answer never
 * lands in that child).  Nothing here writes the error message: peer-fd.c,
 * which knows the other routes, words it.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/environment.h"
#include "base/little-endian.h"
#include "base/tracked-fd.h"
#include "mooncake/segment.h"
#include "fd-socket.h"
#include "private.h"
#include "route.h"

#define HANGUP_WAIT_MS 1000

/* The peer's timeout in ms, or -1 (with @why) for a value that is not one. */
int mc_peer_timeout_ms(char *why, size_t why_size)
{
	uint64_t ms;

	if (mc_env_number("MOONCAKE_SEGMENT_PEER_TIMEOUT_MS", 1, MC_FD_CLIENT_MAX_TIMEOUT_MS,
			  MC_FD_CLIENT_DEFAULT_TIMEOUT_MS, &ms, why, why_size) != 0)
		return -1;
	return (int)ms;
}

/* Connect and send the request, without the fork registry; 0 or the failure. */
static enum mc_fd_client_failure ask(int s, const struct mc_peer_fd *h, uint32_t owner_pid, int64_t deadline,
				     struct mc_fd_client_result *r)
{
	struct ucred cred = { 0, (uid_t)-1, (gid_t)-1 };
	socklen_t cred_len = sizeof(cred);
	char *why = r->why;
	size_t why_size = sizeof(r->why);
	uint8_t request[MC_FD_REQUEST_NAMED_BYTES];
	struct sockaddr_un addr;
	socklen_t len = mc_fd_socket_address(h->socket_id, &addr);
	struct timeval tv;
	int64_t left;
	struct pollfd pfd = { s, POLLIN, 0 };
	int ready, err;

	/* A Unix socket's connect waits for room in the backlog up to SO_SNDTIMEO;
	 * a signal handler of the application's interrupts it, and it starts again. */
	do {
		left = deadline - mc_now_ms();
		if (left <= 0)
			return MC_FD_CLIENT_NO_ANSWER;
		tv.tv_sec = left / 1000;
		tv.tv_usec = (left % 1000) * 1000;
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		err = connect(s, (struct sockaddr *)&addr, len) == 0 ? 0 : errno;
	} while (err == EINTR);
	if (err) {
		errno = err;
		if (errno == EAGAIN || errno == EINPROGRESS || errno == ETIMEDOUT)
			return MC_FD_CLIENT_NO_ANSWER;
		if (errno == ECONNREFUSED || errno == ENOENT)
			return MC_FD_CLIENT_NOT_LISTENING;
		snprintf(why, why_size, "connect to @%s: %s", addr.sun_path + 1, strerror(errno));
		return MC_FD_CLIENT_SYSTEM;
	}
	/* The owner's name is free once it finished: whoever took it since gets
	 * no token (the pid is known only in the owner's PID namespace). */
	if (owner_pid && getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0 &&
	    (uint32_t)cred.pid != owner_pid) {
		r->listener_pid = (int)cred.pid;
		return MC_FD_CLIENT_IMPOSTOR;
	}
	mc_put_le32(request, MC_FD_REQUEST_MAGIC);
	memcpy(request + 4, h->token, MC_PEER_FD_TOKEN_SIZE);
	mc_put_le32(request + MC_FD_REQUEST_BYTES, h->fd);
	/* Room for one small message right after connect: this does not block.
	 * The owner refuses another user as it accepts, before reading: its
	 * reply may be waiting although it hung up already (EPIPE). */
	if (send(s, request, sizeof(request), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(request) &&
	    errno != EPIPE && errno != ECONNRESET) {
		if (errno == EAGAIN)
			return MC_FD_CLIENT_NO_ANSWER;
		snprintf(why, why_size, "send: %s", strerror(errno));
		return MC_FD_CLIENT_SYSTEM;
	}
	do {
		left = deadline - mc_now_ms();
		ready = poll(&pfd, 1, left > 0 ? (int)left : 0);
	} while (ready < 0 && errno == EINTR);
	if (ready == 0)
		return MC_FD_CLIENT_NO_ANSWER;
	if (ready < 0) {
		snprintf(why, why_size, "poll: %s", strerror(errno));
		return MC_FD_CLIENT_SYSTEM;
	}
	/* The owner hangs up right after its reply: wait for that too (briefly),
	 * so that no connection of the owner's outlives this call. */
	pfd.events = 0;
	left = deadline - mc_now_ms();
	(void)poll(&pfd, 1, left < HANGUP_WAIT_MS ? (left > 0 ? (int)left : 0) : HANGUP_WAIT_MS);
	return MC_FD_CLIENT_OK;
}

/* Read the reply that is waiting; the descriptor (>= 0) or -1 with the failure. */
static int take_reply(int s, const struct mc_peer_fd *h, struct mc_fd_client_result *r)
{
	uint8_t bytes[MC_FD_REPLY_BYTES + 1];
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} control;
	struct iovec iov = { bytes, sizeof(bytes) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = control.buf,
			      .msg_controllen = sizeof(control.buf) };
	ssize_t n = recvmsg(s, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int fd = -1, extra = 0;
	struct stat st;

	/* An owner that hangs up on a request it did not read (it refuses another
	 * user as it accepts) leaves ECONNRESET, reported before its reply. */
	if (n < 0 && errno == ECONNRESET) {
		n = recvmsg(s, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EAGAIN)
			errno = ECONNRESET;
	}

	/* An empty message may carry descriptors too: close what came with it. */
	for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&msg) : NULL; c; c = CMSG_NXTHDR(&msg, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int got;

				memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (fd < 0)
					fd = got;
				else {
					close(got); /* only ever one: a stranger's extras are not kept */
					extra++;
				}
			}
	if (n <= 0) {
		r->failure = n == 0 || errno == ECONNRESET ? MC_FD_CLIENT_CLOSED : MC_FD_CLIENT_SYSTEM;
		if (r->failure == MC_FD_CLIENT_SYSTEM)
			snprintf(r->why, sizeof(r->why), "recvmsg: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	r->owner_uid = mc_get_le32(bytes + 4);
	r->status = bytes[0];
	if (n != MC_FD_REPLY_BYTES || extra || (msg.msg_flags & MSG_CTRUNC) ||
	    r->status > MC_FD_REPLY_MALFORMED || (r->status == MC_FD_REPLY_OK) != (fd >= 0)) {
		r->failure = MC_FD_CLIENT_SYSTEM;
		snprintf(r->why, sizeof(r->why),
			 "the owner's socket answered with %zd bytes that are not a reply", n);
	} else if (r->status != MC_FD_REPLY_OK) {
		r->failure = MC_FD_CLIENT_REFUSED;
	} else if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != h->dev || (uint64_t)st.st_ino != h->ino) {
		/* Never keep a file the owner did not publish, whoever sent it. */
		r->failure = MC_FD_CLIENT_WRONG_FILE;
	} else {
		r->failure = MC_FD_CLIENT_OK;
		return fd;
	}
	if (fd >= 0)
		close(fd);
	return -1;
}

int mc_fd_client_receive(const struct mc_peer_fd *h, uint32_t owner_pid, int64_t *silent_since_ms,
			 struct mc_fd_client_result *r)
{
	struct mc_tracked_fd tracking;
	int64_t deadline;
	int ms, s, err, fd = -1;

	memset(r, 0, sizeof(*r));
	r->status = -1;
	mc_fd_socket_name(h->socket_id, r->socket_name, sizeof(r->socket_name));
	ms = mc_peer_timeout_ms(r->why, sizeof(r->why));
	r->timeout_ms = ms;
	if (ms < 0) {
		r->failure = MC_FD_CLIENT_BAD_SETTING;
		return -1;
	}
	/* One budget for complete()'s waits on a silent owner: a second request
	 * after a first that got no answer waits only for what is left of it. */
	if (silent_since_ms && !*silent_since_ms)
		*silent_since_ms = mc_now_ms();
	deadline = (silent_since_ms ? *silent_since_ms : mc_now_ms()) + ms;
	/* The owner may take its time: let fork() in meanwhile; the connection
	 * is tracked (a child closes its copy), and the descriptor itself
	 * arrives only once the registry is ours again. */
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	err = errno;
	if (s >= 0)
		mc_fd_track_held(&tracking, &s);
	mc_fd_track_pause();
	if (s < 0) {
		r->failure = MC_FD_CLIENT_SYSTEM;
		snprintf(r->why, sizeof(r->why), "socket(AF_UNIX): %s", strerror(err));
	} else {
		r->failure = ask(s, h, owner_pid, deadline, r);
	}
	mc_fd_track_resume();
	if (s >= 0)
		mc_fd_untrack_held(&tracking);
	if (r->failure == MC_FD_CLIENT_OK) {
		fd = take_reply(s, h, r);
		if (silent_since_ms && r->status >= 0)
			*silent_since_ms = 0; /* it answered: it runs */
	}
	if (s >= 0)
		close(s);
	return fd;
}
