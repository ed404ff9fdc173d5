/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment demo: fork N ranks that exchange blobs over socketpairs;
 * the owner writes a pattern, every peer checks it and writes back, and a
 * table of each rank's mapping (base, RSS, PSS) shows that the group holds
 * one copy, not N.
 *
 * --background: the owner creates with background_commit; every rank writes
 * and reads back its block of the first chunk at once, waits for the whole
 * (wait_ready), then checks every byte of the owner's pattern.  With
 * --kill-owner-at-half the owner SIGKILLs itself once the front passes half
 * the segment: every peer's wait must fail, with the library's error, within
 * 2 s of the kill; the peers report through a shared page, since the group's
 * all-gathers end with the owner.  With --stop-owner-at-half the owner
 * SIGSTOPs itself there instead (a debugger, docker pause, a cgroup
 * freezer): every peer's wait_ready with a 2 s timeout must end with
 * -ETIMEDOUT within its timeout, the front standing still; the last peer
 * to report continues the owner (SIGCONT), and every rank then sees the
 * whole segment ready.
 *
 * --alignment A: each rank's block (the size over the ranks) is padded to A
 * and the segment declares it (options.alignment), as an engine's pool of
 * aligned blocks would; the summary shows the padding that costs and checks
 * that every rank's base is a multiple of A.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "cli.h"
#include "group.h"

#define MAX_RANKS 64

/* A peer's wait after the owner's SIGKILL (--kill-owner-at-half), written
 * into a page the ranks share with the command. */
struct kill_report {
	int32_t done;	   /* this rank reported */
	int32_t err;	   /* wait_ready's return */
	int64_t after_ns;  /* from the owner's kill to the wait's return */
	char message[512]; /* mooncake_segment_last_error() */
	/* --stop-owner-at-half: the front before and after the wait, how long it
	 * waited, and the wait for the whole once the owner was continued. */
	uint64_t front_before, front_after;
	int64_t waited_ns;
	int32_t resumed_err;
};

struct demo_config {
	uint32_t ranks;
	uint32_t owner;
	uint64_t size;
	uint64_t requested; /* --size as given; size is it with each block padded (--alignment) */
	uint64_t alignment; /* --alignment: options.alignment, 0 for the default */
	bool hugetlb;
	bool background;
	bool kill_owner_at_half;
	bool stop_owner_at_half;
	struct kill_report *kills; /* shared with the ranks: one per rank, and the kill's time */
	volatile int64_t *kill_ns; /* CLOCK_MONOTONIC of the owner's SIGKILL (SIGSTOP); 0: none */
	int32_t *owner_pid;	   /* --stop-owner-at-half: whom the last peer continues */
	int32_t *reported;	   /* ... and how many peers have reported */
};

/* A peer's wait may take this long after the owner's death (issue 24's acceptance). */
#define KILL_NOTICE_MS 2000
/* ... and is given this long before it counts as a hang. */
#define KILL_WAIT_MS 10000
/* A peer's timeout on a stopped owner (--stop-owner-at-half), and the slack
 * past it before the wait counts as one that ignored its timeout. */
#define STOP_WAIT_MS  2000
#define STOP_SLACK_MS 1000

/* What each rank reports to rank 0 for the table. */
struct rank_report {
	uint64_t base;
	uint64_t rss;
	uint64_t pss;
	uint64_t hugetlb;
	uint32_t pid;
	uint32_t peers_ok;	 /* this rank saw the owner's pattern */
	uint32_t writeback_ok;	 /* owner: every peer's write-back arrived */
	uint32_t first_block_ok; /* --background: its block was ready at once and read back */
	uint64_t page_size;
	uint64_t alloc_size; /* the size the pages take: ratios are against it, not the request */
	uint64_t huge_bytes;
	uint64_t commit_ns;
	uint32_t commit_threads;
	int32_t numa_node;
	char backend[16];
	char commit_method[32];
	/* --background */
	uint64_t first_block_ns; /* from calling create to this rank's first block read back */
	uint64_t ready_ns;	 /* from calling create to wait_ready's return */
};

static uint8_t pattern(uint64_t offset)
{
	return (uint8_t)(offset * 131 >> 9);
}

static int fail_rank(const struct group_rank *self, const char *what)
{
	fprintf(stderr, "%s demo: rank %u: %s: %s\n", PROGRAM, self->rank, what,
		mooncake_segment_last_error());
	return 1;
}

static int lost_group(const struct group_rank *self)
{
	fprintf(stderr, "%s demo: rank %u: another rank failed or exited; stopping\n", PROGRAM, self->rank);
	return 1;
}

/* One byte per 4 KiB page: every page written and read, quickly. */
#define STRIDE 4096

