/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment bench --slots: what the publish slots cost, between two
 * real processes (group.h forks them) that share one memfd segment declared
 * with four slots; rank 0 owns and writes, rank 1 is a peer and reads.
 *
 *   latency   publish-to-wake, ping-pong over two slots: the writer stamps
 *             CLOCK_MONOTONIC into the block and publishes; the reader,
 *             asleep in wait_slot (or first polling the slot's word for a
 *             bounded time), takes the clock on waking: one clock, so the
 *             difference is the latency.  Then it publishes the pong.
 *   rate      publishes per second on one slot, with no waiter and with one
 *             waiter (the peer in wait_slot, sequence after sequence).
 *   seqlock   read_begin, a 64 KiB memcpy out of the segment and read_retry,
 *             against the same memcpy alone, in the same process: a ratio.
 *
 * --repeat runs every measurement once per round, in turn; latencies are
 * percentiles over every round of every run, rates the best and median of
 * the runs, the seqlock ratio the median of the runs' ratios.  Figures are
 * reported, never asserted: a busy machine shows in them.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mooncake/segment.h>

#include "bench.h"
#include "cli.h"
#include "group.h"

#define SLOT_PING  0 /* writer -> reader: a stamp is in the block */
#define SLOT_PONG  1 /* reader -> writer: the next round may start */
#define SLOT_RATE  2 /* publish rate */
#define SLOT_BLOCK 3 /* the seqlock's block */
#define SLOTS	   4

#define BLOCK_BYTES   (64 * 1024)
#define SEGMENT_BYTES (4 * BLOCK_BYTES) /* the stamp's line, then the seqlock's block */
#define WAIT_MS	      10000		/* a wait that takes this long: the other rank is stuck */

/* The reader's bounded poll of the slot word before wait_slot, and the
 * goal of issue 26 for a reader that polls briefly then sleeps. */
#define SPIN_NS	     50000
#define SPIN_GOAL_US 5.0
/* The writer is not what is measured: it polls for the pong (bounded, then
 * sleeps) and publishes the next ping this long after it, so that the
 * reader is asleep in the futex (a publish that came first is counted), or
 * polling, well inside its window, when the publish comes.  A writer that
 * slept on the pong too would add its own wake-up to the reader's poll, and
 * where a wake-up takes longer than the window (a virtual CPU woken from
 * idle), neither would ever catch the other polling. */
#define WRITER_SPIN_NS	  1000000000
#define SLEEP_GAP_NS	  50000
#define SPIN_GAP_NS	  10000
#define PUBLISHES_PER_RUN 200000
#define SEQLOCK_GOAL	  1.05
#define COPIES_PER_BATCH  500
#define BATCHES		  20

enum latency_mode { ASLEEP, SPINNING, MODES };

static const char *const mode_names[MODES] = { "asleep", "spin-then-sleep" };

/* What the ranks measure, in a page they share with the command. */
struct slots_shared {
	uint64_t rounds_done[MODES];
	uint64_t published_before_wait[MODES]; /* asleep: the reader found it already published */
	uint64_t caught_spinning[MODES];       /* spinning: the reader's poll saw it */
	double rate[2][MAX_RUNS];	       /* publishes per second, [waiters][run] */
	uint64_t wakes[MAX_RUNS];	       /* the waiter's returns from wait_slot */
	double seqlock_ns[MAX_RUNS];	       /* the best batch's time per copy */
	double memcpy_ns[MAX_RUNS];
	uint64_t retries;
	char error[256];       /* the first failure of a rank */
	uint32_t *latency_ns;  /* [mode][run * rounds + round], after this struct */
	uint8_t *seen_polling; /* the same rounds: 1 where the reader's poll saw the publish */
};

struct slots_run {
	const struct bench_config *cfg;
	struct slots_shared *shared;
};

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static int rank_failed(struct slots_shared *shared, const struct group_rank *self, const char *what)
{
	if (!shared->error[0])
		snprintf(shared->error, sizeof(shared->error), "rank %u: %s: %s", self->rank, what,
			 mooncake_segment_last_error());
	return 1;
}

