/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench's measuring methods, each timed on its own memory:
 *
 *   memset     bandwidth over already-faulted memory (the physical limit)
 *   anon       anonymous memory of the same page size, MADV_POPULATE_WRITE
 *   raw-memfd  the best raw method on our backing: memfd + fallocate +
 *              parallel MADV_POPULATE_WRITE, written here without the library
 *   ours       mooncake_segment_create() of the owner (commit included)
 *   ours-aligned  the same with options.alignment 1 GiB (the largest): what an
 *              aligned base costs; the same bytes, so nothing but noise is expected
 *   import     a peer's complete() (map), and with populate_on_import
 *   register   the owner's create with host_register (--register)
 *   baseline   what a Python user does without us: a /dev/shm file touched
 *              page by page by one thread
 *   background (--background) the owner's create with background_commit:
 *              the first byte written and read back, then every byte ready
 *              (wait_ready), the front sampled every millisecond meanwhile;
 *              against ours (the blocking commit) and the memset limit only
 *
 * Every method runs once per round, --repeat rounds, and each round starts
 * one method later than the one before: the memset limit is measured between
 * the others, not once at a moment the machine may be busy.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "bench.h"
#include "cli.h"

#include "base/linux-compat.h"

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

static uint64_t bench_start_ns;

/* Run starts are told from here: called once, before the options are read. */
void bench_clock_start(void)
{
	bench_start_ns = mc_now_ns();
}

