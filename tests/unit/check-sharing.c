/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Real sharing: one rank, two ranks in one process, N ranks in N forked
 * processes writing both ways, one physical copy (PSS), finish, a gone
 * owner, what a rank can discard (MADV_REMOVE) and nothing left behind after
 * destroy.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "group.h"
#include "helpers.h"
#include "internals.h"

/* Lines of /proc/self/maps that lie inside [@base, @base+@len). */
static int count_vmas_in(const void *base, uint64_t len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	unsigned long long lo, hi, start = (unsigned long long)(uintptr_t)base;
	char line[512];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && lo >= start && hi <= start + len)
			n++;
	if (f)
		fclose(f);
	return n;
}

START_TEST(test_single_rank_round_trip)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	struct mooncake_segment_info info;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	int fds = count_fds(), maps = count_mappings();
	uint8_t *base;

	ck_assert_int_eq(mooncake_segment_create("single", TEST_SIZE, &opt, &seg, blob), 0);
	ck_assert(!mooncake_segment_ready(seg));
	ck_assert_int_eq(mooncake_segment_complete(seg, blob, sizeof(blob)), 0);
	ck_assert(mooncake_segment_ready(seg));
	base = mooncake_segment_base(seg);
	ck_assert_ptr_nonnull(base);
	ck_assert_uint_eq(mooncake_segment_size(seg), TEST_SIZE);
	ck_assert_uint_ge(mooncake_segment_alloc_size(seg), TEST_SIZE);
	ck_assert_uint_eq(mooncake_segment_device_addr(seg), 0);
	/* Committed and zeroed before create returned. */
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_uint_eq(info.alloc_size % info.page_size, 0);
	ck_assert_uint_eq(info.resident_bytes, info.alloc_size);
	ck_assert(info.flags & MOONCAKE_SEGMENT_INFO_OWNER);
	ck_assert_str_eq(info.backend, "memfd");
	ck_assert_uint_ge(info.commit_threads, 1);
	ck_assert_str_ne(info.commit_method, "");
	ck_assert_uint_eq(base[0], 0);
	ck_assert_uint_eq(base[TEST_SIZE - 1], 0);
	base[0] = 0x11;
	base[TEST_SIZE - 1] = 0x22;
	ck_assert_uint_eq(base[0] + base[TEST_SIZE - 1], 0x33);
	ck_assert_int_eq(mooncake_segment_finish(seg), 0);
	ck_assert_int_eq(mooncake_segment_finish(seg), 0);
	ck_assert_int_eq(count_fds(), fds);
	mooncake_segment_destroy(seg);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

/* Owner and peer in this process; blobs holds both. */
static void create_pair(const char *name, struct mooncake_segment **owner, struct mooncake_segment **peer,
			uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE])
{
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);

	ck_assert_int_eq(mooncake_segment_create(name, TEST_SIZE, &o, owner, blobs), 0);
	ck_assert_int_eq(
		mooncake_segment_create(name, TEST_SIZE, &p, peer, blobs + MOONCAKE_SEGMENT_BLOB_SIZE), 0);
}

START_TEST(test_two_ranks_share_pages_in_one_process)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *owner, *peer;
	int fds = count_fds(), maps = count_mappings();
	uint8_t *a, *b;

	create_pair("pair", &owner, &peer, blobs);
	ck_assert_ptr_nonnull(mooncake_segment_base(peer)); /* known after phase one */
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	a = mooncake_segment_base(owner);
	b = mooncake_segment_base(peer);
	ck_assert_ptr_ne(a, b);
	fill_pattern(a, TEST_SIZE / 2, 1);
	ck_assert(check_pattern(b, TEST_SIZE / 2, 1));
	fill_pattern(b + TEST_SIZE / 2, TEST_SIZE / 2, 2);
	ck_assert(check_pattern(a + TEST_SIZE / 2, TEST_SIZE / 2, 2));
	ck_assert_int_eq(mooncake_segment_finish(peer), 0); /* a no-op on non-owners */
	ck_assert_int_eq(mooncake_segment_finish(owner), 0);
	/* Destroying the owner first leaves the peer's pages valid. */
	mooncake_segment_destroy(owner);
	ck_assert(check_pattern(b, TEST_SIZE / 2, 1));
	mooncake_segment_destroy(peer);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

/* An explicit alignment holds for every rank's base (1 GiB: far above what
 * an unaligned window would give by chance), and info() reports it. */
