/* SPDX-License-Identifier: Apache-2.0 */
/* The memory cgroup room of a process (cgroup.c), for the library and the CLI. */
#ifndef MOONCAKE_SEGMENT_CGROUP_H
#define MOONCAKE_SEGMENT_CGROUP_H

#include <stdbool.h>
#include <stdint.h>

struct mc_memory_room {
	uint64_t room; /* bytes that can still be charged, UINT64_MAX unlimited */
	uint64_t limit;
	uint64_t usage;
	char where[256]; /* the cgroup directory that binds */
};

/* The tightest memory cgroup room of the process described by @proc_cgroup
 * (a /proc/PID/cgroup file) under @cgroup_root; false when no limit applies. */
bool mc_cgroup_memory_room(const char *proc_cgroup, const char *cgroup_root, struct mc_memory_room *room);

#endif
