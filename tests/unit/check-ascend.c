/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ascend host registration against the fake AscendCL runtime
 * (tests/fakes/ascend, built from the public CANN documentation): the
 * capability probe, the current-device rule, registration of each rank's own
 * mapping, chunks and their rollback, unregistration before unmapping.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "internal.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(8) << 20)

static char log_path[64];

static void use_fake_runtime(const char *devices, const char *current)
{
	use_fake_ascend_runtime(devices, current, log_path, sizeof(log_path));
}

/* The fake's call log, one call per line. */
static const char *calls(char *buf, size_t size)
{
	return read_text(log_path, buf, size);
}

START_TEST(test_runtime_without_devices_means_not_supported)
{
	use_fake_runtime("0", "0");
	ck_assert(!mooncake_segment_supported(true, true, false));
}
END_TEST

START_TEST(test_registration_on_the_current_device)
{
	struct mooncake_segment_options o = host_register_options(2, 0, 1),
					p = host_register_options(2, 1, 1);
	struct mooncake_segment *owner, *peer;
	struct mooncake_segment_info info;
	uint8_t blobs[2 * BLOB];
	char log[4096];
	int maps;

	use_fake_runtime("2", "1");
	ck_assert(mooncake_segment_supported(true, true, false));
	maps = count_mappings();
	ck_assert_int_eq(mooncake_segment_create("npu", SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("npu", SIZE, &p, &peer, blobs + BLOB), 0);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(count_lines(calls(log, sizeof(log)), "register "), 2);
	ck_assert_ptr_nonnull(strstr(log, "device 1"));
	/* The device address the runtime gave, not the host address. */
	ck_assert_uint_ne(mooncake_segment_device_addr(peer), 0);
	ck_assert_uint_ne(mooncake_segment_device_addr(peer), (uintptr_t)mooncake_segment_base(peer));
	ck_assert_int_eq(mooncake_segment_get_info(owner, &info, sizeof(info)), 0);
	ck_assert_str_eq(info.accelerator, "ascend");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	ck_assert_int_eq(count_lines(calls(log, sizeof(log)), "unregister "), 2);
	ck_assert_msg(!strstr(log, "ERROR"), "%s", log);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

START_TEST(test_another_current_device_is_refused_as_upstream)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, 1);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	use_fake_runtime("2", "0");
	ck_assert_error(mooncake_segment_create("npu", SIZE, &opt, &seg, blob), EINVAL,
			"Shared segment mmap must run on device 1, but the current device is 0");
	setenv("FAKE_ACL_CURRENT_DEVICE", "-1", 1); /* no device set on this thread */
	ck_assert_error(mooncake_segment_create("npu", SIZE, &opt, &seg, blob), EINVAL,
			"current device is -1");
}
END_TEST

START_TEST(test_chunks_roll_back_on_failure)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	char log[4096];
	int maps;

	use_fake_runtime("1", "0");
	setenv("FAKE_ACL_FAIL_REGISTER_AT", "3", 1);
	opt.register_chunk_size = UINT64_C(2) << 20;
	ck_assert(mooncake_segment_supported(true, true, false));
	maps = count_mappings();
	ck_assert_error(mooncake_segment_create("npu", SIZE, &opt, &seg, blob), ENOMEM,
			"Ascend host registration of chunk 3 of 4");
	calls(log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "register "), 3);
	ck_assert_int_eq(count_lines(log, "unregister "), 2);
	ck_assert_msg(!strstr(log, "ERROR"), "%s", log);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ascend");
	TCase *tc = tcase_create("fake-runtime");
	SRunner *runner;
	int failed;

	tcase_add_test(tc, test_runtime_without_devices_means_not_supported);
	tcase_add_test(tc, test_registration_on_the_current_device);
	tcase_add_test(tc, test_another_current_device_is_refused_as_upstream);
	tcase_add_test(tc, test_chunks_roll_back_on_failure);
	suite_add_tcase(s, tc);
	runner = srunner_create(s);
	srunner_set_fork_status(runner, CK_FORK); /* each test loads the runtime afresh */
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