START_TEST(test_every_rank_base_has_the_declared_alignment)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	struct mooncake_segment *owner, *peer;
	struct mooncake_segment_info info;
	const uint64_t gib = UINT64_C(1) << 30;
	int fds = count_fds(), maps = count_mappings();

	o.alignment = p.alignment = gib;
	ck_assert_int_eq(mooncake_segment_create("aligned", TEST_SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(
		mooncake_segment_create("aligned", TEST_SIZE, &p, &peer, blobs + MOONCAKE_SEGMENT_BLOB_SIZE),
		0);
	ck_assert_uint_eq((uintptr_t)mooncake_segment_base(peer) % gib, 0); /* reserved at create */
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_uint_eq((uintptr_t)mooncake_segment_base(owner) % gib, 0);
	ck_assert_uint_eq((uintptr_t)mooncake_segment_base(peer) % gib, 0);
	fill_pattern(mooncake_segment_base(owner), TEST_SIZE, 7);
	ck_assert(check_pattern(mooncake_segment_base(peer), TEST_SIZE, 7));
	ck_assert_int_eq(mooncake_segment_get_info(peer, &info, sizeof(info)), 0);
	ck_assert_uint_eq(info.alignment, gib);
	/* Alignment moves the base; it adds no pages: the size is rounded to a page only. */
	ck_assert_uint_lt(info.alloc_size, TEST_SIZE + info.page_size);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_mappings(), maps);
}
END_TEST

/* The default is the alignment a memfd segment always had: its huge page. */
START_TEST(test_default_alignment_is_the_huge_page_size)
{
	struct mooncake_segment_options o = test_options(1, 0, 0);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	ck_assert_int_eq(mooncake_segment_create("default-aligned", TEST_SIZE, &o, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_uint_eq(info.alignment, UINT64_C(2) << 20);
	ck_assert_uint_eq((uintptr_t)mooncake_segment_base(seg) % info.alignment, 0);
	mooncake_segment_destroy(seg);
}
END_TEST

/* Ranks that declare different alignments never form a group. */
START_TEST(test_ranks_with_other_alignments_fail_complete)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment_options o = test_options(2, 0, 0), p = test_options(2, 1, 0);
	struct mooncake_segment *owner, *peer;

	o.alignment = UINT64_C(64) << 10;
	ck_assert_int_eq(mooncake_segment_create("misaligned", TEST_SIZE, &o, &owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("misaligned", TEST_SIZE, &p, &peer,
						 blobs + MOONCAKE_SEGMENT_BLOB_SIZE),
			 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EINVAL, "alignment");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

START_TEST(test_complete_twice_is_ealready)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *owner, *peer;

	create_pair("twice", &owner, &peer, blobs);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EALREADY, "already");
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_error(mooncake_segment_complete(owner, blobs, sizeof(blobs)), EALREADY, "already");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

START_TEST(test_finish_before_complete_is_einval)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *owner, *peer;

	create_pair("early-finish", &owner, &peer, blobs);
	ck_assert_error(mooncake_segment_finish(owner), EINVAL, "complete");
	ck_assert_error(mooncake_segment_finish(peer), EINVAL, "complete");
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

START_TEST(test_peer_after_finish_gets_esrch)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *owner, *peer;
	int maps;

	create_pair("late", &owner, &peer, blobs);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_finish(owner), 0);
	maps = count_mappings();
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), ESRCH,
			"Shared segment rank 1: the owner process");
	ck_assert(strstr(mooncake_segment_last_error(), "no longer holds"));
	ck_assert(!mooncake_segment_ready(peer));
	ck_assert_int_eq(count_mappings(), maps);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

/* A log callback that forks (or calls the library) while a peer's import
 * fails must not deadlock on the library's fork registry: the failure's log
 * line is delivered once the registry is let go. */
static void forking_log_fn(int priority, const char *message, void *userdata)
{
	pid_t child = fork();

	(void)priority;
	if (child == 0)
		_exit(0);
	if (child > 0)
		waitpid(child, NULL, 0);
	if (strstr(message, "owner process"))
		++*(int *)userdata;
}

