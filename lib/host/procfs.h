/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Readers of /proc and /sys files (procfs.c).  The two the CLI uses too are
 * declared in private.h.
 *
 * Host facts (meminfo, THP modes, HugeTLB pools, cgroups, NUMA topology, the
 * boot id) are read under one host root: "" on a real host, a fixture tree
 * in tests.  The root comes from $MOONCAKE_SEGMENT_HOST_ROOT (ignored in
 * set-uid programs) or mc_host_root_set().  What belongs to a live process
 * (/proc/PID/fd, /proc/self/smaps, namespaces) is never read under it.
 */
#ifndef MOONCAKE_SEGMENT_PROCFS_H
#define MOONCAKE_SEGMENT_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mooncake/segment.h"
#include "private.h"

/* The first line of @path into @buf, newline stripped; false on error. */
bool mc_read_line(const char *path, char *buf, size_t size);
/* The first line of @path as an unsigned decimal number into *@value;
 * cgroup's "max" (no limit) reads as UINT64_MAX.  False when the file cannot
 * be read or does not start with a number (*@value may then be 0). */
bool mc_read_number(const char *path, uint64_t *value);
/* mc_read_number() of @path (absolute, under /proc or /sys) below the host root. */
bool mc_read_host_number(const char *path, uint64_t *value);
/* The state letter of process @pid in this process's /proc/PID/stat (R, S,
 * D, T, t, Z, X...), '\0' when it cannot be read.  A live process's file:
 * never under the host root. */
char mc_process_state(pid_t pid);
/* The host root, "" on a real host. */
const char *mc_host_root(void);
/* Replace the host root (tests; call before any other thread reads host facts). */
void mc_host_root_set(const char *root);
/* @path (absolute, under /proc or /sys) below the host root, into @buf. */
const char *mc_host_path(char *buf, size_t size, const char *path);
/* The word between [ and ] of a sysfs mode line ("always [madvise] never"). */
bool mc_selected_mode(const char *line, char *mode, size_t size);

#endif
