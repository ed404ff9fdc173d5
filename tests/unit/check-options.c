/* SPDX-License-Identifier: Apache-2.0 */
/* Option validation: every invalid input is -EINVAL with a message and allocates nothing. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "helpers.h"
#include "internals.h"

static uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

/* Create must fail with @err, leave *out and the blob untouched and leak nothing. */
static void expect_create_fails(uint64_t size, const struct mooncake_segment_options *opt, int err,
				const char *needle)
{
	struct mooncake_segment *seg = (struct mooncake_segment *)0x1;
	int fds = count_fds(), maps = count_mappings();

	memset(blob, 0xA5, sizeof(blob));
	ck_assert_error(mooncake_segment_create("cache", size, opt, &seg, blob), err, needle);
	ck_assert_ptr_eq(seg, (struct mooncake_segment *)0x1);
	for (size_t i = 0; i < sizeof(blob); i++)
		ck_assert_uint_eq(blob[i], 0xA5);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}

START_TEST(test_defaults)
{
	struct mooncake_segment_options opt;

	memset(&opt, 0x5A, sizeof(opt));
	mooncake_segment_options_init(&opt);
	ck_assert_uint_eq(opt.world_size, 1);
	ck_assert_uint_eq(opt.rank_id, 0);
	ck_assert_uint_eq(opt.owner_rank, 0);
	ck_assert_int_eq(opt.device_id, -1);
	ck_assert(opt.mmap);
	ck_assert(!opt.host_register);
	ck_assert(!opt.hugetlb);
	ck_assert_int_eq(opt.numa_node, MOONCAKE_SEGMENT_NUMA_AUTO);
	ck_assert_uint_eq(opt.commit_threads, 0);
	ck_assert(!opt.populate_on_import);
	mooncake_segment_options_init(NULL); /* harmless */
}
END_TEST

/* A struct zeroed instead of filled by mooncake_segment_options_init() gets the hint. */
START_TEST(test_zeroed_options_are_told_to_call_options_init)
{
	struct mooncake_segment_options opt;

	memset(&opt, 0, sizeof(opt));
	expect_create_fails(TEST_SIZE, &opt, EINVAL, "mooncake_segment_options_init()");
	/* Zeroed, then only the group set: mmap is false without the user asking. */
	opt.world_size = 1;
	if (!mooncake_segment_supported(false, false, false))
		expect_create_fails(TEST_SIZE, &opt, ENOTSUP, "mooncake_segment_options_init() did not fill");
}
END_TEST

static void mmap_off_host_register_on(struct mooncake_segment_options *opt)
{
	opt->mmap = false;
	opt->host_register = true;
}

static void mmap_off_hugetlb_on(struct mooncake_segment_options *opt)
{
	opt->mmap = false;
	opt->hugetlb = true;
}

static void device_below_minus_one(struct mooncake_segment_options *opt)
{
	opt->device_id = -2;
}

/* Kept segments (keep.c): another owner is a flag, so a zeroed uid never means root's. */
static void keep_owner_without_flag(struct mooncake_segment_options *opt)
{
	opt->keep_name = "kv";
	opt->keep_owner_uid = 1000;
}

static void keep_name_with_bar(struct mooncake_segment_options *opt)
{
	opt->keep_name = "kv|owner=1";
}

static void keep_options_without_name(struct mooncake_segment_options *opt)
{
	opt->keep_flags = MOONCAKE_SEGMENT_KEEP_REPLACE;
}

static void alignment_not_power_of_two(struct mooncake_segment_options *opt)
{
	opt->alignment = 3 * 4096;
}

static void alignment_below_a_page(struct mooncake_segment_options *opt)
{
	opt->alignment = 2048;
}

static void alignment_above_1g(struct mooncake_segment_options *opt)
{
	opt->alignment = UINT64_C(2) << 30;
}

static void keep_mmap_off(struct mooncake_segment_options *opt)
{
	opt->keep_name = "kv";
	opt->mmap = false;
}

static void numa_below_interleave(struct mooncake_segment_options *opt)
{
	opt->numa_node = -3;
}

