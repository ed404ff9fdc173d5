/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_segment_get_info(): what a segment actually got, read back from
 * the kernel (smaps for residency and huge pages), not from what was asked.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

struct smaps_totals {
	uint64_t rss;
	uint64_t huge;
};

/* Sum the smaps fields of the VMAs inside [start, end). */
static void read_smaps(uintptr_t start, uintptr_t end, struct smaps_totals *t)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[256];
	bool inside = false;
	unsigned long long kb;

	memset(t, 0, sizeof(*t));
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t lo, hi;

		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			inside = lo >= start && hi <= end;
			continue;
		}
		if (!inside)
			continue;
		if (sscanf(line, "Rss: %llu kB", &kb) == 1)
			t->rss += (uint64_t)kb << 10;
		else if (sscanf(line, "ShmemPmdMapped: %llu kB", &kb) == 1 ||
			 sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1 ||
			 sscanf(line, "Shared_Hugetlb: %llu kB", &kb) == 1 ||
			 sscanf(line, "Private_Hugetlb: %llu kB", &kb) == 1)
			t->huge += (uint64_t)kb << 10;
	}
	fclose(f);
}

MC_EXPORT int mooncake_segment_get_info(const struct mooncake_segment *seg,
					struct mooncake_segment_info *info, size_t info_size)
{
	struct mooncake_segment_info full;
	struct smaps_totals t = { 0, 0 };

	mc_clear_error();
	if (!seg || !info || info_size < sizeof(uint64_t))
		return mc_error(EINVAL, "Shared segment get_info needs a segment and an info struct");
	memset(&full, 0, sizeof(full));
	full.size = seg->size;
	full.alloc_size = seg->alloc_size;
	full.page_size = seg->page_size;
	if (seg->mapped)
		read_smaps((uintptr_t)seg->base, (uintptr_t)seg->base + seg->alloc_size, &t);
	full.resident_bytes = t.rss;
	full.huge_bytes = t.huge;
	full.commit_ns = seg->commit.ns;
	full.commit_threads = seg->commit.threads;
	full.flags = seg->info_flags | (seg->is_owner ? MOONCAKE_SEGMENT_INFO_OWNER : 0) |
		     (mooncake_segment_device_addr(seg) ? MOONCAKE_SEGMENT_INFO_REGISTERED : 0);
	full.numa_node_requested = seg->numa_node_requested;
	full.numa_node = -1;
	if (seg->mapped)
		mc_placement_query(seg->base, seg->alloc_size, seg->page_size, &full.numa_node,
				   &full.numa_node_mask);
	full.register_ns = seg->registration.ns;
	if (seg->registration.ops)
		snprintf(full.accelerator, sizeof(full.accelerator), "%s", seg->registration.ops->name);
	snprintf(full.commit_method, sizeof(full.commit_method), "%s",
		 seg->is_owner ? seg->commit.method : "none (peer)");
	/* The backend names itself, and what it counts its own way. */
	seg->backend->describe(seg, &full);
	memcpy(info, &full, info_size < sizeof(full) ? info_size : sizeof(full));
	return 0;
}
