/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Publish slots in CUDA stream order against the fake driver
 * (tests/fakes/cuda), whose streams run each operation as it is queued and
 * log it: the slot words get device addresses on every rank (registered
 * with each rank's device, unregistered at destroy), a stream publish
 * stores the value behind the stream's work and then wakes the CPU waiters
 * through a host function on the slot's word, a stream wait holds its
 * stream until the slot is published past what was seen, and what is
 * refused says why (no host_register, a driver without stream memory
 * operations, bad flags).  tests/gpu/slots_stream_check.py runs the same
 * calls on a real GPU: copy, publish, wait on another process's stream,
 * compare the bytes.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "slot-pair.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE

static char log_path[64];
static char log_text[16384];

static const char *calls(void)
{
	return read_text(log_path, log_text, sizeof(log_text));
}

/* Every registration undone, every push popped, every context released. */
static void check_everything_released(void)
{
	calls();
	ck_assert_int_eq(count_lines(log_text, "register "), count_lines(log_text, "unregister "));
	ck_assert_int_eq(count_lines(log_text, "push"), count_lines(log_text, "pop"));
	ck_assert_int_eq(count_lines(log_text, "retain "), count_lines(log_text, "release "));
	ck_assert_msg(!strstr(log_text, "ERROR"), "%s", log_text);
}

START_TEST(test_slot_words_have_device_addresses_on_every_rank)
{
	uint64_t owner_dev = 0, peer_dev = 0;
	size_t stride = 0, host_stride = 0;
	struct slot_pair g;

	use_fake_cuda_driver("2", "cuda-slots", log_path, sizeof(log_path));
	if (_i)
		setenv("FAKE_CUDA_NO_UVA", "1", 1);
	g = slot_pair_make(0, 1, true);
	/* Each rank registered its pages and its slot words. */
	ck_assert_int_eq(count_lines(calls(), "register "), 4);
	ck_assert_int_eq(mooncake_segment_slot_device_words(g.owner, &owner_dev, &stride), 0);
	ck_assert_int_eq(mooncake_segment_slot_device_words(g.peer, &peer_dev, &stride), 0);
	ck_assert_uint_eq(stride, 64);
	ck_assert_ptr_nonnull(mooncake_segment_slot_words(g.owner, &host_stride));
	ck_assert_uint_eq(stride, host_stride);
	if (_i) /* without unified addressing the device sees the words elsewhere */
		ck_assert_uint_ne(owner_dev, (uintptr_t)mooncake_segment_slot_words(g.owner, &host_stride));
	else
		ck_assert_uint_eq(owner_dev, (uintptr_t)mooncake_segment_slot_words(g.owner, &host_stride));
	ck_assert_uint_ne(owner_dev, 0);
	ck_assert_uint_ne(peer_dev, 0);
	/* A stream publish through the device address lands in the shared word. */
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 3, (void *)0x77, 0), 2);
	ck_assert_int_eq(mooncake_segment_wait_slot(g.peer, 3, 0, 0), 2);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

START_TEST(test_stream_publish_stores_then_wakes_cpu_waiters)
{
	struct delayed_publish d = { .slot = 1, .on_stream = true };
	size_t stride;
	const uint64_t *words;
	char data[64];
	const char *write_line, *wake_line;
	pthread_t writer;
	struct slot_pair g;

	use_fake_cuda_driver("2", "cuda-slots", log_path, sizeof(log_path));
	g = slot_pair_make(0, 1, true);
	d.seg = g.owner;
	pthread_create(&writer, NULL, publish_later, &d);
	/* The peer sleeps on the CPU; the stream's host function wakes it. */
	ck_assert_int_eq(mooncake_segment_wait_slot(g.peer, 1, 0, 10000), 2);
	pthread_join(writer, NULL);
	ck_assert_int_eq(d.result, 2);
	calls();
	write_line = strstr(log_text, "stream-write stream 0x77 value 2 flags 0");
	wake_line = strstr(log_text, "host-func stream 0x77");
	ck_assert_msg(write_line && wake_line && write_line < wake_line, "store, then wake: %s", log_text);
	/* The host function wakes the sleepers of this slot's word. */
	words = mooncake_segment_slot_words(g.owner, &stride);
	snprintf(data, sizeof(data), "data %p", (const void *)(words + 1 * stride / sizeof(*words)));
	ck_assert_msg(strstr(wake_line, data), "%s expected in %s", data, wake_line);
	/* Back to back: the values grow; without the wake, no host function. */
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 1, (void *)0x77, 0), 4);
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 1, (void *)0x77,
							    MOONCAKE_SEGMENT_STREAM_NO_HOST_WAKE),
			 6);
	ck_assert_int_eq(count_lines(calls(), "host-func"), 2);
	ck_assert_int_eq(count_lines(log_text, "stream-write"), 3);
	/* The CPU publish of the same slot goes on from the stream's value. */
	ck_assert_int_eq(mooncake_segment_wait_slot(g.peer, 1, 4, 0), 6);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

