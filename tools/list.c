/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment list: every segment on this host (segments.c finds them)
 * as a table, as JSON (schema in doc/list-json.md) or as Prometheus text
 * (prometheus.c); once, or again every --watch seconds; to standard output
 * or, replaced atomically, to --output FILE.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "segments.h"

enum list_format { FORMAT_TABLE, FORMAT_JSON, FORMAT_PROMETHEUS };

struct list_config {
	enum list_format format;
	uint64_t watch; /* seconds; 0: once */
	const char *output;
	const char *proc;
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: %s list [--json | --prometheus] [--watch SECONDS] [--output FILE] [--proc DIR]\n\n"
		"Every segment on this host, found from /proc: size, backend, owner, the processes\n"
		"that map it, resident bytes per NUMA node and in huge pages.\n\n"
		"  --json             machine-readable (schema: doc/list-json.md)\n"
		"  --prometheus       Prometheus text format (node_exporter's textfile collector)\n"
		"  --watch SECONDS    scan again every SECONDS until interrupted\n"
		"  --output FILE      write FILE atomically (a temporary file renamed over it)\n"
		"  --proc DIR         read processes from DIR instead of /proc\n",
		PROGRAM);
}

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

static const char *role(const struct segment_process *p)
{
	if (p->owner)
		return "owner";
	return p->maps ? "peer" : "fd";
}

static void write_table(FILE *out, const struct segment_scan *scan)
{
	char b1[32], b2[32], b3[32], b4[32], b5[32], id[64];

	if (!scan->nsegs)
		fprintf(out, "No segments on this host (%u processes scanned).\n", scan->processes);
	else
		fprintf(out, "%-20s %-16s %10s %-7s %9s %8s %7s %10s %10s %12s\n", "SEGMENT", "ID", "SIZE",
			"BACKEND", "PAGE", "OWNER", "MAPPERS", "RESIDENT", "HUGE", "PRIVATE(xN)");
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		const struct segment *s = &scan->segs[i];

		snprintf(id, sizeof(id), "%u:%u:%llu", s->dev_major, s->dev_minor,
			 (unsigned long long)s->ino);
		fprintf(out, "%-20s %-16s %10s %-7s %9s ", s->label, id, size_text(s->size, b1),
			s->hugetlb ? "hugetlb" : "memfd", size_text(s->page_size, b2));
		if (s->owner >= 0)
			fprintf(out, "%8d ", (int)s->procs[s->owner].pid);
		else
			fprintf(out, "%8s ", "-");
		fprintf(out, "%7u %10s %10s %12s\n", s->mappers, size_text(s->resident_bytes, b3),
			size_text(s->huge_page_bytes, b4), size_text(s->private_copies_bytes, b5));
	}
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		const struct segment *s = &scan->segs[i];

		fprintf(out, "\n%s (%u:%u:%llu): resident ", s->label, s->dev_major, s->dev_minor,
			(unsigned long long)s->ino);
		write_nodes(out, &s->resident);
		fprintf(out, "; one copy for %u mapping processes", s->mappers);
		if (s->named_owner >= 0 && s->owner < 0)
			fprintf(out, "; owner pid %ld (its namespace) maps it no more", s->named_owner);
		fprintf(out, "\n  %8s %-16s %-5s %10s %-20s %s\n", "PID", "COMMAND", "ROLE", "RESIDENT",
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
			fprintf(out, "  %8d %-16s %-5s %10s %-20s %s\n", (int)p->pid, p->command, role(p),
				size_text(p->resident_bytes, b2), len ? nodes : "-",
				p->cgroup[0] ? p->cgroup : "-");
		}
	}
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

