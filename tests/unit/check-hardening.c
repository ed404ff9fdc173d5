/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Faults and crashes with real processes: the owner SIGKILLed before, while
 * and after peers import; a peer SIGKILLed mid-import; a peer that tries to
 * resize the pages; a thousand create/complete/destroy cycles.  Nothing may
 * hang, and nothing may be left on the host.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

#include "group.h"
#include "helpers.h"
#include "internals.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(8) << 20)

/*
 * What a crash could leave in /dev/shm, counting only what this test's ranks
 * made.  Where we may (root), the ranks get a /dev/shm of their own: a fresh
 * tmpfs in a private mount namespace, so every entry there is theirs.
 * Elsewhere only entries named like ours count: other tests of a parallel
 * make check (torch, mpirun) create and remove files there at any moment.
 */
static bool private_dev_shm;

static void use_a_private_dev_shm(void)
{
	static bool tried;

	if (tried)
		return;
	tried = true;
	if (unshare(CLONE_NEWNS) != 0)
		return;
	/* Our mount must not propagate to the host: make its parent private first. */
	if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 &&
	    mount("none", "/dev/shm", "none", MS_REC | MS_PRIVATE, NULL) != 0)
		return;
	private_dev_shm = mount("none", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") == 0;
}

static int count_dev_shm(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && strncmp(e->d_name, "vgdb-", 5) != 0 &&
		    (private_dev_shm || strstr(e->d_name, "mooncake")))
			n++;
	closedir(d);
	return n;
}

static uint64_t elapsed_ms(const struct timespec *start)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)((now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000);
}

static struct mooncake_segment *create_rank(struct group_rank *self, uint8_t *blob)
{
	struct mooncake_segment_options opt = test_options(self->world_size, self->rank, 0);
	struct mooncake_segment *seg = NULL;

	if (mooncake_segment_create("hardening", SIZE, &opt, &seg, blob) != 0) {
		fprintf(stderr, "rank %u: create: %s\n", self->rank, mooncake_segment_last_error());
		return NULL;
	}
	return seg;
}

#define NO_RANK_KILLED (-1)

/* Run the scenario: rank @killed dies of the SIGKILL it raises itself, every
 * other rank exits 0 (a rank killed by anything else, the OOM killer
 * included, fails the test), and nothing is left in /dev/shm. */
static void run_group(uint32_t world, group_rank_fn fn, void *arg, int killed)
{
	int codes[8], shm;

	use_a_private_dev_shm();
	shm = count_dev_shm();
	ck_assert_int_eq(group_run(world, fn, arg, 30000, codes), 0);
	for (uint32_t r = 0; r < world; r++)
		ck_assert_msg(codes[r] == ((int)r == killed ? 128 + SIGKILL : 0), "rank %u exited with %d%s",
			      r, codes[r], (int)r == killed ? " (expected its own SIGKILL)" : "");
	ck_assert_int_eq(count_dev_shm(), shm); /* nothing left behind */
}

/* (a) The owner is killed before any peer imports: a clear error, at once. */
static int killed_before_import(struct group_rank *self, void *arg)
{
	uint8_t blob[BLOB], blobs[3 * BLOB];
	struct mooncake_segment *seg = create_rank(self, blob);
	struct timespec start;
	int ret;

	(void)arg;
	RANK_CHECK(seg && group_allgather(self, blob, BLOB, blobs) == 0);
	if (self->rank == 0)
		raise(SIGKILL);
	RANK_CHECK(wait_until_dead(group_pid(0), 5000));
	clock_gettime(CLOCK_MONOTONIC, &start);
	ret = mooncake_segment_complete(seg, blobs, sizeof(blobs));
	RANK_CHECK(ret == -ESRCH);
	RANK_CHECK(strstr(mooncake_segment_last_error(), "is gone"));
	RANK_CHECK(elapsed_ms(&start) < 1000);
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_owner_killed_before_peers_import)
{
	run_group(3, killed_before_import, NULL, 0);
}
END_TEST

