/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host registration in chunks, for every runtime: drivers cap one call, so a
 * mapping is registered a chunk at a time; the chunks must form one
 * contiguous device range, and a failing chunk unregisters the ones before
 * it in reverse, so a failure leaves nothing registered.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "base/error.h"
#include "mooncake/segment.h"
#include "accel.h"

void mc_unregister_chunks(struct mc_registration *reg, const struct mc_chunk_ops *ops)
{
	while (reg->chunks > 0) {
		reg->chunks--;
		ops->unregister_chunk((char *)reg->addr + (uint64_t)reg->chunks * reg->chunk);
	}
}

static unsigned int chunk_count(const struct mc_registration *reg)
{
	return (unsigned int)((reg->len + reg->chunk - 1) / reg->chunk);
}

bool mc_registration_done(const struct mc_registration *reg)
{
	return reg->chunks >= chunk_count(reg);
}

uint64_t mc_registration_end(const struct mc_registration *reg)
{
	uint64_t end = (uint64_t)reg->chunks * reg->chunk;

	return end < reg->len ? end : reg->len;
}

int mc_register_next_chunk(struct mc_registration *reg, const struct mc_chunk_ops *ops)
{
	unsigned int total = chunk_count(reg);
	uint64_t off = (uint64_t)reg->chunks * reg->chunk, device_addr = 0;
	uint64_t len = reg->len - off < reg->chunk ? reg->len - off : reg->chunk;
	char why[160];
	int err = ops->register_chunk((char *)reg->addr + off, len, &device_addr, why, sizeof(why));

	if (!err && reg->chunks == 0)
		reg->device_addr = device_addr;
	if (!err && device_addr != reg->device_addr + off) {
		/* Registered, but not where the range continues: undo it too. */
		ops->unregister_chunk((char *)reg->addr + off);
		snprintf(why, sizeof(why),
			 "the chunks are not contiguous on the device (no unified addressing)");
		err = -ENOTSUP;
	}
	if (err) {
		unsigned int before = reg->chunks;

		mc_unregister_chunks(reg, ops);
		reg->device_addr = 0;
		return mc_error(
			-err,
			"%s (Shared segment %s host registration of chunk %u of %u, %llu bytes at "
			"offset %llu of the range registered, on device %d; the %u chunk(s) before it "
			"were unregistered)",
			why, ops->runtime, before + 1, total, (unsigned long long)len,
			(unsigned long long)off, reg->device, before);
	}
	reg->chunks++;
	mc_log(MOONCAKE_SEGMENT_LOG_INFO, "Shared segment: registered %llu of %llu bytes with %s device %d",
	       (unsigned long long)mc_registration_end(reg), (unsigned long long)reg->len, ops->runtime,
	       reg->device);
	return 0;
}