static void write_json(FILE *out, const struct segment_scan *scan)
{
	fprintf(out,
		"{\"schema_version\": 1, \"root\": %s, \"processes_scanned\": %u, "
		"\"processes_unreadable\": %u, \"scan_seconds\": %.6f, \"segments\": [",
		geteuid() == 0 ? "true" : "false", scan->processes, scan->unreadable,
		(double)scan->duration_ns / 1e9);
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

static void write_report(FILE *out, const struct list_config *cfg, const struct segment_scan *scan)
{
	if (cfg->format == FORMAT_JSON)
		write_json(out, scan);
	else if (cfg->format == FORMAT_PROMETHEUS)
		prometheus_write(out, scan);
	else
		write_table(out, scan);
}

/* Readers of @path see the old file or the new one, never half of one. */
static int write_atomically(const struct list_config *cfg, const struct segment_scan *scan)
{
	size_t len = strlen(cfg->output);
	char *tmp = malloc(len + 8), *dir_copy = strdup(cfg->output);
	int fd = -1, err = 0;
	FILE *f = NULL;

	if (!tmp || !dir_copy) {
		err = ENOMEM;
		goto out;
	}
	/* Same directory, so rename() is atomic; no ".prom" suffix, so the
	 * textfile collector ignores it meanwhile. */
	snprintf(tmp, len + 8, "%s.XXXXXX", cfg->output);
	fd = mkstemp(tmp);
	if (fd < 0) {
		err = errno;
		fprintf(stderr,
			"%s list: cannot create a file in %s: %s; create the directory or choose another --output\n",
			PROGRAM, dirname(dir_copy), strerror(err));
		goto out;
	}
	f = fdopen(fd, "w");
	if (!f || fchmod(fd, 0644) != 0) {
		err = errno;
		goto fail;
	}
	write_report(f, cfg, scan);
	if (fflush(f) != 0 || fsync(fd) != 0 || ferror(f)) {
		err = errno ? errno : EIO;
		goto fail;
	}
	fclose(f); /* closes fd too */
	f = NULL;
	fd = -1;
	if (rename(tmp, cfg->output) != 0) {
		err = errno;
		goto fail;
	}
	goto out;
fail:
	fprintf(stderr, "%s list: writing %s failed: %s\n", PROGRAM, cfg->output, strerror(err));
	if (f)
		fclose(f);
	else if (fd >= 0)
		close(fd);
	unlink(tmp);
out:
	free(tmp);
	free(dir_copy);
	return err ? 1 : 0;
}

static int list_once(const struct list_config *cfg)
{
	struct segment_scan scan;
	int ret = 0;

	if (!segments_scan(cfg->proc, &scan)) {
		fprintf(stderr, "%s list: cannot read %s: %s; mount procfs there (mount -t proc proc %s)\n",
			PROGRAM, cfg->proc, strerror(errno), cfg->proc);
		return 1;
	}
	if (cfg->output) {
		ret = write_atomically(cfg, &scan);
	} else {
		if (cfg->watch && cfg->format == FORMAT_TABLE && isatty(STDOUT_FILENO)) {
			time_t now = time(NULL);
			char when[64];

			strftime(when, sizeof(when), "%F %T", localtime(&now));
			printf("\033[H\033[2J%s list, every %llus: %s\n\n", PROGRAM,
			       (unsigned long long)cfg->watch, when);
		}
		write_report(stdout, cfg, &scan);
		fflush(stdout);
	}
	segments_free(&scan);
	return ret;
}

int cmd_list(int argc, char **argv)
{
	static const struct option options[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "watch", required_argument, NULL, 'w' },
		{ "output", required_argument, NULL, 'o' },
		{ "proc", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct list_config cfg = { .format = FORMAT_TABLE, .proc = "/proc" };
	int c, ret;

	while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (c) {
		case 'j':
		case 'p':
			if (cfg.format != FORMAT_TABLE) {
				fprintf(stderr,
					"%s list: --json and --prometheus exclude each other; choose one\n",
					PROGRAM);
				return 2;
			}
			cfg.format = c == 'j' ? FORMAT_JSON : FORMAT_PROMETHEUS;
			break;
		case 'w':
			if (!parse_uint(optarg, 1, 86400, &cfg.watch)) {
				fprintf(stderr, "%s list: --watch '%s': give whole seconds from 1 to 86400\n",
					PROGRAM, optarg);
				return 2;
			}
			break;
		case 'o':
			cfg.output = optarg;
			break;
		case 'P':
			cfg.proc = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s list: unexpected argument '%s'\n", PROGRAM, argv[optind]);
		usage(stderr);
		return 2;
	}
	for (;;) {
		ret = list_once(&cfg);
		if (!cfg.watch)
			return ret;
		sleep((unsigned int)cfg.watch);
	}
}
