/* SPDX-License-Identifier: Apache-2.0 */
/* The memory cgroup room of a process (cgroup.c); the CLI reads its own
 * through mc_self_cgroup_room() (private.h). */
#ifndef MOONCAKE_SEGMENT_CGROUP_H
#define MOONCAKE_SEGMENT_CGROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "private.h" /* struct mc_memory_room */

/* The tightest memory cgroup room of the process described by @proc_cgroup
 * (a /proc/PID/cgroup file) under @cgroup_root; false when no limit applies. */
bool mc_cgroup_memory_room(const char *proc_cgroup, const char *cgroup_root, struct mc_memory_room *room);
/* The memory cgroup room of process @pid ("self" or a number) under the
 * host root, as create's check reads its own (limits.c); false when no
 * limit applies. */
bool mc_process_cgroup_room(const char *pid, struct mc_memory_room *room);

#endif