/* Create (rank 0 owns), exchange the blobs, complete and finish. */
static struct mooncake_segment *join(struct group_rank *self, struct slots_shared *shared)
{
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE], blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *seg = NULL;
	int err;

	mooncake_segment_options_init(&opt);
	opt.world_size = self->world_size;
	opt.rank_id = self->rank;
	opt.owner_rank = 0;
	opt.commit_threads = 1;
	opt.slot_count = SLOTS;
	err = mooncake_segment_create("bench-slots", SEGMENT_BYTES, &opt, &seg, blob);
	if (err)
		snprintf(shared->error, sizeof(shared->error), "rank %u: create: %s", self->rank,
			 mooncake_segment_last_error());
	if (group_allgather(self, blob, err ? 1 : sizeof(blob), blobs) != 0 || err ||
	    mooncake_segment_complete(seg, blobs, sizeof(blobs)) != 0 || group_barrier(self) != 0 ||
	    mooncake_segment_finish(seg) != 0) {
		if (!err)
			rank_failed(shared, self, "joining the segment");
		mooncake_segment_destroy(seg);
		return NULL;
	}
	return seg;
}

/* The slot's sequence as it is now, read through slot_words(). */
static uint64_t slot_word(const uint64_t *words, size_t stride, uint32_t slot)
{
	return __atomic_load_n((const uint64_t *)(const void *)((const char *)words + slot * stride),
			       __ATOMIC_RELAXED);
}

/* Wait until @slot passes @seen: with @spin_ns, poll its word that long
 * first (*@caught says whether the poll saw it); then wait_slot, which
 * orders the block's bytes (and returns at once if the poll saw it). */
static int64_t await_slot(struct mooncake_segment *seg, const uint64_t *words, size_t stride, uint32_t slot,
			  uint64_t seen, uint64_t spin_ns, bool *caught)
{
	*caught = false;
	if (spin_ns) {
		uint64_t deadline = mc_now_ns() + spin_ns;

		for (unsigned int i = 1;; i++) {
			uint64_t v = slot_word(words, stride, slot);

			if (v != seen && !(v & 1)) {
				*caught = true;
				break;
			}
			cpu_relax();
			if (i % 64 == 0 && mc_now_ns() > deadline)
				break;
		}
	}
	return mooncake_segment_wait_slot(seg, slot, seen, WAIT_MS);
}

static void spin_until(uint64_t t)
{
	while (mc_now_ns() < t)
		cpu_relax();
}

/* Sequences each rank last saw or published, carried from run to run. */
struct sequences {
	uint64_t ping, pong;
};

/* One run of @rounds ping-pongs in @mode; the reader records each latency. */
static int latency_run(struct group_rank *self, struct slots_run *run, struct mooncake_segment *seg,
		       enum latency_mode mode, int index, struct sequences *seq)
{
	struct slots_shared *shared = run->shared;
	long rounds = run->cfg->slot_rounds;
	size_t first = ((size_t)mode * (size_t)run->cfg->repeat + (size_t)index) * (size_t)rounds;
	volatile uint64_t *stamp = mooncake_segment_base(seg);
	uint64_t spin_ns = mode == SPINNING ? SPIN_NS : 0;
	size_t stride;
	const uint64_t *words = mooncake_segment_slot_words(seg, &stride);
	bool caught;

