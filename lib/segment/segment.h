/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The segment object (segment.c) behind the public struct mooncake_segment:
 * what the state machine knows of the group, its memory as the backend
 * sees it (struct mc_memory, embedded), and this rank's registration.
 */
#ifndef MOONCAKE_SEGMENT_SEGMENT_H
#define MOONCAKE_SEGMENT_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <pthread.h>

#include "accel/accel.h"
#include "backends/backend.h"
#include "host/commit-lock.h"
#include "host/populate.h"
#include "mooncake/segment.h"
#include "control.h"
#include "keep.h"

struct mooncake_segment {
	const struct mc_backend_ops *backend;
	struct mooncake_segment_options opt;
	char label[64]; /* the name before '|', for messages and /proc/PID/maps */
	uint64_t size;
	uint64_t fingerprint;
	/* What the backend sees and fills; memory.opt and memory.label point
	 * into this object. */
	struct mc_memory memory;
	struct mc_registration registration; /* .ops set while registered */
	pid_t creator;			     /* the process that created it: only it releases anything */
	int32_t numa_node_requested;

	/* The readiness front (control.h): the owner's pages committed, this
	 * rank's registered; area NULL for a backend that passes no control area. */
	struct mc_control_map control;
	struct mc_commit_progress progress;    /* the commit's reports, into control */
	struct mc_commit_lock commit_lock;     /* owner: held until the last page is committed */
	pthread_t committer;		       /* owner, background: commits the rest */
	pthread_t registrar;		       /* background host_register: registers behind the front */
	uint64_t register_begin, register_end; /* the part of the segment this rank registers */
	uint64_t published_device_addr;	       /* atomic: the base's device address, once known */
	const char *register_runtime;	       /* host_register: the runtime's name, from create on */
	char register_message[320];	       /* why the background registration failed */
	int register_error;		       /* its positive errno */
	uint32_t create_info_flags;	       /* memory.info_flags when create returned */
	struct mc_keep keep;		       /* a kept segment's: warm, generation (keep.h) */
	uint64_t keep_fingerprint;	       /* what the keeper compares: the name, with its layout */

	/* Publish slots in stream order (slots-stream.c): the slot words'
	 * registration with this rank's device, and per slot the last value
	 * this rank queued on a stream (atomic). */
	struct mc_registration slot_registration;
	uint64_t *stream_next;

	/* Publish slots (slots.c): the thread that holds this rank's liveness mutex. */
	pthread_t life;
	pthread_mutex_t life_lock;
	pthread_cond_t life_cond;

	bool ready;
	bool finished;
	bool stopping; /* destroy: the threads stop (atomic) */
	bool committer_running;
	bool registrar_running;
	bool life_running;
	bool life_stop; /* under life_lock */
};

/* Start a thread of the segment's that takes no signal (the application's
 * handlers run on its own threads); 0 or a negative errno with a message. */
int mc_segment_start_thread(pthread_t *thread, void *(*run)(void *), void *arg);

/* Publish slots (slots.c): start this rank's liveness thread once it maps
 * the control area (owner: create, peer: complete); stop it (destroy). */
int mc_slots_start(struct mooncake_segment *seg);
void mc_slots_stop(struct mooncake_segment *seg);
/* Slot @slot of @seg, or NULL with *@err set (and the message): no slots, a
 * peer before complete(), a slot out of range. */
struct mc_control_slot *mc_slot_get(const struct mooncake_segment *seg, uint32_t slot, int *err);
/* slots-stream.c: with host_register, register the control area's mapping
 * with this rank's device (mc_slots_start does), and undo it (mc_slots_stop). */
int mc_slots_register_words(struct mooncake_segment *seg);
void mc_slots_unregister_words(struct mooncake_segment *seg);

/* The background work of a segment (background.c). */
/* Point seg->progress at the control area's front. */
void mc_background_init(struct mooncake_segment *seg);
/* Owner: start committing the rest behind the front; 0 or a negative errno. */
int mc_background_commit_start(struct mooncake_segment *seg);
/* This rank: start registering behind the front; 0 or a negative errno. */
int mc_background_register_start(struct mooncake_segment *seg);
/* Stop and join both (destroy); the front fails with -ECANCELED on every
 * rank when the commit was stopped half way. */
void mc_background_stop(struct mooncake_segment *seg);
/* Wait until [offset, end) is committed and (registering) registered on this
 * rank: 0, -ETIMEDOUT, or the error that stopped it (message set). */
int mc_background_wait(struct mooncake_segment *seg, uint64_t offset, uint64_t end, int timeout_ms);
/* What a peer's complete() waits for: the front at @end; @waiting_for and
 * @fix complete the timeout's sentence ("waited in complete() <waiting_for>
 * ...; or <fix>"). */
struct mc_follow {
	uint64_t end;
	const char *waiting_for;
	const char *fix;
};
/* A peer's complete(): wait until the front reaches @follow->end, or
 * -ETIMEDOUT once the front has not moved for @silence_ms since
 * @silent_since_ms (the owner's socket went unanswered since then; 0: now)
 * or since its last move; or the error that
 * stopped the commit (message set). */
int mc_background_follow(struct mooncake_segment *seg, const struct mc_follow *follow,
			 int64_t silent_since_ms, int silence_ms);
/* Where a background peer's complete() lets the front reach before it
 * returns: a page a peer touches past the front is charged to the peer's
 * memory cgroup (the fault commits it), so no more than half the cgroup's
 * room (the rest is the engine's own) may lie past the front.  0 when no
 * limit binds, the rest fits, or the owner (@owner_pid, in this PID
 * namespace; 0 unknown) is bound by the same cgroup, whose room its create
 * checked for every page; else @why (@size bytes) says which cgroup and how
 * much room, for the timeout's message. */
uint64_t mc_background_peer_front(const struct mooncake_segment *seg, pid_t owner_pid, char *why,
				  size_t size);
/* Whether the commit (the registration) has ended, so that what it wrote
 * into the segment may be read by another thread (get_info). */
bool mc_background_commit_settled(const struct mooncake_segment *seg);
bool mc_background_registration_settled(const struct mooncake_segment *seg);
/* [0, ready) is committed and, where this rank registers, registered. */
uint64_t mc_background_ready_bytes(const struct mooncake_segment *seg);

/* create()'s checks of mmap, host_register, hugetlb and device_id: 0 or -EINVAL (message set). */
int mc_segment_check_flags(const struct mooncake_segment_options *opt);
/* The page size create() would use for @opt, or the error it would give. */
int mc_segment_page_size(const struct mooncake_segment_options *opt, uint64_t *page_size);

#endif