/* One invalid input each: the group, the size, then option combinations. */
static const struct rejection {
	uint64_t size;
	void (*edit)(struct mooncake_segment_options *opt); /* NULL: test_options() as is */
	const char *needle;
	uint32_t world, rank, owner;
	int err;
} rejections[] = {
	{ .world = 0,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = NULL,
	  .err = EINVAL,
	  .needle = "world_size must not be zero" },
	{ .world = 2,
	  .rank = 2,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = NULL,
	  .err = EINVAL,
	  .needle = "must be below world_size" }, /* rank */
	{ .world = 2,
	  .rank = 0,
	  .owner = 5,
	  .size = TEST_SIZE,
	  .edit = NULL,
	  .err = EINVAL,
	  .needle = "must be below world_size" }, /* owner */
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = 0,
	  .edit = NULL,
	  .err = EINVAL,
	  .needle = "size must be in (0, 70368744177664]" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = MOONCAKE_SEGMENT_MAX_SIZE + 1,
	  .edit = NULL,
	  .err = EINVAL,
	  .needle = "size must be in" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = UINT64_MAX,
	  .edit = NULL,
	  .err = EINVAL,
	  .needle = "size must be in" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = mmap_off_host_register_on,
	  .err = EINVAL,
	  .needle = "host_register requires mmap=true" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = mmap_off_hugetlb_on,
	  .err = EINVAL,
	  .needle = "hugetlb requires mmap=true" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = device_below_minus_one,
	  .err = EINVAL,
	  .needle = "device_id" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = numa_below_interleave,
	  .err = EINVAL,
	  .needle = "numa_node" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = keep_owner_without_flag,
	  .err = EINVAL,
	  .needle = "read only with MOONCAKE_SEGMENT_KEEP_OWNER" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = keep_name_with_bar,
	  .err = EINVAL,
	  .needle = "has a '|'" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = keep_options_without_name,
	  .err = EINVAL,
	  .needle = "need keep_name" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = keep_mmap_off,
	  .err = EINVAL,
	  .needle = "a kept segment is host memory" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = alignment_not_power_of_two,
	  .err = EINVAL,
	  .needle = "alignment must be 0 (the page size in use) or a power of two" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = alignment_below_a_page,
	  .err = EINVAL,
	  .needle = "from 4096 (4 KiB) to 1073741824 (1 GiB), got 2048" },
	{ .world = 1,
	  .rank = 0,
	  .owner = 0,
	  .size = TEST_SIZE,
	  .edit = alignment_above_1g,
	  .err = EINVAL,
	  .needle = "got 2147483648" },
};

START_TEST(test_rejects_invalid_options)
{
	const struct rejection *r = &rejections[_i];
	struct mooncake_segment_options opt = test_options(r->world, r->rank, r->owner);

	if (r->edit)
		r->edit(&opt);
	expect_create_fails(r->size, &opt, r->err, r->needle);
}
END_TEST

static bool never(bool host_register, bool hugetlb)
{
	(void)host_register;
	(void)hugetlb;
	return false;
}

static bool without_hugetlb(bool host_register, bool hugetlb)
{
	(void)host_register;
	return !hugetlb;
}

/* A second backend for one mmap value is one more table line: the first that can serve wins. */
START_TEST(test_backend_choice_follows_the_table)
{
	const struct mc_backend_ops host = { .name = "host", .mmap = true, .supported = never },
				    vmm_a = { .name = "vmm-a", .mmap = false, .supported = never },
				    vmm_b = { .name = "vmm-b", .mmap = false, .supported = without_hugetlb };
	const struct mc_backend_ops *const one[] = { &host, NULL }, *const two[] = { &host, &vmm_a, &vmm_b,
										     NULL };

	/* The only one serving a value is taken even when unsupported: its ops name what is missing. */
	ck_assert_ptr_eq(mc_backend_choose(one, true, false, false), &host);
	ck_assert_ptr_null(mc_backend_choose(one, false, false, false));
	ck_assert_ptr_eq(mc_backend_choose(two, false, false, false), &vmm_b);
	/* None can: the first, whose error is the one to show. */
	ck_assert_ptr_eq(mc_backend_choose(two, false, false, true), &vmm_a);
	/* This build's own table serves mmap=true. */
	ck_assert_ptr_eq(mc_backend_for(true, false, false), mc_backends[0]);
}
END_TEST