	if (!words)
		return rank_failed(shared, self, "slot_words");
	if (group_barrier(self) != 0)
		return 1;
	for (long r = 0; r < rounds; r++) {
		int64_t got;

		if (self->rank == 0) {
			uint64_t t0;

			spin_until(mc_now_ns() + (mode == ASLEEP ? SLEEP_GAP_NS : SPIN_GAP_NS));
			t0 = mc_now_ns();
			stamp[0] = t0;
			got = mooncake_segment_publish(seg, SLOT_PING);
			if (got < 0)
				return rank_failed(shared, self, "publish");
			seq->ping = (uint64_t)got;
			got = await_slot(seg, words, stride, SLOT_PONG, seq->pong, WRITER_SPIN_NS, &caught);
			if (got < 0)
				return rank_failed(shared, self, "wait for the pong");
			seq->pong = (uint64_t)got;
		} else {
			uint64_t t1;

			if (mode == ASLEEP && slot_word(words, stride, SLOT_PING) != seq->ping)
				shared->published_before_wait[mode]++;
			got = await_slot(seg, words, stride, SLOT_PING, seq->ping, spin_ns, &caught);
			t1 = mc_now_ns();
			if (got < 0)
				return rank_failed(shared, self, "wait for the ping");
			seq->ping = (uint64_t)got;
			shared->latency_ns[first + (size_t)r] =
				(uint32_t)(t1 - stamp[0] > UINT32_MAX ? UINT32_MAX : t1 - stamp[0]);
			shared->seen_polling[first + (size_t)r] = caught;
			shared->caught_spinning[mode] += caught;
			got = mooncake_segment_publish(seg, SLOT_PONG);
			if (got < 0)
				return rank_failed(shared, self, "publish the pong");
			seq->pong = (uint64_t)got;
		}
	}
	if (self->rank == 1)
		shared->rounds_done[mode] += (uint64_t)rounds;
	return 0;
}

/* The writer publishes PUBLISHES_PER_RUN times; with @waiters, the reader
 * waits for sequence after sequence until the last. */
static int rate_run(struct group_rank *self, struct slots_run *run, struct mooncake_segment *seg, int waiters,
		    int index)
{
	struct slots_shared *shared = run->shared;
	int64_t start = mooncake_segment_wait_slot(seg, SLOT_RATE, UINT64_MAX, 0);

	/* Both read the start before either publishes. */
	if (start < 0)
		return rank_failed(shared, self, "read the rate slot");
	if (group_barrier(self) != 0)
		return 1;
	if (self->rank == 0) {
		uint64_t t0 = mc_now_ns();

		for (long i = 0; i < PUBLISHES_PER_RUN; i++)
			if (mooncake_segment_publish(seg, SLOT_RATE) < 0)
				return rank_failed(shared, self, "publish");
		shared->rate[waiters][index] = PUBLISHES_PER_RUN / ((double)(mc_now_ns() - t0) / 1e9);
	} else if (waiters) {
		uint64_t last = (uint64_t)start + 2 * PUBLISHES_PER_RUN, seen = (uint64_t)start, wakes = 0;

		while (seen < last) {
			int64_t got = mooncake_segment_wait_slot(seg, SLOT_RATE, seen, WAIT_MS);

			if (got < 0)
				return rank_failed(shared, self, "wait on the rate slot");
			seen = (uint64_t)got;
			wakes++;
		}
		shared->wakes[index] = wakes;
	}
	return group_barrier(self) != 0;
}

static uint8_t copy_out[BLOCK_BYTES];

/* @n copies of the block, under the seqlock or not: nanoseconds per copy. */
static double copy_batch(struct mooncake_segment *seg, const uint8_t *block, bool seqlock, int n,
			 uint64_t *retries)
{
	uint64_t t0 = mc_now_ns();

	for (int i = 0; i < n; i++) {
		int64_t seq = seqlock ? mooncake_segment_read_begin(seg, SLOT_BLOCK, WAIT_MS) : 0;

		memcpy(copy_out, block, BLOCK_BYTES);
		/* Every copy happens: the compiler, which sees copy_out read by
		 * nobody, may neither drop the copies nor merge them. */
		__asm__ __volatile__("" : : "r"(copy_out), "r"(block) : "memory");
		if (seqlock && (seq < 0 || mooncake_segment_read_retry(seg, SLOT_BLOCK, (uint64_t)seq) != 0))
			(*retries)++;
	}
	return (double)(mc_now_ns() - t0) / n;
}

/* The reader alone: batches of seqlock reads and of plain copies, in turn;
 * the best batch of each (the least disturbed) per copy. */
