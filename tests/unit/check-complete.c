/* SPDX-License-Identifier: Apache-2.0 */
/*
 * complete(): every check in its documented order, the first failure
 * winning and naming the rank; a failed complete leaves nothing mapped and
 * a later correct complete still works.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "helpers.h"
#include "internals.h"

#define BLOB  MOONCAKE_SEGMENT_BLOB_SIZE
#define WORLD 3

struct trio {
	struct mooncake_segment *seg[WORLD];
	uint8_t blobs[WORLD * BLOB];
};

/* Three ranks of one segment in this process, owner 0. */
static void trio_create(struct trio *t, const char *name, uint64_t size)
{
	for (uint32_t r = 0; r < WORLD; r++) {
		struct mooncake_segment_options opt = test_options(WORLD, r, 0);

		ck_assert_int_eq(mooncake_segment_create(name, size, &opt, &t->seg[r], t->blobs + r * BLOB),
				 0);
	}
}

static void trio_destroy(struct trio *t)
{
	for (uint32_t r = 0; r < WORLD; r++)
		mooncake_segment_destroy(t->seg[r]);
}

/* Decode rank @r's blob, let @edit change it, encode it back. */
static void forge(struct trio *t, uint32_t r, void (*edit)(struct mc_blob *b))
{
	struct mc_blob b;

	ck_assert_int_eq(mc_blob_decode(t->blobs + r * BLOB, r, &b), 0);
	edit(&b);
	ck_assert_int_eq(mc_blob_encode(&b, t->blobs + r * BLOB), 0);
}

/* Rank 1 (a non-owner) must fail with @err/@needle and map nothing. */
static void expect_rejected(struct trio *t, int err, const char *needle)
{
	int maps = count_mappings(), fds = count_fds();

	ck_assert_error(mooncake_segment_complete(t->seg[1], t->blobs, sizeof(t->blobs)), err, needle);
	ck_assert(!mooncake_segment_ready(t->seg[1]));
	ck_assert_int_eq(count_mappings(), maps);
	ck_assert_int_eq(count_fds(), fds);
	/* The owner rejects the same bad blob too: every rank checks every blob. */
	ck_assert_int_eq(mooncake_segment_complete(t->seg[0], t->blobs, sizeof(t->blobs)), -err);
}

static void swap_rank(struct mc_blob *b)
{
	b->rank_id = 1;
}
static void other_host(struct mc_blob *b)
{
	b->boot_id[3] ^= 0x40;
}
static void other_backend(struct mc_blob *b)
{
	b->backend_id = MC_BACKEND_ASCEND_VMM;
}
static void other_world(struct mc_blob *b)
{
	b->world_size = 4;
}
static void other_owner(struct mc_blob *b)
{
	b->owner_rank = 1;
}
static void other_flags(struct mc_blob *b)
{
	b->flags |= MC_BLOB_FLAG_HUGETLB;
}
static void other_fingerprint(struct mc_blob *b)
{
	b->fingerprint ^= 1;
}
static void other_page_size(struct mc_blob *b)
{
	b->page_size *= 2;
	b->alloc_size = mc_align_up(b->alloc_size, b->page_size);
}
static void other_alloc_size(struct mc_blob *b)
{
	b->alloc_size += b->page_size;
}
static void drop_handle(struct mc_blob *b)
{
	b->handle_bytes = 0;
	memset(b->handle, 0, sizeof(b->handle));
}
static void other_pid_namespace(struct mc_blob *b)
{
	b->pid_namespace ^= 1;
}
static void other_pid_and_network_namespace(struct mc_blob *b)
{
	b->pid_namespace ^= 1;
	b->net_namespace ^= 1;
}
/* The owner's blob as if it served no socket (bytes 24..31: the socket id). */
static void other_pid_namespace_and_no_socket(struct mc_blob *b)
{
	b->pid_namespace ^= 1;
	memset(b->handle + 24, 0, 8);
}
static void other_pid_namespace_and_wrong_token(struct mc_blob *b)
{
	b->pid_namespace ^= 1;
	b->handle[32 + 5] ^= 0x10;
}
static void other_inode(struct mc_blob *b)
{
	b->handle[16] ^= 1;
}
static void not_a_memfd_handle(struct mc_blob *b)
{
	b->handle_bytes = 5;
}

#define REJECTION_TEST(test, rank, edit, err, needle) \
	START_TEST(test)                              \
	{                                             \
		struct trio t;                        \
		trio_create(&t, "kv", TEST_SIZE);     \
		forge(&t, rank, edit);                \
		expect_rejected(&t, err, needle);     \
		trio_destroy(&t);                     \
	}                                             \
	END_TEST

REJECTION_TEST(test_rejects_out_of_order_rank, 2, swap_rank, EINVAL,
	       "blob of rank 2 carries a different rank id (1)")
