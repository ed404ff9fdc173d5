/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper's client (keeper-client.c): one connection to mooncake-segmentd
 * over its filesystem SOCK_SEQPACKET socket, one request and its reply at a
 * time, descriptors received only with a CREATE reply that announces them.
 * The library's kept create and the CLI's `keep` commands use it (the CLI
 * through lib/private.h).  doc/keeper-protocol.md is the protocol.
 */
#ifndef MOONCAKE_SEGMENT_KEEPER_CLIENT_H
#define MOONCAKE_SEGMENT_KEEPER_CLIENT_H

#include <stdint.h>

#include "keeper-wire.h"

struct mc_keeper_conn {
	int fd;
	uint32_t sequence;
	char path[108]; /* sun_path's size */
};

/* The keeper's socket: MOONCAKE_SEGMENT_KEEPER (read as the library reads
 * every variable, not in set-user-ID programs) or the default. */
const char *mc_keeper_socket_path(void);

/* Connect to the keeper at @path (NULL: mc_keeper_socket_path()) within
 * @timeout_ms, and check who serves it: root or this process's effective
 * uid, never another user who bound the path first.  0, or a negative errno
 * with the library's error message naming the path and the fix. */
int mc_keeper_open(struct mc_keeper_conn *conn, const char *path, int timeout_ms);
void mc_keeper_close(struct mc_keeper_conn *conn);

/* Send @req (its sequence is set here) and receive its reply into @rep,
 * waiting at most @timeout_ms (-1: as long as it takes, for a CREATE that
 * commits a large segment).  A CREATE reply's descriptors land in @fds
 * (pages, then control; -1 where none), each close-on-exec; any other
 * reply's, or a number other than the reply announces, are closed and the
 * exchange fails with -EPROTO.  0 when a reply arrived (rep->status may
 * still be a refusal), else a negative errno with the message set. */
int mc_keeper_exchange(struct mc_keeper_conn *conn, struct mc_keeper_request *req,
		       struct mc_keeper_reply *rep, int fds[2], int timeout_ms);

/* The exchange in its three steps, for a caller that must let fork() in
 * while it waits but receive the descriptors where no fork can copy them
 * (keep.c): send @req, wait until a reply is there (ETIMEDOUT after
 * @timeout_ms, -1: no limit), receive it.  Each 0 or a negative errno with
 * the message, as for the exchange. */
int mc_keeper_send(struct mc_keeper_conn *conn, struct mc_keeper_request *req, int timeout_ms);
int mc_keeper_wait_reply(struct mc_keeper_conn *conn, const struct mc_keeper_request *req, int timeout_ms);
int mc_keeper_receive(struct mc_keeper_conn *conn, const struct mc_keeper_request *req,
		      struct mc_keeper_reply *rep, int fds[2]);

#endif
