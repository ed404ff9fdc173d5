/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench's report: each method's runs summarised (the best, the median and
 * the spread, worst over best), the ratios between methods with their
 * targets, and the whole as text or JSON.  A ratio to the memset limit above
 * 1 is flagged as a disturbed measurement.  Ratios, not absolute numbers,
 * are what to compare across machines.  With --background: the first
 * usable byte, the time to fully ready against the blocking commit of the
 * same size and threads, and where the front's curves were written.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/segment.h>

#include "bench.h"
#include "cli.h"

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

void bench_record(struct size_report *r, const char *method, unsigned int threads, const struct samples *runs)
{
	struct result *res = &r->results[r->nresults < MAX_RESULTS - 1 ? r->nresults++ : r->nresults];
	double sorted[MAX_RUNS];

	*res = (struct result){ method, threads, -1, -1, -1, *runs };
	if (!runs->n)
		return;
	memcpy(sorted, runs->seconds, sizeof(double) * (size_t)runs->n);
	qsort(sorted, (size_t)runs->n, sizeof(double), compare_doubles);
	res->seconds = sorted[0];
	res->worst = sorted[runs->n - 1];
	res->median = runs->n % 2 ? sorted[runs->n / 2] : (sorted[runs->n / 2 - 1] + sorted[runs->n / 2]) / 2;
}

/* (worst - best) / best, in percent; -1 when not measured. */
static double spread_percent(const struct result *res)
{
	return res->seconds > 0 ? (res->worst - res->seconds) / res->seconds * 100 : -1;
}

static const struct result *find_result(const struct size_report *r, const char *method, unsigned int threads)
{
	for (int i = 0; i < r->nresults; i++)
		if (!strcmp(r->results[i].method, method) && r->results[i].threads == threads)
			return &r->results[i];
	return NULL;
}

static double find(const struct size_report *r, const char *method, unsigned int threads)
{
	const struct result *res = find_result(r, method, threads);

	return res ? res->seconds : -1;
}

double bench_find(const struct size_report *r, const char *method, unsigned int threads)
{
	return find(r, method, threads);
}

/* The goals of issue 24: the first byte at once, the whole as fast as blocking. */
#define FIRST_BYTE_GOAL_MS 10.0
#define READY_RATIO_GOAL   0.95

/* Throughput of @a relative to @b (both times): b / a, or -1. */
static double ratio(double a, double b)
{
	return a > 0 && b > 0 ? b / a : -1;
}

struct ratio_line {
	const char *name;
	double value;
	const char *target;
};

/* Nothing commits memory faster than memset writes it: above 1 (with 5% for
 * timer noise), the limit was measured while the machine was busy. */
#define LIMIT_SLACK 1.05

/* Above the memset limit: that limit's runs were disturbed, not we faster. */
static bool limit_disturbed(const struct ratio_line *line)
{
	return strstr(line->name, "memset limit") && line->value > LIMIT_SLACK;
}

