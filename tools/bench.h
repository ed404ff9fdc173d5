/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What bench's three files share: the command (bench.c) fills a
 * bench_config, the methods (bench-methods.c) measure each size into a
 * size_report, and the report (bench-report.c) summarises and prints them.
 */
#ifndef MOONCAKE_SEGMENT_BENCH_H
#define MOONCAKE_SEGMENT_BENCH_H

#include <stdbool.h>
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

struct size_report {
	uint64_t size;
	int nresults;
	struct result results[MAX_RESULTS];
};

struct bench_config {
	uint64_t sizes[MAX_SIZES];
	int nsizes;
	unsigned int threads;
	int repeat;
	bool json;
	bool hugetlb;
	int register_device; /* -1: no registration run */
};

/* bench-methods.c: the clock runs' starts are told from, then every method
 * at r->size, --repeat interleaved rounds at 1 and cfg->threads threads. */
void bench_clock_start(void);
void bench_size(const struct bench_config *cfg, struct size_report *r);

/* bench-report.c: @runs of @method summarised into @r, and the printers. */
void bench_record(struct size_report *r, const char *method, unsigned int threads,
		  const struct samples *runs);
void bench_print_text(const struct bench_config *cfg, const struct size_report *reports);
void bench_print_json(const struct bench_config *cfg, const struct size_report *reports);

#endif
