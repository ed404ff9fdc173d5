/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Publish slots in Ascend stream order against the fake AscendCL runtime
 * (tests/fakes/ascend), whose streams run each aclrtValueWrite and
 * aclrtValueWait as it is queued and log it: the slot words get device
 * addresses on every rank (registered with each rank's device, unregistered
 * at destroy), a stream publish stores the value through the device address
 * and, AscendCL having no host function, makes no wake-up call (CPU waiters
 * notice within their 100 ms sleep), a stream wait holds its stream until
 * the slot is published past what was seen, and what is refused says why
 * (no host_register, a thread on another device, a runtime or a build
 * without the value operations, a failing call).
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "slot-pair.h"

/* Both ranks on the thread's current device, as AscendCL requires. */
#define DEVICE 1

static char log_path[64];
static char log_text[16384];

static const char *calls(void)
{
	return read_text(log_path, log_text, sizeof(log_text));
}

/* Every registration undone, nothing the fake refused. */
static void check_everything_released(void)
{
	calls();
	ck_assert_int_eq(count_lines(log_text, "register "), count_lines(log_text, "unregister "));
	ck_assert_msg(!strstr(log_text, "ERROR"), "%s", log_text);
}

#if HAVE_ASCEND_VALUE_OPS
/* The futex wake-ups the library makes on the watched words (a slot's
 * sequence in the owner's and the peer's mapping): this program's syscall()
 * comes before libc's for the library linked into it. */
static const void *watched[2];
static int wakes;

long syscall(long __sysno, ...) /* glibc's name for it, so the declarations agree */
{
	static long (*real)(long number, ...);
	long number = __sysno, arg[6];
	va_list ap;

	va_start(ap, __sysno);
	for (int i = 0; i < 6; i++)
		arg[i] = va_arg(ap, long); /* as glibc's syscall() reads them */
	va_end(ap);
	if (number == SYS_futex && (arg[1] & FUTEX_CMD_MASK) == FUTEX_WAKE &&
	    ((const void *)arg[0] == watched[0] || (const void *)arg[0] == watched[1]))
		__atomic_add_fetch(&wakes, 1, __ATOMIC_RELAXED);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "syscall");
	return real(number, arg[0], arg[1], arg[2], arg[3], arg[4], arg[5]);
}

/* Watch @slot's sequence in both ranks' mappings for wake-ups. */
static void watch_slot(const struct slot_pair *g, uint32_t slot)
{
	size_t stride;
	const uint64_t *owner_words = mooncake_segment_slot_words(g->owner, &stride);
	const uint64_t *peer_words = mooncake_segment_slot_words(g->peer, &stride);

	watched[0] = owner_words + slot * stride / sizeof(uint64_t);
	watched[1] = peer_words + slot * stride / sizeof(uint64_t);
	__atomic_store_n(&wakes, 0, __ATOMIC_RELAXED);
}

START_TEST(test_slot_words_have_device_addresses_on_every_rank)
{
	uint64_t owner_dev = 0, peer_dev = 0;
	size_t stride = 0, host_stride = 0;
	const uint64_t *owner_words;
	struct slot_pair g;

	use_fake_ascend_runtime("2", "1", log_path, sizeof(log_path));
	g = slot_pair_make(DEVICE, DEVICE, true);
	/* Each rank registered its pages and its slot words. */
	ck_assert_int_eq(count_lines(calls(), "register "), 4);
	ck_assert_int_eq(mooncake_segment_slot_device_words(g.owner, &owner_dev, &stride), 0);
	ck_assert_int_eq(mooncake_segment_slot_device_words(g.peer, &peer_dev, &stride), 0);
	ck_assert_uint_eq(stride, 64);
	owner_words = mooncake_segment_slot_words(g.owner, &host_stride);
	ck_assert_uint_eq(stride, host_stride);
	/* The runtime's device address, not the host one. */
	ck_assert_uint_ne(owner_dev, 0);
	ck_assert_uint_ne(peer_dev, 0);
	ck_assert_uint_ne(owner_dev, (uintptr_t)owner_words);
	/* A stream publish through the device address lands in the shared word. */
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 3, (void *)0x77, 0), 2);
	ck_assert_int_eq(count_lines(calls(), "value-write stream 0x77 value 2"), 1);
	ck_assert_int_eq(mooncake_segment_wait_slot(g.peer, 3, 0, 0), 2);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

