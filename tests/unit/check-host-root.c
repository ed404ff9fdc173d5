/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host facts read under the host root (procfs.h), end to end through create
 * and complete: the boot id (two "hosts" in one process), the THP mode and
 * PMD size, the HugeTLB pool in the error that names the fix, MemAvailable
 * and a memory cgroup; and the smaps walker on a fixture /proc root.  Each
 * test builds a fixture tree, so none needs root and none reads or changes
 * the real host's settings.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"

#define BOOT_A "0123456789abcdef0123456789abcdef"
#define BOOT_B "fedcba98-7654-3210-fedc-ba9876543210"

static char root[256];

/* A fixture host like this one, but with the given boot id, THP mode and memory. */
static void host_fixture(const char *boot_id, const char *shmem_enabled, const char *meminfo)
{
	char boot[64];

	fixture_tree_create(root, sizeof(root));
	snprintf(boot, sizeof(boot), "%s\n", boot_id);
	fixture_put(root, "proc/sys/kernel/random/boot_id", boot);
	fixture_put(root, "sys/kernel/mm/transparent_hugepage/shmem_enabled", shmem_enabled);
	fixture_put(root, "sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "2097152\n");
	fixture_put(root, "proc/meminfo", meminfo);
	fixture_put(root, "proc/self/cgroup", "0::/\n");
	fixture_put(root, "sys/devices/system/node/online", "0\n");
	mc_host_root_set(root);
}

static void host_fixture_remove(void)
{
	mc_host_root_set(NULL);
	fixture_tree_remove(root);
}

#define PLENTY "MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\nSwapFree: 0 kB\nHugepagesize: 2048 kB\n"

START_TEST(test_boot_id_comes_from_the_host_root)
{
	uint8_t id[MC_BOOT_ID_SIZE];

	host_fixture(BOOT_B, "[never]\n", PLENTY);
	ck_assert(mc_host_boot_id(id));
	ck_assert_uint_eq(id[0], 0xfe);
	ck_assert_uint_eq(id[1], 0xdc);
	ck_assert_uint_eq(id[15], 0x10);
	host_fixture_remove();
}
END_TEST

/* The public host id is that boot id, from the same root; an unreadable one is false and zeroed. */
START_TEST(test_public_host_id_is_the_boot_id_under_the_host_root)
{
	uint8_t id[MOONCAKE_SEGMENT_HOST_ID_SIZE], boot[MC_BOOT_ID_SIZE];

	host_fixture(BOOT_B, "[never]\n", PLENTY);
	memset(id, 0xaa, sizeof(id));
	ck_assert(mooncake_segment_host_id(id));
	ck_assert(mc_host_boot_id(boot));
	ck_assert_mem_eq(id, boot, sizeof(id));
	ck_assert_uint_eq(id[0], 0xfe);
	fixture_put(root, "proc/sys/kernel/random/boot_id", "not a boot id\n");
	ck_assert(!mooncake_segment_host_id(id));
	for (size_t i = 0; i < sizeof(id); i++)
		ck_assert_uint_eq(id[i], 0);
	ck_assert(!mooncake_segment_host_id(NULL));
	host_fixture_remove();
}
END_TEST

START_TEST(test_ranks_of_two_hosts_cannot_share)
{
	struct mooncake_segment_options owner_opt = test_options(2, 0, 0), peer_opt = test_options(2, 1, 0);
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];

	host_fixture(BOOT_A, "[never]\n", PLENTY);
	ck_assert_int_eq(mooncake_segment_create("hosts", TEST_SIZE, &owner_opt, &owner, blobs), 0);
	host_fixture_remove();
	host_fixture(BOOT_B, "[never]\n", PLENTY);
	ck_assert_int_eq(mooncake_segment_create("hosts", TEST_SIZE, &peer_opt, &peer,
						 blobs + MOONCAKE_SEGMENT_BLOB_SIZE),
			 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EXDEV,
			"rank 0 runs on another host");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	host_fixture_remove();
}
END_TEST

