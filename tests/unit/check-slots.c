/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Publish slots with real processes: the declaration (slot_count is part of
 * it), the litmus tests (a writer and three readers on separate processes:
 * publish/wait with acknowledgements, and the seqlock under continuous
 * rewrites; no reader may ever accept a torn block), timeouts, and claims
 * (one winner; a claimer SIGKILLed or destroyed is taken over at once; one
 * SIGKILLed mid-write leaves its heir a usable slot and no reader the
 * half-written block), and publish refusing a slot mid-write.
 * MOONCAKE_SEGMENT_LITMUS_ROUNDS raises the rounds (default 10000 blocks,
 * 100000 rewrites).
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group.h"
#include "helpers.h"

#define BLOB	  MOONCAKE_SEGMENT_BLOB_SIZE
#define BLOCK	  (64 * 1024)
#define WORLD	  4
#define SLOT_DATA 0 /* the writer publishes here; reader r acknowledges on slot r */
#define SLOTS	  (WORLD + 1)
#define WAIT_MS	  30000

static long rounds(long fallback)
{
	const char *v = getenv("MOONCAKE_SEGMENT_LITMUS_ROUNDS");

	return v && atol(v) > 0 ? atol(v) : fallback;
}

/* Create and complete a segment with SLOTS slots on this rank. */
static struct mooncake_segment *join(struct group_rank *self, const char *name, uint32_t slots)
{
	struct mooncake_segment_options opt = test_options(self->world_size, self->rank, 0);
	uint8_t blob[BLOB], blobs[WORLD * BLOB];
	struct mooncake_segment *seg = NULL;

	opt.slot_count = slots;
	if (mooncake_segment_create(name, 2 * BLOCK, &opt, &seg, blob) != 0 ||
	    group_allgather(self, blob, sizeof(blob), blobs) != 0 ||
	    mooncake_segment_complete(seg, blobs, (size_t)self->world_size * BLOB) != 0) {
		fprintf(stderr, "rank %u: %s\n", self->rank, mooncake_segment_last_error());
		mooncake_segment_destroy(seg);
		return NULL;
	}
	return seg;
}

/* Every 8-byte word of the block is @value. */
static int block_is(const volatile uint64_t *block, uint64_t value)
{
	for (size_t i = 0; i < BLOCK / 8; i++)
		if (block[i] != value)
			return 0;
	return 1;
}

static void fill(volatile uint64_t *block, uint64_t value)
{
	for (size_t i = 0; i < BLOCK / 8; i++)
		block[i] = value;
}

/* Rank 0 writes block after block and publishes; every reader waits, checks
 * every word, and acknowledges; the writer waits for every acknowledgement
 * before it rewrites. */
static int publish_rank(struct group_rank *self, void *arg)
{
	long n = rounds(10000), torn = 0;
	struct mooncake_segment *seg = join(self, "litmus-publish", SLOTS);
	volatile uint64_t *block;
	int64_t seen = 0;

	(void)arg;
	RANK_CHECK(seg != NULL);
	block = mooncake_segment_base(seg);
	for (long r = 1; r <= n; r++) {
		if (self->rank == 0) {
			fill(block, (uint64_t)r);
			RANK_CHECK(mooncake_segment_publish(seg, SLOT_DATA) == 2 * r);
			for (uint32_t k = 1; k < self->world_size; k++)
				RANK_CHECK(mooncake_segment_wait_slot(seg, k, (uint64_t)(2 * r - 2),
								      WAIT_MS) == 2 * r);
		} else {
			seen = mooncake_segment_wait_slot(seg, SLOT_DATA, (uint64_t)seen, WAIT_MS);
			RANK_CHECK(seen == 2 * r);
			if (!block_is(block, (uint64_t)r))
				torn++;
			RANK_CHECK(mooncake_segment_publish(seg, self->rank) == 2 * r);
		}
	}
	if (torn)
		fprintf(stderr, "rank %u: %ld torn blocks of %ld\n", self->rank, torn, n);
	mooncake_segment_destroy(seg);
	return torn ? 1 : 0;
}

/* Rank 0 rewrites the block under the seqlock without waiting for anyone;
 * the readers copy it between read_begin and read_retry and must never
 * accept a copy whose words differ. */
