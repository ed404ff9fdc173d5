/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Publish slots (the declaration's slot_count): one writer, many readers, no
 * half-written block seen.  Each slot is a 64-bit sequence and a claim word
 * in the control area (control.h), outside the caller's bytes.
 *
 * Ordering: publish and write_end store the sequence with release
 * semantics after the writer's stores to its block; wait_slot and
 * read_begin load it with acquire semantics, so a reader that sees a
 * sequence sees every store the writer made before the store that produced
 * it.  Readers sleep on the low half of the sequence (a futex), never spin.
 * The seqlock pair: write_begin makes the sequence odd (a CAS from even, so
 * two writers cannot interleave), write_end even again; a reader copies
 * between read_begin and read_retry and retries when the sequence moved.
 *
 * Claims: the first rank to swap its rank + 1 into a free claim word wins.
 * Each rank of a segment with slots runs a liveness thread that holds a
 * robust mutex in its rank's entry for as long as the rank holds the
 * segment; a claim whose holder died (the kernel marks the mutex) or
 * destroyed its segment (the mutex is free) is taken over by the next
 * try_claim, at once: the bound is the kernel's own cleanup of the dead
 * process.
 *
 * A claimer gone between write_begin and write_end leaves the sequence odd:
 * its block is half written.  The takeover records that odd sequence as
 * abandoned; the new holder's write_begin then writes over it (the sequence
 * moves 2 on, still odd) instead of failing, and its write_end makes it
 * even.  No reader ever accepts the half-written block: the sequence is odd
 * from the dead writer's write_begin to the new holder's write_end, so a
 * read_begin waits and a copy begun before retries.  publish() refuses an
 * odd sequence (-EBUSY) instead of making it odd + 2.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>

#include "base/environment.h"
#include "base/error.h"
#include "mooncake/segment.h"
#include "control.h"
#include "private.h"
#include "segment.h"

/* How long a slot waiter sleeps at most before it looks again: a publish
 * queued on a stream without its host wake-up is noticed within this.
 * MOONCAKE_SEGMENT_SLOT_SLEEP_MS changes it (tests make it long, so that a
 * lost wake-up hangs instead of hiding in the next look). */
#define SLOT_SLEEP_MS_DEFAULT 100
#define SLOT_SLEEP_MS_MAX     3600000

struct mc_control_slot *mc_slot_get(const struct mooncake_segment *seg, uint32_t slot, int *err)
{
	if (!seg) {
		*err = mc_error(EINVAL, "Shared segment slots need a segment");
		return NULL;
	}
	if (!seg->opt.slot_count || !seg->control.area || slot >= seg->opt.slot_count) {
		*err = !seg->opt.slot_count
			       ? mc_error(EINVAL,
					  "Shared segment '%s' declares no publish slots: set "
					  "slot_count in the options (Python: slots=N) on every rank",
					  seg->label)
		       : !seg->control.area
			       ? mc_error(EINVAL,
					  "Shared segment rank %u: complete() first (the slots are "
					  "the group's)",
					  seg->opt.rank_id)
			       : mc_error(EINVAL, "Shared segment slot %u does not exist (%u slots, 0 to %u)",
					  slot, seg->opt.slot_count, seg->opt.slot_count - 1);
		return NULL;
	}
	*err = 0;
	return mc_control_slot(seg->control.area, slot);
}

static int64_t remaining_ms(int64_t deadline)
{
	int64_t left = deadline - mc_now_ms();

	return left < 0 ? 0 : left;
}

/* Sleep on @s's sequence (which held @seen) until it moves, a wake-up or the
 * deadline.  The waiter counts itself in first, with a full barrier, and the
 * kernel compares the word after its own: a publish whose store came later
 * sees the count and wakes it (Dekker's pattern with wake_waiters()). */
static int sleep_until(struct mc_control_slot *s, uint64_t seen, int64_t deadline, uint32_t slot,
		       const char *what)
{
	int64_t left = remaining_ms(deadline);
	uint64_t slice;
	char why[256];

	if (left == 0)
		return mc_error(ETIMEDOUT, "Shared segment slot %u: no %s before the timeout", slot, what);
	if (mc_env_number("MOONCAKE_SEGMENT_SLOT_SLEEP_MS", 1, SLOT_SLEEP_MS_MAX, SLOT_SLEEP_MS_DEFAULT,
			  &slice, why, sizeof(why)) != 0)
		return mc_error(EINVAL, "Shared segment slot wait: %s", why);
	__atomic_add_fetch(&s->waiters, 1, __ATOMIC_SEQ_CST);
	mc_control_sleep_on(&s->seq, seen, (int)(left < (int64_t)slice ? left : (int64_t)slice));
	__atomic_sub_fetch(&s->waiters, 1, __ATOMIC_RELAXED);
	return 0;
}