REJECTION_TEST(test_rejects_other_host, 2, other_host, EXDEV, "rank 2 runs on another host")
REJECTION_TEST(test_rejects_forged_backend, 2, other_backend, EINVAL, "backend of rank 2")
REJECTION_TEST(test_rejects_other_world_size, 2, other_world, EINVAL, "rank 2 declares world_size 4")
REJECTION_TEST(test_rejects_other_owner, 2, other_owner, EINVAL, "owner 1")
REJECTION_TEST(test_rejects_other_flags, 2, other_flags, EINVAL, "hugetlb=true")
REJECTION_TEST(test_rejects_other_fingerprint, 2, other_fingerprint, EINVAL, "declaration of rank 2 differs")
REJECTION_TEST(test_rejects_other_page_size, 2, other_page_size, EINVAL, "page size of rank 2")
REJECTION_TEST(test_rejects_other_alloc_size, 2, other_alloc_size, EINVAL, "allocation size of rank 2")
REJECTION_TEST(test_rejects_owner_without_handle, 0, drop_handle, EPROTO, "did not export a handle")

START_TEST(test_rejects_wrong_blob_buffer_length)
{
	struct trio t;

	trio_create(&t, "kv", TEST_SIZE);
	ck_assert_error(mooncake_segment_complete(t.seg[1], t.blobs, 2 * BLOB), EINVAL,
			"one blob per rank, got 2 (512 bytes; 3 ranks need 3 x 256 = 768 bytes)");
	ck_assert_error(mooncake_segment_complete(t.seg[1], t.blobs, 3 * BLOB + 1), EINVAL,
			"got 3 (769 bytes;");
	trio_destroy(&t);
}
END_TEST

START_TEST(test_first_failure_wins_in_rank_order)
{
	struct trio t;

	trio_create(&t, "kv", TEST_SIZE);
	forge(&t, 2, other_host);  /* would be EXDEV */
	t.blobs[1 * BLOB] ^= 0xFF; /* rank 1: bad magic, checked first */
	ck_assert_error(mooncake_segment_complete(t.seg[0], t.blobs, sizeof(t.blobs)), EPROTO,
			"Shared segment blob magic mismatch");
	ck_assert_msg(strstr(mooncake_segment_last_error(), "(the blob of rank 1)"), "%s",
		      mooncake_segment_last_error());
	trio_destroy(&t);
}
END_TEST

START_TEST(test_rejects_mismatching_declarations_of_real_ranks)
{
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];

	/* Same size, another name (another block layout in the tag). */
	ck_assert_int_eq(mooncake_segment_create("kv|a:1:8:torch.float16:16", TEST_SIZE, &o, &owner, blobs),
			 0);
	ck_assert_int_eq(
		mooncake_segment_create("kv|a:1:8:torch.bfloat16:16", TEST_SIZE, &p, &peer, blobs + BLOB), 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EINVAL,
			"declaration of rank 0 differs");
	mooncake_segment_destroy(peer);
	/* Another size: the fingerprint catches it first. */
	ck_assert_int_eq(mooncake_segment_create("kv|a:1:8:torch.float16:16", TEST_SIZE + 4096, &p, &peer,
						 blobs + BLOB),
			 0);
	ck_assert_error(mooncake_segment_complete(owner, blobs, sizeof(blobs)), EINVAL,
			"declaration of rank 1 differs");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

/* The owner's pid means nothing there, but its socket serves this network namespace. */
START_TEST(test_other_pid_namespace_is_served_by_the_owners_socket)
{
	struct trio t;

	trio_create(&t, "kv", TEST_SIZE);
	forge(&t, 0, other_pid_namespace);
	for (uint32_t r = 0; r < WORLD; r++)
		ck_assert_int_eq(mooncake_segment_complete(t.seg[r], t.blobs, sizeof(t.blobs)), 0);
	((uint8_t *)mooncake_segment_base(t.seg[0]))[9] = 99;
	ck_assert_uint_eq(((uint8_t *)mooncake_segment_base(t.seg[1]))[9], 99);
	trio_destroy(&t);
}
END_TEST

START_TEST(test_other_pid_and_network_namespace_is_eacces_naming_both_fixes)
{
	struct trio t;

	trio_create(&t, "kv", TEST_SIZE);
	forge(&t, 0, other_pid_and_network_namespace);
	ck_assert_error(mooncake_segment_complete(t.seg[1], t.blobs, sizeof(t.blobs)), EACCES,
			"another PID namespace");
	ck_assert_msg(strstr(mooncake_segment_last_error(), "another network namespace") &&
			      strstr(mooncake_segment_last_error(), "--pid=host") &&
			      strstr(mooncake_segment_last_error(), "shareProcessNamespace") &&
			      strstr(mooncake_segment_last_error(), "--network=container:NAME"),
		      "%s", mooncake_segment_last_error());
	trio_destroy(&t);
}
END_TEST

