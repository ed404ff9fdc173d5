/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment bench: what a segment costs, against the physical limits
 * measured in the same run.  For each size and thread count the methods
 * (bench-methods.c: memset, anon, raw-memfd, ours, import, register,
 * baseline) run in interleaved rounds; the report (bench-report.c) gives
 * each figure as the best of its runs with the median and the spread, and
 * the ratios to compare across machines.  --background measures the
 * background commit instead (the first usable byte, fully ready against the
 * blocking commit, the front's curve into --out).  --slots measures the
 * publish slots between two processes instead (bench-slots.c).  This file is the command:
 * its options, the sizes memory allows, and the order of the work.
 */
#include "config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "bench.h"
#include "cli.h"

static bool parse_sizes(char *list, struct bench_config *cfg)
{
	cfg->nsizes = 0;
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		if (cfg->nsizes == MAX_SIZES || !parse_size(tok, &cfg->sizes[cfg->nsizes]) ||
		    cfg->sizes[cfg->nsizes] < (UINT64_C(1) << 20) ||
		    cfg->sizes[cfg->nsizes] > MOONCAKE_SEGMENT_MAX_SIZE)
			return false;
		cfg->nsizes++;
	}
	return cfg->nsizes > 0;
}

static void bench_usage(FILE *out)
{
	fprintf(out,
		"Usage: %s bench [--sizes LIST] [--threads N] [--repeat N] [--hugetlb] [--json]\n"
		"       %s bench --background [--out DIR] [--sizes LIST] [--threads N] [--repeat N] [--json]\n"
		"       %s bench --slots [--rounds N] [--repeat N] [--json]\n\n"
		"Measure the owner's create+commit, a peer's import and the Python-style baseline\n"
		"against anonymous memory and memset in the same run.\n\n"
		"  --sizes LIST   comma-separated sizes, default 256M,1G,4G (each >= 1M)\n"
		"  --threads N    the multi-threaded runs (default: CPUs allowed, at most 64)\n"
		"  --repeat N     N interleaved rounds of every method; best, median and spread (default 3)\n"
		"  --hugetlb      also measure hugetlb=true where the pool can hold the size\n"
		"  --register DEV also measure create with host_register=true on device DEV\n"
		"  --background   the background commit instead: the first usable byte, fully ready\n"
		"                 against the blocking commit of the same size and threads, and the\n"
		"                 readiness front sampled every millisecond (one copy at a time)\n"
		"  --out DIR      with --background: write the front as CSV and SVG into DIR\n"
		"  --slots        the publish slots instead, between two processes: publish-to-wake\n"
		"                 latency (reader asleep, and polling briefly first), publishes per\n"
		"                 second on one slot, a seqlock read of 64 KiB against memcpy\n"
		"  --rounds N     with --slots: ping-pong rounds per run (default %d)\n"
		"  --json         machine-readable output\n",
		PROGRAM, PROGRAM, PROGRAM, SLOT_ROUNDS_DEFAULT);
}

/* The defaults: every CPU allowed (at most MAX_THREADS), 256M,1G,4G, and 16G where memory allows. */
static void set_defaults(struct bench_config *cfg, uint64_t available)
{
	char default_sizes[] = "256M,1G,4G";
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	cfg->threads = cpus > MAX_THREADS ? MAX_THREADS : cpus > 0 ? (unsigned int)cpus : 1;
	parse_sizes(default_sizes, cfg);
	/* And larger where memory allows (a run holds about twice the size). */
	if (available >= (UINT64_C(40) << 30))
		cfg->sizes[cfg->nsizes++] = UINT64_C(16) << 30;
}

/* One option (getopt's @c and optarg) into @cfg: -1 to go on, else the exit status. */
static int apply_option(int c, struct bench_config *cfg)
{
	uint64_t v;

	switch (c) {
	case 's':
		if (!parse_sizes(optarg, cfg)) {
			fprintf(stderr, "%s bench: --sizes takes up to %d sizes of 1M..64T, e.g. 256M,1G\n",
				PROGRAM, MAX_SIZES);
			return 2;
		}
		return -1;
	case 't':
	case 'r':
		if (!parse_uint(optarg, 1, c == 't' ? MAX_THREADS : MAX_RUNS, &v)) {
			fprintf(stderr, "%s bench: --%s must be 1..%d\n", PROGRAM,
				c == 't' ? "threads" : "repeat", c == 't' ? MAX_THREADS : MAX_RUNS);
			return 2;
		}
		if (c == 't')
			cfg->threads = (unsigned int)v;
		else
			cfg->repeat = (int)v;
		return -1;
	case 'R':
		if (!parse_uint(optarg, 0, 1023, &v)) {
			fprintf(stderr, "%s bench: --register takes a device index\n", PROGRAM);
			return 2;
		}
		cfg->register_device = (int)v;
		return -1;
	case 'H':
		cfg->hugetlb = true;
		return -1;
	case 'S':
		cfg->slots = true;
		return -1;
	case 'n':
		if (!parse_uint(optarg, 1, SLOT_ROUNDS_MAX, &v)) {
			fprintf(stderr, "%s bench: --rounds must be 1..%d\n", PROGRAM, SLOT_ROUNDS_MAX);
			return 2;
		}
		cfg->slot_rounds = (long)v;
		return -1;
	case 'B':
		cfg->background = true;
		return -1;
	case 'o':
		cfg->out_dir = optarg;
		return -1;
	case 'j':
		cfg->json = true;
		return -1;
	case 'h':
		bench_usage(stdout);
		return 0;
	default:
		bench_usage(stderr);
		return 2;
	}
}

/* An argument after the options: `bench 256M` meant --sizes, so say so
 * rather than run the defaults for minutes.  Returns the exit status. */
