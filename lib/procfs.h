/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Readers of /proc and /sys files (procfs.c), for the library and the CLI.
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

/* The first line of @path into @buf, newline stripped; false on error. */
bool mc_read_line(const char *path, char *buf, size_t size);
/* The host root, "" on a real host. */
const char *mc_host_root(void);
/* Replace the host root (tests; call before any other thread reads host facts). */
void mc_host_root_set(const char *root);
/* @path (absolute, under /proc or /sys) below the host root, into @buf. */
const char *mc_host_path(char *buf, size_t size, const char *path);
/* mc_read_line() of @path below the host root. */
bool mc_read_host_line(const char *path, char *buf, size_t size);
/* The word between [ and ] of a sysfs mode line ("always [madvise] never"). */
bool mc_selected_mode(const char *line, char *mode, size_t size);
/* A /proc/meminfo field in bytes ("kB" fields) or as a count; 0 when absent. */
uint64_t mc_meminfo_field(const char *name);

#endif
