/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The list as Prometheus text exposition format 0.0.4, for node_exporter's
 * textfile collector: one family per fact (HELP, TYPE, then every sample),
 * names prefixed mooncake_segment_ with their unit, labels segment and id on
 * every per-segment sample, node and pid where the fact has one.
 */
#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "segments.h"

/* A label value: escaped as the text format asks, always UTF-8. */
static void label_value(FILE *out, const char *s)
{
	write_quoted_utf8(out, s, false);
}

static void family(FILE *out, const char *name, const char *help)
{
	fprintf(out, "# HELP mooncake_segment_%s %s\n# TYPE mooncake_segment_%s gauge\n", name, help, name);
}

static void sample_start(FILE *out, const char *name, const struct segment *s)
{
	fprintf(out, "mooncake_segment_%s{segment=", name);
	label_value(out, s->label);
	fprintf(out, ",id=\"%u:%u:%llu\"", s->dev_major, s->dev_minor, (unsigned long long)s->ino);
}

enum segment_fact { SIZE, PAGE_SIZE, MAPPERS, HUGE_PAGES, PRIVATE_COPIES, KEPT, FILE_BYTES, WARM_ATTACHES };

/* Whether @s has @f at all: a file nobody holds a descriptor of, or a kept
 * segment the keeper did not describe, has no sample rather than a 0. */
static bool known(const struct segment *s, enum segment_fact f)
{
	if (f == FILE_BYTES)
		return s->has_file_bytes;
	if (f == WARM_ATTACHES)
		return s->has_keeper;
	return true;
}

static uint64_t fact(const struct segment *s, enum segment_fact f)
{
	switch (f) {
	case SIZE:
		return s->size;
	case PAGE_SIZE:
		return s->page_size;
	case MAPPERS:
		return s->mappers;
	case HUGE_PAGES:
		return s->huge_page_bytes;
	case PRIVATE_COPIES:
		return s->private_copies_bytes;
	case KEPT:
		return s->kept;
	case FILE_BYTES:
		return s->file_bytes;
	case WARM_ATTACHES:
		return s->keeper.warm_attaches;
	}
	return 0;
}

/* One sample per segment that has the per-segment fact. */
static void per_segment(FILE *out, const struct segment_scan *scan, const char *name, const char *help,
			enum segment_fact f)
{
	family(out, name, help);
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		if (!known(&scan->segs[i], f))
			continue;
		sample_start(out, name, &scan->segs[i]);
		fprintf(out, "} %llu\n", (unsigned long long)fact(&scan->segs[i], f));
	}
}

static void per_process(FILE *out, const struct segment_scan *scan, const char *name, const char *help,
			size_t offset)
{
	family(out, name, help);
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		const struct segment *s = &scan->segs[i];

		for (unsigned int j = 0; j < s->nprocs; j++) {
			const struct segment_process *p = &s->procs[j];
			uint64_t value;

			/* The field at @offset, by copy: no cast that assumes its alignment. */
			memcpy(&value, (const char *)p + offset, sizeof(value));
			sample_start(out, name, s);
			fprintf(out, ",pid=\"%d\",command=", (int)p->pid);
			label_value(out, p->command);
			fprintf(out, "} %llu\n", (unsigned long long)value);
		}
	}
}

void prometheus_write(FILE *out, const struct segment_scan *scan)
{
	family(out, "segments", "Segments found on this host.");
	fprintf(out, "mooncake_segment_segments %u\n", scan->nsegs);
	family(out, "scan_processes", "Processes the last scan looked at.");
	fprintf(out, "mooncake_segment_scan_processes %u\n", scan->processes);
	family(out, "scan_unreadable_processes",
	       "Processes whose maps or descriptors /proc refused (another user's, unless root).");
	fprintf(out, "mooncake_segment_scan_unreadable_processes %u\n", scan->unreadable);
	family(out, "scan_duration_seconds", "How long the scan of /proc took.");
	fprintf(out, "mooncake_segment_scan_duration_seconds %.6f\n", (double)scan->duration_ns / 1e9);

	family(out, "info", "Always 1: the segment's backend, whether HugeTLB, and its owner's pid.");
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		const struct segment *s = &scan->segs[i];

		sample_start(out, "info", s);
		fprintf(out, ",backend=\"memfd\",hugetlb=\"%s\",owner_pid=\"", s->hugetlb ? "true" : "false");
		if (s->owner >= 0)
			fprintf(out, "%d", (int)s->procs[s->owner].pid);
		fputs("\"} 1\n", out);
	}
	per_segment(out, scan, "size_bytes", "Size of the segment (its memfd, page-aligned).", SIZE);
	per_segment(out, scan, "page_size_bytes", "Page size of the segment's mappings.", PAGE_SIZE);
	per_segment(out, scan, "mapped_processes", "Processes that map the segment.", MAPPERS);
	family(out, "resident_bytes",
	       "Resident bytes of the segment on a NUMA node (one copy, however many map it).");
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		const struct segment *s = &scan->segs[i];

		/* Every node up to the last with pages; node 0 even when nothing is resident. */
		for (unsigned int n = 0; n < s->resident.count || n == 0; n++) {
			sample_start(out, "resident_bytes", s);
			fprintf(out, ",node=\"%u\"} %llu\n", n,
				(unsigned long long)(n < s->resident.count ? s->resident.bytes[n] : 0));
		}
	}
	per_segment(out, scan, "huge_page_bytes",
		    "Resident bytes of the segment in huge pages (THP or HugeTLB).", HUGE_PAGES);
	per_segment(out, scan, "private_copies_bytes", "What a private copy per mapping process would take.",
		    PRIVATE_COPIES);
	per_segment(out, scan, "kept", "1 when the node keeper holds the segment past its ranks.", KEPT);
	per_segment(out, scan, "file_bytes",
		    "Bytes the segment's file holds, mapped or not (where a descriptor was read).",
		    FILE_BYTES);
	per_segment(out, scan, "keeper_warm_attaches",
		    "Attaches that found a kept segment already there, as its keeper counts.", WARM_ATTACHES);
	per_process(out, scan, "process_resident_bytes",
		    "Resident bytes of the segment in one process's mappings.",
		    offsetof(struct segment_process, resident_bytes));
}
