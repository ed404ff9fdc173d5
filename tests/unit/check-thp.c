/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Transparent huge pages on the default path: shmem_enabled is switched to
 * "advise" for the run (and restored).  The segment is then aligned and
 * rounded to the PMD size, advised before its first touch, committed by the
 * THP method (or measured slower and dropped), and fully resident.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"
#include "privileged.h"

#define SHMEM_ENABLED "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

static void check_thp_segment(uint64_t size)
{
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	struct mooncake_segment *owner, *peer;
	struct mooncake_segment_info info;
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	uint64_t pmd = mc_host_thp_pmd_size();

	ck_assert_int_eq(mooncake_segment_create("thp", size, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("thp", size, &p, &peer, blobs + MOONCAKE_SEGMENT_BLOB_SIZE),
			 0);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_get_info(owner, &info, sizeof(info)), 0);
	ck_assert_uint_eq(info.page_size, pmd);
	ck_assert_uint_eq(info.alloc_size % pmd, 0);
	ck_assert_uint_eq((uintptr_t)mooncake_segment_base(owner) % pmd, 0);
	ck_assert_uint_eq((uintptr_t)mooncake_segment_base(peer) % pmd, 0);
	ck_assert(info.flags & MOONCAKE_SEGMENT_INFO_THP_ADVISED);
	ck_assert_msg(!strcmp(info.commit_method, "populate (THP)") ||
			      !strcmp(info.commit_method, "THP, then base pages"),
		      "%s", info.commit_method);
	ck_assert_uint_eq(!strcmp(info.commit_method, "THP, then base pages"),
			  !!(info.flags & MOONCAKE_SEGMENT_INFO_THP_FALLBACK));
	ck_assert_uint_eq(info.resident_bytes, info.alloc_size);
	fprintf(stderr, "# THP %llu MiB: %s, %llu MiB on huge pages, %.1f ms\n",
		(unsigned long long)(size >> 20), info.commit_method,
		(unsigned long long)(info.huge_bytes >> 20), (double)info.commit_ns / 1e6);
	((volatile uint8_t *)mooncake_segment_base(peer))[size - 1] = 0x5A;
	ck_assert_uint_eq(((uint8_t *)mooncake_segment_base(owner))[size - 1], 0x5A);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}

START_TEST(test_small_thp_segment_is_advised_and_committed)
{
	check_thp_segment(UINT64_C(20) << 20);
}
END_TEST

START_TEST(test_large_thp_segment_is_measured_against_base_pages)
{
	check_thp_segment(UINT64_C(512) << 20);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("thp");
	TCase *tc = tcase_create("shmem");

	require_privileged_stage("the shmem THP mode, " SHMEM_ENABLED);
	if (access(SHMEM_ENABLED, W_OK) != 0)
		skip_all("this kernel has no writable " SHMEM_ENABLED);
	if (!write_setting(SHMEM_ENABLED, "advise"))
		skip_all("cannot set " SHMEM_ENABLED " to advise");
	tcase_add_test(tc, test_small_thp_segment_is_advised_and_committed);
	tcase_add_test(tc, test_large_thp_segment_is_measured_against_base_pages);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
