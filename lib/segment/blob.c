/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The blob every rank publishes after create(): a fixed-size, explicitly
 * little-endian record (doc/wire-format.md), and the fingerprint of a
 * declaration.  The decoder takes any 256 bytes (it is fuzzed) and rejects
 * every malformed one with -EPROTO and a message naming the rank.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "backends/backend.h"
#include "base/base.h"
#include "base/error.h"
#include "base/little-endian.h"
#include "host/host.h"
#include "mooncake/segment.h"
#include "blob.h"

enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 4,
	OFF_BACKEND = 6,
	OFF_RANK = 8,
	OFF_WORLD = 12,
	OFF_OWNER = 16,
	OFF_FLAGS = 20,
	OFF_PAGE_SIZE = 24,
	OFF_FINGERPRINT = 32,
	OFF_ALLOC_SIZE = 40,
	OFF_BOOT_ID = 48,
	OFF_PID_NS = 64,
	OFF_PID = 72,
	OFF_UID = 76,
	OFF_HANDLE_BYTES = 80,
	OFF_RESERVED1 = 82,
	OFF_HANDLE = 88,
	OFF_NET_NS = OFF_HANDLE + MC_HANDLE_MAX,
	OFF_KEEP_GENERATION = OFF_NET_NS + 8,
	OFF_RESERVED2 = OFF_KEEP_GENERATION + 8,
	OFF_CHECKSUM = MOONCAKE_SEGMENT_BLOB_SIZE - 8,
};

_Static_assert(OFF_NET_NS == 216, "handle area moved");
_Static_assert(OFF_CHECKSUM == 248, "checksum moved");

#define FNV1A_PRIME UINT64_C(1099511628211)

uint64_t mc_fnv1a_bytes(uint64_t hash, const void *data, size_t len)
{
	const uint8_t *p = data;

	for (size_t i = 0; i < len; i++) {
		hash ^= p[i];
		hash *= FNV1A_PRIME;
	}
	return hash;
}

uint64_t mc_fnv1a_u64(uint64_t hash, uint64_t value)
{
	uint8_t le[8];

	mc_put_le64(le, value);
	return mc_fnv1a_bytes(hash, le, sizeof(le));
}

/* FNV-1a 64 over the name bytes, then each declared value as 8 LE bytes.
 * rank_id and device_id are per rank, so they are left out. */
uint64_t mc_fingerprint(const char *name, uint64_t size, const struct mooncake_segment_options *opt)
{
	uint64_t h = mc_fnv1a_bytes(MC_FNV1A_OFFSET, name, strlen(name));

	h = mc_fnv1a_u64(h, size);
	h = mc_fnv1a_u64(h, opt->world_size);
	h = mc_fnv1a_u64(h, opt->owner_rank);
	h = mc_fnv1a_u64(h, opt->mmap ? 1 : 0);
	h = mc_fnv1a_u64(h, opt->host_register ? 1 : 0);
	h = mc_fnv1a_u64(h, opt->hugetlb ? 1 : 0);
	/* Only when declared, so that a declaration without slots keeps its fingerprint. */
	if (opt->slot_count)
		h = mc_fnv1a_u64(mc_fnv1a_bytes(h, "slots", 5), opt->slot_count);
	/* Likewise an alignment above a base page: 4096 asks for what every
	 * mapping has, so it declares the same segment as 0. */
	if (opt->alignment > MOONCAKE_SEGMENT_MIN_ALIGNMENT)
		h = mc_fnv1a_u64(mc_fnv1a_bytes(h, "alignment", 9), opt->alignment);
	return h;
}

static uint64_t checksum(const uint8_t *blob)
{
	return mc_fnv1a_bytes(MC_FNV1A_OFFSET, blob, OFF_CHECKSUM);
}

int mc_blob_encode(const struct mc_blob *b, uint8_t out[MOONCAKE_SEGMENT_BLOB_SIZE])
{
	uint32_t flags = b->flags & ~MC_BLOB_FLAG_HANDLE;

	if (b->handle_bytes > MC_HANDLE_MAX)
		return mc_error(EINVAL,
				"Shared segment handle of %u bytes does not fit in a blob (%d at most)",
				b->handle_bytes, MC_HANDLE_MAX);
	if (b->handle_bytes)
		flags |= MC_BLOB_FLAG_HANDLE;

	memset(out, 0, MOONCAKE_SEGMENT_BLOB_SIZE);
	mc_put_le32(out + OFF_MAGIC, MC_BLOB_MAGIC);
	mc_put_le16(out + OFF_VERSION, MC_BLOB_VERSION);
	mc_put_le16(out + OFF_BACKEND, b->backend_id);
	mc_put_le32(out + OFF_RANK, b->rank_id);
	mc_put_le32(out + OFF_WORLD, b->world_size);
	mc_put_le32(out + OFF_OWNER, b->owner_rank);
	mc_put_le32(out + OFF_FLAGS, flags);
	mc_put_le64(out + OFF_PAGE_SIZE, b->page_size);
	mc_put_le64(out + OFF_FINGERPRINT, b->fingerprint);
	mc_put_le64(out + OFF_ALLOC_SIZE, b->alloc_size);
	memcpy(out + OFF_BOOT_ID, b->boot_id, MC_BOOT_ID_SIZE);
	mc_put_le64(out + OFF_PID_NS, b->pid_namespace);
	mc_put_le32(out + OFF_PID, b->pid);
	mc_put_le32(out + OFF_UID, b->uid);
	mc_put_le16(out + OFF_HANDLE_BYTES, b->handle_bytes);
	memcpy(out + OFF_HANDLE, b->handle, b->handle_bytes);
	mc_put_le64(out + OFF_NET_NS, b->net_namespace);
	mc_put_le64(out + OFF_KEEP_GENERATION, b->keep_generation);
	mc_put_le64(out + OFF_CHECKSUM, checksum(out));
	return 0;
}

