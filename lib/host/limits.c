/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Will the memory fit?  Checked before the owner commits a page, because a
 * memory cgroup limit answers an oversized commit with the OOM killer, even
 * under fallocate: the only clean error is the one given before trying.
 *
 * The cgroup's room is read by cgroup.c (clean page cache counts as room: the
 * kernel reclaims it first).  Two creates in one cgroup are serialised by
 * commit-lock.c from this check to their last committed page, and the room is
 * checked again before each chunk is committed, so that memory another
 * program took meanwhile ends the commit with an error, not the OOM killer.
 *
 * Only what the backend says is charged to the memory cgroup is checked (the
 * state machine asks it): HugeTLB pages are not, and come from their own
 * pool, which mmap checks.
 *
 * mooncake_segment_room() (room.c) reports the same figures as a number: both
 * read them through mc_self_cgroup_room() and mc_host_memory_room(); the
 * CLI's doctor reads the first too (private.h).
 *
 * Process resource limits, too: RLIMIT_FSIZE (ulimit -f), which the kernel
 * enforces on the memfd with SIGXFSZ, is checked before the file is sized;
 * RLIMIT_AS (ulimit -v) is named when address space runs out.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/error.h"
#include "cgroup.h"
#include "commit-lock.h"
#include "host.h"
#include "limits.h"
#include "private.h"
#include "procfs.h"

/*
 * The overhead of a commit, measured (Debian 12, kernel 6.1, cgroup v1, 4 KiB
 * pages; `mooncake-segment bench` and the privileged room sweep check it):
 * the cgroup's peak usage exceeds the segment by 0.25 MiB at 64 MiB, 3.3 MiB
 * at 1 GiB and 17.1 MiB at 4 GiB, about 4.2 MiB a GiB (page tables, 8 bytes
 * a page; the page cache's xarray, about as much), plus the commit threads'
 * stacks and slab.  Counted as bytes/240 (4.27 MiB a GiB) + 1 MiB, so that
 * create(room()) never meets the OOM killer.  The fixed part is spent as the
 * commit starts; the re-check before each chunk counts only the
 * proportional part of what remains.  THP pages need fewer page tables: the
 * same figure only leaves them a little room to spare.
 */
#define COMMIT_OVERHEAD_DIVISOR 240
#define COMMIT_OVERHEAD_FIXED	(UINT64_C(1) << 20)

static uint64_t proportional_overhead(uint64_t bytes)
{
	return bytes / COMMIT_OVERHEAD_DIVISOR;
}

uint64_t mc_commit_overhead(uint64_t bytes)
{
	return proportional_overhead(bytes) + COMMIT_OVERHEAD_FIXED;
}

uint64_t mc_commit_fit(uint64_t room, uint64_t page_size)
{
	uint64_t fit;

	if (room <= COMMIT_OVERHEAD_FIXED)
		return 0;
	/* fit + fit/240 + fixed <= room, solved, then adjusted by whole pages. */
	fit = (room - COMMIT_OVERHEAD_FIXED) / (COMMIT_OVERHEAD_DIVISOR + 1) * COMMIT_OVERHEAD_DIVISOR;
	fit = fit / page_size * page_size;
	while (fit && fit + mc_commit_overhead(fit) > room)
		fit -= page_size;
	while (fit + page_size + mc_commit_overhead(fit + page_size) <= room)
		fit += page_size;
	return fit;
}

uint64_t mc_import_fit(uint64_t room, uint64_t page_size)
{
	/* A peer's own cgroup pays its page tables, 8 bytes a page, and the slack. */
	if (room <= COMMIT_OVERHEAD_FIXED)
		return 0;
	return (room - COMMIT_OVERHEAD_FIXED) / 8 > UINT64_MAX / page_size
		       ? UINT64_MAX
		       : (room - COMMIT_OVERHEAD_FIXED) / 8 * page_size;
}

/* The kernel's MEMCG_CHARGE_BATCH: 64 on current kernels, 32 on older ones (the larger is safe). */
#define MEMCG_CHARGE_BATCH_PAGES 64

uint64_t mc_memcg_charge_slack(void)
{
	return (uint64_t)MEMCG_CHARGE_BATCH_PAGES * (uint64_t)sysconf(_SC_PAGESIZE) * mc_host_cpus_allowed();
}

bool mc_process_memory_cgroup(const char *pid, char *where, size_t size, bool *v2)
{
	char proc_cgroup[1024], path[64];

	snprintf(path, sizeof(path), "/proc/%s/cgroup", pid);
	return mc_cgroup_memory_path(mc_host_path(proc_cgroup, sizeof(proc_cgroup), path), where, size, v2);
}

MC_PRIVATE bool mc_self_cgroup_room(struct mc_memory_room *room)
{
	char proc_cgroup[1024], cgroup_root[1024];

	return mc_cgroup_memory_room(mc_host_path(proc_cgroup, sizeof(proc_cgroup), "/proc/self/cgroup"),
				     mc_host_path(cgroup_root, sizeof(cgroup_root), "/sys/fs/cgroup"), room);
}

uint64_t mc_host_memory_room(uint64_t *available, uint64_t *swap)
{
	*available = mc_meminfo_field("MemAvailable");
	*swap = mc_meminfo_field("SwapFree");
	return *available ? *available + *swap : UINT64_MAX;
}

