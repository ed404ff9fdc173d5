/* SPDX-License-Identifier: Apache-2.0 */
/* Readers of /proc and /sys files (procfs.c), for the library and the CLI. */
#ifndef MOONCAKE_SEGMENT_PROCFS_H
#define MOONCAKE_SEGMENT_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first line of @path into @buf, newline stripped; false on error. */
bool mc_read_line(const char *path, char *buf, size_t size);
/* The word between [ and ] of a sysfs mode line ("always [madvise] never"). */
bool mc_selected_mode(const char *line, char *mode, size_t size);
/* A /proc/meminfo field in bytes ("kB" fields) or as a count; 0 when absent. */
uint64_t mc_meminfo_field(const char *name);

#endif
