/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment bench: what a segment costs, against the physical limits
 * measured in the same run.  For each size and thread count:
 *
 *   memset     bandwidth over already-faulted memory (the physical limit)
 *   anon       anonymous memory of the same page size, MADV_POPULATE_WRITE
 *   raw-memfd  the best raw method on our backing: memfd + fallocate +
 *              parallel MADV_POPULATE_WRITE, written here without the library
 *   ours       mooncake_segment_create() of the owner (commit included)
 *   import     a peer's complete() (map), and with populate_on_import
 *   baseline   what a Python user does without us: a /dev/shm file touched
 *              page by page by one thread
 *
 * Every method runs once per round, --repeat rounds, and each round starts
 * one method later than the one before: the memset limit is measured between
 * the others, not once at a moment the machine may be busy.  Each figure is
 * the best of its runs, shown with the median and the spread (worst over best)
 * of all of them; a ratio to the memset limit above 1 is flagged as a
 * disturbed measurement.  Ratios, not absolute numbers, are what to compare
 * across machines.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "cli.h"

#include "base/linux-compat.h"

#define MAX_THREADS 64
#define MAX_SIZES   8
#define MAX_RESULTS 32

enum work { WORK_POPULATE, WORK_MEMSET, WORK_TOUCH };

struct slice {
	uint8_t *addr;
	size_t len;
	enum work work;
	int err;
};

static void *run_slice(void *arg)
{
	struct slice *s = arg;

	switch (s->work) {
	case WORK_POPULATE:
		s->err = madvise(s->addr, s->len, MADV_POPULATE_WRITE) ? errno : 0;
		break;
	case WORK_MEMSET:
		memset(s->addr, 0x5A, s->len);
		break;
	case WORK_TOUCH:
		for (size_t off = 0; off < s->len; off += 4096)
			s->addr[off] = 1;
		break;
	}
	return NULL;
}

/* Split [addr, addr+len) on page boundaries over @threads threads. */
static int parallel(uint8_t *addr, size_t len, size_t page, unsigned int threads, enum work work)
{
	struct slice s[MAX_THREADS] = { { 0 } };
	pthread_t t[MAX_THREADS];
	bool started[MAX_THREADS] = { false };
	size_t pages = len / page, off = 0;
	int err = 0;

	if (threads == 0 || threads > MAX_THREADS)
		threads = threads ? MAX_THREADS : 1;
	for (unsigned int i = 0; i < threads; i++) {
		size_t n = pages / threads + (i < pages % threads);

		s[i] = (struct slice){ addr + off, n * page, work, 0 };
		off += n * page;
	}
	for (unsigned int i = 1; i < threads; i++)
		started[i] = pthread_create(&t[i], NULL, run_slice, &s[i]) == 0;
	run_slice(&s[0]);
	for (unsigned int i = 1; i < threads; i++) {
		if (started[i])
			pthread_join(t[i], NULL);
		else
			run_slice(&s[i]);
	}
	for (unsigned int i = 0; i < threads; i++)
		err = err ? err : s[i].err;
	return err;
}

#define MAX_RUNS 100 /* --repeat's maximum */

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

static uint64_t bench_start_ns;

static void add_sample(struct samples *s, uint64_t started_ns, double seconds)
{
	if (seconds < 0 || s->n == MAX_RUNS)
		return;
	s->seconds[s->n] = seconds;
	s->start[s->n] = (double)(started_ns - bench_start_ns) / 1e9;
	s->n++;
}

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void record(struct size_report *r, const char *method, unsigned int threads,
		   const struct samples *runs)
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

static double seconds_since(uint64_t start)
{
	return (double)(mc_now_ns() - start) / 1e9;
}

/* Anonymous memory populated like ours; then memset over it (the limit). */
static void bench_anon(size_t size, unsigned int threads, double *populate, double *memset_s,
		       uint64_t *memset_start)
{
	uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t t0;

	*populate = *memset_s = -1;
	if (p == MAP_FAILED)
		return;
	/* Our default path on a host without shmem THP uses 4 KiB pages: compare like with like. */
	madvise(p, size, MADV_NOHUGEPAGE);
	t0 = mc_now_ns();
	if (parallel(p, size, 4096, threads, WORK_POPULATE) == 0)
		*populate = seconds_since(t0);
	t0 = *memset_start = mc_now_ns();
	parallel(p, size, 4096, threads, WORK_MEMSET);
	*memset_s = seconds_since(t0);
	munmap(p, size);
}

/* The best raw method on a memfd, without the library: fallocate (which
 * fails cleanly) then parallel populate; for HugeTLB the mmap reserves the
 * pool, so parallel populate alone (hugetlbfs's fallocate zeroes on one thread). */
