/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fork() after create, with real processes: a forked child shares the pages
 * (reads the owner's bytes, its writes reach the parent), its destroy and
 * finish release nothing of the parent's even where the child has put its
 * own memory in the range, it cannot complete the parent's segment, and it
 * never holds one of the library's descriptors, even when forked by another
 * thread while a segment is being created.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
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

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(8) << 20)

/* Run @fn in a forked child; its exit status, or 128 + the signal that killed it. */
static int in_child(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	int status;

	if (pid == 0)
		_exit(fn(arg));
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Descriptors of process @pid that are a memfd the library created. */
static int count_segment_memfds(pid_t pid)
{
	return count_fds_to((int)pid, "/memfd:mooncake-segment:");
}

/* Whether process @pid holds file @ino of device @dev: a descriptor or a mapping. */
static bool holds_file(pid_t pid, uint64_t dev, uint64_t ino)
{
	char dir[64], path[320], line[512];
	unsigned long long map_ino;
	struct dirent *e;
	struct stat st;
	bool found = false;
	DIR *d;
	FILE *f;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			found = found || (stat(path, &st) == 0 && (uint64_t)st.st_dev == dev &&
					  (uint64_t)st.st_ino == ino);
		}
	if (d)
		closedir(d);
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f))
		found = found || (sscanf(line, "%*s %*s %*s %*s %llu", &map_ino) == 1 && map_ino == ino &&
				  strstr(line, "memfd:mooncake-segment:"));
	if (f)
		fclose(f);
	return found;
}

/* A one-rank segment, complete, the pattern @seed over its first half. */
static struct mooncake_segment *solo_segment(uint32_t seed)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	ck_assert_msg(mooncake_segment_create("fork", SIZE, &opt, &seg, blob) == 0, "%s",
		      mooncake_segment_last_error());
	ck_assert_msg(mooncake_segment_complete(seg, blob, BLOB) == 0, "%s", mooncake_segment_last_error());
	fill_pattern(mooncake_segment_base(seg), SIZE / 2, seed);
	return seg;
}

struct shared_child {
	uint8_t *base;
	uint32_t rank;
};

/* The child reads the owner's half and writes its own quarter of the other half. */
static int read_and_write_inherited(void *arg)
{
	const struct shared_child *c = arg;

	if (!check_pattern(c->base, SIZE / 2, 7))
		return 2;
	fill_pattern(c->base + SIZE / 2 + c->rank * (SIZE / 4), SIZE / 4, 100 + c->rank);
	return 0;
}

static int rank_with_a_forked_child(struct group_rank *self, void *arg)
{
	struct mooncake_segment_options opt = test_options(2, self->rank, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB], blobs[2 * BLOB];
	struct shared_child child;
	int status;

	(void)arg;
	RANK_CHECK(mooncake_segment_create("fork", SIZE, &opt, &seg, blob) == 0);
	RANK_CHECK(group_allgather(self, blob, BLOB, blobs) == 0);
	RANK_CHECK(mooncake_segment_complete(seg, blobs, sizeof(blobs)) == 0);
	child.base = mooncake_segment_base(seg);
	child.rank = self->rank;
	if (self->rank == 0)
		fill_pattern(child.base, SIZE / 2, 7);
	RANK_CHECK(group_barrier(self) == 0);
	/* Owner and peer each fork after complete: both kinds of mapping are inherited. */
	status = in_child(read_and_write_inherited, &child);
	if (status != 0) {
		fprintf(stderr, "rank %u: its forked child exited with %d\n", self->rank, status);
		return 1;
	}
	RANK_CHECK(group_barrier(self) == 0);
	/* Both children's writes reached the pages every rank maps. */
	RANK_CHECK(check_pattern(child.base + SIZE / 2, SIZE / 4, 100));
	RANK_CHECK(check_pattern(child.base + SIZE / 2 + SIZE / 4, SIZE / 4, 101));
	RANK_CHECK(group_barrier(self) == 0);
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_forked_child_reads_and_writes_the_inherited_pages)
{
	int codes[2];

	ck_assert_int_eq(group_run(2, rank_with_a_forked_child, NULL, 30000, codes), 0);
	ck_assert_msg(codes[0] == 0 && codes[1] == 0, "ranks exited with %d and %d", codes[0], codes[1]);
}
END_TEST

/* The child frees the second half of the range, puts its own memory there,
 * then finishes and destroys its copy: neither half may be unmapped. */