START_TEST(test_stream_publish_wakes_no_host_waiter)
{
	struct delayed_publish d = { .slot = 1, .on_stream = true };
	struct timespec start, end;
	pthread_t writer;
	struct slot_pair g;

	use_fake_ascend_runtime("2", "1", log_path, sizeof(log_path));
	g = slot_pair_make(DEVICE, DEVICE, true);
	watch_slot(&g, 1);
	/* The peer sleeps on the CPU: the stream's store alone reaches it, at its next look. */
	d.seg = g.owner;
	clock_gettime(CLOCK_MONOTONIC, &start);
	pthread_create(&writer, NULL, publish_later, &d);
	ck_assert_int_eq(mooncake_segment_wait_slot(g.peer, 1, 0, 10000), 2);
	clock_gettime(CLOCK_MONOTONIC, &end);
	pthread_join(writer, NULL);
	ck_assert_int_eq(d.result, 2);
	ck_assert_int_eq(__atomic_load_n(&wakes, __ATOMIC_RELAXED), 0);
	ck_assert_msg(end.tv_sec - start.tv_sec < 5, "the waiter noticed only after %ld s",
		      (long)(end.tv_sec - start.tv_sec));
	/* Back to back, with or without the wake flag: the values grow, no wake. */
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 1, (void *)0x77, 0), 4);
	ck_assert_int_eq(mooncake_segment_publish_on_stream(g.owner, 1, (void *)0x77,
							    MOONCAKE_SEGMENT_STREAM_NO_HOST_WAKE),
			 6);
	ck_assert_int_eq(count_lines(calls(), "value-write stream 0x77"), 3);
	ck_assert_int_eq(__atomic_load_n(&wakes, __ATOMIC_RELAXED), 0);
	/* The count sees wake-ups: a CPU publish with a sleeper makes one. */
	d.on_stream = false;
	pthread_create(&writer, NULL, publish_later, &d);
	ck_assert_int_eq(mooncake_segment_wait_slot(g.peer, 1, 6, 10000), 8);
	pthread_join(writer, NULL);
	ck_assert_int_gt(__atomic_load_n(&wakes, __ATOMIC_RELAXED), 0);
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

	use_fake_ascend_runtime("2", "1", log_path, sizeof(log_path));
	g = slot_pair_make(DEVICE, DEVICE, true);
	d.seg = g.owner;
	w.seg = g.peer;
	/* The fake stream waits in the call, polling the word, like the device does. */
	pthread_create(&waiter, NULL, wait_on_stream, &w);
	pthread_create(&writer, NULL, publish_later, &d);
	pthread_join(writer, NULL);
	pthread_join(waiter, NULL);
	ck_assert_int_eq(d.result, 2);
	ck_assert_int_eq(w.result, 2);
	ck_assert_int_eq(count_lines(calls(), "value-wait stream 0x88 value 2 flag 0"), 1);
	ck_assert_int_eq(count_lines(log_text, "value-waited stream 0x88 value 2"), 1);
	/* A write in progress (odd) is not a publish: the wait is for the next even value. */
	ck_assert_int_eq(mooncake_segment_write_begin(g.owner, 2), 3);
	ck_assert_int_eq(mooncake_segment_write_end(g.owner, 2), 4);
	ck_assert_int_eq(mooncake_segment_wait_slot_on_stream(g.peer, 2, 3, (void *)0x88), 4);
	/* Past the top of the counter the next value is 0, and 4 is past 0 (wrap-aware). */
	ck_assert_int_eq(mooncake_segment_wait_slot_on_stream(g.peer, 2, UINT64_MAX - 1, (void *)0x88), 0);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

/* AscendCL runs a call on the thread's current device: the library neither
 * moves the caller's thread nor queues on another device's stream. */
START_TEST(test_a_thread_on_another_device_is_refused)
{
	struct slot_pair g;

	use_fake_ascend_runtime("2", "1", log_path, sizeof(log_path));
	g = slot_pair_make(DEVICE, DEVICE, true);
	setenv("FAKE_ACL_CURRENT_DEVICE", "0", 1);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0), EINVAL,
			"must run on device 1, but the current device is 0 (call torch.npu.set_device(1) "
			"or aclrtSetDevice");
	setenv("FAKE_ACL_CURRENT_DEVICE", "-1", 1); /* no device set on this thread */
	ck_assert_error(mooncake_segment_wait_slot_on_stream(g.peer, 0, 0, NULL), EINVAL,
			"the current device is -1");
	calls();
	ck_assert_int_eq(count_lines(log_text, "value-"), 0);
	ck_assert_int_eq(count_lines(log_text, "set-device"), 0);
	setenv("FAKE_ACL_CURRENT_DEVICE", "1", 1);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

