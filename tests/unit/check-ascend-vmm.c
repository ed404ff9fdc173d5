/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Ascend VMM backend (mmap=false) against the fake AscendCL runtime
 * (tests/fakes/ascend), whose physical memory is a real memfd: forked ranks
 * really share pages through the exported handle.  The capability probe, the
 * current-device rule, the logical device id granted, FABRIC and DEFAULT
 * handles, NUMA placement and its fallback, and that every failure of the
 * runtime leaves nothing behind (each allocation freed, each reservation
 * released, no mapping or descriptor left).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group.h"
#include "helpers.h"
#include "internals.h"
#include "vmm-share.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(6) << 20)

static char log_path[64];
static char log_text[16384];

static void use_fake_runtime(const char *devices, const char *current)
{
	use_fake_ascend_runtime(devices, current, log_path, sizeof(log_path));
}

/* Lines of the fake's call log starting with @prefix. */
static int calls(const char *prefix)
{
	return count_lines(read_text(log_path, log_text, sizeof(log_text)), prefix);
}

/* Everything the runtime handed out came back, and nothing was misused. */
static void assert_runtime_balanced(void)
{
	ck_assert_int_eq(calls("malloc ") + calls("import "), calls("free "));
	ck_assert_int_eq(calls("reserve "), calls("release "));
	ck_assert_int_eq(calls("map "), calls("unmap "));
	ck_assert_msg(!strstr(log_text, "ERROR"), "%s", log_text);
	unlink(log_path);
}

static struct mooncake_segment_options vmm_options(uint32_t world, uint32_t rank, uint32_t owner, int device)
{
	struct mooncake_segment_options opt = test_options(world, rank, owner);

	opt.mmap = false;
	opt.device_id = device;
	return opt;
}

START_TEST(test_supported_only_with_a_vmm_runtime_and_a_device)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	use_fake_runtime(_i == 0 ? "2" : "0", "0");
	if (_i == 0) {
		ck_assert(mooncake_segment_supported(false, false, false));
		ck_assert(!mooncake_segment_supported(false, true, false)); /* host_register needs mmap */
		ck_assert(!mooncake_segment_supported(false, false, true)); /* so does hugetlb */
		return;
	}
	ck_assert(!mooncake_segment_supported(false, false, false));
	/* Alone, the Ascend backend's reason; beside the CUDA one, named among theirs. */
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), ENOTSUP,
			HAVE_CUDA_VMM
				? "ascend-vmm: the Ascend runtime reports no device"
				: "no VMM backend for shared segments (the Ascend runtime reports no device");
}
END_TEST

START_TEST(test_no_runtime_is_a_clear_error)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	use_fake_runtime("2", "0");
	setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", "/nonexistent/libascendcl.so", 1);
	ck_assert(!mooncake_segment_supported(false, false, false));
	ck_assert_error(
		mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), ENOTSUP,
		HAVE_CUDA_VMM
			? "ascend-vmm: /nonexistent/libascendcl.so"
			: "This build has no VMM backend for shared segments (/nonexistent/libascendcl.so");
	ck_assert(!strncmp(mooncake_segment_last_error(), "This build has no VMM backend for shared segments",
			   49));
	ck_assert_ptr_null(seg);
}
END_TEST

/* --- N ranks in N processes ------------------------------------------------ */

static int vmm_rank(struct group_rank *self, void *arg)
{
	uint32_t owner = *(const uint32_t *)arg;
	struct mooncake_segment_options opt =
		vmm_options(self->world_size, self->rank, owner, (int)self->rank);
	const struct vmm_share expect = { SIZE,	    UINT64_C(2) << 20, "ascend-vmm",
					  "ascend", count_mappings,    NULL };
	char device[16];

	/* Each rank runs on its own device, as torch.npu.set_device(rank) would set. */
	snprintf(device, sizeof(device), "%u", self->rank);
	setenv("FAKE_ACL_CURRENT_DEVICE", device, 1);
	return vmm_share_rank(self, &opt, &expect);
}

START_TEST(test_four_processes_share_pinned_memory)
{
	uint32_t owner = (uint32_t)_i;
	int codes[4];

	use_fake_runtime("4", "0");
	/* User ids 0-3 are logical ids 4-7, as with ASCEND_RT_VISIBLE_DEVICES=4,5,6,7. */
	setenv("FAKE_ACL_LOGICAL_OFFSET", "4", 1);
	ck_assert(
		mooncake_segment_supported(false, false, false)); /* loaded before the ranks count mappings */
	ck_assert_int_eq(group_run(4, vmm_rank, &owner, 20000, codes), 0);
	for (uint32_t r = 0; r < 4; r++)
		ck_assert_msg(codes[r] == 0, "rank %u exited with %d", r, codes[r]);
	ck_assert_int_eq(calls("malloc 6291456 host 0"), 1);
	ck_assert_int_eq(calls("export default"), 1);
	ck_assert_int_eq(calls("import default"), 3);
	ck_assert_int_eq(calls("reserve "), 4);
	/* Each rank granted its own device, by its logical id. */
	for (int logical = 4; logical < 8; logical++) {
		char line[48];

		snprintf(line, sizeof(line), "access logical device %d", logical);
		ck_assert_msg(calls(line) == 1, "%s: %s", line, log_text);
	}
	assert_runtime_balanced();
}
END_TEST