static void add_sample(struct samples *s, uint64_t started_ns, double seconds)
{
	if (seconds < 0 || s->n == MAX_RUNS)
		return;
	s->seconds[s->n] = seconds;
	s->start[s->n] = (double)(started_ns - bench_start_ns) / 1e9;
	s->n++;
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
static void bench_ours(size_t size, unsigned int threads, bool hugetlb, uint64_t alignment, double *create_s,
		       double *import_s, double *import_populate_s)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment_options o = bench_options(0, threads, hugetlb);
	struct mooncake_segment *owner = NULL, *peer;
	uint64_t t0 = mc_now_ns();

	*create_s = *import_s = *import_populate_s = -1;
	o.alignment = alignment;
	if (mooncake_segment_create("bench", size, &o, &owner, blobs) != 0) {
		fprintf(stderr, "%s bench: create: %s\n", PROGRAM, mooncake_segment_last_error());
		return;
	}
	*create_s = seconds_since(t0);
	for (int populate = 0; populate <= 1; populate++) {
		struct mooncake_segment_options p = bench_options(1, threads, hugetlb);

		p.populate_on_import = populate;
		p.alignment = alignment;
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

/* The front's sampler: ready_bytes() about every millisecond until every
 * byte is ready or the bench stops it. */
struct front_sampler {
	struct mooncake_segment *seg;
	uint64_t t0, alloc;
	struct front_curve *curve;
	atomic_bool stop;
};

static void *sample_front(void *arg)
{
	struct front_sampler *s = arg;
	const struct timespec ms = { 0, 1000000 };

	for (;;) {
		uint64_t bytes = mooncake_segment_ready_bytes(s->seg);

		front_curve_add(s->curve, (double)(mc_now_ns() - s->t0) / 1e6, bytes);
		if (bytes >= s->alloc || atomic_load(&s->stop))
			return NULL;
		nanosleep(&ms, NULL);
	}
}

/* The owner's create with background_commit, as the blocking ours is
 * created otherwise: when the first byte was written and read back, when
 * every byte was ready, and the front meanwhile into @curve. */
static void bench_background(size_t size, unsigned int threads, double *first_s, double *ready_s,
			     struct front_curve *curve)
{
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment_options o = bench_options(0, threads, false);
	struct front_sampler sampler = { 0 };
	struct mooncake_segment *seg = NULL;
	volatile uint8_t *base;
	pthread_t thread;
	bool sampling;
	uint64_t t0;
	int err;

	*first_s = *ready_s = -1;
	o.background_commit = true;
	t0 = mc_now_ns();
	if (mooncake_segment_create("bench", size, &o, &seg, blob) != 0) {
		fprintf(stderr, "%s bench: background create: %s\n", PROGRAM, mooncake_segment_last_error());
		return;
	}
	base = mooncake_segment_base(seg);
	base[0] = 0xA5;
	if (base[0] == 0xA5)
		*first_s = seconds_since(t0);
	front_curve_add(curve, 0, 0);
	sampler = (struct front_sampler){ seg, t0, mooncake_segment_alloc_size(seg), curve, false };
	sampling = pthread_create(&thread, NULL, sample_front, &sampler) == 0;
	err = mooncake_segment_wait_ready(seg, 0, 0, -1);
	if (err == 0)
		*ready_s = seconds_since(t0);
	else
		fprintf(stderr, "%s bench: background wait_ready: %s\n", PROGRAM,
			mooncake_segment_last_error());
	atomic_store(&sampler.stop, true);
	if (sampling)
		pthread_join(thread, NULL);
	else
		front_curve_add(curve, (double)(mc_now_ns() - t0) / 1e6, mooncake_segment_ready_bytes(seg));
	mooncake_segment_destroy(seg);
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
	bench_record(r, "ours+register", threads, &create_runs);
	bench_record(r, "register", threads, &register_runs);
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
enum step {
	STEP_ANON_MEMSET,
	STEP_RAW,
	STEP_OURS,
	STEP_ALIGNED,
	STEP_BASELINE,
	STEP_HUGE_RAW,
	STEP_HUGE_OURS,
	STEP_BACKGROUND,
	NSTEPS
};

struct size_samples {
	struct samples anon, memset, raw, ours, aligned, import, import_pop, baseline;
	struct samples huge_raw, huge_ours, huge_import, huge_import_pop;
	struct samples first_byte, ready;
	struct background_report *background; /* the curve of the fastest background run */
};

/* Keep @curve as the background's curve when its run is the fastest yet. */
static void keep_fastest(struct background_report *b, struct front_curve *curve, double ready_s)
{
	if (ready_s > 0 && (b->ready_s <= 0 || ready_s < b->ready_s)) {
		front_curve_free(&b->curve);
		b->curve = *curve;
		b->ready_s = ready_s;
	} else {
		front_curve_free(curve);
	}
}

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
		bench_ours(size, threads, false, 0, &a, &b, &c);
		add_sample(&m->ours, t0, a);
		add_sample(&m->import, t0, b);
		add_sample(&m->import_pop, t0, c);
		break;
	case STEP_ALIGNED:
		bench_ours(size, threads, false, MOONCAKE_SEGMENT_MAX_ALIGNMENT, &a, &b, &c);
		add_sample(&m->aligned, t0, a);
		break;
	case STEP_BASELINE:
		add_sample(&m->baseline, t0, bench_baseline(size));
		break;
	case STEP_HUGE_RAW:
		add_sample(&m->huge_raw, t0, bench_raw_memfd(align_2m(size), 2 << 20, threads, true));
		break;
	case STEP_HUGE_OURS:
		bench_ours(size, threads, true, 0, &a, &b, &c);
		add_sample(&m->huge_ours, t0, a);
		add_sample(&m->huge_import, t0, b);
		add_sample(&m->huge_import_pop, t0, c);
		break;
	case STEP_BACKGROUND: {
		struct front_curve curve = { 0 };

		bench_background(size, threads, &a, &b, &curve);
		add_sample(&m->first_byte, t0, a);
		add_sample(&m->ready, t0, b);
		keep_fastest(m->background, &curve, b);
		break;
	}
	case NSTEPS:
		break;
	}
}

/* Whether @st runs in this round: --background measures the background
 * commit against the blocking one and the memset limit only (one copy of the
 * size at a time, so that 16 GiB fits a 24 GiB host). */
static bool step_wanted(enum step st, const struct bench_config *cfg, int t, bool huge)
{
	if (cfg->background)
		return st == STEP_ANON_MEMSET || st == STEP_OURS || st == STEP_BACKGROUND;
	if (st == STEP_BACKGROUND)
		return false;
	/* The baseline is one thread by definition: measured with the 1-thread round. */
	if (st == STEP_BASELINE)
		return t == 0;
	return (st != STEP_HUGE_RAW && st != STEP_HUGE_OURS) || huge;
}

void bench_size(const struct bench_config *cfg, struct size_report *r)
{
	const unsigned int counts[2] = { 1, cfg->threads };
	int nthreads = cfg->threads > 1 ? 2 : 1;
	size_t size = r->size;
	struct samples baseline = { 0 };

	for (int t = 0; t < nthreads; t++) {
		unsigned int threads = counts[t];
		bool huge = cfg->hugetlb && !cfg->background && hugetlb_pool_fits(align_2m(size));
		struct size_samples *m = calloc(1, sizeof(*m));
		enum step steps[NSTEPS];
		int nsteps = 0;

		if (!m)
			return;
		m->background = &r->background[t];
		m->background->threads = threads;
		for (enum step st = 0; st < NSTEPS; st++)
			if (step_wanted(st, cfg, t, huge))
				steps[nsteps++] = st;
		/* Each round starts one method later: every method, the memset limit
		 * included, runs before and after each other one across the rounds (on a
		 * VM the host may also take freed memory back, slowing whichever
		 * allocates next). */
		for (int i = 0; i < cfg->repeat; i++)
			for (int k = 0; k < nsteps; k++)
				run_step(steps[(i + k) % nsteps], size, threads, m);
		bench_record(r, "memset", threads, &m->memset);
		bench_record(r, "anon", threads, &m->anon);
		if (!cfg->background)
			bench_record(r, "raw-memfd", threads, &m->raw);
		bench_record(r, "ours", threads, &m->ours);
		if (!cfg->background)
			bench_record(r, "ours-aligned", threads, &m->aligned);
		bench_record(r, "import", threads, &m->import);
		bench_record(r, "import+populate", threads, &m->import_pop);
		if (cfg->background) {
			bench_record(r, "background-first-byte", threads, &m->first_byte);
			bench_record(r, "background-ready", threads, &m->ready);
		} else {
			m->background->threads = 0;
		}
		if (cfg->register_device >= 0)
			bench_register(r, size, threads, cfg);
		if (huge) {
			bench_record(r, "raw-memfd-hugetlb", threads, &m->huge_raw);
			bench_record(r, "ours-hugetlb", threads, &m->huge_ours);
			bench_record(r, "import-hugetlb", threads, &m->huge_import);
			bench_record(r, "import+populate-hugetlb", threads, &m->huge_import_pop);
		}
		if (t == 0)
			baseline = m->baseline;
		free(m);
	}
	if (!cfg->background)
		bench_record(r, "baseline-devshm", 1, &baseline);
}