/* Publishes queued back to back, before the stream ran any of them, still
 * grow: each reserves its value when it is queued. */
START_TEST(test_queued_publishes_reserve_their_values)
{
	int (*synchronize)(void *stream); /* CUresult */
	void *fake;
	struct slot_pair g;

	use_fake_cuda_driver("2", "cuda-slots", log_path, sizeof(log_path));
	setenv("FAKE_CUDA_STREAM_DEFER", "1", 1);
	g = slot_pair_make(0, 1, true);
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 0, (void *)0x77, 0), 2);
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 0, (void *)0x77, 0), 4);
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 0, (void *)0x77, 0), 6);
	/* Nothing ran yet: the slot is still unpublished. */
	ck_assert_error(mooncake_segment_wait_slot(g.peer, 0, 0, 0), ETIMEDOUT, "no publish");
	/* The same library the segment loaded (dlopen of a loaded path returns it). */
	fake = dlopen(getenv("FAKE_CUDA_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(fake);
	*(void **)&synchronize = dlsym(fake, "cuStreamSynchronize");
	ck_assert_ptr_nonnull(synchronize);
	synchronize((void *)0x77);
	dlclose(fake);
	ck_assert_int_eq(mooncake_segment_wait_slot(g.peer, 0, 0, 0), 6);
	ck_assert_int_eq(count_lines(calls(), "host-func ran"), 3);
	/* The stream's last value is this rank's base for the next. */
	ck_assert_int_eq(mooncake_segment_publish(g.owner, 0), 8);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

START_TEST(test_stream_wait_holds_the_stream_until_published)
{
	struct delayed_publish d = { .slot = 2, .on_stream = false };
	struct stream_wait w = { .slot = 2, .seen = 0 };
	pthread_t writer, waiter;
	struct slot_pair g;

	use_fake_cuda_driver("2", "cuda-slots", log_path, sizeof(log_path));
	g = slot_pair_make(0, 1, true);
	d.seg = g.owner;
	w.seg = g.peer;
	/* The fake stream waits in the call, polling the word, like the device does. */
	pthread_create(&waiter, NULL, wait_on_stream, &w);
	pthread_create(&writer, NULL, publish_later, &d);
	pthread_join(writer, NULL);
	pthread_join(waiter, NULL);
	ck_assert_int_eq(d.result, 2);
	ck_assert_int_eq(w.result, 2);
	ck_assert_int_eq(count_lines(calls(), "stream-wait stream 0x88 value 2 flags 0"), 1);
	ck_assert_int_eq(count_lines(log_text, "stream-waited stream 0x88 value 2"), 1);
	/* A write in progress (odd) is not a publish: the wait is for the next even value. */
	ck_assert_int_eq(mooncake_segment_write_begin(g.owner, 2), 3);
	ck_assert_int_eq(mooncake_segment_write_end(g.owner, 2), 4);
	ck_assert_int_eq(mooncake_segment_wait_slot_on_stream(g.peer, 2, 3, (void *)0x88), 4);
	ck_assert_int_eq(mooncake_segment_wait_slot_on_stream(g.peer, 2, 2, (void *)0x88), 4);
	/* Past the top of the counter the next value is 0, and 4 is past 0 (wrap-aware). */
	ck_assert_int_eq(mooncake_segment_wait_slot_on_stream(g.peer, 2, UINT64_MAX - 1, (void *)0x88), 0);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

START_TEST(test_stream_order_needs_host_register)
{
	uint64_t dev = 1;
	size_t stride = 1;
	struct slot_pair g;

	use_fake_cuda_driver("2", "cuda-slots", log_path, sizeof(log_path));
	g = slot_pair_make(0, 1, false);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0), ENOTSUP,
			"need host_register=true");
	ck_assert_error(mooncake_segment_wait_slot_on_stream(g.peer, 0, 0, NULL), ENOTSUP,
			"need host_register=true");
	ck_assert_error(mooncake_segment_slot_device_words(g.peer, &dev, &stride), ENOTSUP,
			"need host_register=true");
	ck_assert_uint_eq(dev, 1);
	ck_assert_uint_eq(stride, 1);
	ck_assert_int_eq(count_lines(calls(), "register "), 0);
	slot_pair_destroy(&g);
}
END_TEST

START_TEST(test_bad_arguments_are_named)
{
	struct mooncake_segment_options p = host_register_options(2, 1, 1);
	struct mooncake_segment *late;
	uint8_t blob[BLOB];
	struct slot_pair g;

	use_fake_cuda_driver("2", "cuda-slots", log_path, sizeof(log_path));
	g = slot_pair_make(0, 1, true);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0x2), EINVAL,
			"unknown flags 0x2");
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, SLOT_PAIR_SLOTS, NULL, 0), EINVAL,
			"slot 4 does not exist (4 slots, 0 to 3)");
	ck_assert_error(mooncake_segment_wait_slot_on_stream(NULL, 0, 0, NULL), EINVAL, "need a segment");
	ck_assert_error(mooncake_segment_slot_device_words(g.owner, NULL, NULL), EINVAL, "somewhere to put");
	/* A peer before complete() has no slots yet. */
	p.slot_count = SLOT_PAIR_SLOTS;
	ck_assert_int_eq(mooncake_segment_create("stream-slots", SLOT_PAIR_SIZE, &p, &late, blob), 0);
	ck_assert_error(mooncake_segment_publish_on_stream(late, 0, NULL, 0), EINVAL, "complete() first");
	mooncake_segment_destroy(late);
	/* A failing driver call: its words, and nothing queued. */
	setenv("FAKE_CUDA_FAIL_cuStreamWriteValue64", "1", 1);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0), ENOTSUP,
			"CUDA_ERROR_NOT_SUPPORTED");
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

