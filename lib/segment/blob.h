/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The blob every rank publishes at create (blob.c): a fixed-size,
 * little-endian, versioned record of who the rank is, what it declared (the
 * fingerprint) and, from the owner, what its backend exported.
 * doc/wire-format.md is the byte layout.
 */
#ifndef MOONCAKE_SEGMENT_BLOB_H
#define MOONCAKE_SEGMENT_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "host/host.h"
#include "mooncake/segment.h"

#define MC_BLOB_MAGIC	UINT32_C(0x4753434D) /* bytes "MCSG" */
#define MC_BLOB_VERSION 2

#define MC_BLOB_FLAG_MMAP	   (1u << 0)
#define MC_BLOB_FLAG_HOST_REGISTER (1u << 1)
#define MC_BLOB_FLAG_HUGETLB	   (1u << 2)
#define MC_BLOB_FLAG_HANDLE	   (1u << 3)
#define MC_BLOB_FLAG_KEPT	   (1u << 4) /* a kept segment (the fingerprint covers its keep options) */
#define MC_BLOB_FLAG_WARM	   (1u << 5) /* owner: the keeper's pages existed before this group */
#define MC_BLOB_FLAGS_KNOWN                                                                            \
	(MC_BLOB_FLAG_MMAP | MC_BLOB_FLAG_HOST_REGISTER | MC_BLOB_FLAG_HUGETLB | MC_BLOB_FLAG_HANDLE | \
	 MC_BLOB_FLAG_KEPT | MC_BLOB_FLAG_WARM)
/* The flags that are part of the declaration (the fingerprint covers them). */
#define MC_BLOB_FLAGS_DECLARED (MC_BLOB_FLAG_MMAP | MC_BLOB_FLAG_HOST_REGISTER | MC_BLOB_FLAG_HUGETLB)

/* The decoded form of a blob. */
struct mc_blob {
	uint16_t version;
	uint16_t backend_id;
	uint32_t rank_id;
	uint32_t world_size;
	uint32_t owner_rank;
	uint32_t flags;
	uint64_t page_size;
	uint64_t fingerprint;
	uint64_t alloc_size;
	uint8_t boot_id[MC_BOOT_ID_SIZE];
	uint64_t pid_namespace;
	uint32_t pid;
	uint32_t uid;
	uint16_t handle_bytes;
	uint8_t handle[MC_HANDLE_MAX];
	uint64_t net_namespace;
	uint64_t keep_generation; /* owner of a kept segment: the keeper's generation; else 0 */
};

uint64_t mc_fnv1a_bytes(uint64_t hash, const void *data, size_t len);
uint64_t mc_fnv1a_u64(uint64_t hash, uint64_t value);
#define MC_FNV1A_OFFSET UINT64_C(0xcbf29ce484222325)

uint64_t mc_fingerprint(const char *name, uint64_t size, const struct mooncake_segment_options *opt);
/* Encode @b into exactly MOONCAKE_SEGMENT_BLOB_SIZE bytes; -EINVAL if the handle does not fit. */
int mc_blob_encode(const struct mc_blob *b, uint8_t out[MOONCAKE_SEGMENT_BLOB_SIZE]);
/* Decode and check the format of one blob; -EPROTO with a message naming @rank. */
int mc_blob_decode(const uint8_t in[MOONCAKE_SEGMENT_BLOB_SIZE], uint32_t rank, struct mc_blob *b);

#endif
