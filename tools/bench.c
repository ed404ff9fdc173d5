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
 * Each figure is the best of --repeat runs.  Ratios, not absolute numbers,
 * are what to compare across machines.
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

#include "linux-compat.h"

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

struct result {
	const char *method;
	unsigned int threads;
	double seconds; /* best of the repeats; < 0: not measured */
	char note[64];
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

static struct result *record(struct size_report *r, const char *method, unsigned int threads, double seconds)
{
	struct result *res = &r->results[r->nresults < MAX_RESULTS - 1 ? r->nresults++ : r->nresults];

	*res = (struct result){ method, threads, seconds, "" };
	return res;
}

static void keep_best(double *best, double seconds)
{
	if (seconds >= 0 && (*best < 0 || seconds < *best))
		*best = seconds;
}

static double seconds_since(uint64_t start)
{
	return (double)(monotonic_ns() - start) / 1e9;
}

/* Anonymous memory populated like ours; then memset over it (the limit). */
static void bench_anon(size_t size, unsigned int threads, double *populate, double *memset_s)
{
	uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t t0;

	*populate = *memset_s = -1;
	if (p == MAP_FAILED)
		return;
	/* Our default path on a host without shmem THP uses 4 KiB pages: compare like with like. */
	madvise(p, size, MADV_NOHUGEPAGE);
	t0 = monotonic_ns();
	if (parallel(p, size, 4096, threads, WORK_POPULATE) == 0)
		*populate = seconds_since(t0);
	t0 = monotonic_ns();
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
	uint64_t t0 = monotonic_ns();
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
	uint64_t t0 = monotonic_ns();

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
		t0 = monotonic_ns();
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
	double create_s = -1, register_s = -1;

	for (int i = 0; i < cfg->repeat; i++) {
		struct mooncake_segment_options opt = bench_options(0, threads, false);
		struct mooncake_segment_info info;
		struct mooncake_segment *seg;
		uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
		uint64_t t0 = monotonic_ns();

		opt.world_size = 1;
		opt.host_register = true;
		opt.device_id = cfg->register_device;
		if (mooncake_segment_create("bench", size, &opt, &seg, blob) != 0) {
			fprintf(stderr, "%s bench: --register: %s\n", PROGRAM, mooncake_segment_last_error());
			break;
		}
		keep_best(&create_s, seconds_since(t0));
		if (mooncake_segment_get_info(seg, &info, sizeof(info)) == 0)
			keep_best(&register_s, (double)info.register_ns / 1e9);
		mooncake_segment_destroy(seg);
	}
	record(r, "ours+register", threads, create_s);
	record(r, "register", threads, register_s);
}

/* multiprocessing.shared_memory style: a /dev/shm file, first touch, one thread. */
static double bench_baseline(size_t size)
{
	char path[64];
	int fd;
	uint8_t *p;
	uint64_t t0 = monotonic_ns();
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

static void bench_size(const struct bench_config *cfg, struct size_report *r)
{
	const unsigned int counts[2] = { 1, cfg->threads };
	int nthreads = cfg->threads > 1 ? 2 : 1;
	size_t size = r->size;

	for (int t = 0; t < nthreads; t++) {
		unsigned int threads = counts[t];
		double anon = -1, mem = -1, raw = -1, ours = -1, import = -1, import_pop = -1;
		double huge_raw = -1, huge_ours = -1, huge_import = -1, huge_import_pop = -1;
		bool huge = cfg->hugetlb && hugetlb_pool_fits(align_2m(size));

		for (int i = 0; i < cfg->repeat; i++) {
			double a, m, c, im, ip;

			bench_anon(size, threads, &a, &m);
			keep_best(&anon, a);
			keep_best(&mem, m);
			/* Alternate which of raw and ours runs first: on a VM the host may
			 * take freed memory back, slowing whichever allocates next. */
			if (i % 2)
				keep_best(&raw, bench_raw_memfd(size, 4096, threads, false));
			bench_ours(size, threads, false, &c, &im, &ip);
			keep_best(&ours, c);
			if (!(i % 2))
				keep_best(&raw, bench_raw_memfd(size, 4096, threads, false));
			keep_best(&import, im);
			keep_best(&import_pop, ip);
			if (huge) {
				keep_best(&huge_raw, bench_raw_memfd(align_2m(size), 2 << 20, threads, true));
				bench_ours(size, threads, true, &c, &im, &ip);
				keep_best(&huge_ours, c);
				keep_best(&huge_import, im);
				keep_best(&huge_import_pop, ip);
			}
		}
		record(r, "memset", threads, mem);
		record(r, "anon", threads, anon);
		record(r, "raw-memfd", threads, raw);
		record(r, "ours", threads, ours);
		record(r, "import", threads, import);
		record(r, "import+populate", threads, import_pop);
		if (cfg->register_device >= 0)
			bench_register(r, size, threads, cfg);
		if (huge) {
			record(r, "raw-memfd-hugetlb", threads, huge_raw);
			record(r, "ours-hugetlb", threads, huge_ours);
			record(r, "import-hugetlb", threads, huge_import);
			record(r, "import+populate-hugetlb", threads, huge_import_pop);
		}
	}
	double base = -1;

	for (int i = 0; i < cfg->repeat; i++)
		keep_best(&base, bench_baseline(size));
	record(r, "baseline-devshm", 1, base);
}

static double find(const struct size_report *r, const char *method, unsigned int threads)
{
	for (int i = 0; i < r->nresults; i++)
		if (!strcmp(r->results[i].method, method) && r->results[i].threads == threads)
			return r->results[i].seconds;
	return -1;
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

	printf("%s bench (%s): best of %d, threads 1 and %u\n", PROGRAM, mooncake_segment_version(),
	       cfg->repeat, cfg->threads);
	for (int i = 0; i < cfg->nsizes; i++) {
		const struct size_report *r = &reports[i];
		struct ratio_line lines[8];

		printf("\n== %s ==\n%-26s %7s %10s %9s\n", format_size(r->size, a, sizeof(a)), "method",
		       "threads", "ms", "GB/s");
		for (int j = 0; j < r->nresults; j++) {
			const struct result *res = &r->results[j];

			if (res->seconds < 0)
				printf("%-26s %7u %10s %9s\n", res->method, res->threads, "-", "failed");
			else
				printf("%-26s %7u %10.3f %9.2f\n", res->method, res->threads,
				       res->seconds * 1e3, (double)r->size / res->seconds / 1e9);
		}
		for (unsigned int t = 1; t <= cfg->threads; t = t == cfg->threads ? t + 1 : cfg->threads) {
			int n = ratios(r, t, lines);

			printf("ratios at %u thread%s:\n", t, t == 1 ? "" : "s");
			for (int k = 0; k < n; k++)
				printf("  %-44s %6.2f  (target %s)\n", lines[k].name, lines[k].value,
				       lines[k].target);
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

			printf("%s{\"method\": \"%s\", \"threads\": %u, \"seconds\": %.6f, \"gbps\": %.3f}",
			       j ? ", " : "", res->method, res->threads, res->seconds,
			       res->seconds > 0 ? (double)r->size / res->seconds / 1e9 : -1.0);
		}
		printf("], \"ratios\": [");
		for (unsigned int t = 1, first = 1; t <= cfg->threads;
		     t = t == cfg->threads ? t + 1 : cfg->threads) {
			int n = ratios(r, t, lines);

			for (int k = 0; k < n; k++, first = 0) {
				printf("%s{\"threads\": %u, \"name\": ", first ? "" : ", ", t);
				json_string(stdout, lines[k].name);
				printf(", \"value\": %.3f}", lines[k].value);
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
		"  --repeat N     best of N runs (default 3)\n"
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
			if (!parse_uint(optarg, 1, c == 't' ? MAX_THREADS : 100, &v)) {
				fprintf(stderr, "%s bench: --%s must be 1..%d\n", PROGRAM,
					c == 't' ? "threads" : "repeat", c == 't' ? MAX_THREADS : 100);
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
