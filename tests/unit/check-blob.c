/* SPDX-License-Identifier: Apache-2.0 */
/* The blob wire format (doc/wire-format.md): layout pinned byte by byte, and every rejection. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "helpers.h"
#include "internals.h"

static struct mc_blob sample(void)
{
	struct mc_blob b;

	memset(&b, 0, sizeof(b));
	b.backend_id = MC_BACKEND_MEMFD;
	b.rank_id = 2;
	b.world_size = 4;
	b.owner_rank = 1;
	b.flags = MC_BLOB_FLAG_MMAP | MC_BLOB_FLAG_HUGETLB;
	b.page_size = 2 << 20;
	b.fingerprint = UINT64_C(0x0123456789abcdef);
	b.alloc_size = UINT64_C(6) << 20;
	for (int i = 0; i < MC_BOOT_ID_SIZE; i++)
		b.boot_id[i] = (uint8_t)(0xB0 + i);
	b.pid_namespace = UINT64_C(4026531836);
	b.net_namespace = UINT64_C(4026531840);
	b.pid = 4242;
	b.uid = 1000;
	b.handle_bytes = MC_HANDLE_MAX;
	for (int i = 0; i < MC_HANDLE_MAX; i++)
		b.handle[i] = (uint8_t)(i + 1);
	return b;
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* After a deliberate edit, make the checksum right again so a later check is reached. */
static void reseal(uint8_t *raw)
{
	uint64_t sum = mc_fnv1a_bytes(MC_FNV1A_OFFSET, raw, 248);

	for (int i = 0; i < 8; i++)
		raw[248 + i] = (uint8_t)(sum >> (8 * i));
}

START_TEST(test_round_trip_header_and_handle)
{
	struct mc_blob in = sample(), out;
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE];

	ck_assert_int_eq(mc_blob_encode(&in, raw), 0);
	ck_assert_int_eq(mc_blob_decode(raw, 2, &out), 0);
	ck_assert_uint_eq(out.version, MC_BLOB_VERSION);
	ck_assert_uint_eq(out.backend_id, in.backend_id);
	ck_assert_uint_eq(out.rank_id, 2);
	ck_assert_uint_eq(out.world_size, 4);
	ck_assert_uint_eq(out.owner_rank, 1);
	ck_assert_uint_eq(out.flags, in.flags | MC_BLOB_FLAG_HANDLE);
	ck_assert_uint_eq(out.page_size, in.page_size);
	ck_assert_uint_eq(out.fingerprint, in.fingerprint);
	ck_assert_uint_eq(out.alloc_size, in.alloc_size);
	ck_assert_mem_eq(out.boot_id, in.boot_id, MC_BOOT_ID_SIZE);
	ck_assert_uint_eq(out.pid_namespace, in.pid_namespace);
	ck_assert_uint_eq(out.net_namespace, in.net_namespace);
	ck_assert_uint_eq(out.pid, 4242);
	ck_assert_uint_eq(out.uid, 1000);
	ck_assert_uint_eq(out.handle_bytes, MC_HANDLE_MAX);
	ck_assert_mem_eq(out.handle, in.handle, MC_HANDLE_MAX);
}
END_TEST

START_TEST(test_layout_is_little_endian_at_documented_offsets)
{
	struct mc_blob in = sample();
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE];

	ck_assert_int_eq(mc_blob_encode(&in, raw), 0);
	ck_assert_mem_eq(raw, "MCSG", 4);
	ck_assert_uint_eq(raw[4] | raw[5] << 8, MC_BLOB_VERSION);
	ck_assert_uint_eq(raw[6] | raw[7] << 8, MC_BACKEND_MEMFD);
	ck_assert_uint_eq(raw[8], 2);  /* rank */
	ck_assert_uint_eq(raw[12], 4); /* world size */
	ck_assert_uint_eq(raw[16], 1); /* owner */
	ck_assert_uint_eq(raw[20], MC_BLOB_FLAG_MMAP | MC_BLOB_FLAG_HUGETLB | MC_BLOB_FLAG_HANDLE);
	ck_assert_uint_eq(le64(raw + 24), 2 << 20);
	ck_assert_uint_eq(le64(raw + 32), UINT64_C(0x0123456789abcdef));
	ck_assert_uint_eq(le64(raw + 40), UINT64_C(6) << 20);
	ck_assert_uint_eq(raw[48], 0xB0);
	ck_assert_uint_eq(le64(raw + 64), UINT64_C(4026531836));
	ck_assert_uint_eq(raw[72] | raw[73] << 8, 4242);
	ck_assert_uint_eq(raw[76] | raw[77] << 8, 1000);
	ck_assert_uint_eq(raw[80], MC_HANDLE_MAX);
	ck_assert_uint_eq(raw[88], 1);
	ck_assert_uint_eq(raw[88 + MC_HANDLE_MAX - 1], MC_HANDLE_MAX);
	ck_assert_uint_eq(le64(raw + 216), UINT64_C(4026531840));
	for (int i = 224; i < 248; i++)
		ck_assert_uint_eq(raw[i], 0);
	ck_assert_uint_eq(le64(raw + 248), mc_fnv1a_bytes(MC_FNV1A_OFFSET, raw, 248));
}
END_TEST