#if HAVE_CUDA_VMM
/* libfake-cuda-novmm.so, beside the fake: an older driver, without stream memory operations. */
START_TEST(test_driver_without_stream_operations)
{
	uint64_t dev = 0;
	size_t stride = 0;
	struct slot_pair g;

	use_fake_cuda_driver("2", "cuda-slots", log_path, sizeof(log_path));
	setenv("MOONCAKE_SEGMENT_CUDA_LIBRARY", fake_cuda_sibling("libfake-cuda-novmm.so"), 1);
	g = slot_pair_make(0, 1, true);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0), ENOTSUP,
			"the CUDA driver lacks cuStreamWriteValue64");
	/* The words are registered all the same: a kernel may poll them. */
	ck_assert_int_eq(mooncake_segment_slot_device_words(g.peer, &dev, &stride), 0);
	ck_assert_uint_ne(dev, 0);
	slot_pair_destroy(&g);
}
END_TEST
#endif

static Suite *suite_cuda_slots(void)
{
	Suite *s = suite_create("cuda-slots");
	TCase *tc = tcase_create("stream order");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_slot_words_have_device_addresses_on_every_rank, 0, 2);
	tcase_add_test(tc, test_stream_publish_stores_then_wakes_cpu_waiters);
	tcase_add_test(tc, test_queued_publishes_reserve_their_values);
	tcase_add_test(tc, test_stream_wait_holds_the_stream_until_published);
	tcase_add_test(tc, test_stream_order_needs_host_register);
	tcase_add_test(tc, test_bad_arguments_are_named);
#if HAVE_CUDA_VMM
	tcase_add_test(tc, test_driver_without_stream_operations);
#endif
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *runner = srunner_create(suite_cuda_slots());
	int failed;

	/* Each test loads the driver afresh: it must run in its own process. */
	srunner_set_fork_status(runner, CK_FORK);
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
