/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HugeTLB for real: a small pool is reserved for the run (and restored), a
 * segment shared by forked ranks takes exactly its pages from it, an
 * oversized request fails closed without touching the pool, and THP and
 * HugeTLB ranks cannot form a group.
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
#include "privileged.h"

#define POOL_PAGES 16
#define HUGE	   (UINT64_C(2) << 20)
#define SEGMENT	   (4 * HUGE - 4096) /* rounds up to 4 pages */

static uint64_t free_pages(void)
{
	return mc_meminfo_field("HugePages_Free");
}

static uint64_t reserved_pages(void)
{
	return mc_meminfo_field("HugePages_Rsvd");
}

static struct mooncake_segment_options huge_options(uint32_t world, uint32_t rank)
{
	struct mooncake_segment_options opt = test_options(world, rank, 0);

	opt.hugetlb = true;
	return opt;
}

struct pool_view {
	uint64_t free_during;
	uint64_t mapped_hugetlb;
	uint32_t saw_all;
};

static int hugetlb_rank(struct group_rank *self, void *arg)
{
	struct mooncake_segment_options opt = huge_options(self->world_size, self->rank);
	struct mooncake_segment *seg;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE], blobs[3 * MOONCAKE_SEGMENT_BLOB_SIZE], *base;
	struct pool_view mine = { 0, 0, 1 }, all[3];
	struct mc_mapping_usage usage;
	uint64_t *expected = arg;

	if (mooncake_segment_create("huge", SEGMENT, &opt, &seg, blob) ||
	    group_allgather(self, blob, sizeof(blob), blobs) ||
	    mooncake_segment_complete(seg, blobs, sizeof(blobs)) || group_barrier(self)) {
		fprintf(stderr, "rank %u: %s\n", self->rank, mooncake_segment_last_error());
		return 1;
	}
	mooncake_segment_finish(seg);
	base = mooncake_segment_base(seg);
	base[self->rank * HUGE] = (uint8_t)(0x40 + self->rank);
	if (group_barrier(self))
		return 1;
	for (uint32_t r = 0; r < self->world_size; r++)
		mine.saw_all &= base[r * HUGE] == (uint8_t)(0x40 + r);
	/* Every rank has mapped every page it wrote or read: measure now. */
	for (uint64_t off = 0; off < mooncake_segment_alloc_size(seg); off += HUGE)
		(void)((volatile uint8_t *)base)[off];
	if (group_barrier(self))
		return 1;
	mine.free_during = free_pages();
	mc_mapping_usage(base, mooncake_segment_alloc_size(seg), &usage);
	mine.mapped_hugetlb = usage.hugetlb;
	if (group_allgather(self, &mine, sizeof(mine), all) || group_barrier(self))
		return 1;
	mooncake_segment_destroy(seg);
	for (uint32_t r = 0; r < self->world_size; r++)
		if (!all[r].saw_all || all[r].free_during != expected[0] - 4 ||
		    all[r].mapped_hugetlb != 4 * HUGE) {
			fprintf(stderr, "rank %u saw_all %u free %llu (expected %llu) mapped %llu\n", r,
				all[r].saw_all, (unsigned long long)all[r].free_during,
				(unsigned long long)(expected[0] - 4),
				(unsigned long long)all[r].mapped_hugetlb);
			return 1;
		}
	return 0;
}

START_TEST(test_forked_ranks_share_exactly_the_pages_they_need)
{
	uint64_t before = free_pages();
	int codes[3];

	ck_assert_int_eq(group_run(3, hugetlb_rank, &before, 20000, codes), 0);
	for (int r = 0; r < 3; r++)
		ck_assert_msg(codes[r] == 0, "rank %d exited with %d", r, codes[r]);
	/* The last mapping went: the pages are back in the pool. */
	ck_assert_uint_eq(free_pages(), before);
	ck_assert_uint_eq(reserved_pages(), 0);
}
END_TEST

