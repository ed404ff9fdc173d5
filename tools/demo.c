/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake-segment demo: fork N ranks that exchange blobs over socketpairs;
 * the owner writes a pattern, every peer checks it and writes back, and a
 * table of each rank's mapping (base, RSS, PSS) shows that the group holds
 * one copy, not N.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "cli.h"
#include "group.h"

#define MAX_RANKS 64

struct demo_config {
	uint32_t ranks;
	uint32_t owner;
	uint64_t size;
	bool hugetlb;
};

/* What each rank reports to rank 0 for the table. */
struct rank_report {
	uint64_t base;
	uint64_t rss;
	uint64_t pss;
	uint64_t hugetlb;
	uint32_t pid;
	uint32_t peers_ok;     /* this rank saw the owner's pattern */
	uint32_t writeback_ok; /* owner: every peer's write-back arrived */
	uint64_t page_size;
	uint64_t alloc_size; /* the size the pages take: ratios are against it, not the request */
	uint64_t huge_bytes;
	uint64_t commit_ns;
	uint32_t commit_threads;
	int32_t numa_node;
	char backend[16];
	char commit_method[32];
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

static const char *rank_check(const struct rank_report *report, bool owner)
{
	if (!report->peers_ok)
		return "FAILED: wrong bytes";
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
		const char *check = rank_check(&all[r], r == cfg->owner);

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

/* One rank of the demo, from create to destroy; rank 0 prints the table. */
static int demo_rank(struct group_rank *self, void *arg)
{
	const struct demo_config *cfg = arg;
	struct mooncake_segment *seg = NULL;
	struct rank_report mine, all[MAX_RANKS];
	uint8_t *blobs, *base;
	uint64_t total = 0;
	int ret;

	blobs = calloc(self->world_size, MOONCAKE_SEGMENT_BLOB_SIZE);
	if (!blobs)
		return 1;
	ret = join_segment(self, cfg, blobs, &seg);
	if (ret)
		return ret;
	base = mooncake_segment_base(seg);
	memset(&mine, 0, sizeof(mine));
	ret = exchange_bytes(self, cfg, base, &mine);
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
		"Usage: %s demo [--ranks N] [--size SIZE] [--owner RANK] [--hugetlb]\n\n"
		"Fork N ranks (default 4) that share one segment (default 256M) and show that the\n"
		"group holds one physical copy: per rank its base address, RSS and PSS.\n",
		PROGRAM);
}

int cmd_demo(int argc, char **argv)
{
	static const struct option options[] = {
		{ "ranks", required_argument, NULL, 'n' }, { "size", required_argument, NULL, 's' },
		{ "owner", required_argument, NULL, 'o' }, { "hugetlb", no_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },	   { NULL, 0, NULL, 0 },
	};
	struct demo_config cfg = { 4, 0, UINT64_C(256) << 20, false };
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
	fflush(stdout);
	err = group_run(cfg.ranks, demo_rank, &cfg, 600000, codes);
	if (err == -ETIMEDOUT) {
		fprintf(stderr, "%s demo: the ranks did not finish in time\n", PROGRAM);
		return 1;
	}
	if (err) {
		/* The group could not even start: say why, and the fix for the likely cause. */
		fprintf(stderr, "%s demo: cannot start %u ranks: %s%s\n", PROGRAM, cfg.ranks, strerror(-err),
			err == -EMFILE || err == -ENFILE
				? " (the ranks' sockets need descriptors: raise the limit, ulimit -n)"
			: err == -EAGAIN ? " (no more processes: raise ulimit -u or the cgroup's pids.max)"
					 : "");
		return 1;
	}
	for (uint32_t r = 0; r < cfg.ranks; r++)
		if (codes[r] != 0) {
			fprintf(stderr, "%s demo: rank %u exited with status %d\n", PROGRAM, r, codes[r]);
			ret = 1;
		}
	return ret;
}
