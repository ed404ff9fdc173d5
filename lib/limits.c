/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Will the memory fit?  Checked before the owner commits a page, because a
 * memory cgroup limit answers an oversized commit with the OOM killer, even
 * under fallocate: the only clean error is the one given before trying.
 *
 * The cgroup's room is read by cgroup.c.  HugeTLB pages are not charged to the
 * memory cgroup and come from their own pool, which mmap checks for us.
 */
#include "config.h"

#include <errno.h>

#include "internal.h"

int mc_check_memory_room(const struct mooncake_segment *seg)
{
	struct mc_memory_room room;
	uint64_t available, swap, total;
	char proc_cgroup[1024], cgroup_root[1024];

	if (seg->opt.hugetlb)
		return 0;
	if (mc_cgroup_memory_room(mc_host_path(proc_cgroup, sizeof(proc_cgroup), "/proc/self/cgroup"),
				  mc_host_path(cgroup_root, sizeof(cgroup_root), "/sys/fs/cgroup"), &room) &&
	    seg->alloc_size > room.room)
		return mc_error(
			ENOMEM,
			"Shared segment '%s' needs %llu bytes but its memory cgroup has room for %llu "
			"(limit %llu, usage %llu, %s); committing would end in the OOM killer. Raise the limit "
			"(Docker: --memory; Kubernetes: resources.limits.memory; systemd: MemoryMax=) or create a "
			"smaller segment",
			seg->label, (unsigned long long)seg->alloc_size, (unsigned long long)room.room,
			(unsigned long long)room.limit, (unsigned long long)room.usage, room.where);
	available = mc_meminfo_field("MemAvailable");
	swap = mc_meminfo_field("SwapFree");
	total = available + swap;
	if (available && seg->alloc_size > total)
		return mc_error(
			ENOMEM,
			"Shared segment '%s' needs %llu bytes but the host has %llu available "
			"(MemAvailable %llu + SwapFree %llu); create a smaller segment or free memory",
			seg->label, (unsigned long long)seg->alloc_size, (unsigned long long)total,
			(unsigned long long)available, (unsigned long long)swap);
	return 0;
}