static bool check_owner_pattern(const uint8_t *base, uint64_t size)
{
	for (uint64_t off = 0; off < size; off += STRIDE)
		if (base[off] != pattern(off))
			return false;
	return true;
}

/* Create, exchange the blobs, complete and finish: 0 with *@seg set, else
 * the rank's exit status. */
static int join_segment(struct group_rank *self, const struct demo_config *cfg, uint8_t *blobs,
			struct mooncake_segment **seg)
{
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	int err;

	mooncake_segment_options_init(&opt);
	opt.world_size = self->world_size;
	opt.rank_id = self->rank;
	opt.owner_rank = cfg->owner;
	opt.hugetlb = cfg->hugetlb;
	opt.background_commit = cfg->background;
	opt.alignment = cfg->alignment;
	err = mooncake_segment_create("demo", cfg->size, &opt, seg, blob);
	/* Every rank takes part in every round, so one failure fails all (and
	 * when every rank failed, the round succeeds: each still reports its own). */
	if (group_allgather(self, blob, err ? 1 : sizeof(blob), blobs) != 0 || err)
		return err ? fail_rank(self, "create") : lost_group(self);
	if (mooncake_segment_complete(*seg, blobs, self->world_size * sizeof(blob)) != 0)
		return fail_rank(self, "complete");
	if (group_barrier(self) != 0 || mooncake_segment_finish(*seg) != 0)
		return lost_group(self);
	return 0;
}

/* The owner writes the pattern, every rank checks it, each peer writes its
 * rank into its slice and the owner checks every write-back; 0, or the exit
 * status when another rank was lost. */
static int exchange_bytes(struct group_rank *self, const struct demo_config *cfg, uint8_t *base,
			  struct rank_report *mine)
{
	uint64_t slice = cfg->size / self->world_size / STRIDE * STRIDE;

	if (self->rank == cfg->owner)
		for (uint64_t off = 0; off < cfg->size; off += STRIDE)
			base[off] = pattern(off);
	if (group_barrier(self) != 0)
		return lost_group(self);
	/* Every rank checks the owner's bytes; then peers write their rank into their slice. */
	mine->peers_ok = check_owner_pattern(base, cfg->size);
	if (group_barrier(self) != 0)
		return lost_group(self);
	if (self->rank != cfg->owner)
		for (uint64_t off = self->rank * slice; off < (self->rank + 1) * slice; off += STRIDE)
			base[off] = (uint8_t)(self->rank + 1);
	if (group_barrier(self) != 0)
		return lost_group(self);
	if (self->rank == cfg->owner) {
		mine->writeback_ok = 1;
		for (uint32_t r = 0; r < self->world_size; r++)
			for (uint64_t off = r * slice; r != cfg->owner && off < (r + 1) * slice;
			     off += STRIDE)
				if (base[off] != (uint8_t)(r + 1))
					mine->writeback_ok = 0;
	}
	return 0;
}

/* --background: every byte's pattern, by 8-byte words. */
static uint64_t word_pattern(uint64_t index)
{
	return (index + 1) * UINT64_C(0x9E3779B97F4A7C15);
}

/* Rank r's block of the first chunk (committed before create returned). */
#define FIRST_BLOCK 4096

/* Write this rank's block of the first chunk and read it back, at once:
 * the block must be ready without waiting (wait_ready with no time). */
static void use_first_block(struct group_rank *self, struct mooncake_segment *seg, uint8_t *base, uint64_t t0,
			    struct rank_report *mine)
{
	uint8_t *block = base + (uint64_t)self->rank * FIRST_BLOCK;
	bool ready =
		mooncake_segment_wait_ready(seg, (uint64_t)self->rank * FIRST_BLOCK, FIRST_BLOCK, 0) == 0;

	memset(block, (int)(self->rank + 1), FIRST_BLOCK);
	mine->first_block_ok = ready;
	for (size_t i = 0; i < FIRST_BLOCK; i++)
		if (((volatile uint8_t *)block)[i] != (uint8_t)(self->rank + 1))
			mine->first_block_ok = 0;
	mine->first_block_ns = mc_now_ns() - t0;
}

/* Every rank's first block holds its stamp. */
static bool check_first_blocks(const struct group_rank *self, const uint8_t *base)
{
	for (uint32_t r = 0; r < self->world_size; r++)
		for (size_t i = 0; i < FIRST_BLOCK; i++)
			if (base[(uint64_t)r * FIRST_BLOCK + i] != (uint8_t)(r + 1))
				return false;
	return true;
}

/* After wait_ready: the first blocks checked, the owner writes every word,
 * every rank checks every byte of it. */
static int exchange_background(struct group_rank *self, const struct demo_config *cfg,
			       struct mooncake_segment *seg, uint8_t *base, uint64_t t0,
			       struct rank_report *mine)
{
	uint64_t words = cfg->size / 8;
	const uint64_t *w = (const uint64_t *)(void *)base;
	bool blocks_ok;
	int err;