/* The page size and advice follow the fixture's THP mode, whatever the real host's is. */
static void check_thp_mode(const char *shmem_enabled, uint64_t page_size, int advised)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	host_fixture(BOOT_A, shmem_enabled, PLENTY);
	ck_assert_int_eq(mooncake_segment_create("thp", TEST_SIZE, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_uint_eq(info.page_size, page_size);
	ck_assert_uint_eq(info.alloc_size % page_size, 0);
	ck_assert_int_eq(!!(info.flags & MOONCAKE_SEGMENT_INFO_THP_ADVISED), advised);
	mooncake_segment_destroy(seg);
	host_fixture_remove();
}

START_TEST(test_thp_advise_mode_rounds_to_the_pmd_size_and_advises)
{
	check_thp_mode("always within_size [advise] never deny force\n", UINT64_C(2) << 20, 1);
}
END_TEST

START_TEST(test_thp_never_keeps_base_pages)
{
	check_thp_mode("always within_size advise [never] deny force\n", (uint64_t)sysconf(_SC_PAGESIZE), 0);
}
END_TEST

START_TEST(test_memavailable_comes_from_the_host_root)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	int fds = count_fds();

	host_fixture(BOOT_A, "[never]\n", "MemTotal: 4096 kB\nMemAvailable: 1024 kB\nSwapFree: 0 kB\n");
	ck_assert_error(mooncake_segment_create("big", UINT64_C(8) << 20, &opt, &seg, blob), ENOMEM,
			"the host has 1048576 available (MemAvailable 1048576 + SwapFree 0)");
	ck_assert_ptr_null(seg);
	ck_assert_int_eq(count_fds(), fds);
	host_fixture_remove();
}
END_TEST

/* The NUMA topology comes from the host root too, with or without a device:
 * node 1 of a two-node fixture host is a node that exists. */
START_TEST(test_numa_topology_comes_from_the_host_root_without_a_device)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	host_fixture(BOOT_A, "[never]\n", PLENTY);
	fixture_put(root, "sys/devices/system/node/online", "0-1\n");
	opt.device_id = -1;
	opt.numa_node = 1;
	/* The real host may lack node 1: binding then degrades, but the node is known. */
	ck_assert_int_eq(mooncake_segment_create("numa", TEST_SIZE, &opt, &seg, blob), 0);
	mooncake_segment_destroy(seg);
	opt.numa_node = 2;
	ck_assert_error(mooncake_segment_create("numa", TEST_SIZE, &opt, &seg, blob), EINVAL,
			"numa_node 2 does not exist on this host (online nodes: 2 of them)");
	host_fixture_remove();
}
END_TEST

START_TEST(test_cgroup_limit_comes_from_the_host_root)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	host_fixture(BOOT_A, "[never]\n", PLENTY);
	fixture_put(root, "proc/self/cgroup", "0::/job\n");
	fixture_put(root, "sys/fs/cgroup/job/memory.max", "4194304\n");
	fixture_put(root, "sys/fs/cgroup/job/memory.current", "1048576\n");
	fixture_put(root, "sys/fs/cgroup/job/memory.stat", "anon 1048576\ninactive_file 0\n");
	ck_assert_error(mooncake_segment_create("big", UINT64_C(8) << 20, &opt, &seg, blob), ENOMEM,
			"its memory cgroup has room for 3145728 (limit 4194304, usage 1048576");
	ck_assert_ptr_null(seg);
	host_fixture_remove();
}
END_TEST

/* Free pages in the real pool, read without the host root. */
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

START_TEST(test_hugetlb_pool_numbers_come_from_the_host_root)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	/* More pages than the real pool has free, so the real kernel refuses them. */
	uint64_t needed = real_free_hugepages() + 64;
	char expected[160];

	opt.hugetlb = true;
	host_fixture(BOOT_A, "[never]\n", PLENTY);
	fixture_put(root, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "8\n");
	fixture_put(root, "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "3\n");
	fixture_put(root, "sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages", "2\n");
	snprintf(expected, sizeof(expected),
		 "needs %llu HugeTLB pages of 2048 kB but only 1 of the pool's 8 are free",
		 (unsigned long long)needed);
	ck_assert_error(mooncake_segment_create("huge", needed << 21, &opt, &seg, blob), ENOMEM, expected);
	/* The fix: the pool grows by what is missing (8 + needed - 1). */
	snprintf(expected, sizeof(expected), "sysctl -w vm.nr_hugepages=%llu",
		 (unsigned long long)needed + 7);
	ck_assert_msg(strstr(mooncake_segment_last_error(), expected), "%s", mooncake_segment_last_error());
	ck_assert_ptr_null(seg);
	host_fixture_remove();
}
END_TEST

