/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_segment_room() against create() at the boundary: on fixture host
 * roots (cgroup v2 and v1 limits with clean page cache, MemAvailable +
 * SwapFree, THP page rounding, a HugeTLB pool), create() of the room passes
 * and one page past the check's own figure is refused (under a cgroup,
 * room() is short of that figure by the charge batching, helpers.h).  The fixtures make the
 * figures deterministic; the pages are really committed.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"

#define BLOB   MOONCAKE_SEGMENT_BLOB_SIZE
#define MiB    (UINT64_C(1) << 20)
#define PLENTY "MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\nSwapFree: 0 kB\nHugepagesize: 2048 kB\n"

static char root[256];

static void room_fixture(const char *meminfo, const char *shmem_enabled)
{
	fixture_tree_create(root, sizeof(root));
	fixture_put(root, "proc/sys/kernel/random/boot_id", "0123456789abcdef0123456789abcdef\n");
	fixture_put(root, "sys/kernel/mm/transparent_hugepage/shmem_enabled", shmem_enabled);
	fixture_put(root, "sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "2097152\n");
	fixture_put(root, "proc/meminfo", meminfo);
	fixture_put(root, "proc/self/cgroup", "0::/\n");
	fixture_put(root, "sys/devices/system/node/online", "0\n");
	mc_host_root_set(root);
}

static void room_fixture_remove(void)
{
	mc_host_root_set(NULL);
	fixture_tree_remove(root);
}

/* The documented rule, stated again here: the largest @page multiple S
 * with S + S/240 + 1 MiB (the kernel's page tables and page cache index,
 * the commit threads' stacks) within @room (doc/guarantees.md). */
static uint64_t fit(uint64_t room, uint64_t page)
{
	uint64_t s = 0;

	while (s + page + (s + page) / 240 + MiB <= room)
		s += page;
	return s;
}

/* A cgroup's room as room() counts it: less the charge batching (helpers.h). */
static uint64_t less_charge_slack(uint64_t room)
{
	return room > memcg_charge_slack() ? room - memcg_charge_slack() : 0;
}

static uint64_t room_of(const struct mooncake_segment_options *opt)
{
	uint64_t bytes = 0;

	ck_assert_msg(mooncake_segment_room(opt, &bytes) == 0, "%s", mooncake_segment_last_error());
	return bytes;
}

/* A cgroup v2 "job": limit 24 MiB + 1000, usage 8 MiB of which 3 MiB clean
 * cache, so 19 MiB + 1000 of room. */
static void job_cgroup_with_19_mib_of_room(void)
{
	fixture_put(root, "proc/self/cgroup", "0::/job\n");
	fixture_put(root, "sys/fs/cgroup/job/memory.max", "25166824\n");
	fixture_put(root, "sys/fs/cgroup/job/memory.current", "8388608\n");
	fixture_put(root, "sys/fs/cgroup/job/memory.stat",
		    "anon 4194304\nactive_file 2097152\ninactive_file 2097152\nfile_dirty 1048576\n"
		    "file_writeback 0\n");
}

/* create() of @room passes; of @room + @page it fails with -ENOMEM and @needle:
 * the check's own boundary, which room() reaches without a cgroup limit. */
static void check_boundary(uint64_t room, uint64_t page, const char *needle)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	ck_assert_msg(mooncake_segment_create("room", room, &opt, &seg, blob) == 0,
		      "create of the room %llu: %s", (unsigned long long)room, mooncake_segment_last_error());
	ck_assert_uint_eq(mooncake_segment_alloc_size(seg), room);
	mooncake_segment_destroy(seg);
	seg = NULL;
	ck_assert_error(mooncake_segment_create("room", room + page, &opt, &seg, blob), ENOMEM, needle);
	ck_assert_ptr_null(seg);
}

START_TEST(test_room_is_the_cgroup_v2_room_with_clean_cache)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	room_fixture(PLENTY, "[never]\n");
	job_cgroup_with_19_mib_of_room();
	ck_assert_uint_eq(room_of(&opt), fit(less_charge_slack(19 * MiB + 1000), page));
	check_boundary(fit(19 * MiB + 1000, page), page, "its memory cgroup has room for 19923944");
	room_fixture_remove();
}
END_TEST

/* A peer's room: the pages are the owner's; its own cgroup pays its page tables. */
START_TEST(test_a_peers_room_is_its_page_tables)
{
	struct mooncake_segment_options peer = test_options(2, 1, 0), owner = test_options(2, 0, 0);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	room_fixture(PLENTY, "[never]\n");
	job_cgroup_with_19_mib_of_room();
	ck_assert_uint_eq(room_of(&owner), fit(less_charge_slack(19 * MiB + 1000), page));
	/* 8 bytes of page table a page, after 1 MiB of slack. */
	ck_assert_uint_eq(room_of(&peer), (less_charge_slack(19 * MiB + 1000) - MiB) / 8 * page);
	room_fixture_remove();
}
END_TEST

START_TEST(test_room_is_the_cgroup_v1_room_with_clean_cache)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	room_fixture(PLENTY, "[never]\n");
	/* A hybrid host: the v1 memory controller binds.  limit 32 MiB, usage 20 MiB, 4 MiB clean. */
	fixture_put(root, "proc/self/cgroup", "12:memory:/slurm/job7\n0::/slurm/job7\n");
	fixture_put(root, "sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes", "33554432\n");
	fixture_put(root, "sys/fs/cgroup/memory/slurm/job7/memory.usage_in_bytes", "20971520\n");
	fixture_put(root, "sys/fs/cgroup/memory/slurm/job7/memory.stat",
		    "cache 4194304\ntotal_active_file 1048576\ntotal_inactive_file 3145728\ntotal_dirty 0\n"
		    "total_writeback 0\n");
	ck_assert_uint_eq(room_of(&opt), fit(less_charge_slack(16 * MiB), page));
	check_boundary(fit(16 * MiB, page), page, "its memory cgroup has room for 16777216");
	room_fixture_remove();
}
END_TEST