/* After the store that moved @s's sequence: the system call only when
 * someone sleeps (a publish without waiters costs no system call).  A waiter
 * killed while counted leaves the count up: later publishes then wake for
 * nothing, which costs time, never a lost wake-up. */
static void wake_waiters(struct mc_control_slot *s)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->waiters, __ATOMIC_RELAXED))
		mc_control_wake_on(&s->seq);
}

static int64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? INT64_MAX : mc_now_ms() + timeout_ms;
}

MC_EXPORT int64_t mooncake_segment_publish(struct mooncake_segment *seg, uint32_t slot)
{
	int err;
	struct mc_control_slot *s = mc_slot_get(seg, slot, &err);
	uint64_t seq;

	if (!s)
		return err;
	seq = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
	do {
		if (seq & 1)
			return mc_error(
				EBUSY,
				"Shared segment slot %u: cannot publish while a write is in progress "
				"(sequence %llu, odd: write_begin without write_end); end it with "
				"write_end, or, if its writer died, take the claim over (try_claim) and "
				"write the block again with write_begin and write_end",
				slot, (unsigned long long)seq);
	} while (!__atomic_compare_exchange_n(&s->seq, &seq, seq + 2, true, __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
	wake_waiters(s);
	return (int64_t)(seq + 2);
}

MC_EXPORT int64_t mooncake_segment_wait_slot(struct mooncake_segment *seg, uint32_t slot, uint64_t seen,
					     int timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	int err;
	struct mc_control_slot *s = mc_slot_get(seg, slot, &err);

	while (s && !err) {
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);

		if (seq != seen && !(seq & 1))
			return (int64_t)seq;
		err = sleep_until(s, seq, deadline, slot, "publish");
	}
	return err;
}

MC_EXPORT int64_t mooncake_segment_write_begin(struct mooncake_segment *seg, uint32_t slot)
{
	int err;
	struct mc_control_slot *s = mc_slot_get(seg, slot, &err);
	uint64_t seq, next;

	if (!s)
		return err;
	seq = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
	for (;;) {
		/* Even: from here on odd.  Odd and abandoned to this rank's claim: 2
		 * on, still odd (a copy begun meanwhile retries). */
		next = seq + 1;
		if (seq & 1) {
			if (__atomic_load_n(&s->abandoned, __ATOMIC_ACQUIRE) != seq ||
			    __atomic_load_n(&s->claim, __ATOMIC_ACQUIRE) != (uint64_t)seg->opt.rank_id + 1)
				return mc_error(
					EBUSY,
					"Shared segment slot %u: another write is in progress (one writer at "
					"a time: claim the slot first)",
					slot);
			next = seq + 2;
		}
		if (__atomic_compare_exchange_n(&s->seq, &seq, next, true, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			break;
	}
	if (seq & 1)
		mc_log(MOONCAKE_SEGMENT_LOG_INFO,
		       "Shared segment '%s' slot %u: rank %u writes over the block its gone claimer left half "
		       "written",
		       seg->label, slot, seg->opt.rank_id);
	/* The odd sequence is visible before any store to the block. */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	return (int64_t)next;
}

MC_EXPORT int64_t mooncake_segment_write_end(struct mooncake_segment *seg, uint32_t slot)
{
	int err;
	struct mc_control_slot *s = mc_slot_get(seg, slot, &err);
	uint64_t seq;

	if (!s)
		return err;
	seq = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
	if (!(seq & 1))
		return mc_error(EINVAL, "Shared segment slot %u: write_end without write_begin", slot);
	__atomic_store_n(&s->seq, seq + 1, __ATOMIC_RELEASE);
	wake_waiters(s);
	return (int64_t)(seq + 1);
}

MC_EXPORT int64_t mooncake_segment_read_begin(struct mooncake_segment *seg, uint32_t slot, int timeout_ms)
{
	int64_t deadline = deadline_of(timeout_ms);
	int err;
	struct mc_control_slot *s = mc_slot_get(seg, slot, &err);

	while (s && !err) {
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);

		if (!(seq & 1))
			return (int64_t)seq;
		err = sleep_until(s, seq, deadline, slot, "end of the write in progress");
	}
	return err;
}

MC_EXPORT int mooncake_segment_read_retry(const struct mooncake_segment *seg, uint32_t slot, uint64_t seq)
{
	int err;
	struct mc_control_slot *s = mc_slot_get(seg, slot, &err);

	if (!s)
		return err;
	/* The block's loads are done before the sequence is read again. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&s->seq, __ATOMIC_RELAXED) != seq;
}

/* Does rank @rank still hold its segment?  Its liveness mutex says. */
static bool rank_alive(struct mc_control *c, uint32_t rank)
{
	pthread_mutex_t *alive = &c->ranks[rank].alive;
	int r = pthread_mutex_trylock(alive);

	if (r == EBUSY)
		return true;
	if (r == EOWNERDEAD)
		pthread_mutex_consistent(alive); /* dead: free it for whoever comes next */
	if (r == 0 || r == EOWNERDEAD)
		pthread_mutex_unlock(alive);
	return false;
}

MC_EXPORT int mooncake_segment_try_claim(struct mooncake_segment *seg, uint32_t slot)
{
	int err;
	struct mc_control_slot *s = mc_slot_get(seg, slot, &err);
	uint64_t mine, holder;

	if (!s)
		return err;
	mine = (uint64_t)seg->opt.rank_id + 1;
	holder = __atomic_load_n(&s->claim, __ATOMIC_ACQUIRE);
	for (;;) {
		if (holder == mine)
			return 1;
		if (holder == 0) {
			if (__atomic_compare_exchange_n(&s->claim, &holder, mine, false, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE))
				return 1;
			continue;
		}
		if (holder > seg->opt.world_size || rank_alive(seg->control.area, (uint32_t)(holder - 1)))
			return 0;
		if (__atomic_compare_exchange_n(&s->claim, &holder, mine, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			/* A write of the gone claimer that never ended is this rank's to write over. */
			uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);

			if (seq & 1)
				__atomic_store_n(&s->abandoned, seq, __ATOMIC_RELEASE);
			mc_log(MOONCAKE_SEGMENT_LOG_INFO,
			       "Shared segment '%s' slot %u: rank %u took over the claim of rank %llu, which is gone",
			       seg->label, slot, seg->opt.rank_id, (unsigned long long)(holder - 1));
			return 2;
		}
	}
}

MC_EXPORT int mooncake_segment_release_claim(struct mooncake_segment *seg, uint32_t slot)
{
	int err;
	struct mc_control_slot *s = mc_slot_get(seg, slot, &err);
	uint64_t mine;

	if (!s)
		return err;
	mine = (uint64_t)seg->opt.rank_id + 1;
	if (!__atomic_compare_exchange_n(&s->claim, &mine, 0, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return mc_error(EPERM, "Shared segment slot %u: rank %u does not hold its claim", slot,
				seg->opt.rank_id);
	return 0;
}

MC_EXPORT const uint64_t *mooncake_segment_slot_words(const struct mooncake_segment *seg, size_t *stride)
{
	int err;
	struct mc_control_slot *s;

	if (!stride) {
		mc_error(EINVAL, "Shared segment slot words need somewhere to put the stride");
		return NULL;
	}
	s = mc_slot_get(seg, 0, &err);
	if (!s)
		return NULL;
	*stride = sizeof(*s);
	return &s->seq;
}

/* --- the liveness thread ---------------------------------------------------- */

struct liveness_start {
	struct mooncake_segment *seg;
	sem_t holding;
};

static void *hold_life(void *arg)
{
	struct liveness_start *start = arg;
	struct mooncake_segment *seg = start->seg;
	pthread_mutex_t *alive = &seg->control.area->ranks[seg->opt.rank_id].alive;
	int r = pthread_mutex_lock(alive);

	if (r == EOWNERDEAD) /* a process of this rank that died before: its claims are free anyway */
		pthread_mutex_consistent(alive);
	sem_post(&start->holding);
	pthread_mutex_lock(&seg->life_lock);
	while (!seg->life_stop)
		pthread_cond_wait(&seg->life_cond, &seg->life_lock);
	pthread_mutex_unlock(&seg->life_lock);
	pthread_mutex_unlock(alive);
	return NULL;
}

int mc_slots_start(struct mooncake_segment *seg)
{
	struct liveness_start start = { .seg = seg };
	int err;

	if (!seg->opt.slot_count || !seg->control.area || seg->life_running)
		return 0;
	pthread_mutex_init(&seg->life_lock, NULL);
	pthread_cond_init(&seg->life_cond, NULL);
	seg->life_stop = false;
	sem_init(&start.holding, 0, 0);
	err = mc_segment_start_thread(&seg->life, hold_life, &start);
	if (!err) {
		/* Claims are possible once this returns: the mutex is held by then. */
		while (sem_wait(&start.holding) != 0)
			;
		seg->life_running = true;
	}
	sem_destroy(&start.holding);
	if (err) {
		pthread_cond_destroy(&seg->life_cond);
		pthread_mutex_destroy(&seg->life_lock);
		return err;
	}
	err = mc_slots_register_words(seg);
	if (err)
		mc_slots_stop(seg);
	return err;
}

void mc_slots_stop(struct mooncake_segment *seg)
{
	mc_slots_unregister_words(seg);
	if (!seg->life_running)
		return;
	pthread_mutex_lock(&seg->life_lock);
	seg->life_stop = true;
	pthread_cond_signal(&seg->life_cond);
	pthread_mutex_unlock(&seg->life_lock);
	pthread_join(seg->life, NULL);
	pthread_cond_destroy(&seg->life_cond);
	pthread_mutex_destroy(&seg->life_lock);
	seg->life_running = false;
}