static int seqlock_rank(struct group_rank *self, void *arg)
{
	long n = rounds(100000), accepted = 0, torn = 0;
	struct mooncake_segment *seg = join(self, "litmus-seqlock", SLOTS);
	static uint64_t copy[BLOCK / 8];
	volatile uint64_t *block;

	(void)arg;
	RANK_CHECK(seg != NULL);
	block = mooncake_segment_base(seg);
	if (self->rank == 0) {
		for (long r = 1; r <= n; r++) {
			RANK_CHECK(mooncake_segment_write_begin(seg, SLOT_DATA) == 2 * r - 1);
			fill(block, (uint64_t)r);
			RANK_CHECK(mooncake_segment_write_end(seg, SLOT_DATA) == 2 * r);
		}
		RANK_CHECK(mooncake_segment_publish(seg, 1) > 0); /* done */
	} else {
		/* Until the writer is done, and once more after: a reader that
		 * starts late (few rounds) still reads the last block. */
		for (bool done = false, last = false; !last;) {
			int64_t seq = mooncake_segment_read_begin(seg, SLOT_DATA, WAIT_MS);

			last = done;
			done = mooncake_segment_wait_slot(seg, 1, 0, 0) != -ETIMEDOUT;
			RANK_CHECK(seq >= 0 && seq % 2 == 0);
			for (size_t i = 0; i < BLOCK / 8; i++)
				copy[i] = block[i];
			if (mooncake_segment_read_retry(seg, SLOT_DATA, (uint64_t)seq))
				continue;
			accepted++;
			if (!block_is(copy, (uint64_t)seq / 2))
				torn++;
		}
		if (torn)
			fprintf(stderr, "rank %u: accepted %ld torn copies of %ld\n", self->rank, torn,
				accepted);
		RANK_CHECK(accepted > 0);
	}
	RANK_CHECK(group_barrier(self) == 0);
	mooncake_segment_destroy(seg);
	return torn ? 1 : 0;
}

