/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include "helpers.h"
#include "base/linux-compat.h"

#include <dirent.h>
#include <ftw.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Entries of directory @path, "." and ".." aside; -1 when unreadable. */
static int count_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int count_fds(void)
{
	int n = count_entries("/proc/self/fd");

	return n < 0 ? n : n - 1; /* the directory's own descriptor */
}

int count_fds_to(int pid, const char *prefix)
{
	char dir[64], path[320], target[256];
	struct dirent *e;
	int n = 0;
	ssize_t len;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	d = opendir(dir);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += strncmp(target, prefix, strlen(prefix)) == 0;
	}
	closedir(d);
	return n;
}

int count_tasks(void)
{
	return count_entries("/proc/self/task");
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

/* ASan and valgrind map memory of their own at any moment; under them only
 * the segments' own mappings (the memfd) can be counted exactly. */
int under_memory_checker(void)
{
	static int cached = -1;
	FILE *f;
	char line[512];

	if (cached >= 0)
		return cached;
	cached = UNDER_SANITIZER;
	f = fopen("/proc/self/maps", "re");
	while (!cached && f && fgets(line, sizeof(line), f))
		cached = strstr(line, "vgpreload") != NULL;
	if (f)
		fclose(f);
	return cached;
}

int count_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	int n = 0;

	if (!f)
		return -1;
	/* Only the library's own: segment pages and windows (lib/host/window.c) carry
	 * its name; malloc, stdio and checkers map memory of their own at any moment. */
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "mooncake-segment"))
			n++;
	fclose(f);
	return n;
}

struct mooncake_segment_options test_options(uint32_t world, uint32_t rank, uint32_t owner)
{
	struct mooncake_segment_options opt;

	mooncake_segment_options_init(&opt);
	opt.world_size = world;
	opt.rank_id = rank;
	opt.owner_rank = owner;
	return opt;
}

static uint8_t pattern_byte(uint64_t i, uint32_t seed)
{
	return (uint8_t)((i * 2654435761u) >> 7 ^ seed);
}

void fill_pattern(void *p, uint64_t n, uint32_t seed)
{
	uint8_t *b = p;

	/* One byte per 512 keeps it fast while touching every page. */
	for (uint64_t i = 0; i < n; i += 512)
		b[i] = pattern_byte(i, seed);
	b[n - 1] = pattern_byte(n - 1, seed);
}

int check_pattern(const void *p, uint64_t n, uint32_t seed)
{
	const uint8_t *b = p;

	for (uint64_t i = 0; i < n; i += 512)
		if (b[i] != pattern_byte(i, seed))
			return 0;
	return b[n - 1] == pattern_byte(n - 1, seed);
}

static char process_state(int pid)
{
	char path[64], line[512], *close;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	close = strrchr(line, ')');
	return close && close[1] == ' ' ? close[2] : 0;
}

int wait_until_dead(int pid, int timeout_ms)
{
	for (int waited = 0; waited < timeout_ms; waited += 5) {
		char state = process_state(pid);

		if (state == 0 || state == 'Z' || state == 'X')
			return 1;
		usleep(5000);
	}
	return 0;
}

int wait_until_stopped(int pid, int timeout_ms)
{
	for (int waited = 0; waited < timeout_ms; waited += 5) {
		char state = process_state(pid);

		if (state == 0 || state == 'T')
			return state == 'T';
		usleep(5000);
	}
	return 0;
}

int pidfd_getfd_available(void)
{
	int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0), fd = -1;

	if (pidfd >= 0) {
		fd = (int)syscall(SYS_pidfd_getfd, pidfd, 0, 0);
		close(pidfd);
	}
	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

const char *read_text(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(buf, 1, size - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
	return buf;
}

uint64_t memcg_charge_slack(void)
{
	cpu_set_t cpus;

	if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0)
		abort();
	return 64 * (uint64_t)sysconf(_SC_PAGESIZE) * (uint64_t)CPU_COUNT(&cpus);
}

int count_lines(const char *text, const char *prefix)
{
	size_t len = strlen(prefix);
	int n = 0;

	for (const char *line = text; *line;) {
		const char *end = strchr(line, '\n');

		n += strncmp(line, prefix, len) == 0;
		line = end ? end + 1 : line + strlen(line);
	}
	return n;
}

void fixture_tree_create(char *root, size_t size)
{
	snprintf(root, size, "/tmp/mooncake-segment-fixture-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
}

void fixture_put(const char *root, const char *rel, const char *text)
{
	char path[512], *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (slash = strchr(path + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(path, 0755);
		*slash = '/';
	}
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

void fixture_tree_remove(const char *root)
{
	ck_assert_int_eq(nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

struct mooncake_segment_options host_register_options(uint32_t world, uint32_t rank, int device)
{
	struct mooncake_segment_options opt = test_options(world, rank, 0);

	opt.host_register = true;
	opt.device_id = device;
	return opt;
}

void use_fake_cuda_driver(const char *devices, const char *tag, char *log_path, size_t size)
{
	const char *fake = getenv("FAKE_CUDA_LIBRARY");

	ck_assert_msg(fake && *fake, "FAKE_CUDA_LIBRARY is not set (run through make check)");
	snprintf(log_path, size, "/tmp/fake-%s-%d.log", tag, (int)getpid());
	unlink(log_path);
	setenv("MOONCAKE_SEGMENT_CUDA_LIBRARY", fake, 1);
	setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", "/nonexistent/libascendcl.so", 1);
	setenv("FAKE_CUDA_LOG", log_path, 1);
	setenv("FAKE_CUDA_DEVICES", devices, 1);
}

const char *fake_cuda_sibling(const char *file)
{
	static char path[4096];
	const char *fake = getenv("FAKE_CUDA_LIBRARY");
	const char *name = fake ? strrchr(fake, '/') : NULL;

	ck_assert_msg(name, "FAKE_CUDA_LIBRARY is not a path (run through make check)");
	snprintf(path, sizeof(path), "%.*s/%s", (int)(name - fake), fake, file);
	return path;
}

void use_fake_ascend_runtime(const char *devices, const char *current, char *log_path, size_t size)
{
	const char *fake = getenv("FAKE_ASCEND_LIBRARY");

	ck_assert_msg(fake && *fake, "FAKE_ASCEND_LIBRARY is not set (run through make check)");
	snprintf(log_path, size, "/tmp/fake-acl-%d.log", (int)getpid());
	unlink(log_path);
	setenv("MOONCAKE_SEGMENT_ASCEND_LIBRARY", fake, 1);
	setenv("MOONCAKE_SEGMENT_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
	setenv("FAKE_ACL_LOG", log_path, 1);
	setenv("FAKE_ACL_DEVICES", devices, 1);
	setenv("FAKE_ACL_CURRENT_DEVICE", current, 1);
}