START_TEST(test_non_owner_blob_has_same_length_and_no_handle)
{
	struct mc_blob in = sample(), out;
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE];

	in.handle_bytes = 0;
	ck_assert_int_eq(mc_blob_encode(&in, raw), 0);
	ck_assert_int_eq(mc_blob_decode(raw, 2, &out), 0);
	ck_assert_uint_eq(out.handle_bytes, 0);
	ck_assert(!(out.flags & MC_BLOB_FLAG_HANDLE));
}
END_TEST

START_TEST(test_rejects_handles_that_do_not_fit)
{
	struct mc_blob in = sample();
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE];

	in.handle_bytes = MC_HANDLE_MAX + 1;
	ck_assert_error(mc_blob_encode(&in, raw), EINVAL, "does not fit");
}
END_TEST

/* Encode the sample, apply @edit, optionally reseal, and expect -EPROTO naming rank 3. */
static void expect_malformed(void (*edit)(uint8_t *raw), int seal, const char *needle)
{
	struct mc_blob in = sample(), out;
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE];

	in.rank_id = 3;
	ck_assert_int_eq(mc_blob_encode(&in, raw), 0);
	edit(raw);
	if (seal)
		reseal(raw);
	ck_assert_error(mc_blob_decode(raw, 3, &out), EPROTO, needle);
	ck_assert_msg(strstr(mooncake_segment_last_error(), "rank 3") != NULL, "%s",
		      mooncake_segment_last_error());
}

static void flip_magic(uint8_t *raw)
{
	raw[0] ^= 0xFF;
}
static void bump_version(uint8_t *raw)
{
	raw[4]++;
}
static void corrupt_payload(uint8_t *raw)
{
	raw[100] ^= 1;
}
static void unknown_flag(uint8_t *raw)
{
	raw[23] = 0x80;
}
static void oversized_handle(uint8_t *raw)
{
	raw[80] = MC_HANDLE_MAX + 1;
}
static void reserved_byte(uint8_t *raw)
{
	raw[240] = 1;
}
static void warm_without_kept(uint8_t *raw)
{
	raw[20] |= MC_BLOB_FLAG_WARM;
}
static void generation_without_kept(uint8_t *raw)
{
	raw[226] = 1;
}
static void reserved_header(uint8_t *raw)
{
	raw[83] = 1;
}
static void handle_flag_without_handle(uint8_t *raw)
{
	raw[80] = 0;
	memset(raw + 88, 0, MC_HANDLE_MAX);
}
static void rank_beyond_world(uint8_t *raw)
{
	raw[8] = 9;
}
static void page_not_power_of_two(uint8_t *raw)
{
	raw[24] = 3;
}
static void alloc_not_multiple(uint8_t *raw)
{
	raw[40] = 1;
}

START_TEST(test_rejects_corrupted_blobs)
{
	expect_malformed(flip_magic, 0, "magic mismatch");
	expect_malformed(bump_version, 0, "different builds");
	expect_malformed(corrupt_payload, 0, "checksum mismatch");
	expect_malformed(unknown_flag, 1, "unknown flags");
	expect_malformed(oversized_handle, 1, "oversized handle");
	expect_malformed(reserved_byte, 1, "reserved bytes");
	expect_malformed(reserved_header, 1, "reserved bytes");
	expect_malformed(handle_flag_without_handle, 1, "handle flag");
	expect_malformed(warm_without_kept, 1, "warm but not kept");
	expect_malformed(generation_without_kept, 1, "generation but is not kept");
	expect_malformed(rank_beyond_world, 1, "do not fit world size");
	expect_malformed(page_not_power_of_two, 1, "power of two");
	expect_malformed(alloc_not_multiple, 1, "multiple of the page size");
}
END_TEST