START_TEST(test_hugetlb_size_not_configured_on_the_host)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	opt.hugetlb = true;
	opt.hugetlb_page_size = UINT64_C(1) << 30;
	host_fixture(BOOT_A, "[never]\n", PLENTY);
	fixture_put(root, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n");
	ck_assert_error(mooncake_segment_create("huge", UINT64_C(1) << 30, &opt, &seg, blob), EINVAL,
			"no /sys/kernel/mm/hugepages/hugepages-1048576kB");
	ck_assert_ptr_null(seg);
	host_fixture_remove();
}
END_TEST

/* An smaps file as the kernel writes it: a HugeTLB segment, an anonymous
 * mapping with THP, and a last mapping cut short (no VmFlags line, no
 * final newline), as in a --proc fixture of the CLI's `list`. */
#define SMAPS_SEGMENT                                                                             \
	"7f0000000000-7f0000400000 rw-s 00200000 00:0f 4242                       "               \
	"/memfd:mooncake-segment:kv|owner=42 (deleted)\n"                                         \
	"Size:               4096 kB\nRss:                   0 kB\nPss:                   0 kB\n" \
	"Shared_Hugetlb:     4096 kB\nPrivate_Hugetlb:    2048 kB\n"                              \
	"VmFlags: rd wr sh mr mw me ms de ht sd\n"
#define SMAPS_ANON                                                                                \
	"7f0000400000-7f0000a00000 rw-p 00000000 00:00 0 \n"                                      \
	"Rss:                6144 kB\nPss:                3072 kB\nAnonHugePages:      4096 kB\n" \
	"ShmemPmdMapped:     2048 kB\nVmFlags: rd wr mr mw me ac sd\n"
#define SMAPS_LAST                                                                           \
	"7ffd00000000-7ffd00021000 rw-p 00000000 08:01 99                         [stack]\n" \
	"Rss:                 132 kB\nFilePmdMapped:      2048 kB"

struct smaps_seen {
	struct mc_smaps_mapping mapping[4];
	char name[4][96];
	unsigned int count;
	unsigned int stop_after; /* 0: never */
};

static bool note_mapping(const struct mc_smaps_mapping *m, void *arg)
{
	struct smaps_seen *seen = arg;

	ck_assert_uint_lt(seen->count, 4);
	seen->mapping[seen->count] = *m;
	snprintf(seen->name[seen->count], sizeof(seen->name[0]), "%s", m->name);
	seen->count++;
	return seen->count != seen->stop_after;
}

/* Walk @text as the smaps of pid 42 of a fixture /proc root. */
static int walk_fixture_smaps(const char *text, struct smaps_seen *seen)
{
	int procfd, rc;

	fixture_tree_create(root, sizeof(root));
	fixture_put(root, "proc/42/smaps", text);
	procfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(procfd, 0);
	rc = mc_smaps_walk(procfd, "proc/42/smaps", note_mapping, seen);
	close(procfd);
	fixture_tree_remove(root);
	return rc;
}

START_TEST(test_smaps_walker_reads_every_mapping_to_the_end_of_the_file)
{
	struct smaps_seen seen = { 0 };
	const struct mc_smaps_mapping *m = seen.mapping;

	ck_assert_int_eq(walk_fixture_smaps(SMAPS_SEGMENT SMAPS_ANON SMAPS_LAST, &seen), 0);
	ck_assert_uint_eq(seen.count, 3);
	ck_assert_uint_eq(m[0].start, UINT64_C(0x7f0000000000));
	ck_assert_uint_eq(m[0].end, UINT64_C(0x7f0000400000));
	ck_assert_uint_eq(m[0].offset, UINT64_C(0x200000));
	ck_assert_uint_eq(m[0].dev_major, 0);
	ck_assert_uint_eq(m[0].dev_minor, 0xf);
	ck_assert_uint_eq(m[0].ino, 4242);
	ck_assert_str_eq(seen.name[0], "/memfd:mooncake-segment:kv|owner=42 (deleted)");
	ck_assert_uint_eq(m[0].rss, 0);
	ck_assert_uint_eq(m[0].shared_hugetlb, UINT64_C(4096) << 10);
	ck_assert_uint_eq(m[0].private_hugetlb, UINT64_C(2048) << 10);
	ck_assert_uint_eq(m[0].shmem_pmd_mapped, 0);

	ck_assert_str_eq(seen.name[1], "");
	ck_assert_uint_eq(m[1].rss, UINT64_C(6144) << 10);
	ck_assert_uint_eq(m[1].pss, UINT64_C(3072) << 10);
	ck_assert_uint_eq(m[1].shmem_pmd_mapped, UINT64_C(2048) << 10);
	ck_assert_uint_eq(m[1].shared_hugetlb, 0);

	/* The last mapping: no VmFlags line and no newline end it, the file does. */
	ck_assert_uint_eq(m[2].start, UINT64_C(0x7ffd00000000));
	ck_assert_uint_eq(m[2].dev_major, 8);
	ck_assert_uint_eq(m[2].dev_minor, 1);
	ck_assert_str_eq(seen.name[2], "[stack]");
	ck_assert_uint_eq(m[2].rss, UINT64_C(132) << 10);
	ck_assert_uint_eq(m[2].file_pmd_mapped, UINT64_C(2048) << 10);
}
END_TEST

