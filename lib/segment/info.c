/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_segment_get_info(): what a segment actually got, read back from
 * the kernel (smaps.c for residency and huge pages), not from what was asked.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "base/error.h"
#include "host/placement.h"
#include "mooncake/segment.h"
#include "private.h"
#include "segment.h"

MC_EXPORT int mooncake_segment_get_info(const struct mooncake_segment *seg,
					struct mooncake_segment_info *info, size_t info_size)
{
	struct mooncake_segment_info full;
	struct mc_mapping_usage usage = { 0 };
	bool commit_settled;

	mc_clear_error();
	if (!seg || !info || info_size < sizeof(uint64_t))
		return mc_error(EINVAL, "Shared segment get_info needs a segment and an info struct");
	commit_settled = mc_background_commit_settled(seg);
	memset(&full, 0, sizeof(full));
	full.size = seg->size;
	full.alloc_size = seg->memory.alloc_size;
	full.page_size = seg->memory.page_size;
	full.alignment = seg->memory.alignment;
	if (seg->memory.mapped)
		mc_mapping_usage(seg->memory.base, seg->memory.alloc_size, &usage);
	full.resident_bytes = usage.rss;
	full.huge_bytes = usage.pmd_mapped + usage.hugetlb;
	/* What the commit and the registration learn is theirs until they end. */
	if (commit_settled) {
		full.commit_ns = seg->memory.commit.ns;
		full.commit_threads = seg->memory.commit.threads;
	}
	full.flags = (commit_settled ? seg->memory.info_flags : seg->create_info_flags) |
		     (seg->memory.is_owner ? MOONCAKE_SEGMENT_INFO_OWNER : 0) |
		     (mooncake_segment_device_addr(seg) ? MOONCAKE_SEGMENT_INFO_REGISTERED : 0) |
		     (seg->keep.kept ? MOONCAKE_SEGMENT_INFO_KEPT : 0) |
		     (mooncake_segment_warm(seg) ? MOONCAKE_SEGMENT_INFO_WARM : 0);
	if (seg->keep.kept && (seg->memory.is_owner || seg->ready))
		full.keep_generation = seg->keep.generation;
	full.numa_node_requested = seg->numa_node_requested;
	full.numa_node = -1;
	if (seg->memory.mapped)
		mc_placement_query(seg->memory.base, seg->memory.alloc_size, seg->memory.page_size,
				   &full.numa_node, &full.numa_node_mask);
	if (mc_background_registration_settled(seg)) {
		full.register_ns = seg->registration.ns;
		if (seg->registration.ops)
			snprintf(full.accelerator, sizeof(full.accelerator), "%s",
				 seg->registration.ops->name);
	} else if (seg->register_runtime) {
		/* Registering behind the front: the runtime, before its first chunk. */
		snprintf(full.accelerator, sizeof(full.accelerator), "%s", seg->register_runtime);
	}
	snprintf(full.commit_method, sizeof(full.commit_method), "%s",
		 !seg->memory.is_owner ? "none (peer)"
		 : commit_settled      ? seg->memory.commit.method
				       : "committing (background)");
	/* The backend names itself, and what it counts its own way. */
	seg->backend->describe(&seg->memory, &full);
	memcpy(info, &full, info_size < sizeof(full) ? info_size : sizeof(full));
	return 0;
}