/* A kept segment's owner tells its peers what the keeper answered: warm, and the generation. */
START_TEST(test_kept_owner_blob_carries_warm_and_generation)
{
	struct mc_blob in = sample(), out;
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE];

	in.flags |= MC_BLOB_FLAG_KEPT | MC_BLOB_FLAG_WARM;
	in.keep_generation = UINT64_C(0x1122334455667788);
	ck_assert_int_eq(mc_blob_encode(&in, raw), 0);
	ck_assert_uint_eq(le64(raw + 224), UINT64_C(0x1122334455667788));
	ck_assert_uint_eq(raw[20] & (MC_BLOB_FLAG_KEPT | MC_BLOB_FLAG_WARM),
			  MC_BLOB_FLAG_KEPT | MC_BLOB_FLAG_WARM);
	for (int i = 232; i < 248; i++)
		ck_assert_uint_eq(raw[i], 0);
	ck_assert_int_eq(mc_blob_decode(raw, 2, &out), 0);
	ck_assert_uint_eq(out.keep_generation, in.keep_generation);
	ck_assert_uint_eq(out.flags & MC_BLOB_FLAG_WARM, MC_BLOB_FLAG_WARM);
}
END_TEST

START_TEST(test_version_is_checked_before_checksum)
{
	/* A future version may checksum differently: say "different builds", not "corrupted". */
	struct mc_blob in = sample(), out;
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE];

	ck_assert_int_eq(mc_blob_encode(&in, raw), 0);
	raw[4] = MC_BLOB_VERSION + 1;
	raw[200] ^= 0xFF;
	ck_assert_error(mc_blob_decode(raw, 2, &out), EPROTO, "version 3");
}
END_TEST

/* A rank of the previous release (version 1: no network namespace) is told apart from corruption. */
START_TEST(test_a_version_1_blob_is_refused_naming_both_versions_and_the_fix)
{
	struct mc_blob in = sample(), out;
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE];

	ck_assert_int_eq(mc_blob_encode(&in, raw), 0);
	raw[4] = 1;
	memset(raw + 216, 0, 8); /* version 1 had reserved bytes there */
	reseal(raw);
	ck_assert_error(mc_blob_decode(raw, 2, &out), EPROTO, "format version 1, this build speaks 2");
	ck_assert_msg(
		strstr(mooncake_segment_last_error(), "all ranks must run the same libmooncake-segment"),
		"%s", mooncake_segment_last_error());
}
END_TEST

START_TEST(test_decoder_survives_every_single_byte_flip)
{
	struct mc_blob in = sample(), out;
	uint8_t raw[MOONCAKE_SEGMENT_BLOB_SIZE], copy[MOONCAKE_SEGMENT_BLOB_SIZE];

	ck_assert_int_eq(mc_blob_encode(&in, raw), 0);
	for (int i = 0; i < MOONCAKE_SEGMENT_BLOB_SIZE; i++) {
		memcpy(copy, raw, sizeof(raw));
		copy[i] ^= 0x5A;
		ck_assert_int_eq(mc_blob_decode(copy, 2, &out), -EPROTO);
	}
}
END_TEST

Suite *suite_blob(void)
{
	Suite *s = suite_create("blob");
	TCase *tc = tcase_create("codec");

	tcase_add_test(tc, test_round_trip_header_and_handle);
	tcase_add_test(tc, test_layout_is_little_endian_at_documented_offsets);
	tcase_add_test(tc, test_non_owner_blob_has_same_length_and_no_handle);
	tcase_add_test(tc, test_rejects_handles_that_do_not_fit);
	tcase_add_test(tc, test_rejects_corrupted_blobs);
	tcase_add_test(tc, test_kept_owner_blob_carries_warm_and_generation);
	tcase_add_test(tc, test_version_is_checked_before_checksum);
	tcase_add_test(tc, test_a_version_1_blob_is_refused_naming_both_versions_and_the_fix);
	tcase_add_test(tc, test_decoder_survives_every_single_byte_flip);
	suite_add_tcase(s, tc);
	return s;
}