static int refuse_argument(const char *arg)
{
	uint64_t size;

	if (parse_size(arg, &size))
		fprintf(stderr,
			"%s bench: unexpected argument '%s': sizes go in --sizes (e.g. %s bench --sizes %s)\n",
			PROGRAM, arg, PROGRAM, arg);
	else
		fprintf(stderr, "%s bench: unexpected argument '%s'; see %s bench --help\n", PROGRAM, arg,
			PROGRAM);
	return 2;
}

/* Every size that memory allows, into @reports (dropping the others from @cfg). */
static void measure_sizes(struct bench_config *cfg, struct size_report *reports, uint64_t available)
{
	for (int i = 0; i < cfg->nsizes; i++) {
		char a[32], b[32];

		/* Two copies exist at once (ours and the peer's view share one; anon is freed first);
		 * --background holds one at a time (anon, ours, background), with a tenth to spare. */
		if (cfg->sizes[i] > (cfg->background ? available / 10 * 9 : available / 2)) {
			fprintf(stderr,
				"%s bench: skipping %s: MemAvailable is %s, a run needs %s the size\n",
				PROGRAM, format_size(cfg->sizes[i], a, sizeof(a)),
				format_size(available, b, sizeof(b)),
				cfg->background ? "1.1 times" : "twice");
			cfg->sizes[i--] = cfg->sizes[--cfg->nsizes];
			continue;
		}
		reports[i].size = cfg->sizes[i];
		bench_size(cfg, &reports[i]);
	}
}

/* --background's curves of every size into --out: 0, or 1 when a file could not be written. */
static int write_curves(const struct bench_config *cfg, struct size_report *reports)
{
	for (int i = 0; i < cfg->nsizes; i++) {
		double blocking[2];

		for (int k = 0; k < 2; k++)
			blocking[k] = bench_find(&reports[i], "ours", reports[i].background[k].threads);
		if (bench_write_curves(cfg->out_dir, &reports[i], blocking) != 0)
			return 1;
	}
	return 0;
}

/* The long name of the option whose value is @c. */
static const char *option_name(const struct option *options, int c)
{
	for (; options->name; options++)
		if (options->val == c)
			return options->name;
	return "?";
}

/* --slots alone measures no size: refuse the options of the size runs. */
static int run_slots(struct bench_config *cfg, const char *size_option)
{
	if (!cfg->slots) {
		fprintf(stderr, "%s bench: --rounds counts --slots' rounds: add --slots\n", PROGRAM);
		return 2;
	}
	if (size_option) {
		fprintf(stderr, "%s bench: --%s measures the segment's sizes, not --slots: run them apart\n",
			PROGRAM, size_option);
		return 2;
	}
	if (!cfg->slot_rounds)
		cfg->slot_rounds = SLOT_ROUNDS_DEFAULT;
	return bench_slots(cfg);
}

int cmd_bench(int argc, char **argv)
{
	static const struct option options[] = {
		{ "sizes", required_argument, NULL, 's' },    { "threads", required_argument, NULL, 't' },
		{ "repeat", required_argument, NULL, 'r' },   { "hugetlb", no_argument, NULL, 'H' },
		{ "register", required_argument, NULL, 'R' }, { "json", no_argument, NULL, 'j' },
		{ "background", no_argument, NULL, 'B' },     { "out", required_argument, NULL, 'o' },
		{ "slots", no_argument, NULL, 'S' },	      { "rounds", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },	      { NULL, 0, NULL, 0 },
	};
	struct bench_config cfg = { { 0 }, 0, 1, 3, false, false, -1, false, NULL, false, 0 };
	const char *size_option = NULL; /* the last option of the size runs given, for --slots */
	struct size_report *reports;
	uint64_t available = mc_meminfo_field("MemAvailable");
	int c, status;

	bench_clock_start();
	set_defaults(&cfg, available);
	while ((c = getopt_long(argc, argv, "s:t:r:R:Hjho:", options, NULL)) != -1) {
		if ((status = apply_option(c, &cfg)) >= 0)
			return status;
		if (strchr("stHRBo", c))
			size_option = option_name(options, c);
	}
	if (optind != argc)
		return refuse_argument(argv[optind]);
	if (cfg.slots || cfg.slot_rounds)
		return run_slots(&cfg, size_option);
	if (cfg.out_dir && !cfg.background) {
		fprintf(stderr, "%s bench: --out holds --background's curves: add --background\n", PROGRAM);
		return 2;
	}
	/* Fail once, before minutes of measurements, instead of once per size. */
	if (cfg.register_device >= 0 && !mooncake_segment_supported(true, true, false)) {
		fprintf(stderr,
			"%s bench: --register: no accelerator runtime with a device here (CUDA: libcuda.so.1 "
			"or MOONCAKE_SEGMENT_CUDA_LIBRARY; Ascend: libascendcl.so or "
			"MOONCAKE_SEGMENT_ASCEND_LIBRARY); `%s doctor` says what is missing\n",
			PROGRAM, PROGRAM);
		return 1;
	}
	reports = calloc(cfg.nsizes > 0 ? (size_t)cfg.nsizes : 1, sizeof(*reports));
	if (!reports)
		return 1;
	measure_sizes(&cfg, reports, available);
	status = cfg.out_dir ? write_curves(&cfg, reports) : 0;
	if (cfg.json)
		bench_print_json(&cfg, reports);
	else
		bench_print_text(&cfg, reports);
	for (int i = 0; i < cfg.nsizes; i++)
		for (int k = 0; k < 2; k++)
			front_curve_free(&reports[i].background[k].curve);
	free(reports);
	return status;
}