START_TEST(test_room_is_memavailable_plus_swapfree)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	/* No cgroup limit: the host's MemAvailable 10 MiB + SwapFree 2 MiB bind. */
	room_fixture("MemTotal: 4194304 kB\nMemAvailable: 10240 kB\nSwapFree: 2048 kB\n", "[never]\n");
	ck_assert_uint_eq(room_of(&opt), fit(12 * MiB, page));
	check_boundary(fit(12 * MiB, page), page,
		       "the host has 12582912 available (MemAvailable 10485760 + SwapFree 2097152)");
	room_fixture_remove();
}
END_TEST

START_TEST(test_room_is_the_tighter_of_cgroup_and_host)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	room_fixture("MemTotal: 4194304 kB\nMemAvailable: 10240 kB\nSwapFree: 0 kB\n", "[never]\n");
	fixture_put(root, "proc/self/cgroup", "0::/job\n");
	fixture_put(root, "sys/fs/cgroup/job/memory.max", "max\n");
	fixture_put(root, "sys/fs/cgroup/job/memory.current", "8388608\n");
	ck_assert_uint_eq(room_of(&opt), fit(10 * MiB, page)); /* no limit: the host binds */
	fixture_put(root, "sys/fs/cgroup/job/memory.max", "14680064\n");
	ck_assert_uint_eq(room_of(&opt),
			  fit(less_charge_slack(6 * MiB), page)); /* 14 - 8: the cgroup binds */
	room_fixture_remove();
}
END_TEST

START_TEST(test_room_rounds_down_to_the_thp_page)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);

	/* THP backs shmem here: pages are 2 MiB, so 13 MiB of room (less the
	 * overhead) holds 10 MiB. */
	room_fixture("MemTotal: 4194304 kB\nMemAvailable: 13312 kB\nSwapFree: 0 kB\n",
		     "always within_size [advise] never deny force\n");
	ck_assert_uint_eq(room_of(&opt), 10 * MiB);
	ck_assert_uint_eq(room_of(&opt), fit(13 * MiB, 2 * MiB));
	check_boundary(10 * MiB, 2 * MiB, "the host has 13631488 available");
	room_fixture_remove();
}
END_TEST

/* Free pages in the real 2 MiB pool, read without the host root. */
static uint64_t real_free_hugepages(void)
{
	char saved[512];
	uint64_t pages;

	snprintf(saved, sizeof(saved), "%s", mc_host_root());
	mc_host_root_set(NULL);
	pages = mc_meminfo_field("HugePages_Free");
	mc_host_root_set(saved);
	return pages;
}

START_TEST(test_room_with_hugetlb_is_the_free_unreserved_pool)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	/* More free pages than the real pool has, so that the real kernel refuses one more. */
	uint64_t pages = real_free_hugepages() + 64;
	char text[64], expected[160];

	if (!mooncake_segment_supported(true, false, true)) {
		fprintf(stderr, "# SKIP hugetlb room: this kernel has no MFD_HUGETLB\n");
		return;
	}
	opt.hugetlb = true;
	room_fixture(PLENTY, "[never]\n");
	fixture_put(root, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "4096\n");
	snprintf(text, sizeof(text), "%llu\n", (unsigned long long)pages + 2);
	fixture_put(root, "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", text);
	fixture_put(root, "sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages", "2\n");
	/* Free minus reserved; MemAvailable and the cgroup do not apply to HugeTLB pages. */
	ck_assert_uint_eq(room_of(&opt), pages * 2 * MiB);
	snprintf(expected, sizeof(expected),
		 "needs %llu HugeTLB pages of 2048 kB but only %llu of the pool's 4096",
		 (unsigned long long)pages + 1, (unsigned long long)pages);
	ck_assert_error(mooncake_segment_create("huge", (pages + 1) * 2 * MiB, &opt, &seg, blob), ENOMEM,
			expected);
	ck_assert_ptr_null(seg);
	/* A page size the host does not have is the error create() gives. */
	opt.hugetlb_page_size = UINT64_C(1) << 30;
	ck_assert_error(mooncake_segment_room(&opt, &(uint64_t){ 0 }), EINVAL, "hugepages-1048576kB");
	room_fixture_remove();
}
END_TEST

START_TEST(test_room_refuses_null)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	uint64_t bytes = 7;

	ck_assert_error(mooncake_segment_room(NULL, &bytes), EINVAL, "needs options");
	ck_assert_error(mooncake_segment_room(&opt, NULL), EINVAL, "needs options");
	ck_assert_uint_eq(bytes, 7);
}
END_TEST

Suite *suite_room(void)
{
	Suite *s = suite_create("room");
	TCase *tc = tcase_create("room");

	tcase_add_test(tc, test_room_is_the_cgroup_v2_room_with_clean_cache);
	tcase_add_test(tc, test_room_is_the_cgroup_v1_room_with_clean_cache);
	tcase_add_test(tc, test_a_peers_room_is_its_page_tables);
	tcase_add_test(tc, test_room_is_memavailable_plus_swapfree);
	tcase_add_test(tc, test_room_is_the_tighter_of_cgroup_and_host);
	tcase_add_test(tc, test_room_rounds_down_to_the_thp_page);
	tcase_add_test(tc, test_room_with_hugetlb_is_the_free_unreserved_pool);
	tcase_add_test(tc, test_room_refuses_null);
	suite_add_tcase(s, tc);
	return s;
}
