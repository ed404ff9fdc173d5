/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The socket route's protocol, shared by the owner's server (fd-server.c)
 * and the peer's client (fd-client.c).  One SOCK_SEQPACKET connection per
 * peer on the abstract Unix socket "mooncake-segment/<16 hex digits>" of the
 * owner's network namespace: the peer sends one request (magic, token, and
 * the number the descriptor it wants has in the owner), the owner answers
 * with one reply, which carries that descriptor by SCM_RIGHTS when the status
 * is MC_FD_REPLY_OK.  An offer serves its descriptor and, when it has one, a
 * companion (a segment's control area); a request without the number (the
 * first form) asks for the descriptor.  Every integer is little-endian.
 */
#ifndef MOONCAKE_SEGMENT_FD_SOCKET_H
#define MOONCAKE_SEGMENT_FD_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "base/abstract-socket.h"
#include "mooncake/segment.h"
#include "route.h"

#define MC_FD_REQUEST_MAGIC UINT32_C(0x4446434D) /* bytes "MCFD" */
/* magic (4), token (16): the offer's descriptor */
#define MC_FD_REQUEST_BYTES (4 + MC_PEER_FD_TOKEN_SIZE)
/* magic (4), token (16), the descriptor's number in the owner (4) */
#define MC_FD_REQUEST_NAMED_BYTES (MC_FD_REQUEST_BYTES + 4)
/* status (1), zero (3), the owner's uid (4) */
#define MC_FD_REPLY_BYTES 8

enum mc_fd_reply_status {
	MC_FD_REPLY_OK = 0,	    /* the descriptor is attached */
	MC_FD_REPLY_BAD_TOKEN = 1,  /* the request's token is not the offer's */
	MC_FD_REPLY_OTHER_USER = 2, /* the peer's uid is not allowed (MOONCAKE_SEGMENT_PEER_UIDS) */
	MC_FD_REPLY_MALFORMED = 3,  /* not a request of this protocol, or a descriptor not offered */
};

/* How long the owner waits for a connected peer's request before it drops it. */
#define MC_FD_SERVER_REQUEST_DEADLINE_MS 2000
/* How long a peer waits for the owner's reply (MOONCAKE_SEGMENT_PEER_TIMEOUT_MS overrides). */
#define MC_FD_CLIENT_DEFAULT_TIMEOUT_MS 10000
/* The longest wait MOONCAKE_SEGMENT_PEER_TIMEOUT_MS may ask for: one hour. */
#define MC_FD_CLIENT_MAX_TIMEOUT_MS 3600000

/* The socket's name as /proc/net/unix shows it, with the '@' that stands for the leading NUL. */
static inline void mc_fd_socket_name(uint64_t id, char *name, size_t size)
{
	snprintf(name, size, "@mooncake-segment/%016llx", (unsigned long long)id);
}

/* The abstract address of socket @id; returns the address length for bind/connect. */
static inline socklen_t mc_fd_socket_address(uint64_t id, struct sockaddr_un *addr)
{
	return mc_abstract_address(addr, "mooncake-segment/%016llx", (unsigned long long)id);
}

/* --- the peer's side (fd-client.c) ---------------------------------------- */

enum mc_fd_client_failure {
	MC_FD_CLIENT_OK,
	MC_FD_CLIENT_NOT_LISTENING, /* nothing listens on the name: the owner finished or exited */
	MC_FD_CLIENT_CLOSED,	    /* the owner hung up without a reply: it finished or exited */
	MC_FD_CLIENT_IMPOSTOR,	    /* another process listens on the name: the owner finished */
	MC_FD_CLIENT_NO_ANSWER,	    /* no reply before the timeout */
	MC_FD_CLIENT_REFUSED,	    /* the owner said no: status says why */
	MC_FD_CLIENT_WRONG_FILE,    /* the descriptor received is not the published file */
	MC_FD_CLIENT_BAD_SETTING,   /* MOONCAKE_SEGMENT_PEER_TIMEOUT_MS is malformed: why says how */
	MC_FD_CLIENT_SYSTEM,	    /* anything else: why says what */
};

struct mc_fd_client_result {
	enum mc_fd_client_failure failure;
	int status;	    /* the owner's enum mc_fd_reply_status, -1 when none came */
	uint32_t owner_uid; /* from a reply */
	int listener_pid;   /* MC_FD_CLIENT_IMPOSTOR: who listens instead */
	int timeout_ms;
	char socket_name[48];
	char why[320];
};

/* Ask the owner's socket for descriptor @h (h->socket_id != 0); call it
 * between mc_fd_track_begin() and _end() (it pauses the registry while it
 * waits).  @owner_pid: the pid the listener must have (SO_PEERCRED) before
 * the token is sent, 0 when this rank cannot tell (another PID namespace).
 * @silent_since_ms (may be NULL; mc_owner_ref): since when the owner is
 * silent, 0 to start now; the wait ends the peer timeout after it, and an
 * answer sets it to 0.
 * The descriptor, checked against h->dev/ino, or -1 and @r says why. */
int mc_fd_client_receive(const struct mc_peer_fd *h, uint32_t owner_pid, int64_t *silent_since_ms,
			 struct mc_fd_client_result *r);

#endif
