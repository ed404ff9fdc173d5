/* SPDX-License-Identifier: Apache-2.0 */
/* The fingerprint covers every declared field and no per-rank one. */
#include "config.h"

#include <string.h>

#include "helpers.h"
#include "internals.h"

static uint64_t base_fingerprint(void)
{
	struct mooncake_segment_options opt = test_options(4, 0, 1);

	return mc_fingerprint("cache|a:2:2x3:torch.float16:12", TEST_SIZE, &opt);
}

START_TEST(test_changes_with_every_declared_field)
{
	struct mooncake_segment_options opt = test_options(4, 0, 1);
	const char *name = "cache|a:2:2x3:torch.float16:12";
	uint64_t base = base_fingerprint();

	ck_assert_uint_ne(mc_fingerprint("cache|a:2:2x3:torch.float16:13", TEST_SIZE, &opt), base);
	ck_assert_uint_ne(mc_fingerprint(name, TEST_SIZE + 1, &opt), base);
	opt.world_size = 5;
	ck_assert_uint_ne(mc_fingerprint(name, TEST_SIZE, &opt), base);
	opt = test_options(4, 0, 2);
	ck_assert_uint_ne(mc_fingerprint(name, TEST_SIZE, &opt), base);
	opt = test_options(4, 0, 1);
	opt.mmap = false;
	ck_assert_uint_ne(mc_fingerprint(name, TEST_SIZE, &opt), base);
	opt = test_options(4, 0, 1);
	opt.host_register = true;
	ck_assert_uint_ne(mc_fingerprint(name, TEST_SIZE, &opt), base);
	opt = test_options(4, 0, 1);
	opt.hugetlb = true;
	ck_assert_uint_ne(mc_fingerprint(name, TEST_SIZE, &opt), base);
	opt = test_options(4, 0, 1);
	opt.alignment = UINT64_C(2) << 20;
	ck_assert_uint_ne(mc_fingerprint(name, TEST_SIZE, &opt), base);
	opt.alignment = UINT64_C(64) << 10;
	ck_assert_uint_ne(mc_fingerprint(name, TEST_SIZE, &opt), base);
}
END_TEST

/* A declaration made before alignment existed keeps its fingerprint, and
 * 4096 (what every mapping has) declares the same segment as the default. */
START_TEST(test_default_alignment_keeps_the_fingerprint)
{
	struct mooncake_segment_options opt = test_options(4, 0, 1);

	opt.alignment = 4096;
	ck_assert_uint_eq(mc_fingerprint("cache|a:2:2x3:torch.float16:12", TEST_SIZE, &opt),
			  base_fingerprint());
}
END_TEST

START_TEST(test_ignores_rank_device_and_local_tuning)
{
	struct mooncake_segment_options opt = test_options(4, 3, 1);

	opt.device_id = 7;
	opt.numa_node = 0;
	opt.commit_threads = 3;
	opt.populate_on_import = true;
	ck_assert_uint_eq(mc_fingerprint("cache|a:2:2x3:torch.float16:12", TEST_SIZE, &opt),
			  base_fingerprint());
}
END_TEST

START_TEST(test_is_fnv1a_64_over_name_then_le_values)
{
	/* Recompute by hand, so that the documented algorithm is what runs. */
	struct mooncake_segment_options opt = test_options(2, 0, 1);
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	const uint64_t values[] = { 1234, 2, 1, 1, 0, 0 };

	for (const char *p = "kv"; *p; p++)
		h = (h ^ (uint8_t)*p) * UINT64_C(1099511628211);
	for (size_t v = 0; v < MC_ARRAY_SIZE(values); v++)
		for (int i = 0; i < 8; i++)
			h = (h ^ (uint8_t)(values[v] >> (8 * i))) * UINT64_C(1099511628211);
	ck_assert_uint_eq(mc_fingerprint("kv", 1234, &opt), h);
	/* A declared alignment follows as doc/wire-format.md says: "alignment", then 8 bytes. */
	opt.alignment = UINT64_C(2) << 20;
	for (const char *p = "alignment"; *p; p++)
		h = (h ^ (uint8_t)*p) * UINT64_C(1099511628211);
	for (int i = 0; i < 8; i++)
		h = (h ^ (uint8_t)(opt.alignment >> (8 * i))) * UINT64_C(1099511628211);
	ck_assert_uint_eq(mc_fingerprint("kv", 1234, &opt), h);
}
END_TEST

Suite *suite_fingerprint(void)
{
	Suite *s = suite_create("fingerprint");
	TCase *tc = tcase_create("fields");

	tcase_add_test(tc, test_changes_with_every_declared_field);
	tcase_add_test(tc, test_ignores_rank_device_and_local_tuning);
	tcase_add_test(tc, test_default_alignment_keeps_the_fingerprint);
	tcase_add_test(tc, test_is_fnv1a_64_over_name_then_le_values);
	suite_add_tcase(s, tc);
	return s;
}
