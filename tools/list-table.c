/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The list as a table for a person: one line per segment (size, backend,
 * page size, owner, mappers, resident, huge, what private copies would
 * take, how much is ready), then per segment its resident bytes per NUMA
 * node and the publish slots it declares, its readiness front while it
 * commits or once it failed, and a line per
 * process that maps it or holds its descriptor; last, how many processes
 * /proc would not show and why.  Labels, command names and cgroups are
 * printed with their control characters shown as \xNN (printable()): they
 * come from other processes, and a terminal would obey them.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "segments.h"

static const char *size_text(uint64_t bytes, char *buf)
{
	return format_size(bytes, buf, 32);
}

static void write_nodes(FILE *out, const struct node_bytes *nb)
{
	char b[32];
	bool first = true;

	for (unsigned int n = 0; n < nb->count; n++) {
		if (!nb->bytes[n])
			continue;
		fprintf(out, "%snode%u %s", first ? "" : ", ", n, size_text(nb->bytes[n], b));
		first = false;
	}
	if (first)
		fputs("none", out);
}

/* The READY column: "100%", "42.0%" while committing, "failed", or "-". */
static const char *ready_text(const struct segment *s, char *buf, size_t size)
{
	const char *state = segment_front_state(s);

	if (!state)
		return s->kept ? "kept" : "-";
	if (s->front.state == MC_FRONT_VIEW_FAILED)
		return "failed";
	if (s->front.state == MC_FRONT_VIEW_COMMITTED)
		return "100%";
	snprintf(buf, size, "%.1f%%", segment_front_percent(s));
	return buf;
}

/* The front, after a segment's title, where it is not simply committed. */
static void write_front(FILE *out, const struct segment *s)
{
	char b1[32], b2[32], message[1024];

	if (!s->has_front || s->front.state == MC_FRONT_VIEW_COMMITTED)
		return;
	if (s->front.state == MC_FRONT_VIEW_COMMITTING) {
		fprintf(out, "  committing: %s of %s ready (%.1f%%)\n", size_text(s->front.committed, b1),
			size_text(s->front.alloc_size, b2), segment_front_percent(s));
		return;
	}
	fprintf(out, "  failed: errno %d (%s)", s->front.error, strerror(s->front.error));
	if (s->front.error_rank != UINT32_MAX)
		fprintf(out, ", reported by rank %u", s->front.error_rank);
	fprintf(out, ", %s of %s committed: %s\n", size_text(s->front.committed, b1),
		size_text(s->front.alloc_size, b2), printable(s->front.message, message, sizeof(message)));
}

/* What the file holds and what the keeper says, after the segment's title. */
static void write_kept(FILE *out, const struct segment *s)
{
	char b[32];
	time_t now = time(NULL);

	if (s->has_file_bytes)
		fprintf(out, "; %s in its file", size_text(s->file_bytes, b));
	if (!s->kept)
		return;
	fputs("; kept by the node keeper", out);
	if (!s->has_keeper)
		return;
	fprintf(out, ", generation %llu, %u warm attach%s, uid %u, age %llds%s",
		(unsigned long long)s->keeper.generation, s->keeper.warm_attaches,
		s->keeper.warm_attaches == 1 ? "" : "es", s->keeper.uid,
		(long long)(now - (time_t)s->keeper.created), s->keeper.released ? ", released" : "");
}

static const char *role(const struct segment_process *p)
{
	if (p->owner)
		return "owner";
	return p->maps ? "peer" : "fd";
}