/* "limit L, usage U of which C is clean page cache (active_file A + inactive_file I - dirty/writeback D), DIR" */
static const char *room_figures(const struct mc_memory_room *room, char *buf, size_t size)
{
	snprintf(buf, size,
		 "limit %llu, usage %llu of which %llu is clean page cache the kernel reclaims first "
		 "(active_file %llu + inactive_file %llu - dirty/writeback %llu), %s",
		 (unsigned long long)room->limit, (unsigned long long)room->usage,
		 (unsigned long long)room->cache.clean, (unsigned long long)room->cache.active_file,
		 (unsigned long long)room->cache.inactive_file,
		 (unsigned long long)room->cache.dirty + (unsigned long long)room->cache.writeback,
		 room->where);
	return buf;
}

static int cgroup_room_error(const char *label, uint64_t bytes, const struct mc_memory_room *room)
{
	char figures[768];

	return mc_error(
		ENOMEM,
		"Shared segment '%s' needs %llu bytes and %llu more for the kernel's page tables and page "
		"cache index, but its memory cgroup has room for %llu (%s); committing would end in the OOM "
		"killer. Raise the limit (Docker: --memory; Kubernetes: resources.limits.memory; systemd: "
		"MemoryMax=) or create a smaller segment (mooncake_segment_room() gives the largest)",
		label, (unsigned long long)bytes, (unsigned long long)mc_commit_overhead(bytes),
		(unsigned long long)room->room, room_figures(room, figures, sizeof(figures)));
}

int mc_check_memory_room(const char *label, uint64_t bytes, bool *memcg_limited, struct mc_commit_lock *lock)
{
	struct mc_memory_room room;
	uint64_t available, swap, total;

	*memcg_limited = false;
	if (mc_self_cgroup_room(&room)) {
		*memcg_limited = true; /* the commit checks again per chunk */
		/* Every limit of ours nests in the outermost one: one lock there covers them all. */
		mc_commit_lock_acquire(room.outermost, lock);
		/* Read again: whoever held the lock has committed meanwhile. */
		if (lock->fd >= 0 && !mc_self_cgroup_room(&room))
			room.room = UINT64_MAX;
		if (bytes + mc_commit_overhead(bytes) > room.room) {
			mc_commit_lock_release(lock);
			return cgroup_room_error(label, bytes, &room);
		}
	}
	total = mc_host_memory_room(&available, &swap);
	if (bytes + mc_commit_overhead(bytes) > total) {
		mc_commit_lock_release(lock);
		return mc_error(
			ENOMEM,
			"Shared segment '%s' needs %llu bytes and %llu more for the kernel's page tables and "
			"page cache index, but the host has %llu available (MemAvailable %llu + SwapFree %llu); "
			"create a smaller segment or free memory",
			label, (unsigned long long)bytes, (unsigned long long)mc_commit_overhead(bytes),
			(unsigned long long)total, (unsigned long long)available, (unsigned long long)swap);
	}
	return 0;
}

int mc_check_commit_room(const struct mc_room_need *need, uint64_t committed)
{
	uint64_t remaining = need->bytes > committed ? need->bytes - committed : 0;
	struct mc_memory_room room;
	char figures[768];

	/* What we committed so far is in the usage already (its overhead too, and
	 * the fixed part): the rest must fit with its own page tables and index. */
	if (!mc_self_cgroup_room(&room) || remaining + proportional_overhead(remaining) <= room.room)
		return 0;
	return mc_error(
		ENOMEM,
		"Shared segment '%s' committed %llu of %llu bytes when its memory cgroup's room fell to "
		"%llu (%s): another program in the cgroup allocated at the same time, and committing the "
		"remaining %llu would end in the OOM killer. Raise the limit (Docker: --memory; Kubernetes: "
		"resources.limits.memory; systemd: MemoryMax=), create a smaller segment, or retry when "
		"the other program is done",
		need->label, (unsigned long long)committed, (unsigned long long)need->bytes,
		(unsigned long long)room.room, room_figures(&room, figures, sizeof(figures)),
		(unsigned long long)remaining);
}

int mc_check_file_size_limit(const char *label, uint64_t bytes)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_FSIZE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || bytes <= r.rlim_cur)
		return 0;
	return mc_error(
		EFBIG,
		"Shared segment '%s' needs a memfd of %llu bytes but this process's file size limit "
		"(RLIMIT_FSIZE, ulimit -f) is %llu bytes, and sizing the file past it would kill the "
		"process with SIGXFSZ; raise it before starting the ranks (ulimit -f unlimited; systemd: "
		"LimitFSIZE=infinity; a batch scheduler's file size limit) or create a smaller segment",
		label, (unsigned long long)bytes, (unsigned long long)r.rlim_cur);
}

uint64_t mc_address_space_in_use(void)
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

int mc_address_space_error(const char *label, uint64_t bytes, int sys_errno)
{
	struct rlimit r;

	if (sys_errno == ENOMEM && getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
		return mc_error(
			ENOMEM,
			"Shared segment '%s' cannot reserve %llu bytes of address space: this process's "
			"address space limit (RLIMIT_AS, ulimit -v) is %llu bytes and it already maps %llu; "
			"raise it before starting the ranks (ulimit -v unlimited; systemd: LimitAS=infinity; "
			"a batch scheduler's virtual memory limit) or create a smaller segment",
			label, (unsigned long long)bytes, (unsigned long long)r.rlim_cur,
			(unsigned long long)mc_address_space_in_use());
	return mc_error_sys(ENOMEM, sys_errno,
			    "Shared segment '%s' cannot reserve %llu bytes of address space", label,
			    (unsigned long long)bytes);
}
