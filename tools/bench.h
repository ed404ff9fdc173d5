/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What bench's three files share: the command (bench.c) fills a
 * bench_config, the methods (bench-methods.c) measure each size into a
 * size_report, and the report (bench-report.c) summarises and prints them.
 */
#ifndef MOONCAKE_SEGMENT_BENCH_H
#define MOONCAKE_SEGMENT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_THREADS 64
#define MAX_SIZES   8
#define MAX_RESULTS 32
#define MAX_RUNS    100 /* --repeat's maximum */

/* Every run of one method: seconds taken, and when it started (since the bench began). */
struct samples {
	int n;
	double seconds[MAX_RUNS];
	double start[MAX_RUNS];
};

struct result {
	const char *method;
	unsigned int threads;
	double seconds; /* best of the runs; < 0: not measured */
	double median;
	double worst;
	struct samples runs;
};

/* The readiness front of one background create, sampled about every
 * millisecond: at t_ms[i] since create() was called, bytes[i] were ready. */
struct front_curve {
	size_t n, cap;
	double *t_ms;
	uint64_t *bytes;
};

/* --background at one thread count: the curve of its fastest run. */
struct background_report {
	unsigned int threads; /* 0: not measured */
	struct front_curve curve;
	double ready_s; /* that run's time to fully ready */
	char csv[4096]; /* the files written ("" when none) */
	char svg[4096];
};

struct size_report {
	uint64_t size;
	int nresults;
	struct result results[MAX_RESULTS];
	struct background_report background[2]; /* at 1 thread and at --threads */
};

struct bench_config {
	uint64_t sizes[MAX_SIZES];
	int nsizes;
	unsigned int threads;
	int repeat;
	bool json;
	bool hugetlb;
	int register_device; /* -1: no registration run */
	bool background;     /* the background commit against the blocking one (and the limit) */
	const char *out_dir; /* where --background writes its curves; NULL: nowhere */
	bool slots;	     /* the publish slots instead (bench-slots.c) */
	long slot_rounds;    /* --slots: ping-pong rounds per run */
};

/* bench-methods.c: the clock runs' starts are told from, then every method
 * at r->size, --repeat interleaved rounds at 1 and cfg->threads threads. */
void bench_clock_start(void);
void bench_size(const struct bench_config *cfg, struct size_report *r);

/* bench-curve.c: a curve's points, its CSV (t_ms,bytes) and the SVG plot of
 * a size's curves, with each thread count's blocking commit marked. */
bool front_curve_add(struct front_curve *c, double t_ms, uint64_t bytes);
void front_curve_free(struct front_curve *c);
bool front_curve_write_csv(const struct front_curve *c, const char *path);
bool front_curve_write_svg(const struct size_report *r, const double *blocking_s, const char *path);
/* Write @r's curves into @dir (created if missing): 0, or 1 after naming
 * the file that could not be written.  @blocking_s: the blocking commit's
 * best time at each background[] entry's thread count. */
int bench_write_curves(const char *dir, struct size_report *r, const double *blocking_s);

/* bench-slots.c: --slots, measured between two forked processes and
 * printed; the exit status. */
#define SLOT_ROUNDS_DEFAULT 10000
#define SLOT_ROUNDS_MAX	    100000
int bench_slots(const struct bench_config *cfg);

/* bench-report.c: @runs of @method summarised into @r, and the printers. */
void bench_record(struct size_report *r, const char *method, unsigned int threads,
		  const struct samples *runs);
void bench_print_text(const struct bench_config *cfg, const struct size_report *reports);
void bench_print_json(const struct bench_config *cfg, const struct size_report *reports);
/* The best time of @method at @threads in @r, or -1. */
double bench_find(const struct size_report *r, const char *method, unsigned int threads);

#endif
