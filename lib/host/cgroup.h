/* SPDX-License-Identifier: Apache-2.0 */
/* The memory cgroup room of a process (cgroup.c); the CLI reads its own
 * through mc_self_cgroup_room() (private.h). */
#ifndef MOONCAKE_SEGMENT_CGROUP_H
#define MOONCAKE_SEGMENT_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "private.h" /* struct mc_memory_room */

/* The tightest memory cgroup room of the process described by @proc_cgroup
 * (a /proc/PID/cgroup file) under @cgroup_root; false when no limit applies. */
bool mc_cgroup_memory_room(const char *proc_cgroup, const char *cgroup_root, struct mc_memory_room *room);
/* The memory cgroup of the process described by @proc_cgroup, as a path in
 * its hierarchy ("/a/b") into @where; *@v2 whether that is cgroup v2.
 * False when the file names none. */
bool mc_cgroup_memory_path(const char *proc_cgroup, char *where, size_t size, bool *v2);
/* The memory cgroup path of process @pid ("self" or a number), read under
 * the host root (limits.c): mc_cgroup_memory_path() of /proc/PID/cgroup. */
bool mc_process_memory_cgroup(const char *pid, char *where, size_t size, bool *v2);

#endif