START_TEST(test_rejects_null_arguments)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;

	ck_assert_error(mooncake_segment_create(NULL, TEST_SIZE, &opt, &seg, blob), EINVAL, "got NULL");
	ck_assert_error(mooncake_segment_create("x", TEST_SIZE, NULL, &seg, blob), EINVAL, "got NULL");
	ck_assert_error(mooncake_segment_create("x", TEST_SIZE, &opt, NULL, blob), EINVAL, "got NULL");
	ck_assert_error(mooncake_segment_create("x", TEST_SIZE, &opt, &seg, NULL), EINVAL, "got NULL");
	ck_assert_ptr_null(seg);
	ck_assert_error(mooncake_segment_complete(NULL, blob, sizeof(blob)), EINVAL, "needs a segment");
	ck_assert_error(mooncake_segment_finish(NULL), EINVAL, "finish");
}
END_TEST

START_TEST(test_unsupported_capabilities_are_enotsup)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);

	opt.mmap = false;
	ck_assert(!mooncake_segment_supported(false, false, false));
	expect_create_fails(TEST_SIZE, &opt, ENOTSUP, "no VMM backend");
	opt.mmap = true;
	opt.host_register = true;
	if (!mooncake_segment_supported(true, true, false))
		expect_create_fails(TEST_SIZE, &opt, ENOTSUP, "host_register");
	ck_assert(mooncake_segment_supported(true, false, false));
}
END_TEST

/* The reason asked without creating anything is create's own error, for
 * every combination of the flags, and 0 exactly when supported() is true. */
