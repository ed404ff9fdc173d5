/* SPDX-License-Identifier: Apache-2.0 */
/* Host facts: boot id, namespaces, page sizes and sysfs mode parsing; the
 * commit's room re-check before each chunk it charges. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"

START_TEST(test_boot_id_matches_proc)
{
	uint8_t id[MC_BOOT_ID_SIZE];
	char line[64], hex[3];

	ck_assert(mc_host_boot_id(id));
	ck_assert(mc_read_line("/proc/sys/kernel/random/boot_id", line, sizeof(line)));
	snprintf(hex, sizeof(hex), "%02x", id[0]);
	ck_assert_mem_eq(line, hex, 2);
	snprintf(hex, sizeof(hex), "%02x", id[15]);
	ck_assert_mem_eq(line + strlen(line) - 2, hex, 2);
}
END_TEST

START_TEST(test_selected_mode)
{
	char mode[16];

	ck_assert(mc_selected_mode("always [madvise] never", mode, sizeof(mode)));
	ck_assert_str_eq(mode, "madvise");
	ck_assert(mc_selected_mode("always within_size advise [never] deny force", mode, sizeof(mode)));
	ck_assert_str_eq(mode, "never");
	ck_assert(!mc_selected_mode("always madvise never", mode, sizeof(mode)));
	ck_assert(!mc_selected_mode("[unterminated", mode, sizeof(mode)));
	ck_assert(!mc_selected_mode("[a-mode-name-that-is-too-long]", mode, sizeof(mode)));
}
END_TEST

START_TEST(test_page_sizes_and_cpus)
{
	ck_assert_uint_eq(mc_host_base_page_size(), (uint64_t)sysconf(_SC_PAGESIZE));
	ck_assert(mc_is_power_of_two(mc_host_thp_pmd_size()));
	ck_assert_uint_gt(mc_host_thp_pmd_size(), mc_host_base_page_size());
	ck_assert_uint_ge(mc_host_cpus_allowed(), 1);
	ck_assert_uint_ne(mc_host_pid_namespace(), 0);
}
END_TEST

#define COMMIT_LEN (UINT64_C(200) << 20)

static uint64_t seen_committed[16];
static int room_checks;

/* Room for the first two 64 MiB chunks, then "another program took the rest". */
static int room_for_two_chunks(const struct mc_room_need *need, uint64_t committed)
{
	(void)need;
	if (room_checks < 16)
		seen_committed[room_checks] = committed;
	room_checks++;
	return committed >= (UINT64_C(128) << 20) ? mc_error(ENOMEM, "room fell to %llu", 0ULL) : 0;
}

START_TEST(test_commit_checks_the_room_before_each_chunk)
{
	int fd = memfd_create("room-check", MFD_CLOEXEC);
	uint8_t *addr;
	struct mc_commit_request req;
	struct mc_commit_result result;
	struct stat st;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)COMMIT_LEN), 0);
	addr = mmap(NULL, COMMIT_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(addr, MAP_FAILED);
	req = (struct mc_commit_request){ .fd = fd,
					  .addr = addr,
					  .len = COMMIT_LEN,
					  .page_size = mc_host_base_page_size(),
					  .cpu_node = -1,
					  .check_room = room_for_two_chunks };
	room_checks = 0;
	ck_assert_error(mc_commit_pages(&req, &result), ENOMEM, "room fell to 0");
	ck_assert_int_eq(room_checks, 3);
	ck_assert_uint_eq(seen_committed[0], 0);
	ck_assert_uint_eq(seen_committed[1], UINT64_C(64) << 20);
	ck_assert_uint_eq(seen_committed[2], UINT64_C(128) << 20);
	/* Only what the checks allowed was allocated (and so charged). */
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_blocks * 512, UINT64_C(128) << 20);
	munmap(addr, COMMIT_LEN);
	close(fd);
}
END_TEST

Suite *suite_host(void)
{
	Suite *s = suite_create("host");
	TCase *tc = tcase_create("facts");

	tcase_add_test(tc, test_boot_id_matches_proc);
	tcase_add_test(tc, test_selected_mode);
	tcase_add_test(tc, test_page_sizes_and_cpus);
	tcase_add_test(tc, test_commit_checks_the_room_before_each_chunk);
	suite_add_tcase(s, tc);
	return s;
}