	err = mooncake_segment_wait_ready(seg, 0, 0, -1);
	mine->ready_ns = mc_now_ns() - t0;
	if (err)
		return fail_rank(self, "wait_ready");
	if (group_barrier(self) != 0)
		return lost_group(self);
	blocks_ok = check_first_blocks(self, base);
	if (group_barrier(self) != 0)
		return lost_group(self);
	if (self->rank == cfg->owner) {
		uint64_t *out = (uint64_t *)(void *)base;

		for (uint64_t i = 0; i < words; i++)
			out[i] = word_pattern(i);
		for (uint64_t off = words * 8; off < cfg->size; off++)
			base[off] = pattern(off);
	}
	if (group_barrier(self) != 0)
		return lost_group(self);
	mine->peers_ok = blocks_ok && mine->first_block_ok;
	for (uint64_t i = 0; i < words && mine->peers_ok; i++)
		if (w[i] != word_pattern(i))
			mine->peers_ok = 0;
	for (uint64_t off = words * 8; off < cfg->size && mine->peers_ok; off++)
		if (base[off] != pattern(off))
			mine->peers_ok = 0;
	mine->writeback_ok = blocks_ok; /* the owner saw every rank's first block */
	return 0;
}

/* The owner: wait until the front passes half the segment, and not the
 * whole (it must still be committing when it is @done, "killed" or
 * "stopped").  0, or 1 having said why not. */
static int reach_half(struct mooncake_segment *seg, const char *done)
{
	uint64_t half = mooncake_segment_alloc_size(seg) / 2;

	/* The front passes half (or the commit fails: then nothing is done to it). */
	if (mooncake_segment_wait_ready(seg, 0, half, KILL_WAIT_MS) != 0) {
		fprintf(stderr, "%s demo: the owner's commit did not reach half the segment: %s\n", PROGRAM,
			mooncake_segment_last_error());
		return 1;
	}
	if (mooncake_segment_ready_bytes(seg) >= mooncake_segment_alloc_size(seg)) {
		fprintf(stderr,
			"%s demo: the owner's commit finished before it could be %s half way; use a larger "
			"--size\n",
			PROGRAM, done);
		return 1;
	}
	fflush(NULL);
	return 0;
}

/* --kill-owner-at-half, the owner: SIGKILL itself once the front passes
 * half the segment, the kill's time written first for the peers. */
static int kill_owner_at_half(const struct demo_config *cfg, struct mooncake_segment *seg)
{
	if (reach_half(seg, "killed"))
		return 1;
	__atomic_store_n(cfg->kill_ns, (int64_t)mc_now_ns(), __ATOMIC_RELEASE);
	kill(getpid(), SIGKILL);
	return 1; /* not reached */
}

/* --stop-owner-at-half, the owner: SIGSTOP itself once the front passes
 * half the segment; continued by the last peer, wait for the whole. */
static int stop_owner_at_half(const struct demo_config *cfg, struct mooncake_segment *seg)
{
	if (reach_half(seg, "stopped"))
		return 1;
	__atomic_store_n(cfg->owner_pid, (int32_t)getpid(), __ATOMIC_RELEASE);
	__atomic_store_n(cfg->kill_ns, (int64_t)mc_now_ns(), __ATOMIC_RELEASE);
	kill(getpid(), SIGSTOP);
	if (mooncake_segment_wait_ready(seg, 0, 0, KILL_WAIT_MS) != 0) {
		fprintf(stderr, "%s demo: the owner, continued: %s\n", PROGRAM,
			mooncake_segment_last_error());
		return 1;
	}
	mooncake_segment_destroy(seg);
	return 0;
}

/* --stop-owner-at-half, a peer: a wait with a timeout on the stopped owner
 * ends with -ETIMEDOUT in time, the front still; the last peer to report
 * continues the owner, and every peer then waits for the whole. */
static int wait_for_stopped_owner(struct group_rank *self, const struct demo_config *cfg,
				  struct mooncake_segment *seg)
{
	struct kill_report *k = &cfg->kills[self->rank];
	uint64_t start;
	int32_t owner;