static double bench_raw_memfd(size_t size, size_t page, unsigned int threads, bool hugetlb)
{
	int fd = memfd_create("bench-raw", MFD_CLOEXEC | (hugetlb ? MFD_HUGETLB : 0));
	uint64_t t0 = mc_now_ns();
	double s = -1;
	uint8_t *p;

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) == 0 && (hugetlb || fallocate(fd, 0, 0, (off_t)size) == 0)) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED) {
			if (parallel(p, size, page, threads, WORK_POPULATE) == 0)
				s = seconds_since(t0);
			munmap(p, size);
		}
	}
	close(fd);
	return s;
}

static struct mooncake_segment_options bench_options(uint32_t rank, unsigned int threads, bool hugetlb)
{
	struct mooncake_segment_options opt;

	mooncake_segment_options_init(&opt);
	opt.world_size = 2;
	opt.rank_id = rank;
	opt.commit_threads = threads;
	opt.hugetlb = hugetlb;
	return opt;
}

/* Our owner's create, then a peer's complete without and with populate. */
static void bench_ours(size_t size, unsigned int threads, bool hugetlb, double *create_s, double *import_s,
		       double *import_populate_s)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment_options o = bench_options(0, threads, hugetlb);
	struct mooncake_segment *owner = NULL, *peer;
	uint64_t t0 = mc_now_ns();

	*create_s = *import_s = *import_populate_s = -1;
	if (mooncake_segment_create("bench", size, &o, &owner, blobs) != 0) {
		fprintf(stderr, "%s bench: create: %s\n", PROGRAM, mooncake_segment_last_error());
		return;
	}
	*create_s = seconds_since(t0);
	for (int populate = 0; populate <= 1; populate++) {
		struct mooncake_segment_options p = bench_options(1, threads, hugetlb);

		p.populate_on_import = populate;
		if (mooncake_segment_create("bench", size, &p, &peer, blobs + MOONCAKE_SEGMENT_BLOB_SIZE) !=
		    0)
			break;
		t0 = mc_now_ns();
		if (mooncake_segment_complete(peer, blobs, sizeof(blobs)) == 0)
			*(populate ? import_populate_s : import_s) = seconds_since(t0);
		mooncake_segment_destroy(peer);
	}
	mooncake_segment_destroy(owner);
}

/* The owner's create with host_register: the whole, and the registration alone. */
static void bench_register(struct size_report *r, size_t size, unsigned int threads,
			   const struct bench_config *cfg)
{
	struct samples create_runs = { 0 }, register_runs = { 0 };

	for (int i = 0; i < cfg->repeat; i++) {
		struct mooncake_segment_options opt = bench_options(0, threads, false);
		struct mooncake_segment_info info;
		struct mooncake_segment *seg;
		uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
		uint64_t t0 = mc_now_ns();

		opt.world_size = 1;
		opt.host_register = true;
		opt.device_id = cfg->register_device;
		if (mooncake_segment_create("bench", size, &opt, &seg, blob) != 0) {
			fprintf(stderr, "%s bench: --register: %s\n", PROGRAM, mooncake_segment_last_error());
			break;
		}
		add_sample(&create_runs, t0, seconds_since(t0));
		if (mooncake_segment_get_info(seg, &info, sizeof(info)) == 0)
			add_sample(&register_runs, t0, (double)info.register_ns / 1e9);
		mooncake_segment_destroy(seg);
	}
	record(r, "ours+register", threads, &create_runs);
	record(r, "register", threads, &register_runs);
}

/* multiprocessing.shared_memory style: a /dev/shm file, first touch, one thread. */
static double bench_baseline(size_t size)
{
	char path[64];
	int fd;
	uint8_t *p;
	uint64_t t0 = mc_now_ns();
	double s = -1;

	snprintf(path, sizeof(path), "/dev/shm/mooncake-segment-bench-%d", (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	unlink(path);
	if (ftruncate(fd, (off_t)size) == 0) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED) {
			parallel(p, size, 4096, 1, WORK_TOUCH);
			s = seconds_since(t0);
			munmap(p, size);
		}
	}
	close(fd);
	return s;
}

static size_t align_2m(size_t size)
{
	return (size + (UINT64_C(2) << 20) - 1) & ~((UINT64_C(2) << 20) - 1);
}

static bool hugetlb_pool_fits(uint64_t size)
{
	uint64_t page = mc_meminfo_field("Hugepagesize");

	return page && mc_meminfo_field("HugePages_Free") * page >= size;
}

/* The methods measured in a round, in their first round's order. */
enum step { STEP_ANON_MEMSET, STEP_RAW, STEP_OURS, STEP_BASELINE, STEP_HUGE_RAW, STEP_HUGE_OURS, NSTEPS };

struct size_samples {
	struct samples anon, memset, raw, ours, import, import_pop, baseline;
	struct samples huge_raw, huge_ours, huge_import, huge_import_pop;
};

