/* SPDX-License-Identifier: Apache-2.0 */
/* Host facts: boot id, namespaces, page sizes and sysfs mode parsing. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "internal.h"

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

Suite *suite_host(void)
{
	Suite *s = suite_create("host");
	TCase *tc = tcase_create("facts");

	tcase_add_test(tc, test_boot_id_matches_proc);
	tcase_add_test(tc, test_selected_mode);
	tcase_add_test(tc, test_page_sizes_and_cpus);
	suite_add_tcase(s, tc);
	return s;
}
