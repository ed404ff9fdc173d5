/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control area of a segment (control.c): a small sealed memfd of its
 * own, beside the caller's pages and never inside them, that the owner
 * creates and passes to the peers with its pages (the companion of the
 * pages' descriptor, route/route.h), so that every rank maps the same few
 * words.  It holds the readiness front (how much of the segment is
 * committed, in order from byte 0), the first error of the commit with its
 * errno, each rank's registration state, and a robust mutex that the
 * owner's commit thread holds while it commits: when the owner dies, the
 * kernel marks it, so that a waiting peer learns it instead of waiting for
 * ever.  Every change bumps one 32-bit word, on which waiters sleep (a futex
 * on the shared page, not a busy loop).  It also holds the publish slots the
 * declaration asks for (slots.c): a sequence and a claim per slot, and per
 * rank a robust mutex its liveness thread holds, so that a dead claimer's
 * claim can be taken over.  doc/wire-format.md has the layout.
 */
#ifndef MOONCAKE_SEGMENT_CONTROL_H
#define MOONCAKE_SEGMENT_CONTROL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/tracked-fd.h"
#include "mooncake/segment.h"

#define MC_CONTROL_MAGIC UINT32_C(0x5443434D) /* bytes "MCCT" */
/* 2: the error's sentence grew from 256 to 1024 bytes (a cgroup ENOMEM with its
 * path and fix did not fit). */
#define MC_CONTROL_VERSION 2
/* The bytes of the first error's sentence, NUL included. */
#define MC_CONTROL_MESSAGE_BYTES 1024

/* How long a waiter sleeps on the word before it checks that the owner still
 * lives (its death changes no word): a dead owner is noticed within this. */
#define MC_CONTROL_OWNER_CHECK_MS 100

enum mc_front_state {
	MC_FRONT_COMMITTING = 0, /* the owner commits; committed is the front */
	MC_FRONT_COMMITTED = 1,	 /* every page is committed */
	MC_FRONT_FAILED = 2,	 /* the commit stopped: error, error_rank, message */
};

enum mc_register_state {
	MC_REGISTER_NONE = 0,	 /* this rank registers nothing */
	MC_REGISTER_RUNNING = 1, /* registered_end advances */
	MC_REGISTER_DONE = 2,	 /* [begin, end) is registered */
	MC_REGISTER_FAILED = 3,	 /* error says why (nothing stays registered) */
};

/* One rank's registration, as every rank sees it (list), and its life. */
struct mc_control_rank {
	uint64_t begin; /* this rank registers [begin, end) of the segment */
	uint64_t end;
	uint64_t registered_end; /* [begin, registered_end) is registered */
	uint32_t state;		 /* enum mc_register_state */
	int32_t error;		 /* positive errno of MC_REGISTER_FAILED */
	pthread_mutex_t alive;	 /* robust: held by the rank's liveness thread (slots) */
};

/* One publish slot, a cache line of its own. */
struct mc_control_slot {
	uint64_t seq;	    /* even: published; odd: a write in progress; the futex is its low half */
	uint64_t claim;	    /* 0: free, else the claimer's rank + 1 */
	uint64_t waiters;   /* CPU waiters counted in before they look the last time (slots.c) */
	uint64_t abandoned; /* the odd sequence of a write whose claimer is gone, for the claim's next
			       holder to write over (slots.c); else any other value */
	uint64_t reserved[4];
};

struct mc_control {
	uint32_t magic;
	uint32_t version;
	uint32_t seq;	/* bumped at every change: the futex word */
	uint32_t state; /* enum mc_front_state */
	uint64_t alloc_size;
	uint64_t committed;			/* [0, committed) is committed */
	uint32_t world_size;			/* entries of ranks[] */
	int32_t error;				/* positive errno of MC_FRONT_FAILED */
	uint32_t error_rank;			/* the rank that reported it */
	uint32_t owner_pid;			/* in the owner's PID namespace, for messages */
	uint64_t commit_started_ns;		/* CLOCK_MONOTONIC of the owner, for progress */
	uint64_t commit_ns;			/* the whole commit, once committed */
	uint32_t slot_count;			/* publish slots, after ranks[] at a 64-byte boundary */
	uint32_t alignment;			/* options.alignment as declared (0: the default), for list */
	char message[MC_CONTROL_MESSAGE_BYTES]; /* the first error's sentence */
	pthread_mutex_t owner_alive; /* robust, process-shared: held by the owner's commit thread */
	struct mc_control_rank ranks[];
};

/* One rank's mapping of the control area. */
struct mc_control_map {
	struct mc_control *area; /* NULL: none (a backend that passes no descriptor) */
	size_t size;
	int fd; /* owner: kept for the peers until finish(); -1 otherwise */
	struct mc_tracked_fd tracking;
};
#define MC_CONTROL_MAP_NONE        \
	{                          \
		NULL, 0, -1,       \
		{                  \
			NULL, NULL \
		}                  \
	}

/* Owner: create, seal and map a control area for @world_size ranks and
 * @slot_count slots of a segment of @alloc_size bytes, its front at 0.  0
 * or a negative errno. */
int mc_control_create(const char *label, uint32_t world_size, uint32_t slot_count, uint64_t alloc_size,
		      struct mc_control_map *m);
/* The bytes of a control area for @world_size ranks and @slot_count slots
 * (a page multiple). */
size_t mc_control_size(uint32_t world_size, uint32_t slot_count);
/* Owner of a kept segment: as mc_control_create(), in the fresh area the
 * node keeper made for this group (@fd, not kept: the map holds a
 * descriptor of its own), checked first: mc_control_size() bytes, sealed
 * against shrinking and growing, writable, all zero.  0 or a negative errno
 * (-EPROTO naming what is wrong). */
int mc_control_create_in(int fd, uint32_t world_size, uint32_t slot_count, uint64_t alloc_size,
			 struct mc_control_map *m);
/* Peer: check and map the owner's control area from @fd (not kept).  0 or
 * -EPROTO naming what does not match. */
int mc_control_attach(int fd, uint32_t world_size, uint32_t slot_count, uint64_t alloc_size,
		      struct mc_control_map *m);
/* Slot @i of the area (i < slot_count). */
struct mc_control_slot *mc_control_slot(struct mc_control *c, uint32_t i);
/* Sleep until the 64-bit word @word no longer has @seen in its low half,
 * a wake-up, or @ms pass. */
void mc_control_sleep_on(uint64_t *word, uint64_t seen, int ms);
/* Wake every sleeper on @word. */
void mc_control_wake_on(uint64_t *word);
/* Owner at finish(): close the descriptor kept for the peers. */
void mc_control_drop_fd(struct mc_control_map *m);
/* Unmap and close everything (NULL area is fine). */
void mc_control_release(struct mc_control_map *m);

/* The front: [0, @committed) is committed now. */
void mc_control_advance(struct mc_control *c, uint64_t committed);
/* Every page is committed, in @ns. */
void mc_control_committed(struct mc_control *c, uint64_t ns);
/* The commit failed with positive @err, reported by @rank: the first
 * failure wins; later ones are dropped.  Wakes every waiter. */
void mc_control_fail(struct mc_control *c, int err, uint32_t rank, const char *message);
/* The owner's commit thread: hold (and let go of) the owner's life mutex. */
bool mc_control_hold_owner(struct mc_control *c);
void mc_control_let_go_owner(struct mc_control *c);
/* While the front is COMMITTING: true when the owner's commit thread died
 * (then the front is FAILED with -ESRCH's message). */
bool mc_control_owner_died(struct mc_control *c, uint32_t owner_rank);

/* Rank @rank's registration of [begin, end) advanced or ended. */
void mc_control_rank_update(struct mc_control *c, uint32_t rank, const struct mc_control_rank *r);

/* The word to sleep on, read before the condition is checked. */
uint32_t mc_control_seq(const struct mc_control *c);
/* Sleep until the word changes from @seq, a wake-up, or @ms pass. */
void mc_control_sleep(struct mc_control *c, uint32_t seq, int ms);
/* Wake every sleeper (a rank's own threads too: destroy). */
void mc_control_wake(struct mc_control *c);

#endif