void list_write_table(FILE *out, const struct segment_scan *scan)
{
	char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], id[64], label[256], command[256], cgroup[1024];

	if (!scan->nsegs)
		fprintf(out, "No segments on this host (%u processes scanned).\n", scan->processes);
	else
		fprintf(out, "%-20s %-16s %10s %-7s %9s %8s %7s %10s %10s %12s %7s\n", "SEGMENT", "ID",
			"SIZE", "BACKEND", "PAGE", "OWNER", "MAPPERS", "RESIDENT", "HUGE", "PRIVATE(xN)",
			"READY");
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		const struct segment *s = &scan->segs[i];

		snprintf(id, sizeof(id), "%u:%u:%llu", s->dev_major, s->dev_minor,
			 (unsigned long long)s->ino);
		fprintf(out, "%-20s %-16s %10s %-7s %9s ", printable(s->label, label, sizeof(label)), id,
			size_text(s->size, b1), s->hugetlb ? "hugetlb" : "memfd",
			size_text(s->page_size, b2));
		if (s->owner >= 0)
			fprintf(out, "%8d ", (int)s->procs[s->owner].pid);
		else
			fprintf(out, "%8s ", "-");
		fprintf(out, "%7u %10s %10s %12s %7s\n", s->mappers, size_text(s->resident_bytes, b3),
			size_text(s->huge_page_bytes, b4), size_text(s->private_copies_bytes, b5),
			ready_text(s, b6, sizeof(b6)));
	}
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		const struct segment *s = &scan->segs[i];

		fprintf(out, "\n%s (%u:%u:%llu): resident ", printable(s->label, label, sizeof(label)),
			s->dev_major, s->dev_minor, (unsigned long long)s->ino);
		write_nodes(out, &s->resident);
		fprintf(out, "; one copy for %u mapping processes", s->mappers);
		write_kept(out, s);
		if (s->has_front && s->slot_count)
			fprintf(out, "; %u publish slot%s", s->slot_count, s->slot_count == 1 ? "" : "s");
		/* Declared only: the default (0) is the page size, shown above. */
		if (s->has_front && s->front.alignment)
			fprintf(out, "; aligned to %s", size_text(s->front.alignment, b1));
		/* A kept segment the keeper described is the keeper's, whose pid
		 * may not be the one its name carries (a restart since), and whom
		 * the scan may not see (another user's process). */
		if (s->named_owner >= 0 && s->owner < 0 && !s->has_keeper)
			fprintf(out, "; owner pid %ld (its namespace) maps it no more", s->named_owner);
		fputc('\n', out);
		write_front(out, s);
		fprintf(out, "  %8s %-16s %-5s %10s %-20s %s\n", "PID", "COMMAND", "ROLE", "RESIDENT",
			"NODES", "CGROUP");
		for (unsigned int j = 0; j < s->nprocs; j++) {
			const struct segment_process *p = &s->procs[j];
			char nodes[128] = "";
			size_t len = 0;

			for (unsigned int n = 0; n < p->nodes.count && len < sizeof(nodes) - 24; n++)
				if (p->nodes.bytes[n])
					len += (size_t)snprintf(nodes + len, sizeof(nodes) - len, "%s%u:%s",
								len ? "," : "", n,
								size_text(p->nodes.bytes[n], b1));
			fprintf(out, "  %8d %-16s %-5s %10s %-20s %s\n", (int)p->pid,
				printable(p->command, command, sizeof(command)), role(p),
				size_text(p->resident_bytes, b2), len ? nodes : "-",
				p->cgroup[0] ? printable(p->cgroup, cgroup, sizeof(cgroup)) : "-");
		}
	}
	if (scan->keeper_asked && !scan->keeper_answered)
		fprintf(out, "\nThe node keeper did not answer: kept segments are shown without its records "
			     "(give its socket with --keeper SOCKET).\n");
	if (scan->unreadable && geteuid() != 0)
		fprintf(out,
			"\n%u of %u processes could not be read (another user's maps or descriptors): "
			"run as root to see every process.\n",
			scan->unreadable, scan->processes);
	else if (scan->unreadable)
		fprintf(out,
			"\n%u of %u processes could not be read even as root (another user namespace, or an "
			"LSM such as Yama or AppArmor refuses their maps or descriptors).\n",
			scan->unreadable, scan->processes);
}