/* --- two ranks in one process ---------------------------------------------- */

static void two_ranks(struct mooncake_segment **owner, struct mooncake_segment **peer, int complete_ok)
{
	struct mooncake_segment_options o = vmm_options(2, 0, 0, 0), p = vmm_options(2, 1, 0, 0);
	uint8_t blobs[2 * BLOB];

	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &o, owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &p, peer, blobs + BLOB), 0);
	ck_assert_int_eq(mooncake_segment_complete(*owner, blobs, sizeof(blobs)), 0);
	if (complete_ok)
		ck_assert_int_eq(mooncake_segment_complete(*peer, blobs, sizeof(blobs)), 0);
}

START_TEST(test_fabric_handle_where_the_system_has_one)
{
	struct mooncake_segment *owner, *peer;
	int maps;

	use_fake_runtime("1", "0");
	setenv("FAKE_ACL_FABRIC", "1", 1);
	ck_assert(mooncake_segment_supported(false, false, false));
	maps = count_mappings();
	two_ranks(&owner, &peer, 1);
	ck_assert_int_eq(owner->memory.handle_bytes, 128);
	memset(mooncake_segment_base(owner), 0x5a, 4096);
	ck_assert_int_eq(((uint8_t *)mooncake_segment_base(peer))[4095], 0x5a);
	ck_assert_int_eq(calls("export fabric"), 1);
	ck_assert_int_eq(calls("import fabric"), 1);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	ck_assert_int_eq(count_mappings(), maps);
	assert_runtime_balanced();
}
END_TEST

START_TEST(test_every_rank_must_run_on_its_device)
{
	struct mooncake_segment_options o = vmm_options(2, 0, 0, 1), p = vmm_options(2, 1, 0, 1);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	use_fake_runtime("2", "0");
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &o, &seg, blob), EINVAL,
			"Shared segment owner must run on device 1, but the current device is 0");
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &p, &seg, blob), EINVAL,
			"Shared segment rank 1: must run on device 1, but the current device is 0");
	o.device_id = -1;
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &o, &seg, blob), EINVAL,
			"mmap=false needs a device_id");
	ck_assert_ptr_null(seg);
	assert_runtime_balanced();
}
END_TEST

/* A runtime call made to fail, and the errno it must become. */
struct failure_case {
	const char *call;
	int err;
};

/* Owner-side failures of each runtime call: a named error, nothing left. */
static const struct failure_case owner_failures[] = {
	{ "aclrtMallocPhysical", ENOMEM },
	{ "aclrtReserveMemAddress", ENOMEM },
	{ "aclrtMapMem", ENOMEM },
	{ "aclrtMemSetAccess", EIO },
	{ "aclrtMemExportToShareableHandleV2", EIO },
};

START_TEST(test_owner_failures_leave_nothing)
{
	struct mooncake_segment_options opt = vmm_options(2, 0, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	int maps, fds;

	use_fake_runtime("1", "0");
	ck_assert(mooncake_segment_supported(false, false, false));
	maps = count_mappings();
	fds = count_fds();
	setenv("FAKE_ACL_FAIL", owner_failures[_i].call, 1);
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), owner_failures[_i].err,
			owner_failures[_i].call);
	ck_assert_ptr_null(seg);
	ck_assert_int_eq(count_mappings(), maps);
	ck_assert_int_eq(count_fds(), fds);
	assert_runtime_balanced();
}
END_TEST

static const struct failure_case peer_failures[] = {
	{ "aclrtMemImportFromShareableHandleV2", EIO },
	{ "aclrtMapMem", ENOMEM },
	{ "aclrtMemSetAccess", EIO },
};

START_TEST(test_peer_failures_leave_nothing_mapped)
{
	struct mooncake_segment_options o = vmm_options(2, 0, 0, 0), p = vmm_options(2, 1, 0, 0);
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];

	use_fake_runtime("1", "0");
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &p, &peer, blobs + BLOB), 0);
	setenv("FAKE_ACL_FAIL", peer_failures[_i].call, 1);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), peer_failures[_i].err,
			peer_failures[_i].call);
	ck_assert(!mooncake_segment_ready(peer));
	ck_assert(!peer->memory.mapped && !mc_ascend_vmm_physical(&peer->memory) &&
		  mooncake_segment_device_addr(peer) == 0);
	/* What the failed import took is back; the reservation stays until destroy. */
	ck_assert_int_eq(calls("malloc ") + calls("import "), calls("free ") + 1);
	unsetenv("FAKE_ACL_FAIL");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	assert_runtime_balanced();
}
END_TEST

