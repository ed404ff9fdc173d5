/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A kept segment's second way to its pages (keeper-join.c): a rank that
 * reaches neither its owner's socket nor its pid (another PID and network
 * namespace: containers of one node) asks the node keeper instead.  The
 * owner's CREATE got a fresh control area for its group with a token; the
 * owner's handle carries the token and the owner's uid as the keeper sees
 * it (a trailer after the descriptor handles), and a peer presents them,
 * with the name and generation every rank agreed on, in a JOIN, which hands
 * the same pages and the same control area.  The descriptor exchange that
 * lets fork() in while the keeper works, shared with the owner's CREATE.
 */
#ifndef MOONCAKE_SEGMENT_KEEPER_JOIN_H
#define MOONCAKE_SEGMENT_KEEPER_JOIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/tracked-fd.h"
#include "keeper-client.h"

/* What a peer presents to the keeper's JOIN. */
struct mc_keeper_ref {
	const char *name;    /* the kept segment's name, which every rank declares */
	uint64_t generation; /* the owner's, from its blob */
	uint32_t owner_uid;  /* the segment's owner as the keeper sees it */
	uint64_t token;	     /* the group's control area; 0: the owner offers no JOIN */
};

/* The handle trailer: a marker, the owner uid and the token (doc/wire-format.md). */
#define MC_KEEPER_REF_BYTES 16
/* Encode @k's uid and token into @out: MC_KEEPER_REF_BYTES, or 0 when @room is short. */
uint16_t mc_keeper_ref_encode(const struct mc_keeper_ref *k, uint8_t *out, size_t room);
/* Decode a trailer of exactly MC_KEEPER_REF_BYTES into @k's uid and token:
 * false when @len differs or the bytes are not one. */
bool mc_keeper_ref_decode(const uint8_t *in, size_t len, struct mc_keeper_ref *k);

/* Send @req and receive its reply into @rep (see mc_keeper_exchange()),
 * fork() let in while the keeper works, the reply's descriptors landing
 * in @fds only once the fork registry is this thread's again, each tracked
 * by @tracking (no forked child ever holds them; mc_fd_close() them).  The
 * connection is tracked meanwhile.  0 when a reply came (rep->status may
 * be a refusal), else a negative errno with the message. */
int mc_keeper_exchange_tracked(struct mc_keeper_conn *conn, struct mc_keeper_request *req,
			       struct mc_keeper_reply *rep, int fds[2], struct mc_tracked_fd tracking[2],
			       int timeout_ms);

/* Peer: JOIN @k at the keeper (MOONCAKE_SEGMENT_KEEPER or the default):
 * fds[0] the pages, fds[1] the group's control area, each tracked by
 * @tracking; checked to be the segment and generation @k names.  The caller
 * checks that they are the files the owner's handle names.  0, or a
 * negative errno with the message naming the keeper and its answer. */
int mc_keeper_join(const struct mc_keeper_ref *k, int fds[2], struct mc_tracked_fd tracking[2]);

#endif
