/* SPDX-License-Identifier: Apache-2.0 */
/* The host-registration scenarios every runtime must pass (registration-scenario.h). */
#include "config.h"

#include "registration-scenario.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(8) << 20)

/* The runtime of this run: Check runs each test in a forked child, which inherits it. */
static const struct fake_runtime *rt;

START_TEST(test_each_rank_registers_its_own_mapping)
{
	struct mooncake_segment_options o = host_register_options(2, 0, rt->owner_device),
					p = host_register_options(2, 1, rt->peer_device);
	struct mooncake_segment *owner, *peer;
	struct mooncake_segment_info info;
	uint8_t blobs[2 * BLOB];
	char log_path[64], log[8192];
	int maps;

	rt->use(rt->peer_device, log_path, sizeof(log_path));
	ck_assert(mooncake_segment_supported(true, true, false));
	maps = count_mappings();
	ck_assert_int_eq(mooncake_segment_create("registered", SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("registered", SIZE, &p, &peer, blobs + BLOB), 0);
	/* The owner registered at create; the peer has nothing to register yet. */
	ck_assert_int_eq(count_lines(read_text(log_path, log, sizeof(log)), "register "), 1);
	ck_assert_uint_ne(mooncake_segment_device_addr(owner), 0);
	ck_assert_uint_eq(mooncake_segment_device_addr(peer), 0);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(count_lines(read_text(log_path, log, sizeof(log)), "register "), 2);
	ck_assert_uint_ne(mooncake_segment_device_addr(peer), 0);
	ck_assert_int_eq(mooncake_segment_get_info(peer, &info, sizeof(info)), 0);
	ck_assert(info.flags & MOONCAKE_SEGMENT_INFO_REGISTERED);
	ck_assert_str_eq(info.accelerator, rt->name);
	if (rt->check_registered)
		rt->check_registered(owner, peer, log);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	read_text(log_path, log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "unregister "), 2);
	ck_assert_msg(!strstr(log, "ERROR"), "%s", log);
	if (rt->check_released)
		rt->check_released(log);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

START_TEST(test_chunks_roll_back_on_failure)
{
	struct mooncake_segment_options opt = host_register_options(1, 0, rt->owner_device);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	char log_path[64], log[8192], named[96];
	const char *failed, *unregisters;
	int fds, maps;

	rt->use(rt->owner_device, log_path, sizeof(log_path));
	setenv(rt->fail_register_at, "3", 1);
	opt.register_chunk_size = UINT64_C(2) << 20;
	ck_assert(mooncake_segment_supported(true, true, false)); /* loads the runtime before counting */
	fds = count_fds();
	maps = count_mappings();
	snprintf(named, sizeof(named), "%s host registration of chunk 3 of 4", rt->runtime);
	ck_assert_error(mooncake_segment_create("rolled-back", SIZE, &opt, &seg, blob), ENOMEM, named);
	ck_assert_ptr_null(seg);
	read_text(log_path, log, sizeof(log));
	ck_assert_int_eq(count_lines(log, "register "), 3);
	ck_assert_int_eq(count_lines(log, "unregister "), 2);
	/* The rollback follows the failure. */
	failed = strstr(log, "register 3 failed");
	unregisters = strstr(log, "unregister ");
	ck_assert_ptr_nonnull(failed);
	ck_assert_ptr_nonnull(unregisters);
	ck_assert(failed < unregisters);
	ck_assert_msg(!strstr(log, "ERROR"), "%s", log);
	if (rt->check_rolled_back)
		rt->check_rolled_back(log);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

void tcase_add_registration_scenarios(TCase *tc, const struct fake_runtime *runtime)
{
	rt = runtime;
	tcase_add_test(tc, test_each_rank_registers_its_own_mapping);
	tcase_add_test(tc, test_chunks_roll_back_on_failure);
}
