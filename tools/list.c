/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment list: every segment on this host (segments.c finds them)
 * as a table (list-table.c), as JSON (list-json.c, schema in
 * doc/list-json.md) or as Prometheus text (prometheus.c); once, or again
 * every --watch seconds; to standard output or, replaced atomically, to
 * --output FILE.  This file is the command: its options and where the
 * report goes.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
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
	const char *keeper; /* --keeper; NULL: the library's default socket */
	bool ask_keeper;    /* not with --proc: another host's keeper is not ours to ask */
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: %s list [--json | --prometheus] [--watch SECONDS] [--output FILE] [--proc DIR]\n\n"
		"Every segment on this host, found from /proc: size, backend, owner, the processes\n"
		"that map it, resident bytes per NUMA node and in huge pages.\n\n"
		"  --json             machine-readable (schema: doc/list-json.md)\n"
		"  --prometheus       Prometheus text format (node_exporter's textfile collector)\n"
		"  --watch SECONDS    scan again every SECONDS until interrupted (SIGINT,\n"
		"                     SIGTERM, SIGHUP: between two reports, never in one)\n"
		"  --output FILE      write FILE atomically (a temporary file renamed over it)\n"
		"  --proc DIR         read processes from DIR instead of /proc (the keeper is not asked)\n"
		"  --keeper SOCKET    the node keeper to ask about kept segments (default:\n"
		"                     $MOONCAKE_SEGMENT_KEEPER or /run/mooncake-segment/keeper.sock)\n",
		PROGRAM);
}

static void write_report(FILE *out, const struct list_config *cfg, const struct segment_scan *scan)
{
	if (cfg->format == FORMAT_JSON)
		list_write_json(out, scan);
	else if (cfg->format == FORMAT_PROMETHEUS)
		prometheus_write(out, scan);
	else
		list_write_table(out, scan);
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
	if (cfg->ask_keeper)
		segments_join_keeper(&scan, cfg->keeper);
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
		ret = finish_output(stdout, "the list to standard output");
	}
	segments_free(&scan);
	return ret;
}

/* --watch: a report every cfg->watch seconds until SIGINT, SIGTERM or
 * SIGHUP, which are taken only between two reports, so that whoever reads
 * the output never gets half of one (a JSON document cut mid-string).  One
 * the process ignores stays ignored (nohup, a script's `cmd &`); one taken
 * ends it as that signal would have, so that a shell sees it. */
static int watch(const struct list_config *cfg)
{
	static const int stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
	struct timespec pause = { (time_t)cfg->watch, 0 };
	sigset_t stops, saved;
	int ret, taken = 0;

	sigemptyset(&stops);
	for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++) {
		struct sigaction now;

		if (sigaction(stop_signals[i], NULL, &now) == 0 && now.sa_handler != SIG_IGN)
			sigaddset(&stops, stop_signals[i]);
	}
	sigprocmask(SIG_BLOCK, &stops, &saved);
	for (;;) {
		ret = list_once(cfg);
		/* Output that cannot be written ends --watch too: nobody reads it. */
		if (ferror(stdout))
			break;
		taken = sigtimedwait(&stops, NULL, &pause);
		if (taken > 0)
			break;
	}
	sigprocmask(SIG_SETMASK, &saved, NULL);
	if (taken > 0 && !ret) {
		signal(taken, SIG_DFL);
		raise(taken); /* the last report was whole */
	}
	return ret;
}

int cmd_list(int argc, char **argv)
{
	static const struct option options[] = {
		{ "json", no_argument, NULL, 'j' },	   { "prometheus", no_argument, NULL, 'p' },
		{ "watch", required_argument, NULL, 'w' }, { "output", required_argument, NULL, 'o' },
		{ "proc", required_argument, NULL, 'P' },  { "keeper", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },	   { NULL, 0, NULL, 0 },
	};
	struct list_config cfg = { .format = FORMAT_TABLE, .proc = "/proc", .ask_keeper = true };
	int c;

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
			cfg.ask_keeper = false;
			break;
		case 'k':
			cfg.keeper = optarg;
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
	if (cfg.keeper)
		cfg.ask_keeper = true; /* named: asked, with --proc too */
	return cfg.watch ? watch(&cfg) : list_once(&cfg);
}