static int destroy_over_own_memory(void *arg)
{
	struct mooncake_segment *seg = arg;
	uint8_t *base = mooncake_segment_base(seg);
	void *own;

	if (munmap(base + SIZE / 2, SIZE / 2) != 0)
		return 2;
	own = mmap(base + SIZE / 2, SIZE / 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		   -1, 0);
	if (own != base + SIZE / 2)
		return 3;
	fill_pattern(own, SIZE / 2, 33);
	if (mooncake_segment_finish(seg) != 0)
		return 4;
	mooncake_segment_destroy(seg);
	/* A signal here (SIGSEGV) is the failure this test is about. */
	if (!check_pattern(own, SIZE / 2, 33))
		return 5;
	if (!check_pattern(base, SIZE / 2, 21))
		return 6;
	return 0;
}

START_TEST(test_child_destroy_releases_nothing_of_the_parent)
{
	struct mooncake_segment *seg = solo_segment(21);
	uint8_t *base = mooncake_segment_base(seg);
	int fd = mc_memfd_descriptor(&seg->memory), status;

	fill_pattern(base + SIZE / 2, SIZE / 2, 22);
	status = in_child(destroy_over_own_memory, seg);
	ck_assert_msg(status == 0, "the child exited with %d", status);
	/* The parent's mapping, pages and descriptor are untouched. */
	ck_assert(check_pattern(base, SIZE / 2, 21));
	ck_assert(check_pattern(base + SIZE / 2, SIZE / 2, 22));
	ck_assert_int_eq(mc_memfd_descriptor(&seg->memory), fd);
	ck_assert_int_ge(fcntl(fd, F_GETFD), 0);
	ck_assert_int_eq(mooncake_segment_finish(seg), 0);
	ck_assert_int_eq(fcntl(fd, F_GETFD), -1);
	mooncake_segment_destroy(seg);
}
END_TEST

static int complete_in_child(void *arg)
{
	struct mooncake_segment *seg = ((void **)arg)[0];
	const uint8_t *blob = ((void **)arg)[1];
	int ret = mooncake_segment_complete(seg, blob, BLOB);

	if (ret != -EINVAL || !strstr(mooncake_segment_last_error(), "forked child")) {
		fprintf(stderr, "child: complete returned %d (%s)\n", ret, mooncake_segment_last_error());
		return 2;
	}
	mooncake_segment_destroy(seg);
	return 0;
}

START_TEST(test_child_cannot_complete_the_parents_segment)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	void *args[2];
	int status;

	ck_assert_int_eq(mooncake_segment_create("fork", SIZE, &opt, &seg, blob), 0);
	args[0] = seg;
	args[1] = blob;
	status = in_child(complete_in_child, args);
	ck_assert_msg(status == 0, "the child exited with %d", status);
	ck_assert_int_eq(mooncake_segment_complete(seg, blob, BLOB), 0);
	mooncake_segment_destroy(seg);
}
END_TEST

/* Item: the owner forks between create and finish; the child must hold no
 * descriptor, so the pages go with the last rank's destroy. */
static int rank_forking_before_finish(struct group_rank *self, void *arg)
{
	struct mooncake_segment_options opt = test_options(2, self->rank, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB], blobs[2 * BLOB];
	int report[2] = { -1, -1 }, release[2] = { -1, -1 }, memfds = -1;
	uint64_t dev = 0, ino = 0;
	struct stat st;
	pid_t child = -1;
	char byte;

	(void)arg;
	RANK_CHECK(mooncake_segment_create("fork", SIZE, &opt, &seg, blob) == 0);
	if (self->rank == 0) {
		RANK_CHECK(fstat(mc_memfd_descriptor(&seg->memory), &st) == 0);
		RANK_CHECK(count_segment_memfds(getpid()) == 1); /* the counter sees the owner's */
		dev = (uint64_t)st.st_dev;
		ino = (uint64_t)st.st_ino;
		RANK_CHECK(pipe(report) == 0 && pipe(release) == 0);
		child = fork();
		if (child == 0) {
			close(release[1]);
			/* The child drops the mapping it inherited: then it holds nothing. */
			munmap(mooncake_segment_base(seg), mooncake_segment_alloc_size(seg));
			memfds = count_segment_memfds(getpid());
			(void)!write(report[1], &memfds, sizeof(memfds));
			(void)!read(release[0], &byte, 1); /* lives on until the rank is done */
			_exit(0);
		}
		RANK_CHECK(child > 0);
		close(release[0]);
		RANK_CHECK(read(report[0], &memfds, sizeof(memfds)) == sizeof(memfds));
		if (memfds != 0) {
			fprintf(stderr, "rank 0: the forked child holds %d memfd(s) of ours\n", memfds);
			kill(child, SIGKILL);
			return 1;
		}
	}
	RANK_CHECK(group_allgather(self, blob, BLOB, blobs) == 0);
	RANK_CHECK(mooncake_segment_complete(seg, blobs, sizeof(blobs)) == 0);
	RANK_CHECK(group_barrier(self) == 0);
	RANK_CHECK(mooncake_segment_finish(seg) == 0);
	mooncake_segment_destroy(seg);
	RANK_CHECK(group_barrier(self) == 0);
	/* Every rank destroyed, the child still alive: nobody holds the file, so its pages are gone. */
	RANK_CHECK(count_segment_memfds(getpid()) == 0);
	if (self->rank == 0) {
		RANK_CHECK(!holds_file(getpid(), dev, ino));
		RANK_CHECK(!holds_file(child, dev, ino));
		RANK_CHECK(kill(child, 0) == 0);
		close(release[1]);
		RANK_CHECK(waitpid(child, NULL, 0) == child);
		close(report[0]);
		close(report[1]);
	}
	return 0;
}