static int seqlock_run(struct group_rank *self, struct slots_run *run, struct mooncake_segment *seg,
		       int index)
{
	struct slots_shared *shared = run->shared;
	const uint8_t *block = (const uint8_t *)mooncake_segment_base(seg) + BLOCK_BYTES;
	double best[2] = { -1, -1 };

	if (self->rank == 1) {
		copy_batch(seg, block, false, COPIES_PER_BATCH / 10, &shared->retries); /* warm */
		for (int b = 0; b < 2 * BATCHES; b++) {
			double ns = copy_batch(seg, block, b % 2 == 0, COPIES_PER_BATCH, &shared->retries);

			if (best[b % 2] < 0 || ns < best[b % 2])
				best[b % 2] = ns;
		}
		shared->seqlock_ns[index] = best[0];
		shared->memcpy_ns[index] = best[1];
	}
	return group_barrier(self) != 0;
}

static int slots_rank(struct group_rank *self, void *arg)
{
	struct slots_run *run = arg;
	struct mooncake_segment *seg = join(self, run->shared);
	struct sequences seq = { 0, 0 };
	int status = 0;

	if (!seg)
		return 1;
	if (self->rank == 0)
		memset((uint8_t *)mooncake_segment_base(seg) + BLOCK_BYTES, 0x5A, BLOCK_BYTES);
	for (int i = 0; i < run->cfg->repeat && !status; i++) {
		for (int m = 0; m < MODES && !status; m++)
			status = latency_run(self, run, seg, (enum latency_mode)m, i, &seq);
		for (int w = 0; w <= 1 && !status; w++)
			status = rate_run(self, run, seg, w, i);
		if (!status)
			status = seqlock_run(self, run, seg, i);
	}
	mooncake_segment_destroy(seg);
	return status;
}

/* --- the report --------------------------------------------------------- */

struct latency_figures {
	size_t n;
	double median_us, p99_us, min_us, max_us;
	double polled_median_us; /* of the rounds the reader's poll saw; -1: none */
};

static int compare_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The nearest-rank percentile @p of the sorted @v. */
static double percentile_us(const uint32_t *v, size_t n, double p)
{
	size_t rank = (size_t)(p * (double)n + 0.999999);

	return (double)v[rank ? rank - 1 : 0] / 1e3;
}

/* The figures of @n latencies at @v (sorted here), of which those with
 * @polled[i] were seen by the reader's poll (copied into @scratch, n long). */
static struct latency_figures latency_figures(uint32_t *v, const uint8_t *polled, size_t n, uint32_t *scratch)
{
	struct latency_figures f = { n, -1, -1, -1, -1, -1 };
	size_t k = 0;

	if (!n)
		return f;
	for (size_t i = 0; i < n; i++)
		if (polled[i])
			scratch[k++] = v[i];
	if (k) {
		qsort(scratch, k, sizeof(*scratch), compare_u32);
		f.polled_median_us = percentile_us(scratch, k, 0.5);
	}
	qsort(v, n, sizeof(*v), compare_u32);
	f.median_us = percentile_us(v, n, 0.5);
	f.p99_us = percentile_us(v, n, 0.99);
	f.min_us = (double)v[0] / 1e3;
	f.max_us = (double)v[n - 1] / 1e3;
	return f;
}