/* The peer's import fails inside the fork registry (the owner is gone). */
static int forking_log_rank(struct group_rank *self, void *arg)
{
	struct mooncake_segment_options opt = test_options(2, self->rank, 0);
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE], blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *seg = NULL;
	int failures_logged = 0;

	(void)arg;
	RANK_CHECK(mooncake_segment_create("forking-log", TEST_SIZE, &opt, &seg, blob) == 0);
	RANK_CHECK(group_allgather(self, blob, sizeof(blob), blobs) == 0);
	if (self->rank == 0)
		_exit(0);
	RANK_CHECK(wait_until_dead(group_pid(0), 5000));
	mooncake_segment_set_log_fn(forking_log_fn, MOONCAKE_SEGMENT_LOG_DEBUG, &failures_logged);
	RANK_CHECK(mooncake_segment_complete(seg, blobs, sizeof(blobs)) == -ESRCH);
	mooncake_segment_set_log_fn(NULL, MOONCAKE_SEGMENT_LOG_DEBUG, NULL);
	RANK_CHECK(failures_logged >= 1);
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_a_log_callback_may_fork_when_an_import_fails)
{
	int codes[2];

	/* A deadlock here is the test's timeout. */
	ck_assert_int_eq(group_run(2, forking_log_rank, NULL, 20000, codes), 0);
	ck_assert_int_eq(codes[1], 0);
}
END_TEST

START_TEST(test_memfd_is_sealed_against_resizing)
{
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg;
	int seals;

	ck_assert_int_eq(mooncake_segment_create("sealed", TEST_SIZE, &opt, &seg, blob), 0);
	seals = fcntl(mc_memfd_descriptor(&seg->memory), F_GET_SEALS);
	ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	ck_assert_int_eq(ftruncate(mc_memfd_descriptor(&seg->memory), 0), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(ftruncate(mc_memfd_descriptor(&seg->memory), (off_t)seg->memory.alloc_size * 2), -1);
	ck_assert_int_eq(errno, EPERM);
	/* The close-on-exec flag keeps it out of exec'd children. */
	ck_assert(fcntl(mc_memfd_descriptor(&seg->memory), F_GETFD) & FD_CLOEXEC);
	mooncake_segment_destroy(seg);
}
END_TEST

/* What the seals do not cover, as guarantees.md says: a rank may discard
 * (zero and decommit) pages under everyone, but the file keeps its size, so
 * the next touch allocates again instead of faulting. */
START_TEST(test_a_rank_can_discard_pages_but_never_resize_them)
{
	uint8_t blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE], resident[16];
	struct mooncake_segment *owner, *peer;
	uint64_t page = mc_host_base_page_size(), off = 32 * page, len = 16 * page;
	uint8_t *a, *b;
	struct stat st;

	create_pair("discard", &owner, &peer, blobs);
	ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	a = mooncake_segment_base(owner);
	b = mooncake_segment_base(peer);
	fill_pattern(a, off, 5);
	fill_pattern(a + off, len, 7);
	fill_pattern(a + off + len, TEST_SIZE - off - len, 8);
	/* The peer punches a hole through its own mapping: nothing refuses it. */
	ck_assert_int_eq(madvise(b + off, len, MADV_REMOVE), 0);
	if (owner->memory.page_size == page) {
		ck_assert_int_eq(mincore(a + off, len, resident), 0);
		for (uint64_t i = 0; i < len / page; i++)
			ck_assert_uint_eq(resident[i] & 1, 0); /* decommitted, before any read */
	}
	/* Every rank reads zeros there (a read allocates a fresh zero page). */
	for (uint64_t i = 0; i < len; i++)
		ck_assert_uint_eq(a[off + i], 0);
	ck_assert(check_pattern(a, off, 5));
	ck_assert(check_pattern(a + off + len, TEST_SIZE - off - len, 8));
	ck_assert_int_eq(fstat(mc_memfd_descriptor(&owner->memory), &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, owner->memory.alloc_size);
	/* The size is sealed, so touching the hole allocates again: no SIGBUS. */
	fill_pattern(b + off, len, 6);
	ck_assert(check_pattern(a + off, len, 6));
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
}
END_TEST

struct log_capture {
	int lines;
	char last[256];
};

static void capture_log(int priority, const char *message, void *userdata)
{
	struct log_capture *c = userdata;

	if (priority == MOONCAKE_SEGMENT_LOG_INFO) {
		c->lines++;
		snprintf(c->last, sizeof(c->last), "%s", message);
	}
}

START_TEST(test_log_callback_is_silent_by_default_and_routes_lines)
{
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg;
	struct log_capture c = { 0, "" };

	mooncake_segment_set_log_fn(capture_log, MOONCAKE_SEGMENT_LOG_INFO, &c);
	ck_assert_int_eq(mooncake_segment_create("logged|tag", TEST_SIZE, &opt, &seg, blob), 0);
	mooncake_segment_set_log_fn(NULL, 0, NULL);
	ck_assert_int_eq(c.lines, 1);
	ck_assert_msg(strstr(c.last, "logged create") && !strstr(c.last, "tag"), "%s", c.last);
	mooncake_segment_destroy(seg);
}
END_TEST

/* --- N ranks in N processes ------------------------------------------------ */

struct group_args {
	uint32_t owner;
	uint64_t size;
};

static int sharing_rank(struct group_rank *self, void *arg)
{
	const struct group_args *a = arg;
	struct mooncake_segment_options opt = test_options(self->world_size, self->rank, a->owner);
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE], blobs[8 * MOONCAKE_SEGMENT_BLOB_SIZE], *base;
	struct mooncake_segment *seg = NULL;
	uint64_t slice = a->size / self->world_size, pss, all_pss[64];
	struct mc_mapping_usage usage;
	int fds = count_fds(), maps = count_mappings();

	RANK_CHECK(self->world_size <= 8);
	RANK_CHECK(mooncake_segment_create("group", a->size, &opt, &seg, blob) == 0);
	RANK_CHECK(group_allgather(self, blob, sizeof(blob), blobs) == 0);
	RANK_CHECK(mooncake_segment_complete(seg, blobs, (size_t)self->world_size * sizeof(blob)) == 0);
	RANK_CHECK(group_barrier(self) == 0);
	RANK_CHECK(mooncake_segment_finish(seg) == 0);
	base = mooncake_segment_base(seg);
	/* Every rank writes its own slice, then reads everyone's: both directions. */
	fill_pattern(base + self->rank * slice, slice, self->rank + 1);
	RANK_CHECK(group_barrier(self) == 0);
	for (uint32_t r = 0; r < self->world_size; r++)
		RANK_CHECK(check_pattern(base + r * slice, slice, r + 1));
	/* Once every rank has touched every page, the group's PSS is one copy. */
	RANK_CHECK(group_barrier(self) == 0);
	RANK_CHECK(mc_mapping_usage(base, mooncake_segment_alloc_size(seg), &usage));
	pss = usage.pss;
	RANK_CHECK(group_allgather(self, &pss, sizeof(pss), all_pss) == 0);
	if (self->rank == 0) {
		uint64_t total = 0;

		for (uint32_t r = 0; r < self->world_size; r++)
			total += all_pss[r];
		RANK_CHECK(total >= mooncake_segment_alloc_size(seg) * 95 / 100);
		RANK_CHECK(total <= mooncake_segment_alloc_size(seg) * 105 / 100);
	}
	RANK_CHECK(group_barrier(self) == 0);
	mooncake_segment_destroy(seg);
	RANK_CHECK(count_fds() == fds);
	RANK_CHECK(count_mappings() == maps);
	return 0;
}