START_TEST(test_child_forked_before_finish_holds_no_descriptor)
{
	int codes[2];

	ck_assert_int_eq(group_run(2, rank_forking_before_finish, NULL, 30000, codes), 0);
	ck_assert_msg(codes[0] == 0 && codes[1] == 0, "ranks exited with %d and %d", codes[0], codes[1]);
}
END_TEST

#define RACE_CREATES 300

static int race_done;

static void *create_and_destroy(void *arg)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	uint8_t blob[BLOB];

	for (int i = 0; i < RACE_CREATES; i++) {
		struct mooncake_segment *seg = NULL;

		if (mooncake_segment_create("race", 1 << 20, &opt, &seg, blob) == 0)
			mooncake_segment_destroy(seg);
	}
	(void)arg;
	__atomic_store_n(&race_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Fork a child that reports how many memfds of ours it holds (through a pipe:
 * under valgrind the exit status may carry the checker's own verdict). */
static int memfds_in_a_forked_child(void)
{
	int pipefd[2], memfds = -1, status;
	pid_t pid;

	if (pipe(pipefd) != 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		memfds = count_segment_memfds(getpid());
		(void)!write(pipefd[1], &memfds, sizeof(memfds));
		_exit(0);
	}
	close(pipefd[1]);
	if (pid < 0 || read(pipefd[0], &memfds, sizeof(memfds)) != sizeof(memfds))
		memfds = -1;
	close(pipefd[0]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	return memfds;
}

START_TEST(test_fork_racing_creates_in_another_thread_leaks_no_descriptor)
{
	pthread_t thread;
	int forks = 0, leaked = 0;

	__atomic_store_n(&race_done, 0, __ATOMIC_RELEASE);
	ck_assert_int_eq(pthread_create(&thread, NULL, create_and_destroy, NULL), 0);
	while (!__atomic_load_n(&race_done, __ATOMIC_ACQUIRE)) {
		forks++;
		leaked += memfds_in_a_forked_child() != 0;
	}
	pthread_join(thread, NULL);
	ck_assert_msg(leaked == 0, "%d of %d children forked during creates held a memfd of ours", leaked,
		      forks);
}
END_TEST

/* A child forked while its parent holds a memory cgroup's commit lock does
 * not hold it: once the parent lets go, the next create gets it, child alive. */
START_TEST(test_child_forked_during_a_commit_does_not_hold_the_cgroup_lock)
{
	struct mc_commit_lock held = MC_COMMIT_LOCK_NONE, again = MC_COMMIT_LOCK_NONE;
	char root[256], byte;
	int child_waits[2], status;
	pid_t child;

	fixture_tree_create(root, sizeof(root)); /* a directory to key the lock by */
	ck_assert(mc_commit_lock_acquire(root, &held));
	ck_assert_int_eq(pipe(child_waits), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		close(child_waits[1]);
		/* Stay alive until the parent is done; report whether the lock came along. */
		_exit(held.fd == -1 && read(child_waits[0], &byte, 1) == 0 ? 0 : 1);
	}
	close(child_waits[0]);
	mc_commit_lock_release(&held);
	/* Waits for ever (the test's timeout fails it) if the child holds the socket. */
	ck_assert(mc_commit_lock_acquire(root, &again));
	mc_commit_lock_release(&again);
	close(child_waits[1]);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	fixture_tree_remove(root);
}
END_TEST

Suite *suite_fork(void)
{
	Suite *s = suite_create("fork");
	TCase *tc = tcase_create("after-create");

	tcase_add_test(tc, test_forked_child_reads_and_writes_the_inherited_pages);
	tcase_add_test(tc, test_child_destroy_releases_nothing_of_the_parent);
	tcase_add_test(tc, test_child_cannot_complete_the_parents_segment);
	tcase_add_test(tc, test_child_forked_before_finish_holds_no_descriptor);
	tcase_add_test(tc, test_fork_racing_creates_in_another_thread_leaks_no_descriptor);
	tcase_add_test(tc, test_child_forked_during_a_commit_does_not_hold_the_cgroup_lock);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return s;
}
