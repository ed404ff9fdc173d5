/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The list as JSON for a program (the schema, and what may change in it, is
 * doc/list-json.md): the scan's counts, then each segment with its facts and
 * the processes that map it or hold its descriptor.  Bytes are exact
 * integers, not the table's rounded sizes.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "segments.h"

static void write_json_nodes(FILE *out, const struct node_bytes *nb)
{
	bool first = true;

	fputc('{', out);
	for (unsigned int n = 0; n < nb->count; n++) {
		if (!nb->bytes[n])
			continue;
		fprintf(out, "%s\"%u\": %llu", first ? "" : ", ", n, (unsigned long long)nb->bytes[n]);
		first = false;
	}
	fputc('}', out);
}

/* "front": the readiness front, or null when its control area was not read. */
static void write_json_front(FILE *out, const struct segment *s)
{
	const char *state = segment_front_state(s);

	if (!state) {
		fputs("\"front\": null, ", out);
		return;
	}
	fprintf(out,
		"\"front\": {\"state\": \"%s\", \"committed_bytes\": %llu, \"alloc_size_bytes\": %llu, "
		"\"percent\": %.3f, \"world_size\": %u, \"commit_seconds\": ",
		state, (unsigned long long)s->front.committed, (unsigned long long)s->front.alloc_size,
		segment_front_percent(s), s->front.world_size);
	if (s->front.state == MC_FRONT_VIEW_COMMITTED)
		fprintf(out, "%.6f", (double)s->front.commit_ns / 1e9);
	else
		fputs("null", out);
	fputs(", \"error\": ", out);
	if (s->front.state != MC_FRONT_VIEW_FAILED) {
		fputs("null}, ", out);
		return;
	}
	fprintf(out, "{\"errno\": %d, \"strerror\": ", s->front.error);
	json_string(out, strerror(s->front.error));
	if (s->front.error_rank != UINT32_MAX)
		fprintf(out, ", \"rank\": %u, \"message\": ", s->front.error_rank);
	else
		fputs(", \"rank\": null, \"message\": ", out);
	json_string(out, s->front.message);
	fputs("}}, ", out);
}

/* "kept", "file_bytes" and "keeper" (doc/list-json.md). */
static void write_json_kept(FILE *out, const struct segment *s)
{
	fprintf(out, "\"kept\": %s, \"file_bytes\": ", s->kept ? "true" : "false");
	if (s->has_file_bytes)
		fprintf(out, "%llu, ", (unsigned long long)s->file_bytes);
	else
		fputs("null, ", out);
	if (!s->has_keeper) {
		fputs("\"keeper\": null, ", out);
		return;
	}
	fprintf(out,
		"\"keeper\": {\"generation\": %llu, \"warm_attaches\": %u, \"uid\": %u, \"sharing\": \"%s\", "
		"\"age_seconds\": %lld, \"released\": %s}, ",
		(unsigned long long)s->keeper.generation, s->keeper.warm_attaches, s->keeper.uid,
		s->keeper.sharing == 2	 ? "any"
		: s->keeper.sharing == 1 ? "group"
					 : "uid",
		(long long)(time(NULL) - (time_t)s->keeper.created), s->keeper.released ? "true" : "false");
}

void list_write_json(FILE *out, const struct segment_scan *scan)
{
	fprintf(out,
		"{\"schema_version\": 1, \"root\": %s, \"processes_scanned\": %u, "
		"\"processes_unreadable\": %u, \"scan_seconds\": %.6f, \"keeper_answered\": %s, "
		"\"segments\": [",
		geteuid() == 0 ? "true" : "false", scan->processes, scan->unreadable,
		(double)scan->duration_ns / 1e9,
		!scan->keeper_asked	? "null"
		: scan->keeper_answered ? "true"
					: "false");
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		const struct segment *s = &scan->segs[i];

		fprintf(out, "%s\n  {\"id\": \"%u:%u:%llu\", \"label\": ", i ? "," : "", s->dev_major,
			s->dev_minor, (unsigned long long)s->ino);
		json_string(out, s->label);
		fprintf(out,
			", \"dev\": \"%u:%u\", \"inode\": %llu, \"size_bytes\": %llu, \"backend\": \"memfd\", "
			"\"hugetlb\": %s, \"page_size_bytes\": %llu, ",
			s->dev_major, s->dev_minor, (unsigned long long)s->ino, (unsigned long long)s->size,
			s->hugetlb ? "true" : "false", (unsigned long long)s->page_size);
		if (s->owner >= 0)
			fprintf(out, "\"owner_pid\": %d, ", (int)s->procs[s->owner].pid);
		else
			fputs("\"owner_pid\": null, ", out);
		if (s->named_owner >= 0)
			fprintf(out, "\"owner_pid_in_namespace\": %ld, ", s->named_owner);
		else
			fputs("\"owner_pid_in_namespace\": null, ", out);
		write_json_kept(out, s);
		write_json_front(out, s);
		if (s->has_front)
			fprintf(out, "\"slots\": %u, \"alignment\": %u, ", s->slot_count, s->front.alignment);
		else
			fputs("\"slots\": null, \"alignment\": null, ", out);
		fprintf(out,
			"\"mapped_processes\": %u, \"resident_bytes\": %llu, \"resident_bytes_by_node\": ",
			s->mappers, (unsigned long long)s->resident_bytes);
		write_json_nodes(out, &s->resident);
		fprintf(out, ", \"huge_page_bytes\": %llu, \"private_copies_bytes\": %llu, \"processes\": [",
			(unsigned long long)s->huge_page_bytes, (unsigned long long)s->private_copies_bytes);
		for (unsigned int j = 0; j < s->nprocs; j++) {
			const struct segment_process *p = &s->procs[j];

			fprintf(out, "%s\n    {\"pid\": %d, \"command\": ", j ? "," : "", (int)p->pid);
			json_string(out, p->command);
			fputs(", \"cgroup\": ", out);
			json_string(out, p->cgroup);
			fprintf(out,
				", \"owner\": %s, \"maps\": %s, \"holds_descriptor\": %s, \"mapped_bytes\": %llu, "
				"\"resident_bytes\": %llu, \"resident_bytes_by_node\": ",
				p->owner ? "true" : "false", p->maps ? "true" : "false",
				p->holds_descriptor ? "true" : "false", (unsigned long long)p->mapped_bytes,
				(unsigned long long)p->resident_bytes);
			write_json_nodes(out, &p->nodes);
			fputc('}', out);
		}
		fputs("]}", out);
	}
	fputs(scan->nsegs ? "\n]}\n" : "]}\n", out);
}