static void run_sharing(uint32_t world, uint32_t owner, uint64_t size)
{
	struct group_args a = { owner, size };
	int codes[8];

	ck_assert_int_eq(group_run(world, sharing_rank, &a, 20000, codes), 0);
	for (uint32_t r = 0; r < world; r++)
		ck_assert_msg(codes[r] == 0, "rank %u exited with %d", r, codes[r]);
}

START_TEST(test_four_processes_share_one_copy_owner_0)
{
	run_sharing(4, 0, UINT64_C(16) << 20);
}
END_TEST

START_TEST(test_four_processes_share_one_copy_owner_2)
{
	run_sharing(4, 2, UINT64_C(16) << 20);
}
END_TEST

static int gone_owner_rank(struct group_rank *self, void *arg)
{
	struct mooncake_segment_options opt = test_options(2, self->rank, 0);
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE], blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *seg = NULL;
	int ret;

	(void)arg;
	RANK_CHECK(mooncake_segment_create("gone", TEST_SIZE, &opt, &seg, blob) == 0);
	RANK_CHECK(group_allgather(self, blob, sizeof(blob), blobs) == 0);
	if (self->rank == 0)
		_exit(0); /* the owner dies before the peer imports */
	RANK_CHECK(wait_until_dead(group_pid(0), 5000));
	ret = mooncake_segment_complete(seg, blobs, sizeof(blobs));
	RANK_CHECK(ret == -ESRCH);
	RANK_CHECK(strstr(mooncake_segment_last_error(), "owner process") != NULL);
	RANK_CHECK(!mooncake_segment_ready(seg));
	mooncake_segment_destroy(seg);
	return 0;
}