START_TEST(test_info_reports_hugetlb_pages)
{
	struct mooncake_segment_options opt = huge_options(1, 0);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	ck_assert(mooncake_segment_supported(true, false, true));
	ck_assert_int_eq(mooncake_segment_create("huge", SEGMENT, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_str_eq(info.backend, "memfd-hugetlb");
	ck_assert_uint_eq(info.page_size, HUGE);
	ck_assert_uint_eq(info.alloc_size, 4 * HUGE);
	ck_assert(info.flags & MOONCAKE_SEGMENT_INFO_HUGETLB);
	ck_assert_uint_eq(info.huge_bytes, 4 * HUGE); /* committed before create returned */
	mooncake_segment_destroy(seg);
}
END_TEST

START_TEST(test_oversized_request_fails_closed_without_touching_the_pool)
{
	struct mooncake_segment_options opt = huge_options(1, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	uint64_t before = free_pages(), reserved = reserved_pages();
	int fds = count_fds(), maps = count_mappings();

	ck_assert_error(mooncake_segment_create("huge", (before + 1) * HUGE, &opt, &seg, blob), ENOMEM,
			"HugeTLB pages of 2048 kB");
	ck_assert_msg(strstr(mooncake_segment_last_error(), "vm.nr_hugepages="), "%s",
		      mooncake_segment_last_error());
	ck_assert_ptr_null(seg);
	ck_assert_uint_eq(free_pages(), before);
	ck_assert_uint_eq(reserved_pages(), reserved);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

START_TEST(test_thp_and_hugetlb_ranks_cannot_form_a_group)
{
	struct mooncake_segment_options owner_opt = huge_options(2, 0), peer_opt = test_options(2, 1, 0);
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];

	ck_assert_int_eq(mooncake_segment_create("mixed", SEGMENT, &owner_opt, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("mixed", SEGMENT, &peer_opt, &peer,
						 blobs + MOONCAKE_SEGMENT_BLOB_SIZE),
			 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EINVAL,
			"rank 0 declares mmap=true host_register=false hugetlb=true");
	ck_assert_error(mooncake_segment_complete(owner, blobs, sizeof(blobs)), EINVAL, "hugetlb=false");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

START_TEST(test_page_size_option)
{
	struct mooncake_segment_options opt = huge_options(1, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	opt.hugetlb_page_size = 3 << 20;
	ck_assert_error(mooncake_segment_create("huge", SEGMENT, &opt, &seg, blob), EINVAL, "not configured");
	opt.hugetlb_page_size = UINT64_C(1) << 30;
	if (mc_hugetlb_size_configured(opt.hugetlb_page_size)) {
		uint64_t total = 0, available = 0;

		mc_hugetlb_pool(opt.hugetlb_page_size, &total, &available);
		if (available == 0)
			ck_assert_error(mooncake_segment_create("huge", SEGMENT, &opt, &seg, blob), ENOMEM,
					"hugepages-1048576kB/nr_hugepages");
	}
	opt.hugetlb_page_size = HUGE;
	ck_assert_int_eq(mooncake_segment_create("huge", SEGMENT, &opt, &seg, blob), 0);
	mooncake_segment_destroy(seg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hugetlb");
	TCase *tc = tcase_create("pool");
	char pages[32];
	uint64_t wanted;

	require_privileged_stage("the HugeTLB pool, vm.nr_hugepages");
	if (mc_hugetlb_default_size() != HUGE)
		skip_all("needs 2 MiB default HugeTLB pages");
	wanted = mc_meminfo_field("HugePages_Total") + POOL_PAGES;
	snprintf(pages, sizeof(pages), "%llu", (unsigned long long)wanted);
	if (!write_setting("/proc/sys/vm/nr_hugepages", pages))
		skip_all("cannot write /proc/sys/vm/nr_hugepages");
	if (free_pages() < POOL_PAGES) {
		restore_all();
		skip_all("the kernel could not reserve 16 HugeTLB pages (fragmented memory)");
	}
	tcase_add_test(tc, test_forked_ranks_share_exactly_the_pages_they_need);
	tcase_add_test(tc, test_info_reports_hugetlb_pages);
	tcase_add_test(tc, test_oversized_request_fails_closed_without_touching_the_pool);
	tcase_add_test(tc, test_thp_and_hugetlb_ranks_cannot_form_a_group);
	tcase_add_test(tc, test_page_size_option);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
