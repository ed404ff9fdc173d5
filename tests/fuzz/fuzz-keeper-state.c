/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: arbitrary bytes as the keeper's saved state (the memfd a
 * restarted mooncake-segmentd reads from systemd's descriptor store:
 * keeper/state.c, doc/keeper-state.md), three ways: both slots of the
 * bytes as a state file, as the loader decodes them; the same after fixing
 * up each header's and payload's checksums (a fuzzer never guesses a 64-bit
 * checksum, so without this it would never reach the records); and the
 * bytes as one payload.  Beyond "no crash, no read past the file": what the
 * decoder accepts must encode back byte for byte (the format has one
 * encoding), and every refusal must come with a sentence.
 *
 * keeper/state.c is built in whole; the service-manager functions it calls
 * are stubs here (no store), and state_load() is never called.
 *
 * Built with -DMC_FUZZ_WRITE_SEEDS instead, it is the seed writer: state
 * files made by this very build's encoders (tests/fuzz/run.sh).
 *
 *   tests/fuzz/run.sh [SECONDS] [BUILDDIR] [keeper-state]
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/little-endian.h"
#include "keeper.h"
#include "state-format.h"

/* The service manager, absent. */
int service_take(const char *fdname)
{
	(void)fdname;
	return -1;
}

bool service_can_store(void)
{
	return false;
}

int service_store(const char *fdname, int fd)
{
	(void)fdname;
	(void)fd;
	return 0;
}

int service_remove(const char *fdname)
{
	(void)fdname;
	return 0;
}

uint64_t service_stored_generation_max(void)
{
	return 0;
}

#ifndef MC_FUZZ_WRITE_SEEDS

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whatever @image holds must encode to exactly the @len bytes at @payload. */
static void round_trip(const struct state_image *image, const uint8_t *payload, size_t len)
{
	/* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, as state_save() takes */
	const struct kept_segment **list = calloc(image->count + 1, sizeof(*list));
	uint8_t *again = malloc(len + 1);
	int n;

	if (!list || !again)
		abort();
	for (size_t j = 0; j < image->count; j++)
		list[j] = &image->segments[j];
	n = state_payload_encode(list, image->count, image->next_generation, again, len);
	if (n < 0 || (size_t)n != len || memcmp(again, payload, len) != 0)
		abort(); /* accepted, but not written back as it came */
	free(again);
	free(list);
}

static void check_refusal(int rc, const char *why)
{
	if (rc != -ENOMEM && (rc != -EPROTO || why[0] == '\0'))
		abort(); /* a refusal must be -EPROTO with its sentence */
}

static void decode_slots(const uint8_t *file, size_t size)
{
	for (unsigned int i = 0; i < 2; i++) {
		struct state_image image;
		struct state_slot slot;
		char why[256];
		int rc;

		why[0] = '\0';
		rc = state_slot_decode(file, size, i, &slot, &image, why, sizeof(why));
		if (rc == 0) {
			round_trip(&image, file + slot.offset, (size_t)slot.length);
			state_image_free(&image);
		} else {
			check_refusal(rc, why);
		}
	}
}

/* Header @h's checksums made right, where it says where its payload is;
 * magic, version, header size and reserved bytes left as they came. */
static void fix_checksums(uint8_t *file, size_t size, uint8_t *h)
{
	uint64_t offset = mc_get_le64(h + 16), length = mc_get_le64(h + 24);

	if (offset <= size && length <= size - offset)
		mc_put_le64(h + 32, state_checksum(file + offset, (size_t)length));
	mc_put_le64(h + 56, state_checksum(h, 56));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct state_image image;
	uint8_t *fixed;
	char why[256];
	int rc;

	decode_slots(data, size);

	fixed = malloc(size + 1);
	if (!fixed)
		abort();
	memcpy(fixed, data, size);
	for (size_t at = 0; at < 2 * STATE_HEADER_BYTES && at + STATE_HEADER_BYTES <= size;
	     at += STATE_HEADER_BYTES)
		fix_checksums(fixed, size, fixed + at);
	decode_slots(fixed, size);
	free(fixed);

	why[0] = '\0';
	rc = state_payload_decode(data, size, &image, why, sizeof(why));
	if (rc == 0) {
		round_trip(&image, data, size);
		state_image_free(&image);
	} else {
		check_refusal(rc, why);
	}
	return 0;
}

