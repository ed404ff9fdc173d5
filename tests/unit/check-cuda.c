/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA host registration against the fake driver (tests/fakes/cuda), which
 * records every call and checks its use: the capability probe with no
 * driver, a driver without devices and with devices; the registration
 * scenarios every runtime passes (registration-scenario.c: each rank's own
 * mapping, chunk rollback) with CUDA's own checks (a retained primary
 * context per device, flags, unified addressing); chunk sizes; device
 * checks; NUMA placement next to the device.
 *
 * On a machine with a real GPU, tests/gpu/run.sh runs the same paths for real.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"
#include "registration-scenario.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(8) << 20)
#define MIB  (UINT64_C(1) << 20)

static char log_path[64];

/* Point the library at the fake driver (before its first use in this test process). */
static void use_fake_driver(const char *devices)
{
	use_fake_cuda_driver(devices, "cuda", log_path, sizeof(log_path));
}

/* The fake's call log, one call per line. */
static const char *calls(char *buf, size_t size)
{
	return read_text(log_path, buf, size);
}

START_TEST(test_no_driver_means_not_supported)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	setenv("MOONCAKE_SEGMENT_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
	ck_assert(!mooncake_segment_supported(true, true, false));
	ck_assert(mooncake_segment_supported(true, false, false));
	ck_assert_error(mooncake_segment_create("cuda", SIZE, &opt, &seg, blob), ENOTSUP,
			"host_register=true needs");
}
END_TEST

START_TEST(test_driver_without_devices_means_not_supported)
{
	use_fake_driver("0");
	ck_assert(!mooncake_segment_supported(true, true, false));
}
END_TEST

/* The runtime-independent scenarios (registration-scenario.c) on the fake
 * driver: each rank on its own device; CUDA's own checks below. */
static void use_for_scenario(int device, char *log, size_t size)
{
	(void)device; /* CUDA takes the device from the options, not from the thread */
	use_fake_driver("2");
	snprintf(log, size, "%s", log_path);
}

/* A retained primary context per device, the driver's flags, host addresses (UVA). */
static void check_cuda_registered(struct mooncake_segment *owner, struct mooncake_segment *peer,
				  const char *log)
{
	ck_assert_int_eq(count_lines(log, "retain 0"), 1);
	ck_assert_int_eq(count_lines(log, "retain 1"), 1);
	ck_assert_msg(strstr(log, "flags 3"), "PORTABLE|DEVICEMAP expected: %s", log);
	ck_assert_uint_eq(mooncake_segment_device_addr(owner), (uintptr_t)mooncake_segment_base(owner));
	ck_assert_uint_eq(mooncake_segment_device_addr(peer), (uintptr_t)mooncake_segment_base(peer));
}

static void check_cuda_released(const char *log)
{
	ck_assert_int_eq(count_lines(log, "release "), 2);
	ck_assert_int_eq(count_lines(log, "push"), count_lines(log, "pop"));
}

static void check_cuda_rolled_back(const char *log)
{
	ck_assert_msg(strstr(mooncake_segment_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"), "%s",
		      mooncake_segment_last_error());
	ck_assert_int_eq(count_lines(log, "release 0"), 1);
	ck_assert_int_eq(count_lines(log, "push"), count_lines(log, "pop"));
}

static const struct fake_runtime fake_cuda = {
	.name = "cuda",
	.runtime = "CUDA",
	.fail_register_at = "FAKE_CUDA_FAIL_REGISTER_AT",
	.owner_device = 0,
	.peer_device = 1,
	.use = use_for_scenario,
	.check_registered = check_cuda_registered,
	.check_released = check_cuda_released,
	.check_rolled_back = check_cuda_rolled_back,
};

START_TEST(test_chunks_cover_the_segment_and_are_page_multiples)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, 0);
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];
	char log[16384];

	use_fake_driver("1");
	opt.register_chunk_size = 3 * MIB + 123; /* rounded down to whole pages */
	ck_assert_int_eq(mooncake_segment_create("cuda", SIZE, &opt, &seg, blob), 0);
	calls(log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "register "), 3);
	ck_assert_ptr_nonnull(strstr(log, "len 3145728"));
	ck_assert_ptr_nonnull(strstr(log, "len 2097152")); /* the rest */
	mooncake_segment_destroy(seg);
}
END_TEST

START_TEST(test_no_registration_without_host_register)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];
	char log[4096];

	use_fake_driver("1");
	opt.device_id = 0;
	ck_assert_int_eq(mooncake_segment_create("cuda", SIZE, &opt, &seg, blob), 0);
	ck_assert_int_eq(count_lines(calls(log, sizeof(log)), "register "), 0);
	ck_assert_uint_eq(mooncake_segment_device_addr(seg), 0);
	mooncake_segment_destroy(seg);
}
END_TEST

START_TEST(test_device_must_exist)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, 5);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	use_fake_driver("2");
	ck_assert_error(mooncake_segment_create("cuda", SIZE, &opt, &seg, blob), EINVAL,
			"device_id of a CUDA device: 5 of 2");
	opt.device_id = -1;
	ck_assert_error(mooncake_segment_create("cuda", SIZE, &opt, &seg, blob), EINVAL, "-1 of 2");
}
END_TEST

START_TEST(test_chunks_without_unified_addressing_are_refused)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	char log[8192];

	use_fake_driver("1");
	setenv("FAKE_CUDA_NO_UVA", "1", 1);
	opt.register_chunk_size = 4 * MIB;
	ck_assert_error(mooncake_segment_create("cuda", SIZE, &opt, &seg, blob), ENOTSUP, "not contiguous");
	calls(log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "register "), count_lines(log, "unregister "));
	ck_assert_int_eq(count_lines(log, "release 0"), 1);
}
END_TEST