	/* The owner stops once the front passes half: wait for that, bounded. */
	for (int i = 0; i < KILL_WAIT_MS && !__atomic_load_n(cfg->kill_ns, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	usleep(10000); /* its SIGSTOP lands */
	k->front_before = mooncake_segment_ready_bytes(seg);
	start = mc_now_ns();
	k->err = mooncake_segment_wait_ready(seg, 0, 0, STOP_WAIT_MS);
	k->waited_ns = (int64_t)(mc_now_ns() - start);
	k->front_after = mooncake_segment_ready_bytes(seg);
	snprintf(k->message, sizeof(k->message), "%s", mooncake_segment_last_error());
	if (__atomic_add_fetch(cfg->reported, 1, __ATOMIC_ACQ_REL) == (int32_t)self->world_size - 1) {
		owner = __atomic_load_n(cfg->owner_pid, __ATOMIC_ACQUIRE);
		if (owner > 0)
			kill(owner, SIGCONT);
	}
	k->resumed_err = mooncake_segment_wait_ready(seg, 0, 0, KILL_WAIT_MS);
	__atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
	mooncake_segment_destroy(seg);
	return 0;
}

/* --kill-owner-at-half, a peer: wait for the whole, which must fail within
 * KILL_NOTICE_MS of the owner's death; the report goes into the shared page. */
static int wait_for_dead_owner(struct group_rank *self, const struct demo_config *cfg,
			       struct mooncake_segment *seg)
{
	struct kill_report *k = &cfg->kills[self->rank];
	int64_t killed;

	k->err = mooncake_segment_wait_ready(seg, 0, 0, KILL_WAIT_MS);
	killed = __atomic_load_n(cfg->kill_ns, __ATOMIC_ACQUIRE);
	k->after_ns = killed ? (int64_t)mc_now_ns() - killed : -1;
	snprintf(k->message, sizeof(k->message), "%s", mooncake_segment_last_error());
	__atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
	return k->err != 0 && k->err != -ETIMEDOUT && killed &&
			       k->after_ns <= (int64_t)KILL_NOTICE_MS * 1000000
		       ? 0
		       : 1;
}

/* What this rank's mapping takes (RSS, PSS) and what the library says of the segment. */
static void describe_mapping(struct mooncake_segment *seg, uint8_t *base, struct rank_report *mine)
{
	struct mooncake_segment_info info;
	struct mc_mapping_usage usage;

	mc_mapping_usage(base, mooncake_segment_alloc_size(seg), &usage);
	mooncake_segment_get_info(seg, &info, sizeof(info));
	mine->base = (uint64_t)(uintptr_t)base;
	mine->rss = usage.rss;
	mine->pss = usage.pss;
	mine->hugetlb = usage.hugetlb;
	mine->pid = (uint32_t)getpid();
	mine->page_size = info.page_size;
	mine->alloc_size = info.alloc_size;
	mine->huge_bytes = info.huge_bytes;
	mine->commit_ns = info.commit_ns;
	mine->commit_threads = info.commit_threads;
	mine->numa_node = info.numa_node;
	memcpy(mine->backend, info.backend, sizeof(mine->backend));
	memcpy(mine->commit_method, info.commit_method, sizeof(mine->commit_method));
}

static const char *rank_check(const struct rank_report *report, bool owner, bool background)
{
	if (!report->peers_ok)
		return "FAILED: wrong bytes";
	if (background && !owner)
		return "ok (every byte of the owner's; every first block)";
	if (background)
		return report->writeback_ok ? "ok (wrote every byte; saw every first block)"
					    : "FAILED: first blocks";
	if (!owner)
		return "ok (read owner's bytes; wrote back)";
	if (!report->writeback_ok)
		return "FAILED: write-back lost";
	return "ok (wrote; saw every write-back)";
}

/* The table's title and one line per rank; false when a rank's check
 * failed.  Adds every rank's PSS to *@total. */
static bool print_ranks(const struct group_rank *self, const struct demo_config *cfg,
			const struct rank_report *all, uint64_t *total)
{
	bool ok = true;
	char a[32], b[32], c[32];

	printf("%s demo: %u ranks share one %s segment (owner rank %u, %s, %s pages", PROGRAM,
	       self->world_size, format_size(cfg->size, a, sizeof(a)), cfg->owner, all[0].backend,
	       format_size(all[0].page_size, b, sizeof(b)));
	if (all[0].alloc_size != cfg->size)
		printf(", %llu bytes rounded up to %s", (unsigned long long)cfg->size,
		       format_size(all[0].alloc_size, c, sizeof(c)));
	printf(")\n\n");
	printf("%-5s %-8s %-18s %12s %12s  %s\n", "rank", "pid", "base", "rss", "pss", "check");
	for (uint32_t r = 0; r < self->world_size; r++) {
		const char *check = rank_check(&all[r], r == cfg->owner, cfg->background);

		ok = ok && all[r].peers_ok && (r != cfg->owner || all[r].writeback_ok);
		*total += all[r].pss;
		printf("%-5u %-8u 0x%016" PRIx64 " %12s %12s  %s\n", r, all[r].pid, all[r].base,
		       format_size(all[r].rss, a, sizeof(a)), format_size(all[r].pss, b, sizeof(b)), check);
	}
	return ok;
}

/* What the group's mappings take against one segment and against private
 * copies, the verdict, and how the owner committed the pages. */
static void print_totals(const struct group_rank *self, const struct demo_config *cfg,
			 const struct rank_report *all, uint64_t total, bool ok)
{
	const struct rank_report *o = &all[cfg->owner];
	char a[32], c[32], d[32];

	if (cfg->hugetlb) {
		/* HugeTLB pages are in no RSS or PSS: the pool's use tells the copies. */
		total = (mc_meminfo_field("HugePages_Total") - mc_meminfo_field("HugePages_Free")) *
			mc_meminfo_field("Hugepagesize");
		printf("\n(HugeTLB pages count in no RSS/PSS; each rank maps %s of them)\n",
		       format_size(all[0].hugetlb, a, sizeof(a)));
		printf("HugeTLB pool in use %s", format_size(total, a, sizeof(a)));
	} else {
		printf("\ntotal PSS %s", format_size(total, a, sizeof(a)));
	}
	/* Against what the pages take (the size rounded up to whole pages). */
	printf(" = %.2f x the segment's %s; %u private copies would be %s (%u.00 x)\n",
	       (double)total / (double)all[0].alloc_size, format_size(all[0].alloc_size, d, sizeof(d)),
	       self->world_size, format_size(all[0].alloc_size * self->world_size, c, sizeof(c)),
	       self->world_size);
	printf("%s\n", ok ? "every rank saw the same bytes: one physical copy" : "FAILED");
	printf("owner: committed by %s with %u thread(s) in %.1f ms; %s on huge pages; NUMA node %d\n",
	       o->commit_method, o->commit_threads, (double)o->commit_ns / 1e6,
	       format_size(o->huge_bytes, a, sizeof(a)), o->numa_node);
}

/* --alignment: what the padding costs, and whether every rank's base has it. */
static bool print_alignment(const struct group_rank *self, const struct demo_config *cfg,
			    const struct rank_report *all)
{
	uint64_t block = cfg->size / self->world_size,
		 data = cfg->requested / self->world_size / STRIDE * STRIDE;
	uint32_t aligned = 0;
	char a[32], b[32], c[32], d[32], e[32];

	for (uint32_t r = 0; r < self->world_size; r++)
		aligned += all[r].base % cfg->alignment == 0;
	printf("alignment %s: %u blocks of %s padded to %s each; padding %s, %.2f%% of the segment's %s\n",
	       format_size(cfg->alignment, a, sizeof(a)), self->world_size, format_size(data, b, sizeof(b)),
	       format_size(block, c, sizeof(c)),
	       format_size(cfg->size - data * self->world_size, d, sizeof(d)),
	       100.0 * (double)(cfg->size - data * self->world_size) / (double)cfg->size,
	       format_size(cfg->size, e, sizeof(e)));
	printf("%s\n", aligned == self->world_size ? "every rank's base and every block are aligned to it"
						   : "FAILED: a rank's base is not aligned");
	return aligned == self->world_size;
}

/* --background's figures after the table: each rank's first block and whole. */
static void print_background(const struct group_rank *self, const struct rank_report *all)
{
	printf("\nbackground commit: every rank used its block of the first chunk at once, then waited "
	       "for the whole\n");
	printf("%-5s %22s %22s  %s\n", "rank", "first block ms", "every byte ready ms", "first block");
	for (uint32_t r = 0; r < self->world_size; r++)
		printf("%-5u %22.3f %22.3f  %s\n", r, (double)all[r].first_block_ns / 1e6,
		       (double)all[r].ready_ns / 1e6,
		       all[r].first_block_ok ? "ready at once, read back"
					     : "FAILED: not ready or wrong bytes");
	printf("(ms from the rank's call to create; the first block includes the blob exchange and complete)\n");
}

/* One rank of the demo, from create to destroy; rank 0 prints the table. */
static int demo_rank(struct group_rank *self, void *arg)
{
	const struct demo_config *cfg = arg;
	struct mooncake_segment *seg = NULL;
	struct rank_report mine, all[MAX_RANKS];
	uint8_t *blobs, *base;
	uint64_t total = 0, t0 = mc_now_ns();
	int ret;

	blobs = calloc(self->world_size, MOONCAKE_SEGMENT_BLOB_SIZE);
	if (!blobs)
		return 1;
	ret = join_segment(self, cfg, blobs, &seg);
	if (ret)
		return ret;
	base = mooncake_segment_base(seg);
	memset(&mine, 0, sizeof(mine));
	if (cfg->background) {
		use_first_block(self, seg, base, t0, &mine);
		if (!mine.first_block_ok)
			fprintf(stderr, "%s demo: rank %u: its first block was not usable at once: %s\n",
				PROGRAM, self->rank, mooncake_segment_last_error());
		if (cfg->kill_owner_at_half) {
			/* Every rank has completed and used its block: now the owner dies. */
			if (group_barrier(self) != 0)
				return lost_group(self);
			return self->rank == cfg->owner ? kill_owner_at_half(cfg, seg)
							: wait_for_dead_owner(self, cfg, seg);
		}
		if (cfg->stop_owner_at_half) {
			/* ... or stops, and is continued once every peer's wait has ended. */
			if (group_barrier(self) != 0)
				return lost_group(self);
			return self->rank == cfg->owner ? stop_owner_at_half(cfg, seg)
							: wait_for_stopped_owner(self, cfg, seg);
		}
		ret = exchange_background(self, cfg, seg, base, t0, &mine);
	} else {
		ret = exchange_bytes(self, cfg, base, &mine);
	}
	if (ret)
		return ret;
	/* Measure only once every rank has touched every page. */
	if (group_barrier(self) != 0)
		return lost_group(self);
	describe_mapping(seg, base, &mine);
	if (group_allgather(self, &mine, sizeof(mine), all) != 0)
		return lost_group(self);
	if (self->rank == 0) {
		bool ok = print_ranks(self, cfg, all, &total);

		print_totals(self, cfg, all, total, ok);
		if (cfg->alignment)
			ok = print_alignment(self, cfg, all) && ok;
		if (cfg->background)
			print_background(self, all);
		if (!ok)
			return 1;
	}
	if (group_barrier(self) != 0)
		return lost_group(self);
	mooncake_segment_destroy(seg);
	free(blobs);
	return 0;
}

static void demo_usage(FILE *out)
{
	fprintf(out,
		"Usage: %s demo [--ranks N] [--size SIZE] [--owner RANK] [--hugetlb] [--alignment A]\n"
		"                        [--background [--kill-owner-at-half | --stop-owner-at-half]]\n\n"
		"Fork N ranks (default 4) that share one segment (default 256M) and show that the\n"
		"group holds one physical copy: per rank its base address, RSS and PSS.\n\n"
		"  --background          the owner commits behind a readiness front: each rank uses\n"
		"                        its block of the first chunk at once, waits for the whole\n"
		"                        (wait_ready) and checks every byte\n"
		"  --kill-owner-at-half  with --background: SIGKILL the owner once half is committed;\n"
		"                        every peer's wait must fail within 2 s (exit 1 if one hangs\n"
		"                        or succeeds)\n"
		"  --stop-owner-at-half  with --background: SIGSTOP the owner once half is committed;\n"
		"                        every peer's wait_ready(timeout 2 s) must end with ETIMEDOUT\n"
		"                        in time, the front still; then the owner is continued and\n"
		"                        every rank sees the whole ready (exit 1 otherwise)\n"
		"  --alignment A         pad each rank's block to A (4K..1G, a power of two, e.g. 2M)\n"
		"                        and declare it: the summary shows the padding it costs\n",
		PROGRAM);
}

/* Why the group could not start, with the fix for the likely cause. */
static int cannot_start(const struct demo_config *cfg, int err)
{
	fprintf(stderr, "%s demo: cannot start %u ranks: %s%s\n", PROGRAM, cfg->ranks, strerror(-err),
		err == -EMFILE || err == -ENFILE
			? " (the ranks' sockets need descriptors: raise the limit, ulimit -n)"
		: err == -EAGAIN ? " (no more processes: raise ulimit -u or the cgroup's pids.max)"
				 : "");
	return 1;
}

/* One peer's line of the kill run; false when its wait hung, succeeded or
 * took longer than KILL_NOTICE_MS. */
static bool report_peer(uint32_t r, const struct kill_report *k, int code, bool killed)
{
	bool ok = k->done && k->err != 0 && k->err != -ETIMEDOUT && killed &&
		  k->after_ns <= (int64_t)KILL_NOTICE_MS * 1000000;

	if (!k->done) {
		printf("rank %u: no report (exit status %d)\n", r, code);
		return false;
	}
	if (k->err == 0)
		printf("rank %u: FAILED: wait_ready succeeded%s\n", r,
		       killed ? " after the owner was killed" : ": the owner was not killed");
	else if (k->err == -ETIMEDOUT)
		printf("rank %u: FAILED: wait_ready hung for %d ms after the owner was killed\n", r,
		       KILL_WAIT_MS);
	else
		printf("rank %u: wait_ready failed %.1f ms after the kill with error %d (%s): %s%s\n", r,
		       (double)k->after_ns / 1e6, -k->err, strerror(-k->err), k->message,
		       ok	? ""
		       : killed ? "  FAILED: later than 2 s"
				: "  FAILED: the owner was not SIGKILLed");
	return ok;
}

/* One peer's line of the stop run; false when its wait ignored its timeout,
 * succeeded, saw the front move, or the whole was not ready once continued. */
static bool report_stopped_peer(uint32_t r, const struct kill_report *k, int code, bool stopped)
{
	bool in_time = k->waited_ns <= (int64_t)(STOP_WAIT_MS + STOP_SLACK_MS) * 1000000;
	bool ok = k->done && stopped && k->err == -ETIMEDOUT && in_time &&
		  k->front_after == k->front_before && k->resumed_err == 0;

	if (!k->done) {
		printf("rank %u: no report (exit status %d)\n", r, code);
		return false;
	}
	printf("rank %u: wait_ready(timeout %d ms) returned %d (%s) after %.1f ms, the front at %" PRIu64
	       " then %" PRIu64 " bytes; once continued: %s%s\n",
	       r, STOP_WAIT_MS, k->err, k->err ? strerror(-k->err) : "ready", (double)k->waited_ns / 1e6,
	       k->front_before, k->front_after, k->resumed_err ? strerror(-k->resumed_err) : "all ready",
	       ok	  ? ""
	       : !stopped ? "  FAILED: the owner was not stopped"
			  : "  FAILED");
	return ok;
}

/* The stop run's lines and exit status (demo_kill's shared page is unmapped here). */
static int stop_verdict(const struct demo_config *cfg, int err, const int *codes, void *shared, size_t bytes)
{
	bool stopped = *cfg->kill_ns != 0 && codes[cfg->owner] == 0;
	uint32_t failed = 0;
	char a[32];

	printf("%s demo: %u ranks, one %s segment committing in the background; owner rank %u %s\n", PROGRAM,
	       cfg->ranks, format_size(cfg->size, a, sizeof(a)), cfg->owner,
	       stopped ? "SIGSTOPped once half was committed, then continued"
		       : "was NOT stopped and continued");
	for (uint32_t r = 0; r < cfg->ranks; r++)
		if (r != cfg->owner && !report_stopped_peer(r, &cfg->kills[r], codes[r], stopped))
			failed++;
	if (err == -ETIMEDOUT)
		printf("the ranks did not finish in time\n");
	if (!stopped || failed || err)
		printf("FAILED: %u of %u peers' waits on the stopped owner did not end in time with the front "
		       "still, or the whole was not ready after\n",
		       failed, cfg->ranks - 1);
	else
		printf("every peer's wait on the stopped owner ended in time (ETIMEDOUT, the front still); "
		       "continued, the owner committed the rest\n");
	munmap(shared, bytes);
	return !stopped || failed || err ? 1 : 0;
}

/* --kill-owner-at-half (--stop-owner-at-half): the ranks report through a
 * page shared with this process; 0 when the owner died by the SIGKILL and
 * every peer's wait failed within KILL_NOTICE_MS (when every peer's wait
 * on the stopped owner ended in time and the whole was ready once it went on). */
static int demo_kill(struct demo_config *cfg)
{
	size_t bytes = 2 * sizeof(int64_t) + (size_t)cfg->ranks * sizeof(struct kill_report);
	int codes[MAX_RANKS], err;
	uint32_t failed = 0;
	bool killed;
	char a[32];
	void *shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (shared == MAP_FAILED) {
		fprintf(stderr, "%s demo: cannot map the ranks' report page: %s\n", PROGRAM, strerror(errno));
		return 1;
	}
	cfg->kill_ns = shared;
	cfg->owner_pid = (int32_t *)(void *)((char *)shared + sizeof(int64_t));
	cfg->reported = cfg->owner_pid + 1;
	cfg->kills = (struct kill_report *)(void *)((char *)shared + 2 * sizeof(int64_t));
	fflush(stdout);
	err = group_run(cfg->ranks, demo_rank, cfg, 120000, codes);
	if (err && err != -ETIMEDOUT) {
		munmap(shared, bytes);
		return cannot_start(cfg, err);
	}
	if (cfg->stop_owner_at_half)
		return stop_verdict(cfg, err, codes, shared, bytes);
	killed = *cfg->kill_ns != 0 && codes[cfg->owner] == 128 + SIGKILL;
	printf("%s demo: %u ranks, one %s segment committing in the background; owner rank %u %s\n", PROGRAM,
	       cfg->ranks, format_size(cfg->size, a, sizeof(a)), cfg->owner,
	       killed ? "SIGKILLed once half was committed" : "was NOT killed");
	for (uint32_t r = 0; r < cfg->ranks; r++)
		if (r != cfg->owner && !report_peer(r, &cfg->kills[r], codes[r], killed))
			failed++;
	if (err == -ETIMEDOUT)
		printf("the ranks did not finish in time\n");
	if (!killed || failed || err)
		printf("FAILED: %u of %u peers' waits did not fail within %d ms of the owner's death\n",
		       failed, cfg->ranks - 1, KILL_NOTICE_MS);
	else
		printf("every peer's wait failed within %d ms of the owner's death: none hung, none succeeded\n",
		       KILL_NOTICE_MS);
	munmap(shared, bytes);
	return !killed || failed || err ? 1 : 0;
}

int cmd_demo(int argc, char **argv)
{
	static const struct option options[] = {
		{ "ranks", required_argument, NULL, 'n' },
		{ "size", required_argument, NULL, 's' },
		{ "owner", required_argument, NULL, 'o' },
		{ "hugetlb", no_argument, NULL, 'H' },
		{ "background", no_argument, NULL, 'B' },
		{ "kill-owner-at-half", no_argument, NULL, 'K' },
		{ "stop-owner-at-half", no_argument, NULL, 'S' },
		{ "alignment", required_argument, NULL, 'A' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct demo_config cfg = {
		4, 0, UINT64_C(256) << 20, 0, 0, false, false, false, false, NULL, NULL, NULL, NULL
	};
	int codes[MAX_RANKS], c, ret = 0, err;
	uint64_t v;

	while ((c = getopt_long(argc, argv, "n:s:o:h", options, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (!parse_uint(optarg, 1, MAX_RANKS, &v)) {
				fprintf(stderr, "%s demo: --ranks must be 1..%d, got '%s'\n", PROGRAM,
					MAX_RANKS, optarg);
				return 2;
			}
			cfg.ranks = (uint32_t)v;
			break;
		case 's':
			if (!parse_size(optarg, &cfg.size) || cfg.size < 4096 ||
			    cfg.size > MOONCAKE_SEGMENT_MAX_SIZE) {
				fprintf(stderr, "%s demo: --size must be 4K..64T (e.g. 256M, 1G), got '%s'\n",
					PROGRAM, optarg);
				return 2;
			}
			break;
		case 'o':
			if (!parse_uint(optarg, 0, MAX_RANKS - 1, &v)) {
				fprintf(stderr, "%s demo: --owner must be a rank, got '%s'\n", PROGRAM,
					optarg);
				return 2;
			}
			cfg.owner = (uint32_t)v;
			break;
		case 'H':
			cfg.hugetlb = true;
			break;
		case 'B':
			cfg.background = true;
			break;
		case 'K':
			cfg.kill_owner_at_half = true;
			break;
		case 'S':
			cfg.stop_owner_at_half = true;
			break;
		case 'A':
			if (!parse_size(optarg, &cfg.alignment) || (cfg.alignment & (cfg.alignment - 1)) ||
			    cfg.alignment < MOONCAKE_SEGMENT_MIN_ALIGNMENT ||
			    cfg.alignment > MOONCAKE_SEGMENT_MAX_ALIGNMENT) {
				fprintf(stderr,
					"%s demo: --alignment must be a power of two of 4K..1G (e.g. 2M), got "
					"'%s'\n",
					PROGRAM, optarg);
				return 2;
			}
			break;
		case 'h':
			demo_usage(stdout);
			return 0;
		default:
			demo_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || cfg.owner >= cfg.ranks) {
		fprintf(stderr, "%s demo: %s\n", PROGRAM,
			optind != argc ? "unexpected arguments" : "--owner must be below --ranks");
		return 2;
	}
	if (cfg.kill_owner_at_half && (!cfg.background || cfg.ranks < 2)) {
		fprintf(stderr, "%s demo: --kill-owner-at-half needs --background and at least 2 --ranks\n",
			PROGRAM);
		return 2;
	}
	if (cfg.stop_owner_at_half && (!cfg.background || cfg.ranks < 2 || cfg.kill_owner_at_half)) {
		fprintf(stderr,
			"%s demo: --stop-owner-at-half needs --background and at least 2 --ranks, and not "
			"--kill-owner-at-half\n",
			PROGRAM);
		return 2;
	}
	/* Each rank's block padded to the alignment: the segment is that many blocks. */
	cfg.requested = cfg.size;
	if (cfg.alignment) {
		uint64_t block = cfg.size / cfg.ranks / STRIDE * STRIDE;

		block = (block + cfg.alignment - 1) / cfg.alignment * cfg.alignment;
		cfg.size = (block ? block : cfg.alignment) * cfg.ranks;
	}
	if (cfg.kill_owner_at_half || cfg.stop_owner_at_half)
		return demo_kill(&cfg);
	fflush(stdout);
	err = group_run(cfg.ranks, demo_rank, &cfg, 600000, codes);
	if (err == -ETIMEDOUT) {
		fprintf(stderr, "%s demo: the ranks did not finish in time\n", PROGRAM);
		return 1;
	}
	if (err)
		return cannot_start(&cfg, err); /* the group could not even start */
	for (uint32_t r = 0; r < cfg.ranks; r++)
		if (codes[r] != 0) {
			fprintf(stderr, "%s demo: rank %u exited with status %d\n", PROGRAM, r, codes[r]);
			ret = 1;
		}
	return ret;
}
