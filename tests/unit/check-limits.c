/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Process resource limits that batch schedulers set, for real in a forked
 * child: under RLIMIT_FSIZE (ulimit -f) the owner's create is a clean error
 * naming the limit, never SIGXFSZ; under RLIMIT_AS (ulimit -v) the address
 * space failure names the limit, on the owner and on a peer.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE

/* Exit status of @fn run in a forked child, or 128 + the signal that killed it. */
static int in_child(int (*fn)(void), const char *what)
{
	pid_t pid = fork();
	int status;

	if (pid == 0)
		_exit(fn());
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status), "%s: killed by signal %d", what,
		      WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return WEXITSTATUS(status);
}

/* 0 when create() of @size as rank @rank of @world fails with -@err and @needle in its message. */
static int expect_create_error(uint64_t size, uint32_t world, uint32_t rank, int err, const char *needle)
{
	struct mooncake_segment_options opt = test_options(world, rank, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	int ret = mooncake_segment_create("limits", size, &opt, &seg, blob);

	if (ret == -err && strstr(mooncake_segment_last_error(), needle))
		return 0;
	fprintf(stderr, "create of %llu bytes as rank %u: %d (%s), expected -%d with '%s'\n",
		(unsigned long long)size, rank, ret, mooncake_segment_last_error(), err, needle);
	mooncake_segment_destroy(seg);
	return 1;
}

static int create_under_file_size_limit(void)
{
	struct rlimit r;
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	getrlimit(RLIMIT_FSIZE, &r);
	r.rlim_cur = UINT64_C(16) << 20;
	if (setrlimit(RLIMIT_FSIZE, &r) != 0)
		return 10;
	/* Signals at their default: SIGXFSZ would kill this child. */
	signal(SIGXFSZ, SIG_DFL);
	if (expect_create_error(UINT64_C(64) << 20, 1, 0, EFBIG, "ulimit -f") != 0)
		return 11;
	if (!strstr(mooncake_segment_last_error(), "RLIMIT_FSIZE"))
		return 12;
	/* Below the limit, create works as ever. */
	if (mooncake_segment_create("limits", UINT64_C(4) << 20, &opt, &seg, blob) != 0 ||
	    mooncake_segment_complete(seg, blob, BLOB) != 0)
		return 13;
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_file_size_limit_is_a_clean_error_not_sigxfsz)
{
	ck_assert_int_eq(in_child(create_under_file_size_limit, "create under ulimit -f"), 0);
}
END_TEST

static int create_under_address_space_limit(void)
{
	struct rlimit r;

	getrlimit(RLIMIT_AS, &r);
	r.rlim_cur = mc_address_space_in_use() + (UINT64_C(256) << 20);
	if (setrlimit(RLIMIT_AS, &r) != 0)
		return 10;
	/* The owner and a peer both reserve the segment's size of address space. */
	if (expect_create_error(UINT64_C(1) << 30, 1, 0, ENOMEM, "RLIMIT_AS, ulimit -v") != 0)
		return 11;
	if (expect_create_error(UINT64_C(1) << 30, 2, 1, ENOMEM, "RLIMIT_AS, ulimit -v") != 0)
		return 12;
	return 0;
}

/* Take every descriptor this process may still open (under a lowered limit). */
static void exhaust_descriptors(void)
{
	struct rlimit r;

	getrlimit(RLIMIT_NOFILE, &r);
	r.rlim_cur = (rlim_t)count_fds() + 8;
	setrlimit(RLIMIT_NOFILE, &r);
	while (dup(0) >= 0)
		;
}

/* Out of descriptors, the owner's create and a peer's complete name the limit and its fix. */
static int group_out_of_descriptors(void)
{
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	struct mooncake_segment *owner = NULL, *peer = NULL;
	uint8_t blobs[2 * BLOB];
	int ret;

	if (mooncake_segment_create("nofile", UINT64_C(4) << 20, &o, &owner, blobs) != 0 ||
	    mooncake_segment_create("nofile", UINT64_C(4) << 20, &p, &peer, blobs + BLOB) != 0)
		return 10;
	exhaust_descriptors();
	ret = mooncake_segment_complete(peer, blobs, sizeof(blobs));
	if (ret != -EMFILE || !strstr(mooncake_segment_last_error(), "ulimit -n")) {
		fprintf(stderr, "complete: %d (%s)\n", ret, mooncake_segment_last_error());
		ret = 11;
	} else {
		ret = expect_create_error(UINT64_C(4) << 20, 1, 0, EMFILE, "ulimit -n") != 0 ? 12 : 0;
	}
	/* Nothing left for a leak checker to find in this child. */
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	return ret;
}

START_TEST(test_out_of_descriptors_names_the_limit)
{
	ck_assert_int_eq(in_child(group_out_of_descriptors, "create and complete without descriptors"), 0);
}
END_TEST

START_TEST(test_address_space_limit_is_named)
{
	ck_assert_int_eq(in_child(create_under_address_space_limit, "create under ulimit -v"), 0);
}
END_TEST

Suite *suite_limits(void)
{
	Suite *s = suite_create("limits");
	TCase *tc = tcase_create("rlimits");

	tcase_add_test(tc, test_file_size_limit_is_a_clean_error_not_sigxfsz);
	tcase_add_test(tc, test_out_of_descriptors_names_the_limit);
	/* ASan and valgrind reserve terabytes of address space of their own. */
	if (under_memory_checker())
		printf("# skipping test_address_space_limit_is_named: RLIMIT_AS cannot be set under ASan or "
		       "valgrind\n");
	else
		tcase_add_test(tc, test_address_space_limit_is_named);
	suite_add_tcase(s, tc);
	return s;
}