static void run_step(enum step step, size_t size, unsigned int threads, struct size_samples *m)
{
	uint64_t t0 = mc_now_ns(), memset_start = t0;
	double a, b, c;

	switch (step) {
	case STEP_ANON_MEMSET:
		bench_anon(size, threads, &a, &b, &memset_start);
		add_sample(&m->anon, t0, a);
		add_sample(&m->memset, memset_start, b);
		break;
	case STEP_RAW:
		add_sample(&m->raw, t0, bench_raw_memfd(size, 4096, threads, false));
		break;
	case STEP_OURS:
		bench_ours(size, threads, false, &a, &b, &c);
		add_sample(&m->ours, t0, a);
		add_sample(&m->import, t0, b);
		add_sample(&m->import_pop, t0, c);
		break;
	case STEP_BASELINE:
		add_sample(&m->baseline, t0, bench_baseline(size));
		break;
	case STEP_HUGE_RAW:
		add_sample(&m->huge_raw, t0, bench_raw_memfd(align_2m(size), 2 << 20, threads, true));
		break;
	case STEP_HUGE_OURS:
		bench_ours(size, threads, true, &a, &b, &c);
		add_sample(&m->huge_ours, t0, a);
		add_sample(&m->huge_import, t0, b);
		add_sample(&m->huge_import_pop, t0, c);
		break;
	case NSTEPS:
		break;
	}
}

static void bench_size(const struct bench_config *cfg, struct size_report *r)
{
	const unsigned int counts[2] = { 1, cfg->threads };
	int nthreads = cfg->threads > 1 ? 2 : 1;
	size_t size = r->size;
	struct samples baseline = { 0 };

	for (int t = 0; t < nthreads; t++) {
		unsigned int threads = counts[t];
		bool huge = cfg->hugetlb && hugetlb_pool_fits(align_2m(size));
		struct size_samples *m = calloc(1, sizeof(*m));
		enum step steps[NSTEPS];
		int nsteps = 0;

		if (!m)
			return;
		for (enum step st = 0; st < NSTEPS; st++)
			/* The baseline is one thread by definition: measured with the 1-thread round. */
			if ((st != STEP_BASELINE || t == 0) &&
			    ((st != STEP_HUGE_RAW && st != STEP_HUGE_OURS) || huge))
				steps[nsteps++] = st;
		/* Each round starts one method later: every method, the memset limit
		 * included, runs before and after each other one across the rounds (on a
		 * VM the host may also take freed memory back, slowing whichever
		 * allocates next). */
		for (int i = 0; i < cfg->repeat; i++)
			for (int k = 0; k < nsteps; k++)
				run_step(steps[(i + k) % nsteps], size, threads, m);
		record(r, "memset", threads, &m->memset);
		record(r, "anon", threads, &m->anon);
		record(r, "raw-memfd", threads, &m->raw);
		record(r, "ours", threads, &m->ours);
		record(r, "import", threads, &m->import);
		record(r, "import+populate", threads, &m->import_pop);
		if (cfg->register_device >= 0)
			bench_register(r, size, threads, cfg);
		if (huge) {
			record(r, "raw-memfd-hugetlb", threads, &m->huge_raw);
			record(r, "ours-hugetlb", threads, &m->huge_ours);
			record(r, "import-hugetlb", threads, &m->huge_import);
			record(r, "import+populate-hugetlb", threads, &m->huge_import_pop);
		}
		if (t == 0)
			baseline = m->baseline;
		free(m);
	}
	record(r, "baseline-devshm", 1, &baseline);
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
	int n = 0;

	out[n++] = (struct ratio_line){ "ours / raw-memfd (same threads)",
					ratio(ours, find(r, "raw-memfd", threads)), ">= 0.9" };
	out[n++] = (struct ratio_line){ "ours / anon (same page size, threads)",
					ratio(ours, find(r, "anon", threads)), "report" };
	out[n++] = (struct ratio_line){ "ours / baseline-devshm (1 thread, touch)",
					ratio(ours, find(r, "baseline-devshm", 1)), ">= 1.6 at all threads" };
	out[n++] = (struct ratio_line){ "ours / memset limit", ratio(ours, find(r, "memset", threads)),
					"report" };
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

static void print_text(const struct bench_config *cfg, const struct size_report *reports)
{
	char a[32];

	printf("%s bench (%s): %d interleaved rounds, threads 1 and %u; best, median and spread "
	       "(worst/best - 1) of the runs\n",
	       PROGRAM, mooncake_segment_version(), cfg->repeat, cfg->threads);
	for (int i = 0; i < cfg->nsizes; i++) {
		const struct size_report *r = &reports[i];
		struct ratio_line lines[8];

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
	}
}

static void print_json(const struct bench_config *cfg, const struct size_report *reports)
{
	printf("{\"version\": \"%s\", \"repeat\": %d, \"threads\": %u, \"sizes\": [",
	       mooncake_segment_version(), cfg->repeat, cfg->threads);
	for (int i = 0; i < cfg->nsizes; i++) {
		const struct size_report *r = &reports[i];
		struct ratio_line lines[8];

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
		printf("]}");
	}
	printf("\n]}\n");
}

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
		"Usage: %s bench [--sizes LIST] [--threads N] [--repeat N] [--hugetlb] [--json]\n\n"
		"Measure the owner's create+commit, a peer's import and the Python-style baseline\n"
		"against anonymous memory and memset in the same run.\n\n"
		"  --sizes LIST   comma-separated sizes, default 256M,1G,4G (each >= 1M)\n"
		"  --threads N    the multi-threaded runs (default: CPUs allowed, at most 64)\n"
		"  --repeat N     N interleaved rounds of every method; best, median and spread (default 3)\n"
		"  --hugetlb      also measure hugetlb=true where the pool can hold the size\n"
		"  --register DEV also measure create with host_register=true on device DEV\n"
		"  --json         machine-readable output\n",
		PROGRAM);
}

