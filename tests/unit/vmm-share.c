/* SPDX-License-Identifier: Apache-2.0 */
/* The sharing scenario every VMM backend's check program runs against its fake runtime (vmm-share.h). */
#include "config.h"

#include "vmm-share.h"

#include <stdio.h>
#include <string.h>

#include "helpers.h"

int vmm_share_rank(struct group_rank *self, const struct mooncake_segment_options *opt,
		   const struct vmm_share *expect)
{
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE], blobs[4 * MOONCAKE_SEGMENT_BLOB_SIZE], *base;
	struct mooncake_segment *seg = NULL;
	struct mooncake_segment_info info;
	int fds = count_fds(), maps = expect->count_mappings();
	uint64_t slice;

	RANK_CHECK(self->world_size >= 1 && self->world_size <= 4);
	RANK_CHECK(mooncake_segment_create("vmm", expect->size, opt, &seg, blob) == 0);
	RANK_CHECK(group_allgather(self, blob, sizeof(blob), blobs) == 0);
	RANK_CHECK(mooncake_segment_complete(seg, blobs, (size_t)self->world_size * sizeof(blob)) == 0);
	RANK_CHECK(group_barrier(self) == 0);
	RANK_CHECK(mooncake_segment_finish(seg) == 0);
	base = mooncake_segment_base(seg);
	/* One address for the host and the device. */
	RANK_CHECK(mooncake_segment_device_addr(seg) == (uintptr_t)base);
	RANK_CHECK(mooncake_segment_get_info(seg, &info, sizeof(info)) == 0);
	RANK_CHECK(strcmp(info.backend, expect->backend) == 0);
	RANK_CHECK(strcmp(info.accelerator, expect->accelerator) == 0);
	RANK_CHECK(info.alloc_size == expect->size && info.page_size == expect->page_size);
	RANK_CHECK(!expect->check || expect->check(self, seg) == 0);
	slice = info.alloc_size / (self->world_size ? self->world_size : 1);
	fill_pattern(base + self->rank * slice, slice, self->rank + 1);
	RANK_CHECK(group_barrier(self) == 0);
	for (uint32_t r = 0; r < self->world_size; r++)
		RANK_CHECK(check_pattern(base + r * slice, slice, r + 1));
	RANK_CHECK(group_barrier(self) == 0);
	mooncake_segment_destroy(seg);
	RANK_CHECK(count_fds() == fds);
	RANK_CHECK(expect->count_mappings() == maps);
	return 0;
}