/* The THP fall-back advises part of the mapping MADV_NOHUGEPAGE, which splits
 * it into several VMAs: the demo's RSS/PSS must count all of them. */
START_TEST(test_mapping_usage_counts_every_vma_of_a_split_mapping)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mc_mapping_usage usage;
	uint64_t page = mc_host_base_page_size(), len = 64 * page;
	uint8_t *base;

	ck_assert_int_eq(mooncake_segment_create("split", len, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_complete(seg, blob, sizeof(blob)), 0);
	base = mooncake_segment_base(seg);
	ck_assert_int_eq(madvise(base + len / 4, len / 4, MADV_NOHUGEPAGE), 0);
	ck_assert_int_eq(madvise(base + len / 2, len / 2, MADV_HUGEPAGE), 0);
	ck_assert_int_ge(count_vmas_in(base, len), 3);
	ck_assert(mc_mapping_usage(base, len, &usage));
	ck_assert_uint_eq(usage.rss, len);
	ck_assert_uint_eq(usage.pss, len);
	mooncake_segment_destroy(seg);
}
END_TEST

START_TEST(test_owner_gone_before_import_is_esrch)
{
	int codes[2];

	ck_assert_int_eq(group_run(2, gone_owner_rank, NULL, 10000, codes), 0);
	ck_assert_int_eq(codes[0], 0);
	ck_assert_int_eq(codes[1], 0);
}
END_TEST

/* The label of this process's segment mapping whose label starts with
 * @prefix, as /proc/self/maps shows it (up to the '|' the library adds). */
static void maps_label(const char *prefix, char *label, size_t size)
{
	char line[512], needle[128], *name, *bar;
	FILE *maps = fopen("/proc/self/maps", "re");

	label[0] = '\0';
	snprintf(needle, sizeof(needle), "memfd:mooncake-segment:%s", prefix);
	ck_assert_ptr_nonnull(maps);
	while (fgets(line, sizeof(line), maps))
		if ((name = strstr(line, needle))) {
			name += strlen("memfd:mooncake-segment:");
			bar = strchr(name, '|');
			snprintf(label, size, "%.*s", bar ? (int)(bar - name) : 0, name);
			break;
		}
	fclose(maps);
}

START_TEST(test_a_long_label_is_never_cut_inside_a_character)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	char name[128], label[128];

	/* 62 ASCII bytes, then "é" (2 bytes) across the 63-byte limit, then more. */
	memset(name, 'a', 62);
	snprintf(name + 62, sizeof(name) - 62, "\xc3\xa9tail");
	ck_assert_int_eq(mooncake_segment_create(name, TEST_SIZE, &opt, &seg, blob), 0);
	maps_label("aaaaaaaa", label, sizeof(label));
	ck_assert_uint_eq(strlen(label), 62);
	ck_assert_int_eq(strspn(label, "a"), 62);
	mooncake_segment_destroy(seg);
}
END_TEST

Suite *suite_sharing(void)
{
	Suite *s = suite_create("sharing");
	TCase *one = tcase_create("one-process");
	TCase *many = tcase_create("processes");

	tcase_add_test(one, test_single_rank_round_trip);
	tcase_add_test(one, test_two_ranks_share_pages_in_one_process);
	tcase_add_test(one, test_complete_twice_is_ealready);
	tcase_add_test(one, test_finish_before_complete_is_einval);
	tcase_add_test(one, test_peer_after_finish_gets_esrch);
	tcase_add_test(one, test_memfd_is_sealed_against_resizing);
	tcase_add_test(one, test_a_log_callback_may_fork_when_an_import_fails);
	tcase_add_test(one, test_a_rank_can_discard_pages_but_never_resize_them);
	tcase_add_test(one, test_log_callback_is_silent_by_default_and_routes_lines);
	tcase_add_test(one, test_mapping_usage_counts_every_vma_of_a_split_mapping);
	tcase_add_test(one, test_a_long_label_is_never_cut_inside_a_character);
	tcase_add_test(one, test_every_rank_base_has_the_declared_alignment);
	tcase_add_test(one, test_default_alignment_is_the_huge_page_size);
	tcase_add_test(one, test_ranks_with_other_alignments_fail_complete);
	tcase_add_test(many, test_four_processes_share_one_copy_owner_0);
	tcase_add_test(many, test_four_processes_share_one_copy_owner_2);
	tcase_add_test(many, test_owner_gone_before_import_is_esrch);
	tcase_set_timeout(many, 30);
	suite_add_tcase(s, one);
	suite_add_tcase(s, many);
	return s;
}
