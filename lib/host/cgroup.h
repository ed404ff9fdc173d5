/* SPDX-License-Identifier: Apache-2.0 */
/* The memory cgroup room of a process (cgroup.c); the CLI reads its own
 * through mc_self_cgroup_room() (private.h). */
#ifndef MOONCAKE_SEGMENT_CGROUP_H
#define MOONCAKE_SEGMENT_CGROUP_H

#include <stdbool.h>
#include <stdint.h>

/* Page cache of a cgroup (memory.stat), in bytes. */
struct mc_page_cache {
	uint64_t active_file;
	uint64_t inactive_file;
	uint64_t dirty;
	uint64_t writeback;
	uint64_t clean; /* active + inactive - dirty - writeback: what reclaim frees */
};

struct mc_memory_room {
	uint64_t
		room; /* limit - (usage - cache.clean): bytes that can still be charged, UINT64_MAX unlimited */
	uint64_t limit;
	uint64_t usage;
	struct mc_page_cache cache;
	char where[256];      /* the cgroup directory that binds */
	char outermost[1280]; /* the outermost limited directory: every limit of ours nests in it */
};

/* The tightest memory cgroup room of the process described by @proc_cgroup
 * (a /proc/PID/cgroup file) under @cgroup_root; false when no limit applies. */
bool mc_cgroup_memory_room(const char *proc_cgroup, const char *cgroup_root, struct mc_memory_room *room);

#endif