static double median_of(const double *runs, int n)
{
	double sorted[MAX_RUNS];

	if (n <= 0)
		return -1;
	memcpy(sorted, runs, sizeof(double) * (size_t)n);
	qsort(sorted, (size_t)n, sizeof(double), compare_doubles);
	return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

static double best_of(const double *runs, int n)
{
	double best = -1;

	for (int i = 0; i < n; i++)
		best = runs[i] > best ? runs[i] : best;
	return best;
}

struct slots_report {
	struct latency_figures latency[MODES];
	double rate_best[2], rate_median[2];
	double ratios[MAX_RUNS];
	double ratio;		      /* median of the runs' seqlock / memcpy */
	double seqlock_ns, memcpy_ns; /* the medians of the runs' best batches */
};

static void summarise(const struct bench_config *cfg, struct slots_shared *shared, struct slots_report *r,
		      uint32_t *scratch)
{
	for (int m = 0; m < MODES; m++) {
		size_t first = (size_t)m * (size_t)cfg->repeat * (size_t)cfg->slot_rounds;

		r->latency[m] = latency_figures(shared->latency_ns + first, shared->seen_polling + first,
						(size_t)shared->rounds_done[m], scratch);
	}
	for (int w = 0; w <= 1; w++) {
		r->rate_best[w] = best_of(shared->rate[w], cfg->repeat);
		r->rate_median[w] = median_of(shared->rate[w], cfg->repeat);
	}
	for (int i = 0; i < cfg->repeat; i++)
		r->ratios[i] = shared->memcpy_ns[i] > 0 ? shared->seqlock_ns[i] / shared->memcpy_ns[i] : -1;
	r->ratio = median_of(r->ratios, cfg->repeat);
	r->seqlock_ns = median_of(shared->seqlock_ns, cfg->repeat);
	r->memcpy_ns = median_of(shared->memcpy_ns, cfg->repeat);
}

static double share_percent(uint64_t part, uint64_t whole)
{
	return whole ? (double)part * 100 / (double)whole : 0;
}

static void print_text(const struct bench_config *cfg, const struct slots_shared *shared,
		       const struct slots_report *r)
{
	const struct latency_figures *asleep = &r->latency[ASLEEP], *spin = &r->latency[SPINNING];

	printf("%s bench --slots (%s): 2 processes (owner writes, peer reads), one memfd segment with %d "
	       "slots; %ld rounds x %d run%s\n",
	       PROGRAM, mooncake_segment_version(), SLOTS, cfg->slot_rounds, cfg->repeat,
	       cfg->repeat == 1 ? "" : "s");
	printf("\npublish-to-wake latency (writer's clock before publish() to the reader's after wait_slot()):\n");
	printf("  %-34s median %8.2f us  p99 %8.2f us  (%zu rounds; %.1f%% published before it slept)\n",
	       "reader asleep in wait_slot", asleep->median_us, asleep->p99_us, asleep->n,
	       share_percent(shared->published_before_wait[ASLEEP], asleep->n));
	printf("  %-34s median %8.2f us  p99 %8.2f us  (%zu rounds; %.1f%% seen while polling: median %.2f us)\n",
	       "reader polls 50 us, then wait_slot", spin->median_us, spin->p99_us, spin->n,
	       share_percent(shared->caught_spinning[SPINNING], spin->n), spin->polled_median_us);
	printf("  polling reader: goal a few microseconds (median < %.0f us): %s\n", SPIN_GOAL_US,
	       spin->median_us >= 0 && spin->median_us < SPIN_GOAL_US ? "met" : "MISSED");
	printf("\npublishes per second on one slot (%d per run; best, median of the runs):\n",
	       PUBLISHES_PER_RUN);
	for (int w = 0; w <= 1; w++)
		printf("  %-34s %8.2f M/s  median %8.2f M/s\n", w ? "one waiter in wait_slot" : "no waiter",
		       r->rate_best[w] / 1e6, r->rate_median[w] / 1e6);
	printf("\nseqlock read of %d KiB (read_begin, memcpy out of the segment, read_retry) against the same memcpy:\n",
	       BLOCK_BYTES / 1024);
	printf("  seqlock %.2f us, memcpy %.2f us per copy: ratio %.3f (median of %d run%s; goal <= %.2f: %s)\n",
	       r->seqlock_ns / 1e3, r->memcpy_ns / 1e3, r->ratio, cfg->repeat, cfg->repeat == 1 ? "" : "s",
	       SEQLOCK_GOAL, r->ratio > 0 && r->ratio <= SEQLOCK_GOAL ? "met" : "MISSED");
}

static void print_latency_json(const struct slots_shared *shared, const struct slots_report *r, int m)
{
	const struct latency_figures *f = &r->latency[m];

	printf("%s{\"mode\": \"%s\", \"spin_ns\": %d, \"rounds\": %zu, \"median_us\": %.3f, \"p99_us\": %.3f, "
	       "\"min_us\": %.3f, \"max_us\": %.3f, \"published_before_wait\": %llu, \"seen_while_polling\": %llu, "
	       "\"seen_while_polling_median_us\": ",
	       m ? ", " : "", mode_names[m], m == SPINNING ? SPIN_NS : 0, f->n, f->median_us, f->p99_us,
	       f->min_us, f->max_us, (unsigned long long)shared->published_before_wait[m],
	       (unsigned long long)shared->caught_spinning[m]);
	if (f->polled_median_us >= 0)
		printf("%.3f}", f->polled_median_us);
	else
		printf("null}");
}

static void print_json(const struct bench_config *cfg, const struct slots_shared *shared,
		       const struct slots_report *r)
{
	printf("{\"version\": \"%s\", \"mode\": \"slots\", \"processes\": 2, \"slot_count\": %d, "
	       "\"repeat\": %d, \"rounds\": %ld, \"latency\": [",
	       mooncake_segment_version(), SLOTS, cfg->repeat, cfg->slot_rounds);
	for (int m = 0; m < MODES; m++)
		print_latency_json(shared, r, m);
	printf("], \"spin_goal_us\": %.1f,\n \"publish_rate\": [", SPIN_GOAL_US);
	for (int w = 0; w <= 1; w++) {
		printf("%s{\"waiters\": %d, \"publishes_per_run\": %d, \"best_per_second\": %.1f, "
		       "\"median_per_second\": %.1f, \"runs\": [",
		       w ? ", " : "", w, PUBLISHES_PER_RUN, r->rate_best[w], r->rate_median[w]);
		for (int i = 0; i < cfg->repeat; i++)
			printf("%s%.1f", i ? ", " : "", shared->rate[w][i]);
		printf("]");
		if (w) {
			printf(", \"wakes\": [");
			for (int i = 0; i < cfg->repeat; i++)
				printf("%s%llu", i ? ", " : "", (unsigned long long)shared->wakes[i]);
			printf("]");
		}
		printf("}");
	}
	printf("],\n \"seqlock\": {\"block_bytes\": %d, \"seqlock_ns\": %.1f, \"memcpy_ns\": %.1f, \"ratio\": %.4f, "
	       "\"ratio_goal\": %.2f, \"retries\": %llu, \"runs\": [",
	       BLOCK_BYTES, r->seqlock_ns, r->memcpy_ns, r->ratio, SEQLOCK_GOAL,
	       (unsigned long long)shared->retries);
	for (int i = 0; i < cfg->repeat; i++)
		printf("%s{\"seqlock_ns\": %.1f, \"memcpy_ns\": %.1f, \"ratio\": %.4f}", i ? ", " : "",
		       shared->seqlock_ns[i], shared->memcpy_ns[i], r->ratios[i]);
	printf("]}}\n");
}

int bench_slots(const struct bench_config *cfg)
{
	size_t samples = (size_t)MODES * (size_t)cfg->repeat * (size_t)cfg->slot_rounds;
	size_t bytes = sizeof(struct slots_shared) + samples * (sizeof(uint32_t) + 1);
	struct slots_shared *shared =
		mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct slots_run run = { cfg, shared };
	struct slots_report report;
	uint32_t *scratch = malloc(samples / MODES * sizeof(uint32_t));
	int codes[2], err;
	/* A round takes well under a millisecond (SLEEP_GAP_NS and two wake-ups), plus a minute. */
	int timeout_ms = 60000 + (int)(cfg->slot_rounds * cfg->repeat);

	if (shared == MAP_FAILED || !scratch) {
		fprintf(stderr, "%s bench: cannot map the ranks' report: %s\n", PROGRAM, strerror(errno));
		if (shared != MAP_FAILED)
			munmap(shared, bytes);
		free(scratch);
		return 1;
	}
	shared->latency_ns = (uint32_t *)(void *)(shared + 1);
	shared->seen_polling = (uint8_t *)(shared->latency_ns + samples);
	fflush(stdout);
	err = group_run(2, slots_rank, &run, timeout_ms, codes);
	if (err || codes[0] || codes[1]) {
		fprintf(stderr, "%s bench --slots: %s\n", PROGRAM,
			shared->error[0]    ? shared->error
			: err == -ETIMEDOUT ? "the two processes did not finish in time"
			: err		    ? strerror(-err)
					    : "a process failed");
		munmap(shared, bytes);
		free(scratch);
		return 1;
	}
	summarise(cfg, shared, &report, scratch);
	free(scratch);
	if (cfg->json)
		print_json(cfg, shared, &report);
	else
		print_text(cfg, shared, &report);
	munmap(shared, bytes);
	return finish_output(stdout, "the report");
}
