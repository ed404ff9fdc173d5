/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The descriptor route (peer-fd.c, fd-server.c, fd-client.c): how a peer
 * reaches the descriptor an owner offers.  The owner serves it on an
 * abstract Unix socket; a peer tries that socket, /proc/PID/fd and
 * pidfd_getfd in order, and keeps a descriptor only if it is still the file
 * the owner published.  A backend that passes a descriptor (memfd, CUDA VMM)
 * offers it here and puts the encoded handle in its blob.
 */
#ifndef MOONCAKE_SEGMENT_ROUTE_H
#define MOONCAKE_SEGMENT_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a peer knows of the owner, from the owner's blob: enough to reach its
 * pages and to explain why they cannot be reached. */
struct mc_owner_ref {
	uint32_t pid;		/* in the owner's PID namespace */
	uint32_t uid;		/* its real uid, as its own user namespace sees it */
	uint64_t pid_namespace; /* inode of the owner's PID namespace, 0 unknown */
	uint64_t net_namespace; /* inode of the owner's network namespace, 0 unknown */
	const uint8_t *handle;	/* what the owner's backend exported */
	uint16_t handle_bytes;
	/* complete(): since when the owner has been silent (mc_now_ms()), one
	 * budget for the waits on it in a row; 0: it answered last, and the next
	 * wait starts the clock (this rank's own work never counts).  An answer
	 * on its socket sets it to 0.  NULL: each socket wait has the whole
	 * peer timeout. */
	int64_t *silent_since_ms;
};

/* One descriptor of the owner's: where it is, which file it must be, and
 * where the owner serves it over a Unix socket (fd-server.c). */
#define MC_PEER_FD_TOKEN_SIZE 16
struct mc_peer_fd {
	uint32_t pid;
	uint32_t fd;
	uint64_t dev;
	uint64_t ino;
	uint64_t socket_id; /* the abstract socket "mooncake-segment/<hex>"; 0: not served */
	uint8_t token[MC_PEER_FD_TOKEN_SIZE]; /* secret a peer presents to the socket */
};
/* The bytes of one encoded struct mc_peer_fd (doc/wire-format.md). */
#define MC_PEER_FD_HANDLE_BYTES 48

/* The owner's serving state for one descriptor, opaque. */
struct mc_fd_offer;

/* Owner: offer descriptor @fd to the peers of one segment, and with it
 * @companion_fd (-1: none; a segment's control area).  Fills @h (and
 * @companion) with everything a peer needs to reach it by any route (pid,
 * fd, dev, ino, and the socket route's address and token, one socket for
 * both) and starts serving.  *@offer must be NULL on entry; 0 or a negative
 * errno with a message. */
int mc_peer_fd_offer(int fd, int companion_fd, struct mc_peer_fd *h, struct mc_peer_fd *companion,
		     struct mc_fd_offer **offer);
/* Owner of a group of one: fill @h as mc_peer_fd_offer() does, but serve
 * nothing (socket_id 0): no peer will ever ask, so no thread or socket is
 * started for it.  0 or a negative errno with a message. */
int mc_peer_fd_describe(int fd, struct mc_peer_fd *h);
/* Owner: stop serving and free (finish() and release(); NULL-safe,
 * idempotent; in a forked child it only frees what it must, joins no thread
 * it does not own, and closes nothing twice). */
void mc_peer_fd_withdraw(struct mc_fd_offer **offer);
/* The handle bytes of @h, one layout for every backend that passes a
 * descriptor: returns the bytes written into @out (at most @room), 0 if it
 * does not fit. */
uint16_t mc_peer_fd_encode(const struct mc_peer_fd *h, uint8_t *out, size_t room);
/* Decode what mc_peer_fd_encode() wrote at the start of @in; false when @len
 * is too short or the bytes are not a peer-fd handle.  *@used (may be NULL)
 * gets the bytes consumed, so a backend can append its own bytes after it. */
bool mc_peer_fd_decode(const uint8_t *in, size_t len, struct mc_peer_fd *h, size_t *used);
/* A companion of a handle (same pid and socket): only its fd, dev and ino,
 * MC_PEER_FD_COMPANION_BYTES; encode returns 0 when it does not fit. */
#define MC_PEER_FD_COMPANION_BYTES 20
uint16_t mc_peer_fd_encode_companion(const struct mc_peer_fd *companion, uint8_t *out, size_t room);
/* The companion of @primary whose bytes start @in (@len at least
 * MC_PEER_FD_COMPANION_BYTES): false when they are not one. */
bool mc_peer_fd_decode_companion(const uint8_t *in, size_t len, const struct mc_peer_fd *primary,
				 struct mc_peer_fd *companion);
/* Peer: open descriptor @h of the process @owner describes, by the routes
 * in order (peer-fd.c), only if it is still the file the owner published;
 * call it between mc_fd_track_begin() and _end().  The descriptor, or a
 * negative errno with a message naming the first cause that holds and its fix. */
int mc_peer_fd_open(const struct mc_owner_ref *owner, const struct mc_peer_fd *h);
/* -ESRCH saying whether the owner process is gone or only its descriptor. */
int mc_peer_fd_gone(const struct mc_peer_fd *h);
/* How long a peer waits on a silent owner, in ms: MOONCAKE_SEGMENT_PEER_TIMEOUT_MS
 * (fd-client.c), else 10 s; -1 with @why for a malformed value. */
int mc_peer_timeout_ms(char *why, size_t why_size);

#endif
