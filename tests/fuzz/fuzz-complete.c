/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: arbitrary bytes as the blobs of a group, through the
 * blob decoder and every check of mooncake_segment_complete() (and, when a
 * forged owner blob passes them, the import path, which must refuse any file
 * but the owner's memfd).
 *
 * Input: byte 0 picks the world size (1-4) and this rank; the rest are the
 * world's blobs back to back (zero-padded, or truncated to test lengths).
 *
 *   tests/fuzz/run.sh [SECONDS]     builds with clang and runs on tests/fuzz/corpus
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_WORLD 4

/* One segment per (world, rank), created on first use and after a success. */
static struct mooncake_segment *segments[MAX_WORLD + 1][MAX_WORLD];

static struct mooncake_segment *segment_for(uint32_t world, uint32_t rank)
{
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	if (!segments[world][rank]) {
		mooncake_segment_options_init(&opt);
		opt.world_size = world;
		opt.rank_id = rank;
		opt.owner_rank = 0;
		if (mooncake_segment_create("fuzz", 1 << 16, &opt, &segments[world][rank], blob) != 0)
			abort();
	}
	return segments[world][rank];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t blobs[MAX_WORLD * MOONCAKE_SEGMENT_BLOB_SIZE] = { 0 };
	struct mc_blob decoded;
	uint32_t world, rank;
	size_t len;
	struct mooncake_segment *seg;

	if (size < 1)
		return 0;
	world = (uint32_t)(data[0] & 3) + 1;
	rank = (uint32_t)(data[0] >> 2 & 3) % world;
	len = size - 1 < sizeof(blobs) ? size - 1 : sizeof(blobs);
	memcpy(blobs, data + 1, len);
	for (uint32_t k = 0; k < MAX_WORLD; k++)
		(void)mc_blob_decode(blobs + k * MOONCAKE_SEGMENT_BLOB_SIZE, k, &decoded);

	seg = segment_for(world, rank);
	/* The top bits of byte 0 also try a wrong total length. */
	len = (size_t)world * MOONCAKE_SEGMENT_BLOB_SIZE - (data[0] & 0x80 ? 1 : 0);
	if (mooncake_segment_complete(seg, blobs, len) == 0) {
		mooncake_segment_destroy(seg);
		segments[world][rank] = NULL;
	}
	return 0;
}
