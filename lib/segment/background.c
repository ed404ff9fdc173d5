/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The work behind a background create, and the waits on it.
 *
 * The owner's committer thread commits the pages after the first chunk, in
 * order, and advances the front in the control area after each chunk
 * (populate.c); it holds the control area's robust mutex while it commits,
 * so that the peers learn of the owner's death.  Each rank's registrar
 * thread (host_register) registers its part of the mapping a chunk at a
 * time, each chunk once the front has passed it, with a pause between
 * chunks so that the driver's locks are never held for long.  Waiting
 * (wait_ready, and a blocking peer's complete) sleeps on the control area's
 * word and looks at the owner's life every MC_CONTROL_OWNER_CHECK_MS.  A
 * blocking peer's complete has no timeout of the caller's: it gives up on an
 * owner whose front has not moved for the peer timeout (a stopped owner:
 * SIGSTOP, a debugger, a frozen container, dies no death a mutex sees).
 *
 * fork(): the threads stay in the parent.  A child's copy of the segment
 * reads the same control area (it is a MAP_SHARED mapping) and so waits on
 * the parent's front, and its destroy joins nothing (segment.c).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"
#include "base/error.h"
#include "host/commit-lock.h"
#include "host/cgroup.h"
#include "host/host.h"
#include "host/limits.h"
#include "mooncake/segment.h"
#include "control.h"
#include "private.h"
#include "segment.h"

static bool stopping(const struct mooncake_segment *seg)
{
	return __atomic_load_n(&seg->stopping, __ATOMIC_ACQUIRE);
}

int mc_segment_start_thread(pthread_t *thread, void *(*run)(void *), void *arg)
{
	sigset_t all, saved;
	int err;

	/* The threads take no signal: the application's handlers run on its own threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &saved);
	err = pthread_create(thread, NULL, run, arg);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	if (err)
		return mc_error(err == EAGAIN ? ENOMEM : EIO,
				"Shared segment cannot start a background thread: %s", strerror(err));
	return 0;
}

/* --- the owner's commit ---------------------------------------------------- */

static void front_advance(void *ctx, uint64_t end)
{
	struct mooncake_segment *seg = ctx;

	if (seg->control.area)
		mc_control_advance(seg->control.area, end);
}

static bool front_stopping(void *ctx)
{
	return stopping(ctx);
}

void mc_background_init(struct mooncake_segment *seg)
{
	seg->progress = (struct mc_commit_progress){ front_advance, front_stopping, seg };
}

struct committer_start {
	struct mooncake_segment *seg;
	sem_t holding; /* posted once the thread holds the owner's mutex */
};

static void *commit_behind(void *arg)
{
	struct committer_start *start = arg;
	struct mooncake_segment *seg = start->seg;
	struct mc_control *c = seg->control.area;
	bool held = mc_control_hold_owner(c);
	char message[MC_CONTROL_MESSAGE_BYTES];
	int err;

	sem_post(&start->holding); /* start is the creator's: gone after this */
	err = seg->backend->commit_rest(&seg->memory);
	if (!err) {
		mc_control_committed(c, seg->memory.commit.ns);
	} else if (err == -ECANCELED) {
		snprintf(message, sizeof(message),
			 "Shared segment owner (rank %u) destroyed the segment while committing it, %llu of "
			 "%llu bytes committed",
			 seg->opt.owner_rank,
			 (unsigned long long)__atomic_load_n(&c->committed, __ATOMIC_ACQUIRE),
			 (unsigned long long)c->alloc_size);
		mc_control_fail(c, ECANCELED, seg->opt.owner_rank, message);
	} else {
		mc_error_name_rank(err, seg->opt.rank_id);
		mc_control_fail(c, -err, seg->opt.rank_id, mooncake_segment_last_error());
	}
	mc_commit_lock_release(&seg->commit_lock);
	if (held)
		mc_control_let_go_owner(c);
	return NULL;
}

int mc_background_commit_start(struct mooncake_segment *seg)
{
	struct committer_start start = { .seg = seg };
	int err;

	sem_init(&start.holding, 0, 0);
	err = mc_segment_start_thread(&seg->committer, commit_behind, &start);
	if (!err) {
		/* A peer that finds the mutex free while the front commits would
		 * wait for ever on an owner that died before taking it. */
		while (sem_wait(&start.holding) != 0)
			;
		seg->committer_running = true;
	}
	sem_destroy(&start.holding);
	return err;
}

/* --- this rank's registration ---------------------------------------------- */

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Is [0, end) of the segment committed?  0 when it is, 1 while it is not
 * yet, or the error that stopped the commit (message set). */
static int front_state(const struct mooncake_segment *seg, uint64_t end)
{
	const struct mc_control *c = seg->control.area;
	uint32_t state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);

	if (state == MC_FRONT_FAILED && (c->error == ESRCH || c->error == ECANCELED))
		return mc_error(c->error, "%s", c->message); /* it names the owner already */
	if (state == MC_FRONT_FAILED)
		return mc_error(c->error, "%s (the background commit of owner rank %u stopped)", c->message,
				c->error_rank);
	if (state == MC_FRONT_COMMITTED || __atomic_load_n(&c->committed, __ATOMIC_ACQUIRE) >= end)
		return 0;
	return 1;
}

/* The registrar waits for the front to pass @end, or for a reason to stop. */
static int wait_front(struct mooncake_segment *seg, uint64_t end)
{
	struct mc_control *c = seg->control.area;

	for (;;) {
		uint32_t seq = mc_control_seq(c);
		int state = front_state(seg, end);

		if (state <= 0)
			return state;
		if (stopping(seg))
			return mc_error(ECANCELED, "Shared segment rank %u: destroyed while registering",
					seg->opt.rank_id);
		if (!mc_control_owner_died(c, seg->opt.owner_rank))
			mc_control_sleep(c, seq, MC_CONTROL_OWNER_CHECK_MS);
	}
}

static void pause_between_chunks(const struct mooncake_segment *seg)
{
	uint32_t us = seg->opt.register_pause_us ? seg->opt.register_pause_us : MC_REGISTER_PAUSE_US_DEFAULT;
	struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void publish_rank(struct mooncake_segment *seg, const struct mc_registration *reg, uint32_t state,
			 int err)
{
	struct mc_control_rank r = {
		.begin = seg->register_begin,
		.end = seg->register_end,
		.registered_end = seg->register_begin + mc_registration_end(reg),
		.state = state,
		.error = err,
	};

	mc_control_rank_update(seg->control.area, seg->opt.rank_id, &r);
}

static void *register_behind(void *arg)
{
	struct mooncake_segment *seg = arg;
	struct mc_registration reg = seg->registration;
	uint64_t start = mc_now_ns();
	int err;

	seg->registration.ops = NULL; /* the thread's until it ends */
	err = reg.ops->register_begin(&reg);
	while (!err && !mc_registration_done(&reg)) {
		uint64_t chunk_end =
			seg->register_begin + min_u64((uint64_t)(reg.chunks + 1) * reg.chunk, reg.len);

		err = wait_front(seg, chunk_end);
		if (err)
			break;
		err = reg.ops->register_next(&reg);
		if (err) {
			reg.ops = NULL; /* a failed chunk rolled back everything: no device address */
			__atomic_store_n(&seg->published_device_addr, 0, __ATOMIC_RELEASE);
			break;
		}
		/* The base's device address, for the chunks registered so far. */
		__atomic_store_n(&seg->published_device_addr, reg.device_addr - seg->register_begin,
				 __ATOMIC_RELEASE);
		publish_rank(seg, &reg, MC_REGISTER_RUNNING, 0);
		if (!mc_registration_done(&reg))
			pause_between_chunks(seg);
	}
	reg.ns = mc_now_ns() - start;
	if (err) {
		mc_error_name_rank(err, seg->opt.rank_id);
		snprintf(seg->register_message, sizeof(seg->register_message), "%s",
			 mooncake_segment_last_error());
		seg->register_error = -err;
		if (reg.ops && reg.chunks == 0) {
			reg.ops->unregister_host(&reg); /* the context a begin took */
			reg.ops = NULL;
		}
	}
	seg->registration = reg; /* what destroy unregisters, once it joined */
	publish_rank(seg, &reg, err ? MC_REGISTER_FAILED : MC_REGISTER_DONE, -err);
	return NULL;
}

int mc_background_register_start(struct mooncake_segment *seg)
{
	int err = mc_segment_start_thread(&seg->registrar, register_behind, seg);

	if (!err)
		seg->registrar_running = true;
	return err;
}

void mc_background_stop(struct mooncake_segment *seg)
{
	__atomic_store_n(&seg->stopping, true, __ATOMIC_RELEASE);
	if (seg->control.area)
		mc_control_wake(seg->control.area);
	if (seg->committer_running)
		pthread_join(seg->committer, NULL);
	if (seg->registrar_running)
		pthread_join(seg->registrar, NULL);
	seg->committer_running = seg->registrar_running = false;
}

/* --- waiting --------------------------------------------------------------- */

/* Is this rank's part of [offset, end) registered?  0, 1 (not yet), or its error. */
static int registration_state(const struct mooncake_segment *seg, uint64_t offset, uint64_t end)
{
	const struct mc_control_rank *r;
	uint32_t state;

	if (!seg->registrar_running && !seg->register_error)
		return 0; /* registered before create or complete returned, or not at all */
	r = &seg->control.area->ranks[seg->opt.rank_id];
	state = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
	if (state == MC_REGISTER_FAILED)
		return mc_error(seg->register_error, "%s", seg->register_message);
	if (state == MC_REGISTER_DONE || end <= seg->register_begin || offset >= seg->register_end)
		return 0;
	return __atomic_load_n(&r->registered_end, __ATOMIC_ACQUIRE) >= min_u64(end, seg->register_end) ? 0
													: 1;
}

int mc_background_wait(struct mooncake_segment *seg, uint64_t offset, uint64_t end, int timeout_ms)
{
	struct mc_control *c = seg->control.area;
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : mc_now_ms() + timeout_ms;

	if (!c)
		return 0; /* a backend without a control area commits everything at create */
	for (;;) {
		uint32_t seq = mc_control_seq(c);
		int64_t left;
		int state = front_state(seg, end);

		if (state == 0)
			state = registration_state(seg, offset, end);
		if (state <= 0)
			return state;
		if (mc_control_owner_died(c, seg->opt.owner_rank))
			continue; /* the front failed: say so */
		left = deadline - mc_now_ms();
		if (left <= 0)
			return mc_error(
				ETIMEDOUT,
				"Shared segment rank %u: bytes [%llu, %llu) not ready within %d ms (%llu of "
				"%llu bytes committed)",
				seg->opt.rank_id, (unsigned long long)offset, (unsigned long long)end,
				timeout_ms,
				(unsigned long long)__atomic_load_n(&c->committed, __ATOMIC_ACQUIRE),
				(unsigned long long)c->alloc_size);
		mc_control_sleep(c, seq, (int)min_u64((uint64_t)left, MC_CONTROL_OWNER_CHECK_MS));
	}
}

int mc_background_follow(struct mooncake_segment *seg, const struct mc_follow *follow,
			 int64_t silent_since_ms, int silence_ms)
{
	struct mc_control *c = seg->control.area;
	uint64_t seen;

	if (!c)
		return 0;
	/* The first look is no progress: the owner may have stopped before it. */
	seen = __atomic_load_n(&c->committed, __ATOMIC_ACQUIRE);
	if (!silent_since_ms)
		silent_since_ms = mc_now_ms();
	for (;;) {
		uint32_t seq = mc_control_seq(c);
		int state = front_state(seg, follow->end);
		uint64_t committed = __atomic_load_n(&c->committed, __ATOMIC_ACQUIRE);
		int64_t now = mc_now_ms(), left;

		if (state <= 0)
			return state;
		if (mc_control_owner_died(c, seg->opt.owner_rank))
			continue; /* the front failed: say so */
		if (committed != seen) {
			seen = committed;
			silent_since_ms = now; /* it moved: the owner runs */
		}
		left = silent_since_ms + silence_ms - now;
		if (left <= 0)
			return mc_error(
				ETIMEDOUT,
				"Shared segment rank %u: the owner (rank %u, pid %u) committed nothing for %d ms "
				"while this rank waited in complete() %s (%llu of %llu bytes committed): "
				"it is stopped (SIGSTOP, a debugger, a frozen container) or stuck; check that it "
				"runs (kill -CONT %u), raise MOONCAKE_SEGMENT_PEER_TIMEOUT_MS if it is only slow, "
				"or %s",
				seg->opt.rank_id, seg->opt.owner_rank, c->owner_pid, silence_ms,
				follow->waiting_for, (unsigned long long)committed,
				(unsigned long long)c->alloc_size, c->owner_pid, follow->fix);
		mc_control_sleep(c, seq, (int)min_u64((uint64_t)left, MC_CONTROL_OWNER_CHECK_MS));
	}
}

/* Whether every memory limit over this process is over the owner too: its
 * cgroup is the owner's or an ancestor of it.  The owner's room check then
 * counted every page under each of them, whoever faults it in.  (Not the
 * tightest directory of each: the owner's commit can make a shared
 * ancestor the tightest of both while the peer's own limit is smaller.) */
static bool owner_under_every_limit(pid_t owner_pid)
{
	char pid[16], mine[1024], owners[1024];
	bool my_v2, owner_v2;
	size_t n;

	if (owner_pid <= 0)
		return false;
	snprintf(pid, sizeof(pid), "%d", (int)owner_pid);
	if (!mc_process_memory_cgroup("self", mine, sizeof(mine), &my_v2) ||
	    !mc_process_memory_cgroup(pid, owners, sizeof(owners), &owner_v2) || my_v2 != owner_v2)
		return false;
	n = strlen(mine);
	if (n && mine[n - 1] == '/')
		n--; /* the root, "/": an ancestor of every cgroup */
	return !strncmp(owners, mine, n) && (owners[n] == '\0' || owners[n] == '/');
}

uint64_t mc_background_peer_front(const struct mooncake_segment *seg, pid_t owner_pid, char *why, size_t size)
{
	const struct mc_control *c = seg->control.area;
	uint64_t alloc = seg->memory.alloc_size, page = seg->memory.page_size, committed, tables, spare, past;
	struct mc_memory_room cgroup;

	if (!c || !page)
		return 0;
	committed = __atomic_load_n(&c->committed, __ATOMIC_ACQUIRE);
	if (committed >= alloc || !mc_self_cgroup_room(&cgroup) || cgroup.room == UINT64_MAX)
		return 0;
	/* Its page tables (8 bytes a page, base pages unless HugeTLB: a THP
	 * fault can fall back to them) and the charge batching are the peer's
	 * whatever it touches (limits.h). */
	if (!seg->opt.hugetlb)
		page = mc_host_base_page_size();
	tables = alloc / page * 8 + mc_memcg_charge_slack();
	spare = cgroup.room > tables ? (cgroup.room - tables) / 2 : 0;
	past = alloc - committed;
	/* The owner's cgroup is read only where the peer's own room falls short. */
	if (past <= spare || owner_under_every_limit(owner_pid))
		return 0;
	snprintf(why, size,
		 "until the pages left to commit fit in half the room of its memory cgroup %s (%llu bytes: a "
		 "page this rank touches past the front is charged to it)",
		 cgroup.where, (unsigned long long)cgroup.room);
	return alloc - spare;
}

bool mc_background_commit_settled(const struct mooncake_segment *seg)
{
	return !seg->committer_running ||
	       __atomic_load_n(&seg->control.area->state, __ATOMIC_ACQUIRE) != MC_FRONT_COMMITTING;
}

bool mc_background_registration_settled(const struct mooncake_segment *seg)
{
	uint32_t state;

	if (!seg->registrar_running)
		return true;
	state = __atomic_load_n(&seg->control.area->ranks[seg->opt.rank_id].state, __ATOMIC_ACQUIRE);
	return state == MC_REGISTER_DONE || state == MC_REGISTER_FAILED;
}

uint64_t mc_background_ready_bytes(const struct mooncake_segment *seg)
{
	const struct mc_control *c = seg->control.area;
	const struct mc_control_rank *r;
	uint64_t ready;

	if (!c)
		return seg->memory.alloc_size;
	ready = __atomic_load_n(&c->committed, __ATOMIC_ACQUIRE);
	if (seg->registrar_running || seg->register_error) {
		r = &c->ranks[seg->opt.rank_id];
		if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != MC_REGISTER_DONE &&
		    ready > seg->register_begin) {
			uint64_t registered = __atomic_load_n(&r->registered_end, __ATOMIC_ACQUIRE);

			ready = registered > seg->register_begin ? min_u64(ready, registered)
								 : seg->register_begin;
		}
	}
	return ready;
}