/* (b) The owner is killed while peers import: each peer maps or gets ESRCH, never hangs. */
static int killed_during_import(struct group_rank *self, void *arg)
{
	uint8_t blob[BLOB], blobs[4 * BLOB];
	struct mooncake_segment *seg = create_rank(self, blob);
	const unsigned int *delay_us = arg;
	int ret;

	if (seg && self->rank == 0)
		((uint8_t *)mooncake_segment_base(seg))[123] = 77;
	RANK_CHECK(seg && group_allgather(self, blob, BLOB, blobs) == 0);
	if (self->rank == 0) {
		usleep(*delay_us);
		raise(SIGKILL);
	}
	ret = mooncake_segment_complete(seg, blobs, sizeof(blobs));
	RANK_CHECK(ret == 0 || ret == -ESRCH);
	/* A peer that mapped sees the owner's write, owner dead or not. */
	if (ret == 0)
		RANK_CHECK(((uint8_t *)mooncake_segment_base(seg))[123] == 77);
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_owner_killed_while_peers_import)
{
	for (unsigned int delay_us = 0; delay_us <= 2000; delay_us += 250)
		run_group(4, killed_during_import, &delay_us, 0);
}
END_TEST

/* (c) The owner is killed after every rank mapped: the pages live on. */
static int killed_after_mapping(struct group_rank *self, void *arg)
{
	uint8_t blob[BLOB], blobs[3 * BLOB], *base;
	struct mooncake_segment *seg = create_rank(self, blob);

	(void)arg;
	RANK_CHECK(seg && group_allgather(self, blob, BLOB, blobs) == 0);
	RANK_CHECK(mooncake_segment_complete(seg, blobs, sizeof(blobs)) == 0);
	base = mooncake_segment_base(seg);
	/* The owner's pattern in the first half; each peer writes its own page of the second. */
	if (self->rank == 0)
		fill_pattern(base, SIZE / 2, 9);
	RANK_CHECK(group_barrier(self) == 0);
	if (self->rank == 0)
		raise(SIGKILL);
	RANK_CHECK(wait_until_dead(group_pid(0), 5000));
	RANK_CHECK(check_pattern(base, SIZE / 2, 9));
	fill_pattern(base + SIZE / 2 + self->rank * 4096, 4096, self->rank);
	RANK_CHECK(check_pattern(base + SIZE / 2 + self->rank * 4096, 4096, self->rank));
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_owner_killed_after_every_rank_mapped)
{
	run_group(3, killed_after_mapping, NULL, 0);
}
END_TEST

/* A peer killed mid-import does not disturb the owner or the other peers. */
static int peer_killed(struct group_rank *self, void *arg)
{
	uint8_t blob[BLOB], blobs[3 * BLOB];
	volatile uint8_t *base;
	struct mooncake_segment *seg = create_rank(self, blob);
	struct timespec start;

	(void)arg;
	RANK_CHECK(seg && group_allgather(self, blob, BLOB, blobs) == 0);
	if (self->rank == 1)
		raise(SIGKILL);
	RANK_CHECK(mooncake_segment_complete(seg, blobs, sizeof(blobs)) == 0);
	base = mooncake_segment_base(seg);
	/* The group's transport has lost rank 1: the pages themselves carry the handshake. */
	if (self->rank == 2)
		base[4096] = 42;
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (base[4096] != 42 && elapsed_ms(&start) < 5000)
		usleep(1000);
	RANK_CHECK(base[4096] == 42);
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_peer_killed_mid_import)
{
	run_group(3, peer_killed, NULL, 1);
}
END_TEST