START_TEST(test_other_pid_namespace_without_a_socket_names_the_pid_namespace_fix)
{
	struct trio t;

	trio_create(&t, "kv", TEST_SIZE);
	forge(&t, 0, other_pid_namespace_and_no_socket);
	ck_assert_error(mooncake_segment_complete(t.seg[1], t.blobs, sizeof(t.blobs)), EACCES,
			"does not serve its pages over a Unix socket");
	ck_assert_msg(strstr(mooncake_segment_last_error(), "--pid=host"), "%s",
		      mooncake_segment_last_error());
	trio_destroy(&t);
}
END_TEST

START_TEST(test_wrong_token_from_another_pid_namespace_is_refused)
{
	struct trio t;
	int maps, fds;

	trio_create(&t, "kv", TEST_SIZE);
	forge(&t, 0, other_pid_namespace_and_wrong_token);
	maps = count_mappings();
	fds = count_fds();
	ck_assert_error(mooncake_segment_complete(t.seg[1], t.blobs, sizeof(t.blobs)), EACCES,
			"refused the token");
	ck_assert_int_eq(count_mappings(), maps);
	ck_assert_int_eq(count_fds(), fds);
	trio_destroy(&t);
}
END_TEST

START_TEST(test_handle_of_another_file_is_esrch)
{
	/* Same pid and fd, another inode: as after a pid reuse. */
	struct trio t;
	int maps;

	trio_create(&t, "kv", TEST_SIZE);
	forge(&t, 0, other_inode);
	maps = count_mappings();
	ck_assert_error(mooncake_segment_complete(t.seg[1], t.blobs, sizeof(t.blobs)), ESRCH,
			"owner process");
	ck_assert_int_eq(count_mappings(), maps);
	trio_destroy(&t);
}
END_TEST

START_TEST(test_handle_that_is_not_memfd_is_eproto)
{
	struct trio t;

	trio_create(&t, "kv", TEST_SIZE);
	forge(&t, 0, not_a_memfd_handle);
	ck_assert_error(mooncake_segment_complete(t.seg[1], t.blobs, sizeof(t.blobs)), EPROTO,
			"not a memfd handle");
	trio_destroy(&t);
}
END_TEST

START_TEST(test_failed_complete_can_be_retried)
{
	struct trio t;
	uint8_t saved[BLOB];

	trio_create(&t, "kv", TEST_SIZE);
	memcpy(saved, t.blobs + 2 * BLOB, BLOB);
	forge(&t, 2, other_fingerprint);
	ck_assert_int_eq(mooncake_segment_complete(t.seg[1], t.blobs, sizeof(t.blobs)), -EINVAL);
	memcpy(t.blobs + 2 * BLOB, saved, BLOB);
	for (uint32_t r = 0; r < WORLD; r++)
		ck_assert_int_eq(mooncake_segment_complete(t.seg[r], t.blobs, sizeof(t.blobs)), 0);
	((uint8_t *)mooncake_segment_base(t.seg[2]))[7] = 42;
	ck_assert_uint_eq(((uint8_t *)mooncake_segment_base(t.seg[1]))[7], 42);
	trio_destroy(&t);
}
END_TEST

Suite *suite_complete(void)
{
	Suite *s = suite_create("complete");
	TCase *tc = tcase_create("checks");

	tcase_add_test(tc, test_rejects_wrong_blob_buffer_length);
	tcase_add_test(tc, test_rejects_out_of_order_rank);
	tcase_add_test(tc, test_rejects_other_host);
	tcase_add_test(tc, test_rejects_forged_backend);
	tcase_add_test(tc, test_rejects_other_world_size);
	tcase_add_test(tc, test_rejects_other_owner);
	tcase_add_test(tc, test_rejects_other_flags);
	tcase_add_test(tc, test_rejects_other_fingerprint);
	tcase_add_test(tc, test_rejects_other_page_size);
	tcase_add_test(tc, test_rejects_other_alloc_size);
	tcase_add_test(tc, test_rejects_owner_without_handle);
	tcase_add_test(tc, test_first_failure_wins_in_rank_order);
	tcase_add_test(tc, test_rejects_mismatching_declarations_of_real_ranks);
	tcase_add_test(tc, test_other_pid_namespace_is_served_by_the_owners_socket);
	tcase_add_test(tc, test_other_pid_and_network_namespace_is_eacces_naming_both_fixes);
	tcase_add_test(tc, test_other_pid_namespace_without_a_socket_names_the_pid_namespace_fix);
	tcase_add_test(tc, test_wrong_token_from_another_pid_namespace_is_refused);
	tcase_add_test(tc, test_handle_of_another_file_is_esrch);
	tcase_add_test(tc, test_handle_that_is_not_memfd_is_eproto);
	tcase_add_test(tc, test_failed_complete_can_be_retried);
	suite_add_tcase(s, tc);
	return s;
}