START_TEST(test_unsupported_reason_is_what_create_says)
{
	char reason[1024];
	int fds = count_fds(), maps = count_mappings();

	for (unsigned int flags = 0; flags < 8; flags++) {
		bool mmap = flags & 1, host_register = flags & 2, hugetlb = flags & 4;
		struct mooncake_segment_options opt = test_options(1, 0, 0);
		struct mooncake_segment *seg = NULL;
		int err = mooncake_segment_unsupported_reason(mmap, host_register, hugetlb, 0, reason,
							      sizeof(reason));

		ck_assert_msg((err == 0) == mooncake_segment_supported(mmap, host_register, hugetlb),
			      "flags %u: %d, %s", flags, err, reason);
		ck_assert_str_eq(reason, mooncake_segment_last_error());
		if (!err) {
			ck_assert_str_eq(reason, "");
			continue;
		}
		opt.mmap = mmap;
		opt.host_register = host_register;
		opt.hugetlb = hugetlb;
		opt.device_id = 0;
		ck_assert_int_eq(mooncake_segment_create("cache", TEST_SIZE, &opt, &seg, blob), err);
		ck_assert_str_eq(mooncake_segment_last_error(), reason);
	}
	/* Here, without an accelerator: no VMM backend, nor a runtime to register with. */
	ck_assert_int_eq(mooncake_segment_unsupported_reason(false, false, false, 0, reason, sizeof(reason)),
			 -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(reason, "no VMM backend"));
	ck_assert_int_eq(mooncake_segment_unsupported_reason(true, true, false, 0, reason, sizeof(reason)),
			 -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(reason, "host_register"));
	ck_assert_int_eq(mooncake_segment_unsupported_reason(false, true, false, 0, NULL, 0), -EINVAL);
	ck_assert_int_eq(mooncake_segment_unsupported_reason(true, false, false, 0, reason, sizeof(reason)),
			 0);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

START_TEST(test_getters_are_null_safe)
{
	ck_assert(!mooncake_segment_ready(NULL));
	ck_assert_ptr_null(mooncake_segment_base(NULL));
	ck_assert_uint_eq(mooncake_segment_size(NULL), 0);
	ck_assert_uint_eq(mooncake_segment_alloc_size(NULL), 0);
	ck_assert_uint_eq(mooncake_segment_device_addr(NULL), 0);
	mooncake_segment_destroy(NULL);
	ck_assert_str_eq(mooncake_segment_version(), PACKAGE_VERSION);
}
END_TEST

START_TEST(test_error_is_per_thread_and_cleared)
{
	struct mooncake_segment_options opt = test_options(0, 0, 0);
	struct mooncake_segment *seg = NULL;

	ck_assert_int_lt(mooncake_segment_create("x", 1, &opt, &seg, blob), 0);
	ck_assert_str_ne(mooncake_segment_last_error(), "");
	opt.world_size = 1;
	ck_assert_int_eq(mooncake_segment_create("x", 1, &opt, &seg, blob), 0);
	ck_assert_str_eq(mooncake_segment_last_error(), "");
	mooncake_segment_destroy(seg);
}
END_TEST

/* error.c's entry points all go through one recorder: each form's sentence,
 * and an added reason that keeps the first, its errno text and its form. */
START_TEST(test_error_entry_points_compose_one_sentence)
{
	ck_assert_int_eq(mc_error_sys(EIO, ENOENT, "open %s failed", "x"), -EIO);
	ck_assert_str_eq(mooncake_segment_last_error(), "open x failed: No such file or directory");
	ck_assert_int_eq(mc_error_add(ENOTSUP, "; and %s", "y too"), -ENOTSUP);
	ck_assert_str_eq(mooncake_segment_last_error(),
			 "open x failed: No such file or directory; and y too");
	ck_assert_int_eq(mc_last_cause()->err, ENOTSUP);
	ck_assert_int_eq(mc_last_cause()->sys_errno, 0);

	ck_assert_int_eq(mc_segment_error_sys(ENOMEM, EMFILE, "dup %d", 7), -ENOMEM);
	ck_assert_int_eq(mc_error_add(ENOMEM, " (a hint)"), -ENOMEM);
	ck_assert_int_eq(mc_error_name_rank(-ENOMEM, 3), -ENOMEM);
	ck_assert_str_eq(mooncake_segment_last_error(),
			 "Shared segment rank 3: dup 7: Too many open files (this process is out of file "
			 "descriptors: raise its limit, ulimit -n / RLIMIT_NOFILE; systemd: LimitNOFILE=; "
			 "Docker: --ulimit nofile=) (a hint)");

	ck_assert_int_eq(mc_error_no_vmm(MC_FORM_NO_VMM, "use mmap=true", "%s", "no driver"), -ENOTSUP);
	ck_assert_str_eq(mooncake_segment_last_error(),
			 "This build has no VMM backend for shared segments (no driver); use mmap=true");
	ck_assert_int_eq(mc_segment_error(EINVAL, "bad"), -EINVAL);
	ck_assert_str_eq(mooncake_segment_last_error(), "Shared segment: bad");
	ck_assert_int_eq(mc_error(EPERM, "plain %u", 1u), -EPERM);
	ck_assert_str_eq(mooncake_segment_last_error(), "plain 1");
	mc_clear_error();
}
END_TEST

Suite *suite_options(void)
{
	Suite *s = suite_create("options");
	TCase *tc = tcase_create("validation");

	tcase_add_test(tc, test_defaults);
	tcase_add_loop_test(tc, test_rejects_invalid_options, 0,
			    (int)(sizeof(rejections) / sizeof(rejections[0])));
	tcase_add_test(tc, test_zeroed_options_are_told_to_call_options_init);
	tcase_add_test(tc, test_error_entry_points_compose_one_sentence);
	tcase_add_test(tc, test_backend_choice_follows_the_table);
	tcase_add_test(tc, test_rejects_null_arguments);
	tcase_add_test(tc, test_unsupported_capabilities_are_enotsup);
	tcase_add_test(tc, test_unsupported_reason_is_what_create_says);
	tcase_add_test(tc, test_getters_are_null_safe);
	tcase_add_test(tc, test_error_is_per_thread_and_cleared);
	suite_add_tcase(s, tc);
	return s;
}