static int ratios(const struct size_report *r, unsigned int threads, struct ratio_line *out)
{
	double ours = find(r, "ours", threads), hours = find(r, "ours-hugetlb", threads);
	double ready = find(r, "background-ready", threads);
	int n = 0;

	/* --background measures neither raw-memfd nor the baseline: no line for them. */
	if (find_result(r, "raw-memfd", threads))
		out[n++] = (struct ratio_line){ "ours / raw-memfd (same threads)",
						ratio(ours, find(r, "raw-memfd", threads)), ">= 0.9" };
	out[n++] = (struct ratio_line){ "ours / anon (same page size, threads)",
					ratio(ours, find(r, "anon", threads)), "report" };
	if (find_result(r, "baseline-devshm", 1))
		out[n++] = (struct ratio_line){ "ours / baseline-devshm (1 thread, touch)",
						ratio(ours, find(r, "baseline-devshm", 1)),
						">= 1.6 at all threads" };
	out[n++] = (struct ratio_line){ "ours / memset limit", ratio(ours, find(r, "memset", threads)),
					"report" };
	if (find_result(r, "ours-aligned", threads))
		/* The same bytes on a 1 GiB-aligned base: the C library pads nothing. */
		out[n++] =
			(struct ratio_line){ "ours-aligned 1G / ours (the same bytes)",
					     ratio(find(r, "ours-aligned", threads), ours), "~1: no cost" };
	if (find_result(r, "background-ready", threads)) {
		/* Throughput of the background commit to fully ready, against the blocking one. */
		out[n++] = (struct ratio_line){ "background-ready / ours (blocking, same threads)",
						ratio(ready, ours), ">= 0.95" };
		out[n++] = (struct ratio_line){ "background-ready / memset limit",
						ratio(ready, find(r, "memset", threads)), "report" };
	}
	if (hours > 0) {
		out[n++] =
			(struct ratio_line){ "ours-hugetlb / raw-memfd-hugetlb",
					     ratio(hours, find(r, "raw-memfd-hugetlb", threads)), ">= 0.9" };
		out[n++] = (struct ratio_line){ "ours-hugetlb / baseline-devshm",
						ratio(hours, find(r, "baseline-devshm", 1)),
						">= 10 at all threads" };
		out[n++] = (struct ratio_line){ "ours-hugetlb / memset limit",
						ratio(hours, find(r, "memset", threads)), "report" };
	}
	return n;
}

/* --background at each thread count: the first byte, fully ready against
 * blocking, and the files of the curve. */
static void print_background(const struct size_report *r)
{
	for (int k = 0; k < 2; k++) {
		const struct background_report *b = &r->background[k];
		double first = find(r, "background-first-byte", b->threads);
		double ready = find(r, "background-ready", b->threads), ours = find(r, "ours", b->threads);

		if (!b->threads)
			continue;
		printf("background commit, %u thread%s: first usable byte %.3f ms (goal < %.0f ms: %s); "
		       "fully ready %.3f s, blocking %.3f s: ratio %.3f (goal >= %.2f: %s)\n",
		       b->threads, b->threads == 1 ? "" : "s", first * 1e3, FIRST_BYTE_GOAL_MS,
		       first >= 0 && first * 1e3 < FIRST_BYTE_GOAL_MS ? "met" : "MISSED", ready, ours,
		       ratio(ready, ours), READY_RATIO_GOAL,
		       ratio(ready, ours) >= READY_RATIO_GOAL ? "met" : "MISSED");
		if (b->csv[0])
			printf("  the front, %zu samples: %s, plot %s\n", b->curve.n, b->csv, b->svg);
		else
			printf("  the front, %zu samples (--out DIR writes them as CSV and SVG)\n",
			       b->curve.n);
	}
}

void bench_print_text(const struct bench_config *cfg, const struct size_report *reports)
{
	char a[32];

	printf("%s bench (%s): %d interleaved rounds, threads 1 and %u; best, median and spread "
	       "(worst/best - 1) of the runs\n",
	       PROGRAM, mooncake_segment_version(), cfg->repeat, cfg->threads);
	for (int i = 0; i < cfg->nsizes; i++) {
		const struct size_report *r = &reports[i];
		struct ratio_line lines[12];

		printf("\n== %s ==\n%-26s %7s %10s %9s %10s %7s %4s\n", format_size(r->size, a, sizeof(a)),
		       "method", "threads", "best ms", "GB/s", "median ms", "spread", "runs");
		for (int j = 0; j < r->nresults; j++) {
			const struct result *res = &r->results[j];

			if (res->seconds < 0)
				printf("%-26s %7u %10s %9s\n", res->method, res->threads, "-", "failed");
			else
				printf("%-26s %7u %10.3f %9.2f %10.3f %6.0f%% %4d\n", res->method,
				       res->threads, res->seconds * 1e3, (double)r->size / res->seconds / 1e9,
				       res->median * 1e3, spread_percent(res), res->runs.n);
		}
		for (unsigned int t = 1; t <= cfg->threads; t = t == cfg->threads ? t + 1 : cfg->threads) {
			const struct result *limit = find_result(r, "memset", t);
			int n = ratios(r, t, lines);

			printf("ratios at %u thread%s:\n", t, t == 1 ? "" : "s");
			for (int k = 0; k < n; k++) {
				printf("  %-44s %6.2f  (target %s)\n", lines[k].name, lines[k].value,
				       lines[k].target);
				if (limit_disturbed(&lines[k]) && limit)
					printf("    above 1: the memset limit was measured while the machine was busy "
					       "(its %d runs spread %.0f%%); rerun on an idle machine or with more "
					       "--repeat\n",
					       limit->runs.n, spread_percent(limit));
			}
		}
		printf("time until a peer can read: %.1f ms (owner create + peer import, %u threads)\n",
		       (find(r, "ours", cfg->threads) + find(r, "import", cfg->threads)) * 1e3, cfg->threads);
		if (cfg->background)
			print_background(r);
	}
}