#else /* the seed writer */

static void write_seed(const char *dir, const char *name, const uint8_t *bytes, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(bytes, 1, n, f) != n || fclose(f) != 0)
		exit(1);
}

static void segment(struct kept_segment *k, const char *name, uint64_t generation, uint16_t identity_bytes)
{
	memset(k, 0, sizeof(*k));
	snprintf(k->record.name, sizeof(k->record.name), "%s", name);
	k->record.fingerprint = UINT64_C(0x0123456789abcdef);
	k->record.size = UINT64_C(1) << 30;
	k->record.page_size = 2 << 20;
	k->record.control_bytes = 4096;
	k->record.generation = generation;
	k->record.created = 1700000000;
	k->record.world_size = 4;
	k->record.owner_uid = 1000;
	k->account_uid = 1000;
	k->record.sharing = MC_KEEPER_SHARE_GROUP;
	k->record.gid = 100;
	k->record.flags = MC_KEEPER_SEGMENT_HUGETLB;
	k->record.warm_attaches = 2;
	k->record.identity_bytes = identity_bytes;
	memset(k->record.identity, 0xa5, identity_bytes);
	k->hugetlb = true;
}

/* A state file with slot A (and B when @both) holding @count segments. */
static size_t state_file(uint8_t *file, size_t room, const struct kept_segment *const *list, size_t count,
			 bool both)
{
	struct state_slot slot = { .sequence = 1, .offset = STATE_PAYLOAD_START };
	int n;

	memset(file, 0, room);
	n = state_payload_encode(list, count, 100, file + STATE_PAYLOAD_START, room - STATE_PAYLOAD_START);
	if (n < 0)
		exit(1);
	slot.length = (uint64_t)n;
	slot.checksum = state_checksum(file + slot.offset, slot.length);
	state_header_encode(&slot, file);
	if (both) {
		/* B, newer, with one segment fewer, after A's payload. */
		uint64_t at = (slot.offset + slot.length + 7) & ~UINT64_C(7);

		n = state_payload_encode(list, count ? count - 1 : 0, 101, file + at, room - at);
		if (n < 0)
			exit(1);
		slot.sequence = 2;
		slot.offset = at;
		slot.length = (uint64_t)n;
		slot.checksum = state_checksum(file + at, slot.length);
		state_header_encode(&slot, file + STATE_HEADER_BYTES);
	}
	return (size_t)(slot.offset + slot.length);
}

int main(int argc, char **argv)
{
	static uint8_t file[65536];
	static struct kept_segment segments[3];
	static char declaration[] = "kv|k:64:1024x8:torch.float16:16384;v:64:8:torch.int8:8";
	const struct kept_segment *list[3] = { &segments[0], &segments[1], &segments[2] };

	if (argc != 2)
		return 2;
	segment(&segments[0], "kv-cache", 7, 12);
	segment(&segments[1], "b.kv", 8, 0);
	segment(&segments[2], "c~1", 9, 64);
	segments[1].record.control_bytes = 0;
	segments[1].record.sharing = MC_KEEPER_SHARE_UID;
	segments[1].record.gid = 0;
	segments[1].hugetlb = false;
	segments[1].record.flags = MC_KEEPER_SEGMENT_RELEASED;
	write_seed(argv[1], "state-empty", file, state_file(file, sizeof(file), list, 0, false));
	write_seed(argv[1], "state-one", file, state_file(file, sizeof(file), list, 1, false));
	write_seed(argv[1], "state-three-two-slots", file, state_file(file, sizeof(file), list, 3, true));
	/* A record with the declaration its CREATE carried (after the identity). */
	segments[0].declaration = declaration;
	write_seed(argv[1], "state-declaration", file, state_file(file, sizeof(file), list, 3, false));
	/* A record counted in another uid's limits (a subordinate uid's, after the declaration). */
	segments[2].account_uid = 100000;
	write_seed(argv[1], "state-account", file, state_file(file, sizeof(file), list, 3, false));
	return 0;
}

#endif
