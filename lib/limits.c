/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Will the memory fit?  Checked before the owner commits a page, because a
 * memory cgroup limit answers an oversized commit with the OOM killer, even
 * under fallocate: the only clean error is the one given before trying.
 *
 * The cgroup's room is read by cgroup.c.  HugeTLB pages are not charged to the
 * memory cgroup and come from their own pool, which mmap checks for us.
 *
 * Process resource limits, too: RLIMIT_FSIZE (ulimit -f), which the kernel
 * enforces on the memfd with SIGXFSZ, is checked before the file is sized;
 * RLIMIT_AS (ulimit -v) is named when address space runs out.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>

#include "internal.h"

int mc_check_memory_room(const struct mooncake_segment *seg)
{
	struct mc_memory_room room;
	uint64_t available, swap, total;

	if (seg->opt.hugetlb)
		return 0;
	if (mc_cgroup_memory_room("/proc/self/cgroup", "/sys/fs/cgroup", &room) &&
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

int mc_check_file_size_limit(const struct mooncake_segment *seg)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_FSIZE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || seg->alloc_size <= r.rlim_cur)
		return 0;
	return mc_error(
		EFBIG,
		"Shared segment '%s' needs a memfd of %llu bytes but this process's file size limit "
		"(RLIMIT_FSIZE, ulimit -f) is %llu bytes, and sizing the file past it would kill the "
		"process with SIGXFSZ; raise it before starting the ranks (ulimit -f unlimited; systemd: "
		"LimitFSIZE=infinity; a batch scheduler's file size limit) or create a smaller segment",
		seg->label, (unsigned long long)seg->alloc_size, (unsigned long long)r.rlim_cur);
}

/* VmSize of this process in bytes, 0 when unknown. */
static uint64_t address_space_in_use(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[128];
	unsigned long long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb << 10;
}

int mc_address_space_error(const struct mooncake_segment *seg, int sys_errno)
{
	struct rlimit r;

	if (sys_errno == ENOMEM && getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
		return mc_error(
			ENOMEM,
			"Shared segment '%s' cannot reserve %llu bytes of address space: this process's "
			"address space limit (RLIMIT_AS, ulimit -v) is %llu bytes and it already maps %llu; "
			"raise it before starting the ranks (ulimit -v unlimited; systemd: LimitAS=infinity; "
			"a batch scheduler's virtual memory limit) or create a smaller segment",
			seg->label, (unsigned long long)seg->alloc_size, (unsigned long long)r.rlim_cur,
			(unsigned long long)address_space_in_use());
	return mc_error_sys(ENOMEM, sys_errno,
			    "Shared segment '%s' cannot reserve %llu bytes of address space", seg->label,
			    (unsigned long long)seg->alloc_size);
}