static bool all_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/* Every format error leads with upstream's wording and then names the rank
 * whose blob it is (the `rank` in scope). */
#define MALFORMED(fmt, ...) \
	mc_error(EPROTO, "Shared segment blob " fmt " (the blob of rank %u)", ##__VA_ARGS__, rank)

int mc_blob_decode(const uint8_t in[MOONCAKE_SEGMENT_BLOB_SIZE], uint32_t rank, struct mc_blob *b)
{
	uint32_t magic = mc_get_le32(in + OFF_MAGIC);

	memset(b, 0, sizeof(*b));
	if (magic != MC_BLOB_MAGIC)
		return MALFORMED("magic mismatch: 0x%08x, expected 0x%08x, not a mooncake-segment blob",
				 magic, MC_BLOB_MAGIC);
	b->version = mc_get_le16(in + OFF_VERSION);
	if (b->version != MC_BLOB_VERSION)
		return MALFORMED(
			"version mismatch, peers run different builds of mooncake-segment: format version %u, "
			"this build speaks %u; all ranks must run the same libmooncake-segment",
			b->version, MC_BLOB_VERSION);
	if (mc_get_le64(in + OFF_CHECKSUM) != checksum(in))
		return MALFORMED("checksum mismatch: it was corrupted or truncated in transit");

	b->backend_id = mc_get_le16(in + OFF_BACKEND);
	b->rank_id = mc_get_le32(in + OFF_RANK);
	b->world_size = mc_get_le32(in + OFF_WORLD);
	b->owner_rank = mc_get_le32(in + OFF_OWNER);
	b->flags = mc_get_le32(in + OFF_FLAGS);
	b->page_size = mc_get_le64(in + OFF_PAGE_SIZE);
	b->fingerprint = mc_get_le64(in + OFF_FINGERPRINT);
	b->alloc_size = mc_get_le64(in + OFF_ALLOC_SIZE);
	memcpy(b->boot_id, in + OFF_BOOT_ID, MC_BOOT_ID_SIZE);
	b->pid_namespace = mc_get_le64(in + OFF_PID_NS);
	b->pid = mc_get_le32(in + OFF_PID);
	b->uid = mc_get_le32(in + OFF_UID);
	b->handle_bytes = mc_get_le16(in + OFF_HANDLE_BYTES);
	b->net_namespace = mc_get_le64(in + OFF_NET_NS);
	b->keep_generation = mc_get_le64(in + OFF_KEEP_GENERATION);

	if (b->flags & ~MC_BLOB_FLAGS_KNOWN)
		return MALFORMED("has unknown flags 0x%x", b->flags & ~MC_BLOB_FLAGS_KNOWN);
	if (b->handle_bytes > MC_HANDLE_MAX)
		return MALFORMED("declares an oversized handle of %u bytes, %d at most", b->handle_bytes,
				 MC_HANDLE_MAX);
	if (!!(b->flags & MC_BLOB_FLAG_HANDLE) != (b->handle_bytes > 0))
		return MALFORMED("handle flag and handle length %u disagree", b->handle_bytes);
	if (b->flags & MC_BLOB_FLAG_WARM && !(b->flags & MC_BLOB_FLAG_KEPT))
		return MALFORMED("says warm but not kept");
	if (b->keep_generation && !(b->flags & MC_BLOB_FLAG_KEPT))
		return MALFORMED("carries a keeper generation but is not kept");
	if (!all_zero(in + OFF_RESERVED1, OFF_HANDLE - OFF_RESERVED1) ||
	    !all_zero(in + OFF_HANDLE + b->handle_bytes, OFF_NET_NS - OFF_HANDLE - b->handle_bytes) ||
	    !all_zero(in + OFF_RESERVED2, OFF_CHECKSUM - OFF_RESERVED2))
		return MALFORMED("has reserved bytes that are not zero");
	if (b->world_size == 0 || b->rank_id >= b->world_size || b->owner_rank >= b->world_size)
		return MALFORMED("rank %u and owner %u do not fit world size %u", b->rank_id, b->owner_rank,
				 b->world_size);
	if (!mc_is_power_of_two(b->page_size))
		return MALFORMED("page size %llu is not a power of two", (unsigned long long)b->page_size);
	if (b->alloc_size == 0 || b->alloc_size % b->page_size)
		return MALFORMED("allocation size %llu is not a positive multiple of the page size %llu",
				 (unsigned long long)b->alloc_size, (unsigned long long)b->page_size);
	memcpy(b->handle, in + OFF_HANDLE, b->handle_bytes);
	return 0;
}
