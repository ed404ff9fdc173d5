/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A real memory cgroup limit: the test process moves into a fresh child of
 * its memory cgroup limited to 64 MiB.  A 256 MiB segment is refused by
 * create with the numbers (it would otherwise end in the OOM killer) and a
 * 16 MiB one fits.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "internal.h"
#include "privileged.h"

#define LIMIT (UINT64_C(64) << 20)

static char cgroup_dir[768];
static bool v2;

static bool write_file(const char *dir, const char *name, const char *value)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		return false;
	fputs(value, f);
	return fclose(f) == 0;
}

/* The memory cgroup directory of this process, v1 preferred as the library does. */
static bool own_memory_cgroup(char *dir, size_t size)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[512];
	bool found = false;

	while (f && fgets(line, sizeof(line), f)) {
		char *path = strrchr(line, ':');

		line[strcspn(line, "\n")] = '\0';
		if (path && strstr(line, ":memory:")) {
			snprintf(dir, size, "/sys/fs/cgroup/memory%s", path + 1);
			v2 = false;
			found = true;
			break;
		}
		if (path && !strncmp(line, "0::", 3)) {
			snprintf(dir, size, "/sys/fs/cgroup%s", path + 1);
			v2 = found = true;
		}
	}
	if (f)
		fclose(f);
	return found;
}

START_TEST(test_segment_larger_than_the_cgroup_room_is_refused_with_numbers)
{
	struct mooncake_segment_options opt = test_options(1, 0, 0);
	struct mooncake_segment *seg = NULL;
	struct mooncake_segment_info info;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	char pid[32];

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	ck_assert(write_file(cgroup_dir, "cgroup.procs", pid));
	ck_assert_error(mooncake_segment_create("capped", UINT64_C(256) << 20, &opt, &seg, blob), ENOMEM,
			"memory cgroup has room for");
	ck_assert_msg(strstr(mooncake_segment_last_error(), "limit 67108864"), "%s",
		      mooncake_segment_last_error());
	ck_assert_ptr_null(seg);
	ck_assert_int_eq(mooncake_segment_create("capped", UINT64_C(16) << 20, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_uint_eq(info.resident_bytes, info.alloc_size);
	mooncake_segment_destroy(seg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cgroup");
	TCase *tc = tcase_create("limit");
	char parent[512], limit[32];
	int ret;

	require_privileged_stage("a memory cgroup, created and removed under /sys/fs/cgroup");
	if (!own_memory_cgroup(parent, sizeof(parent)))
		skip_all("no memory cgroup controller for this process");
	snprintf(cgroup_dir, sizeof(cgroup_dir), "%s/mooncake-segment-test-%d", parent, (int)getpid());
	if (mkdir(cgroup_dir, 0755) != 0)
		skip_all("cannot create a child memory cgroup (read-only cgroupfs or no delegation)");
	snprintf(limit, sizeof(limit), "%llu", (unsigned long long)LIMIT);
	if (!write_file(cgroup_dir, v2 ? "memory.max" : "memory.limit_in_bytes", limit)) {
		rmdir(cgroup_dir);
		skip_all("cannot set a memory limit on a child cgroup");
	}
	tcase_add_test(tc, test_segment_larger_than_the_cgroup_room_is_refused_with_numbers);
	suite_add_tcase(s, tc);
	ret = run_suite(s); /* the forked test exited, so the cgroup is empty again */
	rmdir(cgroup_dir);
	return ret;
}
