/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the two halves of the scan share: segments.c, the whole host (the
 * processes shared out over threads, each thread's finds merged, the totals
 * derived), and segments-process.c, one process's view read from /proc.
 * Not for the renderers: they read struct segment_scan (segments.h) only.
 */
#ifndef MOONCAKE_SEGMENT_SEGMENTS_SCAN_H
#define MOONCAKE_SEGMENT_SEGMENTS_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "segments.h"

/* Room for one more element of *@array, which holds @count: the capacity
 * doubles at powers of two; false when out of memory. */
bool segments_grow(void **array, unsigned int count, size_t elem);
/* Add @bytes to @node, growing @nb; false for an absurd node or out of memory. */
bool segments_node_add(struct node_bytes *nb, unsigned int node, uint64_t bytes);

/* One process into @scan (the calling thread's own), @buf and @cap a reusable
 * read buffer; false when /proc refused what it needed. */
bool segments_scan_process(struct segment_scan *scan, int procfd, pid_t pid, char **buf, size_t *cap);
/* @p's Rss and PMD-mapped bytes from smaps: one process per segment only,
 * as it walks the page tables again. */
void segments_read_smaps(int procfd, struct segment_process *p);

#endif