int cmd_bench(int argc, char **argv)
{
	static const struct option options[] = {
		{ "sizes", required_argument, NULL, 's' },    { "threads", required_argument, NULL, 't' },
		{ "repeat", required_argument, NULL, 'r' },   { "hugetlb", no_argument, NULL, 'H' },
		{ "register", required_argument, NULL, 'R' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },	      { NULL, 0, NULL, 0 },
	};
	char default_sizes[] = "256M,1G,4G";
	struct bench_config cfg = { { 0 }, 0, 1, 3, false, false, -1 };
	struct size_report *reports;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t v, available = mc_meminfo_field("MemAvailable");
	int c;

	bench_start_ns = mc_now_ns();
	cfg.threads = cpus > MAX_THREADS ? MAX_THREADS : cpus > 0 ? (unsigned int)cpus : 1;
	parse_sizes(default_sizes, &cfg);
	/* And larger where memory allows (a run holds about twice the size). */
	if (available >= (UINT64_C(40) << 30))
		cfg.sizes[cfg.nsizes++] = UINT64_C(16) << 30;
	while ((c = getopt_long(argc, argv, "s:t:r:R:Hjh", options, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!parse_sizes(optarg, &cfg)) {
				fprintf(stderr,
					"%s bench: --sizes takes up to %d sizes of 1M..64T, e.g. 256M,1G\n",
					PROGRAM, MAX_SIZES);
				return 2;
			}
			break;
		case 't':
		case 'r':
			if (!parse_uint(optarg, 1, c == 't' ? MAX_THREADS : MAX_RUNS, &v)) {
				fprintf(stderr, "%s bench: --%s must be 1..%d\n", PROGRAM,
					c == 't' ? "threads" : "repeat", c == 't' ? MAX_THREADS : MAX_RUNS);
				return 2;
			}
			if (c == 't')
				cfg.threads = (unsigned int)v;
			else
				cfg.repeat = (int)v;
			break;
		case 'R':
			if (!parse_uint(optarg, 0, 1023, &v)) {
				fprintf(stderr, "%s bench: --register takes a device index\n", PROGRAM);
				return 2;
			}
			cfg.register_device = (int)v;
			break;
		case 'H':
			cfg.hugetlb = true;
			break;
		case 'j':
			cfg.json = true;
			break;
		case 'h':
			bench_usage(stdout);
			return 0;
		default:
			bench_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		uint64_t size;

		/* `bench 256M` meant --sizes: say so rather than run the defaults for minutes. */
		if (parse_size(argv[optind], &size))
			fprintf(stderr,
				"%s bench: unexpected argument '%s': sizes go in --sizes (e.g. %s bench --sizes %s)\n",
				PROGRAM, argv[optind], PROGRAM, argv[optind]);
		else
			fprintf(stderr, "%s bench: unexpected argument '%s'; see %s bench --help\n", PROGRAM,
				argv[optind], PROGRAM);
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
	for (int i = 0; i < cfg.nsizes; i++) {
		char a[32], b[32];

		/* Two copies exist at once (ours and the peer's view share one; anon is freed first). */
		if (cfg.sizes[i] > available / 2) {
			fprintf(stderr,
				"%s bench: skipping %s: MemAvailable is %s, a run needs twice the size\n",
				PROGRAM, format_size(cfg.sizes[i], a, sizeof(a)),
				format_size(available, b, sizeof(b)));
			cfg.sizes[i--] = cfg.sizes[--cfg.nsizes];
			continue;
		}
		reports[i].size = cfg.sizes[i];
		bench_size(&cfg, &reports[i]);
	}
	if (cfg.json)
		print_json(&cfg, reports);
	else
		print_text(&cfg, reports);
	free(reports);
	return 0;
}