START_TEST(test_peer_registration_failure_leaves_nothing_mapped)
{
	struct mooncake_segment_options o = host_register_options(2, 0, 0),
					p = host_register_options(2, 1, 1);
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];
	int maps;

	use_fake_driver("2");
	ck_assert_int_eq(mooncake_segment_create("cuda", SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("cuda", SIZE, &p, &peer, blobs + BLOB), 0);
	setenv("FAKE_CUDA_FAIL_REGISTER_AT", "2", 1); /* the peer's first */
	maps = count_mappings();
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), ENOMEM,
			"CUDA host registration");
	ck_assert(!mooncake_segment_ready(peer));
	ck_assert_int_eq(count_mappings(), maps);
	unsetenv("FAKE_CUDA_FAIL_REGISTER_AT");
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

/* Whether a fake runtime (libfake-cuda.so, libfake-ascend.so) is mapped into this process. */
static bool fake_runtime_loaded(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[1024];
	bool loaded = false;

	ck_assert_ptr_nonnull(f);
	while (!loaded && fgets(line, sizeof(line), f))
		loaded = strstr(line, "libfake-cuda.so") || strstr(line, "libfake-ascend.so");
	fclose(f);
	return loaded;
}

#define LOADED	   10
#define NOT_LOADED 11

/* Create rank @rank of @world (owner 0) with @numa_node and device 1 on a
 * fixture host whose online nodes are @online and whose device 1
 * (0000:3C:00.0 in the fake, spelled 0000:3c:00.0 in sysfs) sits on node 1, in a fresh child process (the
 * runtimes load once per process): LOADED or NOT_LOADED. */
static int create_on_fixture(const char *online, int numa_node, uint32_t world, uint32_t rank)
{
	const char *ascend = getenv("FAKE_ASCEND_LIBRARY");
	char root[256];
	int status;
	pid_t pid;

	use_fake_driver("2");
	ck_assert_msg(ascend && *ascend, "FAKE_ASCEND_LIBRARY is not set (run through make check)");
	setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", ascend, 1);
	fixture_tree_create(root, sizeof(root));
	fixture_put(root, "sys/devices/system/node/online", online);
	fixture_put(root, "sys/bus/pci/devices/0000:3c:00.0/numa_node", "1\n");
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct mooncake_segment_options opt = test_options(world, rank, 0);
		struct mooncake_segment_info info;
		struct mooncake_segment *seg;
		uint8_t blob[BLOB];

		opt.device_id = 1;
		opt.numa_node = numa_node;
		mc_host_root_set(root);
		if (fake_runtime_loaded() || mooncake_segment_create("placed", SIZE, &opt, &seg, blob) != 0 ||
		    mooncake_segment_get_info(seg, &info, sizeof(info)) != 0)
			_exit(1);
		/* The owner's automatic placement reports the device's node. */
		if (rank == 0 && numa_node == MOONCAKE_SEGMENT_NUMA_AUTO && online[1] == '-' &&
		    info.numa_node_requested != 1)
			_exit(2);
		_exit(fake_runtime_loaded() ? LOADED : NOT_LOADED);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	fixture_tree_remove(root);
	ck_assert(WIFEXITED(status));
	return WEXITSTATUS(status);
}

START_TEST(test_automatic_numa_node_is_the_devices_host_node)
{
	/* The one case that needs the runtime: the owner, automatic, several nodes. */
	ck_assert_int_eq(create_on_fixture("0-1\n", MOONCAKE_SEGMENT_NUMA_AUTO, 2, 0), LOADED);
}
END_TEST

START_TEST(test_placement_loads_no_runtime_when_it_needs_none)
{
	/* A peer places nothing. */
	ck_assert_int_eq(create_on_fixture("0-1\n", MOONCAKE_SEGMENT_NUMA_AUTO, 2, 1), NOT_LOADED);
	/* An explicit node, interleave, a single-node host: nothing to ask the device. */
	ck_assert_int_eq(create_on_fixture("0-1\n", 0, 1, 0), NOT_LOADED);
	ck_assert_int_eq(create_on_fixture("0-1\n", MOONCAKE_SEGMENT_NUMA_INTERLEAVE, 1, 0), NOT_LOADED);
	ck_assert_int_eq(create_on_fixture("0\n", MOONCAKE_SEGMENT_NUMA_AUTO, 1, 0), NOT_LOADED);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cuda");
	TCase *tc = tcase_create("fake-driver");
	SRunner *runner;
	int failed;

	tcase_add_test(tc, test_no_driver_means_not_supported);
	tcase_add_test(tc, test_driver_without_devices_means_not_supported);
	tcase_add_registration_scenarios(tc, &fake_cuda);
	tcase_add_test(tc, test_chunks_cover_the_segment_and_are_page_multiples);
	tcase_add_test(tc, test_no_registration_without_host_register);
	tcase_add_test(tc, test_device_must_exist);
	tcase_add_test(tc, test_chunks_without_unified_addressing_are_refused);
	tcase_add_test(tc, test_peer_registration_failure_leaves_nothing_mapped);
	tcase_add_test(tc, test_automatic_numa_node_is_the_devices_host_node);
	tcase_add_test(tc, test_placement_loads_no_runtime_when_it_needs_none);
	suite_add_tcase(s, tc);
	runner = srunner_create(s);
	/* Each test loads the driver afresh: it must run in its own process. */
	srunner_set_fork_status(runner, CK_FORK);
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