START_TEST(test_smaps_walker_stops_when_asked)
{
	struct smaps_seen seen = { .stop_after = 1 };

	ck_assert_int_eq(walk_fixture_smaps(SMAPS_SEGMENT SMAPS_ANON SMAPS_LAST, &seen), 0);
	ck_assert_uint_eq(seen.count, 1);
	ck_assert_uint_eq(seen.mapping[0].shared_hugetlb, UINT64_C(4096) << 10);
}
END_TEST

START_TEST(test_smaps_walker_ignores_a_header_the_file_was_cut_in)
{
	struct smaps_seen seen = { 0 };

	/* Cut inside the third mapping's range: two mappings, the second whole. */
	ck_assert_int_eq(walk_fixture_smaps(SMAPS_SEGMENT SMAPS_ANON "7ffd00000000-7ffd0", &seen), 0);
	ck_assert_uint_eq(seen.count, 2);
	ck_assert_uint_eq(seen.mapping[1].rss, UINT64_C(6144) << 10);
	ck_assert_uint_eq(seen.mapping[1].shmem_pmd_mapped, UINT64_C(2048) << 10);
	/* Cut inside a field line: the mapping ends there, with what was read. */
	memset(&seen, 0, sizeof(seen));
	ck_assert_int_eq(walk_fixture_smaps(SMAPS_SEGMENT "Rss: ", &seen), 0);
	ck_assert_uint_eq(seen.count, 1);
	ck_assert_uint_eq(seen.mapping[0].shared_hugetlb, UINT64_C(4096) << 10);
	ck_assert_uint_eq(seen.mapping[0].rss, 0);
}
END_TEST

START_TEST(test_smaps_walker_reports_a_missing_file)
{
	struct smaps_seen seen = { 0 };

	ck_assert_int_eq(mc_smaps_walk(AT_FDCWD, "/proc/self/no-such-smaps", note_mapping, &seen), -ENOENT);
	ck_assert_uint_eq(seen.count, 0);
}
END_TEST

Suite *suite_host_root(void)
{
	Suite *s = suite_create("host-root");
	TCase *tc = tcase_create("fixture-hosts");

	tcase_add_test(tc, test_boot_id_comes_from_the_host_root);
	tcase_add_test(tc, test_public_host_id_is_the_boot_id_under_the_host_root);
	tcase_add_test(tc, test_ranks_of_two_hosts_cannot_share);
	tcase_add_test(tc, test_thp_advise_mode_rounds_to_the_pmd_size_and_advises);
	tcase_add_test(tc, test_thp_never_keeps_base_pages);
	tcase_add_test(tc, test_memavailable_comes_from_the_host_root);
	tcase_add_test(tc, test_cgroup_limit_comes_from_the_host_root);
	tcase_add_test(tc, test_numa_topology_comes_from_the_host_root_without_a_device);
	tcase_add_test(tc, test_hugetlb_pool_numbers_come_from_the_host_root);
	tcase_add_test(tc, test_hugetlb_size_not_configured_on_the_host);
	tcase_add_test(tc, test_smaps_walker_reads_every_mapping_to_the_end_of_the_file);
	tcase_add_test(tc, test_smaps_walker_stops_when_asked);
	tcase_add_test(tc, test_smaps_walker_ignores_a_header_the_file_was_cut_in);
	tcase_add_test(tc, test_smaps_walker_reports_a_missing_file);
	suite_add_tcase(s, tc);
	return s;
}