static void json_path(const char *path)
{
	if (path[0])
		json_string(stdout, path);
	else
		printf("null");
}

/* , "background": [ per thread count: the figures and the curve's files ] */
static void print_background_json(const struct size_report *r)
{
	printf(", \"background\": [");
	for (int k = 0, first = 1; k < 2; k++) {
		const struct background_report *b = &r->background[k];
		double ready = find(r, "background-ready", b->threads), ours = find(r, "ours", b->threads);

		if (!b->threads)
			continue;
		printf("%s{\"threads\": %u, \"first_byte_ms\": %.6f, \"ready_seconds\": %.9f, "
		       "\"blocking_seconds\": %.9f, \"ready_ratio\": %.3f, \"first_byte_goal_ms\": %.1f, "
		       "\"ready_ratio_goal\": %.2f, \"samples\": %zu, \"csv\": ",
		       first ? "" : ", ", b->threads, find(r, "background-first-byte", b->threads) * 1e3,
		       ready, ours, ratio(ready, ours), FIRST_BYTE_GOAL_MS, READY_RATIO_GOAL, b->curve.n);
		json_path(b->csv);
		printf(", \"svg\": ");
		json_path(b->svg);
		printf("}");
		first = 0;
	}
	printf("]");
}

void bench_print_json(const struct bench_config *cfg, const struct size_report *reports)
{
	printf("{\"version\": \"%s\", \"repeat\": %d, \"threads\": %u, \"sizes\": [",
	       mooncake_segment_version(), cfg->repeat, cfg->threads);
	for (int i = 0; i < cfg->nsizes; i++) {
		const struct size_report *r = &reports[i];
		struct ratio_line lines[12];

		printf("%s\n {\"size\": %llu, \"results\": [", i ? "," : "", (unsigned long long)r->size);
		for (int j = 0; j < r->nresults; j++) {
			const struct result *res = &r->results[j];

			printf("%s{\"method\": \"%s\", \"threads\": %u, \"seconds\": %.9f, \"gbps\": %.3f, "
			       "\"median\": %.9f, \"worst\": %.9f, \"spread_percent\": %.1f, \"runs\": [",
			       j ? ", " : "", res->method, res->threads, res->seconds,
			       res->seconds > 0 ? (double)r->size / res->seconds / 1e9 : -1.0, res->median,
			       res->worst, spread_percent(res));
			/* Each run with its start (seconds since the bench began): the interleaving shows. */
			for (int k = 0; k < res->runs.n; k++)
				printf("%s{\"start\": %.6f, \"seconds\": %.9f}", k ? ", " : "",
				       res->runs.start[k], res->runs.seconds[k]);
			printf("]}");
		}
		printf("], \"ratios\": [");
		for (unsigned int t = 1, first = 1; t <= cfg->threads;
		     t = t == cfg->threads ? t + 1 : cfg->threads) {
			int n = ratios(r, t, lines);

			for (int k = 0; k < n; k++, first = 0) {
				printf("%s{\"threads\": %u, \"name\": ", first ? "" : ", ", t);
				json_string(stdout, lines[k].name);
				printf(", \"value\": %.3f, \"limit_disturbed\": %s}", lines[k].value,
				       limit_disturbed(&lines[k]) ? "true" : "false");
			}
		}
		printf("]");
		if (cfg->background)
			print_background_json(r);
		printf("}");
	}
	printf("\n]}\n");
}
