/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ascend host registration against the fake AscendCL runtime
 * (tests/fakes/ascend, built from the public CANN documentation): the
 * capability probe, the current-device rule, and the registration scenarios
 * every runtime passes (registration-scenario.c: each rank's own mapping,
 * chunk rollback) with Ascend's own check (the runtime's device address).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"
#include "registration-scenario.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(8) << 20)

static char log_path[64];

static void use_fake_runtime(const char *devices, const char *current)
{
	use_fake_ascend_runtime(devices, current, log_path, sizeof(log_path));
}

START_TEST(test_runtime_without_devices_means_not_supported)
{
	use_fake_runtime("0", "0");
	ck_assert(!mooncake_segment_supported(true, true, false));
}
END_TEST

/* The runtime-independent scenarios (registration-scenario.c) on the fake
 * runtime: both ranks on device 1, the calling thread's device, as upstream
 * requires; Ascend's own check below. */
static void use_for_scenario(int device, char *log, size_t size)
{
	char current[16];

	snprintf(current, sizeof(current), "%d", device);
	use_fake_runtime("2", current);
	snprintf(log, size, "%s", log_path);
}

/* The device address the runtime gave, not the host address; the device the thread is on. */
static void check_ascend_registered(struct mooncake_segment *owner, struct mooncake_segment *peer,
				    const char *log)
{
	ck_assert_ptr_nonnull(strstr(log, "device 1"));
	ck_assert_uint_ne(mooncake_segment_device_addr(owner), (uintptr_t)mooncake_segment_base(owner));
	ck_assert_uint_ne(mooncake_segment_device_addr(peer), (uintptr_t)mooncake_segment_base(peer));
}

static const struct fake_runtime fake_ascend = {
	.name = "ascend",
	.runtime = "Ascend",
	.fail_register_at = "FAKE_ACL_FAIL_REGISTER_AT",
	.owner_device = 1,
	.peer_device = 1,
	.use = use_for_scenario,
	.check_registered = check_ascend_registered,
};

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

int main(void)
{
	Suite *s = suite_create("ascend");
	TCase *tc = tcase_create("fake-runtime");
	SRunner *runner;
	int failed;

	tcase_add_test(tc, test_runtime_without_devices_means_not_supported);
	tcase_add_test(tc, test_another_current_device_is_refused_as_upstream);
	tcase_add_registration_scenarios(tc, &fake_ascend);
	suite_add_tcase(s, tc);
	runner = srunner_create(s);
	srunner_set_fork_status(runner, CK_FORK); /* each test loads the runtime afresh */
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