static void run_group(group_rank_fn fn)
{
	int codes[WORLD];

	ck_assert_int_eq(group_run(WORLD, fn, NULL, 300000, codes), 0);
	for (int r = 0; r < WORLD; r++)
		ck_assert_msg(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
}

/* A waiter looks again only after an hour: a lost wake-up hangs the group
 * (and its timeout fails the test) instead of costing 100 ms unseen. */
static void wake_ups_must_not_be_lost(void)
{
	setenv("MOONCAKE_SEGMENT_SLOT_SLEEP_MS", "3600000", 1);
}

START_TEST(test_publish_and_wait_never_show_a_torn_block)
{
	wake_ups_must_not_be_lost();
	run_group(publish_rank);
}
END_TEST

START_TEST(test_the_seqlock_never_accepts_a_torn_copy)
{
	wake_ups_must_not_be_lost();
	run_group(seqlock_rank);
}
END_TEST

START_TEST(test_a_bad_sleep_setting_is_named)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	opt.slot_count = 1;
	ck_assert_int_eq(mooncake_segment_create("sleep", BLOCK, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_complete(seg, blob, sizeof(blob)), 0);
	setenv("MOONCAKE_SEGMENT_SLOT_SLEEP_MS", "0", 1);
	ck_assert_error(mooncake_segment_wait_slot(seg, 0, 0, 50), EINVAL, "MOONCAKE_SEGMENT_SLOT_SLEEP_MS");
	unsetenv("MOONCAKE_SEGMENT_SLOT_SLEEP_MS");
	ck_assert_error(mooncake_segment_wait_slot(seg, 0, 0, 50), ETIMEDOUT, "no publish");
	mooncake_segment_destroy(seg);
}
END_TEST

/* Rank 1 claims slot 0 and dies; rank 2 cannot claim while it lives and
 * takes over once it is dead; rank 3's claim of slot 1 is taken over once
 * it destroyed its segment. */
static int claim_rank(struct group_rank *self, void *arg)
{
	struct mooncake_segment *seg = join(self, "claims", SLOTS);
	int claimed;

	(void)arg;
	RANK_CHECK(seg != NULL);
	if (self->rank == 1) {
		RANK_CHECK(mooncake_segment_try_claim(seg, 0) == 1);
		RANK_CHECK(mooncake_segment_try_claim(seg, 0) == 1); /* already this rank's */
		RANK_CHECK(group_barrier(self) == 0);
		RANK_CHECK(group_barrier(self) == 0);
		raise(SIGKILL);
	}
	if (self->rank == 3) {
		RANK_CHECK(mooncake_segment_try_claim(seg, 1) == 1);
		RANK_CHECK(group_barrier(self) == 0);
		RANK_CHECK(group_barrier(self) == 0);
		mooncake_segment_destroy(seg);
		return 0;
	}
	RANK_CHECK(group_barrier(self) == 0);
	if (self->rank == 2) {
		RANK_CHECK(mooncake_segment_try_claim(seg, 0) == 0);
		RANK_CHECK(mooncake_segment_try_claim(seg, 1) == 0);
		RANK_CHECK(mooncake_segment_release_claim(seg, 0) == -EPERM);
		RANK_CHECK(strstr(mooncake_segment_last_error(), "does not hold") != NULL);
	}
	RANK_CHECK(group_barrier(self) == 0);
	if (self->rank == 2) {
		RANK_CHECK(wait_until_dead(group_pid(1), 10000));
		/* The leader shows dead while its other threads (the liveness
		 * thread) still exit: the claim is free once they have. */
		for (int ms = 0; ms < 2000 && (claimed = mooncake_segment_try_claim(seg, 0)) == 0; ms++)
			usleep(1000);
		RANK_CHECK(claimed == 2);
		while (mooncake_segment_try_claim(seg, 1) == 0) /* until rank 3 has destroyed */
			usleep(1000);
		RANK_CHECK(mooncake_segment_release_claim(seg, 1) == 0);
		RANK_CHECK(mooncake_segment_try_claim(seg, 1) == 1);
	}
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_a_gone_claimer_is_taken_over)
{
	int codes[WORLD];

	ck_assert_int_eq(group_run(WORLD, claim_rank, NULL, 60000, codes), 0);
	ck_assert_int_eq(codes[1], 128 + SIGKILL);
	for (int r = 0; r < WORLD; r++)
		if (r != 1)
			ck_assert_msg(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
}
END_TEST

/* Rank 1 claims slot 0, publishes a whole block of 1s, begins rewriting
 * it with 2s and is SIGKILLed half way.  Rank 0, a reader, never accepts
 * the half-written block (read_begin waits, a copy begun before retries),
 * neither before rank 2 takes the claim over nor after, and cannot publish
 * over it; rank 2 takes the claim over and writes the block whole with
 * write_begin/write_end, and rank 0 then reads the new block.  Rank 2 tells
 * rank 0 on slot 2 (1: rank 1 is dead, 2: took over, 3: wrote), rank 0
 * tells rank 2 on slot 3 (1: take over, 2: write). */
#define TOLD(n) (2 * (n))
static int abandoned_rank(struct group_rank *self, void *arg)
{
	struct mooncake_segment *seg = join(self, "abandoned", SLOTS);
	volatile uint64_t *block;
	const uint64_t *words;
	size_t stride;
	int64_t seq = 0;
	int claimed;

	(void)arg;
	RANK_CHECK(seg != NULL);
	block = mooncake_segment_base(seg);
	words = mooncake_segment_slot_words(seg, &stride);
	RANK_CHECK(words != NULL);
	if (self->rank == 1) {
		RANK_CHECK(mooncake_segment_try_claim(seg, SLOT_DATA) == 1);
		RANK_CHECK(mooncake_segment_write_begin(seg, SLOT_DATA) == 1);
		fill(block, 1);
		RANK_CHECK(mooncake_segment_write_end(seg, SLOT_DATA) == 2);
	}
	RANK_CHECK(group_barrier(self) == 0);
	if (self->rank == 0) {
		seq = mooncake_segment_read_begin(seg, SLOT_DATA, WAIT_MS); /* a copy begun before */
		RANK_CHECK(seq == 2 && block_is(block, 1));
	}
	RANK_CHECK(group_barrier(self) == 0);
	if (self->rank == 1) {
		RANK_CHECK(mooncake_segment_write_begin(seg, SLOT_DATA) == 3);
		for (size_t i = 0; i < BLOCK / 16; i++)
			block[i] = 2;
		raise(SIGKILL);
	}
	if (self->rank == 0) {
		RANK_CHECK(mooncake_segment_wait_slot(seg, 2, 0, WAIT_MS) == TOLD(1)); /* rank 1 is dead */
		RANK_CHECK(mooncake_segment_read_retry(seg, SLOT_DATA, (uint64_t)seq) == 1);
		RANK_CHECK(mooncake_segment_read_begin(seg, SLOT_DATA, 50) == -ETIMEDOUT);
		RANK_CHECK(mooncake_segment_wait_slot(seg, SLOT_DATA, 2, 50) == -ETIMEDOUT);
		RANK_CHECK(mooncake_segment_publish(seg, SLOT_DATA) == -EBUSY);
		RANK_CHECK(strstr(mooncake_segment_last_error(),
				  "slot 0: cannot publish while a write is in progress") != NULL);
		RANK_CHECK(strstr(mooncake_segment_last_error(), "try_claim") != NULL);
		RANK_CHECK(__atomic_load_n(&words[0], __ATOMIC_ACQUIRE) == 3);	    /* still odd, not 5 */
		RANK_CHECK(mooncake_segment_write_begin(seg, SLOT_DATA) == -EBUSY); /* not the claim's */
		RANK_CHECK(mooncake_segment_publish(seg, 3) == TOLD(1));
		RANK_CHECK(mooncake_segment_wait_slot(seg, 2, TOLD(1), WAIT_MS) == TOLD(2));
		/* The takeover alone publishes nothing: the block is still half written. */
		RANK_CHECK(mooncake_segment_read_begin(seg, SLOT_DATA, 50) == -ETIMEDOUT);
		RANK_CHECK(mooncake_segment_wait_slot(seg, SLOT_DATA, 2, 50) == -ETIMEDOUT);
		RANK_CHECK(mooncake_segment_publish(seg, 3) == TOLD(2));
		RANK_CHECK(mooncake_segment_wait_slot(seg, 2, TOLD(2), WAIT_MS) == TOLD(3));
		seq = mooncake_segment_read_begin(seg, SLOT_DATA, 0);
		RANK_CHECK(seq == 6);
		RANK_CHECK(block_is(block, 3));
		RANK_CHECK(mooncake_segment_read_retry(seg, SLOT_DATA, (uint64_t)seq) == 0);
	}
	if (self->rank == 2) {
		RANK_CHECK(wait_until_dead(group_pid(1), 10000));
		RANK_CHECK(mooncake_segment_publish(seg, 2) == TOLD(1));
		RANK_CHECK(mooncake_segment_wait_slot(seg, 3, 0, WAIT_MS) == TOLD(1));
		for (int ms = 0; ms < 2000 && (claimed = mooncake_segment_try_claim(seg, SLOT_DATA)) == 0;
		     ms++)
			usleep(1000);
		RANK_CHECK(claimed == 2);
		RANK_CHECK(mooncake_segment_publish(seg, SLOT_DATA) == -EBUSY);
		RANK_CHECK(mooncake_segment_publish(seg, 2) == TOLD(2));
		RANK_CHECK(mooncake_segment_wait_slot(seg, 3, TOLD(1), WAIT_MS) == TOLD(2));
		RANK_CHECK(mooncake_segment_write_begin(seg, SLOT_DATA) == 5); /* odd on: no reader accepts */
		RANK_CHECK(mooncake_segment_write_begin(seg, SLOT_DATA) == -EBUSY); /* its own write runs */
		fill(block, 3);
		RANK_CHECK(mooncake_segment_write_end(seg, SLOT_DATA) == 6);
		RANK_CHECK(mooncake_segment_publish(seg, 2) == TOLD(3));
	}
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_a_writer_killed_mid_write_leaves_a_usable_slot)
{
	int codes[WORLD];

	ck_assert_int_eq(group_run(WORLD, abandoned_rank, NULL, 60000, codes), 0);
	ck_assert_int_eq(codes[1], 128 + SIGKILL);
	for (int r = 0; r < WORLD; r++)
		if (r != 1)
			ck_assert_msg(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
}
END_TEST

START_TEST(test_slots_are_part_of_the_declaration)
{
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	struct mooncake_segment *owner = NULL, *peer = NULL;
	uint8_t blobs[2 * BLOB];
	const uint64_t *words;
	size_t stride = 0;

	o.slot_count = 4;
	p.slot_count = 5;
	ck_assert_int_eq(mooncake_segment_create("declared", BLOCK, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("declared", BLOCK, &p, &peer, blobs + BLOB), 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EINVAL, "declaration");
	ck_assert_error(mooncake_segment_publish(peer, 0), EINVAL, "complete() first");
	ck_assert_error(mooncake_segment_publish(owner, 4), EINVAL, "slot 4 does not exist");
	ck_assert_error((int)mooncake_segment_wait_slot(owner, 0, 0, 20), ETIMEDOUT, "no publish");
	ck_assert_error((int)mooncake_segment_write_end(owner, 0), EINVAL, "without write_begin");
	ck_assert_int_eq(mooncake_segment_write_begin(owner, 0), 1);
	ck_assert_error((int)mooncake_segment_write_begin(owner, 0), EBUSY, "another write");
	ck_assert_error((int)mooncake_segment_publish(owner, 0), EBUSY,
			"slot 0: cannot publish while a write");
	ck_assert_error((int)mooncake_segment_read_begin(owner, 0, 20), ETIMEDOUT, "write in progress");
	ck_assert_int_eq(mooncake_segment_write_end(owner, 0), 2);
	ck_assert_int_eq(mooncake_segment_read_begin(owner, 0, 0), 2);
	ck_assert_int_eq(mooncake_segment_read_retry(owner, 0, 2), 0);
	ck_assert_int_eq(mooncake_segment_publish(owner, 0), 4);
	ck_assert_int_eq(mooncake_segment_read_retry(owner, 0, 2), 1);
	/* The words are the sequences: slot 0 at 4, slot 3 where publish left it. */
	ck_assert_ptr_null(mooncake_segment_slot_words(peer, &stride));
	ck_assert(strstr(mooncake_segment_last_error(), "complete() first") != NULL);
	ck_assert_ptr_null(mooncake_segment_slot_words(owner, NULL));
	words = mooncake_segment_slot_words(owner, &stride);
	ck_assert_ptr_nonnull(words);
	ck_assert_uint_eq(stride, 64);
	ck_assert_uint_eq(__atomic_load_n(&words[0], __ATOMIC_ACQUIRE), 4);
	ck_assert_int_eq(mooncake_segment_publish(owner, 3), 2);
	ck_assert_uint_eq(__atomic_load_n(&words[3 * stride / 8], __ATOMIC_ACQUIRE), 2);
	ck_assert_uint_eq(__atomic_load_n(&words[1 * stride / 8], __ATOMIC_ACQUIRE), 0);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);

	o = test_options(1, 0, 0);
	ck_assert_error(mooncake_segment_publish(NULL, 0), EINVAL, "need a segment");
	ck_assert_int_eq(mooncake_segment_create("no-slots", BLOCK, &o, &owner, blobs), 0);
	ck_assert_error(mooncake_segment_publish(owner, 0), EINVAL, "declares no publish slots");
	ck_assert_ptr_null(mooncake_segment_slot_words(owner, &stride));
	ck_assert(strstr(mooncake_segment_last_error(), "declares no publish slots") != NULL);
	mooncake_segment_destroy(owner);
	o.slot_count = MOONCAKE_SEGMENT_MAX_SLOTS + 1;
	ck_assert_error(mooncake_segment_create("too-many", BLOCK, &o, &owner, blobs), EINVAL, "at most");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("slots");
	TCase *tc = tcase_create("slots");
	SRunner *runner;
	int failed;

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_slots_are_part_of_the_declaration);
	tcase_add_test(tc, test_publish_and_wait_never_show_a_torn_block);
	tcase_add_test(tc, test_the_seqlock_never_accepts_a_torn_copy);
	tcase_add_test(tc, test_a_gone_claimer_is_taken_over);
	tcase_add_test(tc, test_a_writer_killed_mid_write_leaves_a_usable_slot);
	tcase_add_test(tc, test_a_bad_sleep_setting_is_named);
	suite_add_tcase(s, tc);
	runner = srunner_create(s);
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