START_TEST(test_placement_on_a_node_and_its_fallback)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];

	use_fake_runtime("1", "0");
	opt.numa_node = 0;
	if (_i == 1)
		setenv("FAKE_ACL_NUMA", "0", 1); /* a runtime without HOST_NUMA */
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_str_eq(info.commit_method, "aclrtMallocPhysical");
	if (_i == 0) {
		ck_assert_int_eq(calls("malloc 6291456 node 0"), 1);
		ck_assert(!(info.flags & MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED));
	} else {
		ck_assert_int_eq(calls("refused malloc on node 0"), 1);
		ck_assert_int_eq(calls("malloc 6291456 host 0"), 1);
		ck_assert(info.flags & MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED);
	}
	mooncake_segment_destroy(seg);
	assert_runtime_balanced();
}
END_TEST

START_TEST(test_granularity_from_the_runtime)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];

	use_fake_runtime("1", "0");
	/* 4 MiB granules round up; a runtime that says 0 gets upstream's 2 MiB. */
	setenv("FAKE_ACL_GRANULARITY", _i == 0 ? "4194304" : "0", 1);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), 0);
	ck_assert_uint_eq(mooncake_segment_alloc_size(seg), _i == 0 ? UINT64_C(8) << 20 : SIZE);
	mooncake_segment_destroy(seg);
	assert_runtime_balanced();
}
END_TEST

/* AscendCL takes no alignment: up to its granularity is met, beyond it is refused
 * before anything is reserved. */
START_TEST(test_an_alignment_beyond_the_granularity_is_refused)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];

	use_fake_runtime("1", "0");
	opt.alignment = UINT64_C(64) << 10;
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), 0);
	mooncake_segment_destroy(seg);
	opt.alignment = UINT64_C(4) << 20;
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), ENOTSUP,
			"aligns a VMM range to its granularity, 2097152 bytes, not to the alignment 4194304");
	ck_assert_int_eq(calls("reserve "), 1);
	assert_runtime_balanced();
}
END_TEST

START_TEST(test_a_host_memory_rank_cannot_join)
{
	struct mooncake_segment_options o = vmm_options(2, 0, 0, 0), p = test_options(2, 1, 0);
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];

	use_fake_runtime("1", "0");
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &p, &peer, blobs + BLOB), 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EINVAL,
			"Shared segment backend of rank 0");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	assert_runtime_balanced();
}
END_TEST

START_TEST(test_a_handle_of_another_size_is_refused_before_the_runtime)
{
	struct mooncake_segment_options o = vmm_options(2, 0, 0, 0), p = vmm_options(2, 1, 0, 0);
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];
	struct mc_blob b;

	use_fake_runtime("1", "0");
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &p, &peer, blobs + BLOB), 0);
	/* A well-formed blob whose handle is a memfd-sized one. */
	ck_assert_int_eq(mc_blob_decode(blobs, 0, &b), 0);
	b.handle_bytes = 24;
	ck_assert_int_eq(mc_blob_encode(&b, blobs), 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EPROTO,
			"exported a handle of 24 bytes, not an Ascend shareable handle");
	ck_assert_int_eq(calls("import "), 0);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	assert_runtime_balanced();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ascend-vmm");
	TCase *tc = tcase_create("fake-runtime");
	SRunner *runner;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_supported_only_with_a_vmm_runtime_and_a_device, 0, 2);
	tcase_add_test(tc, test_no_runtime_is_a_clear_error);
	tcase_add_loop_test(tc, test_four_processes_share_pinned_memory, 0, 4);
	tcase_add_test(tc, test_fabric_handle_where_the_system_has_one);
	tcase_add_test(tc, test_every_rank_must_run_on_its_device);
	tcase_add_loop_test(tc, test_owner_failures_leave_nothing, 0, (int)MC_ARRAY_SIZE(owner_failures));
	tcase_add_loop_test(tc, test_peer_failures_leave_nothing_mapped, 0,
			    (int)MC_ARRAY_SIZE(peer_failures));
	tcase_add_loop_test(tc, test_placement_on_a_node_and_its_fallback, 0, 2);
	tcase_add_loop_test(tc, test_granularity_from_the_runtime, 0, 2);
	tcase_add_test(tc, test_an_alignment_beyond_the_granularity_is_refused);
	tcase_add_test(tc, test_a_host_memory_rank_cannot_join);
	tcase_add_test(tc, test_a_handle_of_another_size_is_refused_before_the_runtime);
	suite_add_tcase(s, tc);
	runner = srunner_create(s);
	srunner_set_fork_status(runner, CK_FORK); /* each test loads the runtime afresh */
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
