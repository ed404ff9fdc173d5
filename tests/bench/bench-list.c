/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A benchmark, not a test: how long `mooncake-segment list` takes on a busy
 * node.  It starts SEGMENTS owners (default 100), each of which creates a
 * segment and forks children that map its memfd (inherited before finish();
 * the library's own mapping is MADV_DONTFORK) and read every page of it, PROCESSES processes in
 * all (default 1000, every one of them mapping a segment: the worst case for
 * list, which reads smaps and numa_maps of every mapper), checks that list
 * finds them all, then times REPEAT runs of `list --json` and prints the best
 * and the median.
 *
 * Usage: bench-list TOOL [PROCESSES [SEGMENTS [REPEAT]]]
 * From a build tree, time the program itself, not libtool's wrapper script:
 *   LD_LIBRARY_PATH=lib/.libs tests/bench/bench-list tools/.libs/mooncake-segment 1000 100 10
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/segment.h>

#define SEGMENT_SIZE (UINT64_C(2) << 20)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A child of an owner: map the memfd it inherited, read every page, close it. */
static bool map_inherited_memfd(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	char link[256];
	int fd = -1;
	ssize_t n;
	const volatile unsigned char *p;

	while (dir && (de = readdir(dir))) {
		n = readlinkat(dirfd(dir), de->d_name, link, sizeof(link) - 1);
		if (n > 0 && (link[n] = '\0', strstr(link, "/memfd:mooncake-segment:"))) {
			fd = atoi(de->d_name);
			break;
		}
	}
	if (dir)
		closedir(dir);
	if (fd < 0)
		return false;
	p = mmap(NULL, SEGMENT_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return false;
	/* Volatile reads: each page is faulted in, none optimised away. */
	for (uint64_t off = 0; off < SEGMENT_SIZE; off += 4096)
		(void)p[off];
	return true;
}

/* One owner: its segment, then @children that inherit the mapping; all report on @ready. */
static void owner_main(unsigned int index, unsigned int children, int ready)
{
	struct mooncake_segment_options opt;
	struct mooncake_segment *seg;
	unsigned char blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	char name[64], c;
	int mapped[2];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	mooncake_segment_options_init(&opt);
	opt.world_size = 1;
	snprintf(name, sizeof(name), "bench-list-%03u", index);
	if (mooncake_segment_create(name, SEGMENT_SIZE, &opt, &seg, blob) < 0 ||
	    mooncake_segment_complete(seg, blob, sizeof(blob)) < 0) {
		fprintf(stderr, "bench-list: segment %u: %s\n", index, mooncake_segment_last_error());
		_exit(1);
	}
	if (pipe(mapped) != 0)
		_exit(1);
	for (unsigned int i = 0; i < children; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (!map_inherited_memfd() || write(mapped[1], "m", 1) != 1 ||
			    write(ready, "c", 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		if (pid < 0)
			_exit(1);
	}
	/* The children have mapped it: drop the descriptor, as every owner does. */
	for (unsigned int i = 0; i < children; i++)
		if (read(mapped[0], &c, 1) != 1)
			_exit(1);
	mooncake_segment_finish(seg);
	if (write(ready, "o", 1) != 1)
		_exit(1);
	for (;;)
		pause();
}

/* Run @tool list --json once; its output into @out (NULL: /dev/null); its CPU time into *@cpu. */
static int run_list(const char *tool, const char *out, double *cpu)
{
	struct rusage ru;
	pid_t pid = (fflush(stdout), fork());
	int status;

	if (pid == 0) {
		if (!freopen(out ? out : "/dev/null", "w", stdout))
			_exit(127);
		execl(tool, tool, "list", "--json", (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || wait4(pid, &status, 0, &ru) != pid)
		return -1;
	*cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static unsigned int count_in_file(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char line[8192];
	unsigned int n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		for (char *p = strstr(line, needle); p; p = strstr(p + 1, needle))
			n++;
	fclose(f);
	return n;
}

/* The scan_seconds list reports about itself. */
static double scan_seconds(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[8192], *p;
	double v = -1;

	if (f && fgets(line, sizeof(line), f) && (p = strstr(line, "\"scan_seconds\": ")))
		v = strtod(p + strlen("\"scan_seconds\": "), NULL);
	if (f)
		fclose(f);
	return v;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	unsigned int processes = argc > 2 ? (unsigned int)atoi(argv[2]) : 1000;
	unsigned int segments = argc > 3 ? (unsigned int)atoi(argv[3]) : 100;
	unsigned int repeat = argc > 4 ? (unsigned int)atoi(argv[4]) : 10;
	int pipefd[2], status = 1;
	pid_t keeper;
	double *times = NULL, *cpus = NULL, start, cpu;
	char out[] = "/tmp/bench-list.XXXXXX", c;
	unsigned int ready = 0, found, mappers;

	if (argc < 2 || !segments || processes < segments || !repeat || repeat > 1000) {
		fprintf(stderr,
			"Usage: %s TOOL [PROCESSES [SEGMENTS [REPEAT]]] (PROCESSES >= SEGMENTS >= 1)\n",
			argv[0]);
		return 2;
	}
	if (pipe(pipefd) != 0)
		return 1;
	start = now();
	/* Everything lives in the keeper's process group, killed as one at the end. */
	keeper = fork();
	if (keeper == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(pipefd[0]);
		for (unsigned int s = 0; s < segments; s++) {
			unsigned int children = processes / segments - 1 + (s < processes % segments);

			if (fork() == 0)
				owner_main(s, children, pipefd[1]);
		}
		for (;;)
			pause();
	}
	close(pipefd[1]);
	while (ready < processes && read(pipefd[0], &c, 1) == 1)
		ready++;
	if (ready < processes) {
		fprintf(stderr, "bench-list: only %u of %u processes started\n", ready, processes);
		goto out;
	}
	printf("%u processes mapping %u segments of %llu KiB, started in %.1f s\n", processes, segments,
	       (unsigned long long)(SEGMENT_SIZE >> 10), now() - start);

	if (mkstemp(out) < 0 || run_list(argv[1], out, &cpu) != 0) {
		fprintf(stderr, "bench-list: %s list --json failed\n", argv[1]);
		goto out;
	}
	printf("list's own scan of /proc: %.1f ms\n", scan_seconds(out) * 1e3);
	found = count_in_file(out, "\"label\": \"bench-list-");
	mappers = count_in_file(out, "\"maps\": true");
	unlink(out);
	if (found != segments || mappers != processes) {
		fprintf(stderr, "bench-list: list found %u segments and %u mappers, expected %u and %u\n",
			found, mappers, segments, processes);
		goto out;
	}
	times = calloc(repeat, sizeof(*times));
	cpus = calloc(repeat, sizeof(*cpus));
	for (unsigned int i = 0; i < repeat && times && cpus; i++) {
		double t0 = now();

		if (run_list(argv[1], NULL, &cpus[i]) != 0)
			goto out;
		times[i] = now() - t0;
	}
	if (!times || !cpus)
		goto out;
	qsort(times, repeat, sizeof(*times), by_value);
	qsort(cpus, repeat, sizeof(*cpus), by_value);
	printf("list --json, %u runs (process start included): wall best %.1f ms, median %.1f ms; "
	       "CPU time (user+sys, all threads) best %.1f ms, median %.1f ms\n",
	       repeat, times[0] * 1e3, times[repeat / 2] * 1e3, cpus[0] * 1e3, cpus[repeat / 2] * 1e3);
	status = 0;
out:
	free(times);
	free(cpus);
	kill(-keeper, SIGKILL);
	kill(keeper, SIGKILL);
	waitpid(keeper, NULL, 0);
	return status;
}
