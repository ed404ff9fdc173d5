/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The segments on this host, found from /proc (segments.c, one process at a
 * time by segments-process.c): which processes map or hold each memfd named
 * "mooncake-segment:LABEL|owner=PID", and how much of it is resident, on
 * which NUMA node and in huge pages; and the renderers of a scan.
 */
#ifndef MOONCAKE_SEGMENT_SEGMENTS_H
#define MOONCAKE_SEGMENT_SEGMENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

/* struct mc_front_view: the library reads the control area's layout. */
#include "private.h"

/* What every memfd of the library is called (lib/backends/host-memfd.c), as /proc shows it. */
#define SEGMENT_MEMFD_PREFIX "/memfd:mooncake-segment:"
#define SEGMENT_OWNER_TAG    "|owner="
/* A kept segment's label: the keeper names its memfds "keep:NAME" (keeper/commit.c). */
#define KEPT_LABEL_PREFIX "keep:"
/* Its control area, the readiness front (lib/segment/control.c): same label and owner. */
#define SEGMENT_CONTROL_PREFIX "/memfd:mooncake-segment-control:"

/* Bytes per NUMA node: node i at bytes[i], for i < count. */
struct node_bytes {
	uint64_t *bytes;
	unsigned int count;
};

/* One process that maps the segment or holds its descriptor. */
struct segment_process {
	pid_t pid;
	char command[64];
	char cgroup[256];
	bool maps;	       /* has at least one mapping of it */
	bool holds_descriptor; /* has it open (the owner, until finish()) */
	bool owner;
	uint64_t mapped_bytes;
	uint64_t resident_bytes; /* pages present in its mappings (numa_maps) */
	uint64_t smaps_rss;	 /* the same from smaps, where it was read */
	uint64_t pmd_bytes;	 /* mapped as huge pages (THP or HugeTLB), where smaps was read */
	struct node_bytes nodes;
	uint64_t *starts; /* start address of each mapping */
	unsigned int nstarts;
	unsigned long long pid_ns_pid; /* its pid in its own namespace */
};

/* A kept segment as its keeper describes it (keeper-view.c). */
struct keeper_record {
	uint64_t generation;
	uint64_t created; /* CLOCK_REALTIME seconds */
	uint32_t warm_attaches;
	uint32_t uid;
	uint8_t sharing; /* 0 uid, 1 group, 2 any */
	bool released;
};

struct segment {
	unsigned int dev_major, dev_minor;
	uint64_t ino;
	char label[256];
	long named_owner; /* the owner's pid in its namespace, from the name; -1 if absent */
	uint64_t size;
	uint64_t page_size;
	bool hugetlb;
	struct segment_process *procs;
	unsigned int nprocs;
	/* Derived by segments_scan(). */
	int owner;		       /* index in procs, -1 when not found */
	unsigned int mappers;	       /* processes that map it */
	struct node_bytes resident;    /* per node: the most any one mapping has there */
	uint64_t resident_bytes;       /* sum of resident */
	uint64_t huge_page_bytes;      /* resident bytes in huge pages */
	uint64_t private_copies_bytes; /* mappers x size */
	uint64_t file_bytes;	       /* the bytes its file holds, mapped or not (st_blocks) */
	struct keeper_record keeper;   /* what the keeper says of it, when has_keeper */
	struct mc_front_view front;    /* the readiness front, when has_front */
	uint32_t slot_count;	       /* publish slots it declares, when has_front */
	bool kept;		       /* held by the node keeper: its label is "keep:NAME" */
	bool has_file_bytes;	       /* a descriptor of it could be read: file_bytes */
	bool has_keeper;	       /* the keeper's record was joined (keeper-view.c) */
	bool has_front;		       /* its control area was found and read */
};

/* A control area a process holds or maps, found by the scan and matched
 * to its segment (same label and owner, the same process, the same size)
 * before the renderers see the scan. */
struct segment_control {
	pid_t pid;
	char path[80]; /* under /proc: "PID/fd/N" or "PID/map_files/LO-HI" */
	char label[256];
	long named_owner;
	unsigned int dev_major, dev_minor;
	uint64_t ino;
};

struct segment_scan {
	struct segment *segs;
	unsigned int nsegs;
	unsigned int processes;	 /* processes looked at */
	unsigned int unreadable; /* of which /proc refused the mappings or descriptors */
	uint64_t duration_ns;
	struct segment_control *controls; /* the scan's own: the renderers read segs[i].front */
	unsigned int ncontrols;
	unsigned int kept;    /* segments held by a node keeper */
	bool keeper_asked;    /* kept segments were found and the keeper was asked (keeper-view.c) */
	bool keeper_answered; /* and it answered */
};

/* Scan @proc ("/proc", or a host's /proc mounted elsewhere) into @scan; false with errno set
 * when @proc itself cannot be read.  Free with segments_free(). */
bool segments_scan(const char *proc, struct segment_scan *scan);
void segments_free(struct segment_scan *scan);

/* Join the node keeper's records (its socket @socket, NULL: the
 * library's default) to the kept segments of @scan, by the (device, inode)
 * of the memfd (and its name), and make the keeper's process, where the
 * scan sees it, their owner.  A keeper that does not answer leaves them
 * unjoined: nothing is printed, scan->keeper_answered stays false. */
void segments_join_keeper(struct segment_scan *scan, const char *socket);

/* "LABEL|owner=PID (deleted)" -> label and owner pid (-1 when the name carries none). */
void segments_parse_name(const char *name, char *label, size_t size, long *owner);

/* The front of @s: "committing", "committed", "failed" (an owner that died
 * while committing included, ESRCH), or NULL when its control area was not
 * read; and the committed share in percent (never 100 while committing),
 * -1 when unknown. */
const char *segment_front_state(const struct segment *s);
double segment_front_percent(const struct segment *s);

/* The scan as a table (list-table.c), as JSON (list-json.c) and in
 * Prometheus text format (prometheus.c). */
void list_write_table(FILE *out, const struct segment_scan *scan);
void list_write_json(FILE *out, const struct segment_scan *scan);
void prometheus_write(FILE *out, const struct segment_scan *scan);

#endif