START_TEST(test_a_failing_runtime_call_is_named)
{
	struct slot_pair g;

	use_fake_ascend_runtime("2", "1", log_path, sizeof(log_path));
	g = slot_pair_make(DEVICE, DEVICE, true);
	setenv("FAKE_ACL_FAIL_VALUE_WRITE", "1", 1);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0), ENOTSUP,
			"ascend cannot publish on the stream: returned 207000: fake AscendCL error");
	ck_assert_int_eq(count_lines(calls(), "value-write"), 0);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST

/* libfake-ascend-novalue.so, beside the fake: an older runtime, without aclrtValueWrite. */
static const char *runtime_without_value_operations(void)
{
	static char path[4096];
	const char *fake = getenv("FAKE_ASCEND_LIBRARY");
	const char *name = fake ? strrchr(fake, '/') : NULL;

	ck_assert_msg(name, "FAKE_ASCEND_LIBRARY is not a path (run through make check)");
	snprintf(path, sizeof(path), "%.*s/libfake-ascend-novalue.so", (int)(name - fake), fake);
	return path;
}

START_TEST(test_missing_value_operations_are_named)
{
	uint64_t dev = 0;
	size_t stride = 0;
	struct slot_pair g;

	use_fake_ascend_runtime("2", "1", log_path, sizeof(log_path));
	setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", runtime_without_value_operations(), 1);
	g = slot_pair_make(DEVICE, DEVICE, true);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0), ENOTSUP,
			"the Ascend runtime lacks aclrtValueWrite");
	ck_assert_error(mooncake_segment_wait_slot_on_stream(g.peer, 0, 0, NULL), ENOTSUP,
			"the Ascend runtime lacks aclrtValueWrite");
	/* The words are registered all the same: a kernel may poll them. */
	ck_assert_int_eq(mooncake_segment_slot_device_words(g.peer, &dev, &stride), 0);
	ck_assert_uint_ne(dev, 0);
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST
#else
/* Headers older than CANN 8.x: the build has no value operations to load. */
START_TEST(test_missing_value_operations_are_named)
{
	struct slot_pair g;

	use_fake_ascend_runtime("2", "1", log_path, sizeof(log_path));
	g = slot_pair_make(DEVICE, DEVICE, true);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0), ENOTSUP,
			"this build's Ascend headers declare no aclrtValueWrite or aclrtValueWait");
	slot_pair_destroy(&g);
	check_everything_released();
}
END_TEST
#endif

START_TEST(test_stream_order_needs_host_register)
{
	uint64_t dev = 1;
	size_t stride = 1;
	struct slot_pair g;

	use_fake_ascend_runtime("2", "1", log_path, sizeof(log_path));
	g = slot_pair_make(DEVICE, DEVICE, false);
	ck_assert_error(mooncake_segment_publish_on_stream(g.owner, 0, NULL, 0), ENOTSUP,
			"need host_register=true");
	ck_assert_error(mooncake_segment_wait_slot_on_stream(g.peer, 0, 0, NULL), ENOTSUP,
			"need host_register=true");
	ck_assert_error(mooncake_segment_slot_device_words(g.peer, &dev, &stride), ENOTSUP,
			"need host_register=true");
	ck_assert_uint_eq(dev, 1);
	ck_assert_uint_eq(stride, 1);
	calls();
	ck_assert_int_eq(count_lines(log_text, "register "), 0);
	ck_assert_int_eq(count_lines(log_text, "value-"), 0);
	slot_pair_destroy(&g);
}
END_TEST

static Suite *suite_ascend_slots(void)
{
	Suite *s = suite_create("ascend-slots");
	TCase *tc = tcase_create("stream order");

	tcase_set_timeout(tc, 60);
#if HAVE_ASCEND_VALUE_OPS
	tcase_add_test(tc, test_slot_words_have_device_addresses_on_every_rank);
	tcase_add_test(tc, test_stream_publish_wakes_no_host_waiter);
	tcase_add_test(tc, test_stream_wait_holds_the_stream_until_published);
	tcase_add_test(tc, test_a_thread_on_another_device_is_refused);
	tcase_add_test(tc, test_a_failing_runtime_call_is_named);
#endif
	tcase_add_test(tc, test_missing_value_operations_are_named);
	tcase_add_test(tc, test_stream_order_needs_host_register);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *runner = srunner_create(suite_ascend_slots());
	int failed;

	/* Each test loads the runtime afresh: it must run in its own process. */
	srunner_set_fork_status(runner, CK_FORK);
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