/* A peer cannot resize the owner's memfd: the seals refuse it, others keep working. */
static int resizing_peer(struct group_rank *self, void *arg)
{
	uint8_t blob[BLOB], blobs[2 * BLOB];
	struct mooncake_segment *seg = create_rank(self, blob);
	struct mc_blob owner;
	char path[64];
	int fd;

	(void)arg;
	RANK_CHECK(seg && group_allgather(self, blob, BLOB, blobs) == 0);
	RANK_CHECK(mooncake_segment_complete(seg, blobs, sizeof(blobs)) == 0);
	if (self->rank == 1) {
		RANK_CHECK(mc_blob_decode(blobs, 0, &owner) == 0);
		snprintf(path, sizeof(path), "/proc/%u/fd/%u", owner.pid,
			 (unsigned int)(owner.handle[4] | owner.handle[5] << 8)); /* the handle's fd field */
		fd = open(path, O_RDWR | O_CLOEXEC);
		RANK_CHECK(fd >= 0);
		RANK_CHECK(ftruncate(fd, 4096) == -1 && errno == EPERM);
		RANK_CHECK(ftruncate(fd, (off_t)(2 * SIZE)) == -1 && errno == EPERM);
		RANK_CHECK(fallocate(fd, 0, 0, (off_t)(2 * SIZE)) == -1 && errno == EPERM);
		RANK_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == -1 &&
			   errno == EPERM); /* sealed for good */
		close(fd);
	}
	RANK_CHECK(group_barrier(self) == 0);
	/* Every page is still there for everyone: no SIGBUS. */
	fill_pattern((uint8_t *)mooncake_segment_base(seg) + self->rank * (SIZE / 2), SIZE / 2, self->rank);
	RANK_CHECK(group_barrier(self) == 0);
	RANK_CHECK(check_pattern((uint8_t *)mooncake_segment_base(seg) + (1 - self->rank) * (SIZE / 2),
				 SIZE / 2, 1 - self->rank));
	RANK_CHECK(group_barrier(self) == 0);
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_a_peer_cannot_resize_the_pages)
{
	run_group(2, resizing_peer, NULL, NO_RANK_KILLED);
}
END_TEST

#define CYCLES 1000

struct resource_counts {
	int fds;
	int maps;
	uint64_t rss_kb;
};

static void count_resources(struct resource_counts *c)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[128];
	unsigned long long kb;

	c->fds = count_fds();
	c->maps = count_mappings();
	c->rss_kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
			c->rss_kb = kb;
	if (f)
		fclose(f);
}

static int cycling_rank(struct group_rank *self, void *arg)
{
	struct resource_counts before, after;
	uint8_t blob[BLOB], blobs[3 * BLOB];

	(void)arg;
	for (int i = 0; i < CYCLES; i++) {
		struct mooncake_segment_options opt =
			test_options(self->world_size, self->rank, (uint32_t)i % 3);
		struct mooncake_segment *seg = NULL;

		/* Counted after the first cycle: stdio and the allocator have warmed up. */
		if (i == 1)
			count_resources(&before);
		RANK_CHECK(mooncake_segment_create("cycle", 1 << 20, &opt, &seg, blob) == 0);
		RANK_CHECK(group_allgather(self, blob, BLOB, blobs) == 0);
		RANK_CHECK(mooncake_segment_complete(seg, blobs, sizeof(blobs)) == 0);
		RANK_CHECK(group_barrier(self) == 0);
		RANK_CHECK(mooncake_segment_finish(seg) == 0);
		((volatile uint8_t *)mooncake_segment_base(seg))[self->rank] = (uint8_t)i;
		mooncake_segment_destroy(seg);
	}
	count_resources(&after);
	RANK_CHECK(after.fds == before.fds);
	RANK_CHECK(after.maps == before.maps);
	/* A leaked 1 MiB segment per cycle would be a GiB: allow allocator noise only
	 * (not under ASan or valgrind, whose own memory grows as they run). */
	RANK_CHECK(under_memory_checker() || after.rss_kb <= before.rss_kb + 1024);
	return 0;
}

START_TEST(test_a_thousand_cycles_return_every_count_to_its_start)
{
	run_group(3, cycling_rank, NULL, NO_RANK_KILLED);
}
END_TEST

Suite *suite_hardening(void)
{
	Suite *s = suite_create("hardening");
	TCase *crash = tcase_create("crashes");
	TCase *cycles = tcase_create("cycles");

	tcase_add_test(crash, test_owner_killed_before_peers_import);
	tcase_add_test(crash, test_owner_killed_while_peers_import);
	tcase_add_test(crash, test_owner_killed_after_every_rank_mapped);
	tcase_add_test(crash, test_peer_killed_mid_import);
	tcase_add_test(crash, test_a_peer_cannot_resize_the_pages);
	tcase_add_test(cycles, test_a_thousand_cycles_return_every_count_to_its_start);
	tcase_set_timeout(crash, 120);
	tcase_set_timeout(cycles, 120);
	suite_add_tcase(s, crash);
	suite_add_tcase(s, cycles);
	return s;
}
