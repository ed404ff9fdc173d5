/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segmentd, the node keeper (issue 25, doc/keeper.md): it holds
 * named segments (their memfds) past the processes that map them, and hands
 * their descriptors to the processes it allows, over the protocol of
 * doc/keeper-protocol.md (lib/route/keeper-wire.h).
 *
 * One job per file:
 *   main.c     options, logging, signals, the start and the stop;
 *   server.c   the listening socket, the poll loop, connections (credentials,
 *              limits, timeouts), decoding requests and sending replies;
 *   store.c    the table of kept segments: create or attach, list, stat,
 *              release, sharing, the budget and the idle timeout;
 *   commit.c   allocating and committing a kept segment's pages with the
 *              library's own backend, room check and commit lock, charged
 *              to the keeper's memory cgroup;
 *   service.c  the service manager: socket activation (LISTEN_FDS) and the
 *              file descriptor store (FDSTORE=1), through libsystemd when
 *              configure found it;
 *   state.c    the table's metadata in a memfd the descriptor store keeps,
 *              so that a restarted keeper knows what its descriptors are.
 *
 * The keeper links the library's core statically (lib/libmooncake-segment-
 * core.la): it commits pages exactly as create() does, through internals
 * that are no interface for applications.
 */
#ifndef MOONCAKE_SEGMENTD_KEEPER_H
#define MOONCAKE_SEGMENTD_KEEPER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "route/keeper-wire.h"

/* --- configuration (main.c) ------------------------------------------------ */

struct keeper_config {
	const char *socket_path;     /* --socket; default MC_KEEPER_DEFAULT_SOCKET */
	uint64_t budget_bytes;	     /* --budget: most bytes kept in all; 0 unlimited */
	uint32_t max_segments;	     /* --max-segments (default 1024) */
	uint32_t max_connections;    /* --max-connections (default 256) */
	uint32_t idle_timeout_s;     /* --idle-timeout: free a segment this long after
				      * its last mapper went (and nobody attached); 0 never */
	uint32_t silent_timeout_ms;  /* a connection that sends nothing this long is closed (10 s) */
	mode_t socket_mode;	     /* --socket-mode (default 0666: the directory gates) */
};

#define MC_KEEPER_DEFAULT_SOCKET "/run/mooncake-segment/keeper.sock"

/* --- one kept segment (store.c) -------------------------------------------- */

struct kept_segment {
	struct mc_keeper_segment record; /* what STAT and LIST report (mappers filled when asked) */
	int pages_fd;			 /* the segment's memfd */
	int control_fd;			 /* the control area's memfd, -1 when control_bytes is 0 */
	bool hugetlb;
	uint64_t last_mapped_ns;	 /* CLOCK_MONOTONIC when mappers were last seen > 0 (idle timeout) */
};

/* --- the service manager (service.c) --------------------------------------- */

/* Read LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES once, at start: the listening
 * socket systemd passed (-1 when none) and the stored descriptors, which
 * service_take() then hands out by name. */
int service_start(void);
/* The passed listening socket, or -1 (the keeper binds its own). */
int service_listen_fd(void);
/* The stored descriptor named @fdname, ownership passing to the caller;
 * -1 when none.  Descriptors nobody took are closed by service_ready(). */
int service_take(const char *fdname);
/* Whether descriptors stored now survive the keeper's restart (a service
 * manager with a descriptor store, and libsystemd in this build). */
bool service_can_store(void);
/* Keep @fd in the descriptor store as @fdname (it stays open here too);
 * remove the one stored as @fdname.  0 or a negative errno; without a store
 * both are 0 and do nothing. */
int service_store(const char *fdname, int fd);
int service_remove(const char *fdname);
/* READY=1 with a STATUS= line; STOPPING=1. */
void service_ready(const char *status);
void service_stopping(void);

/* --- the table's metadata (state.c) ---------------------------------------- */

/* Save every segment's record and the next generation where a restarted
 * keeper finds them (a memfd in the descriptor store, "state"); load them at
 * start, with each segment's descriptors taken from the store by
 * "pages-GENERATION" and "control-GENERATION". */
int state_save(const struct kept_segment *const *segments, size_t count, uint64_t next_generation);
int state_load(struct kept_segment **segments, size_t *count, uint64_t *next_generation);

#endif
