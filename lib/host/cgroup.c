/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the memory cgroup of a process: the room left under the tightest
 * limit of the cgroup and its ancestors, cgroup v2 (memory.max,
 * memory.current) or v1 (memory.limit_in_bytes, memory.usage_in_bytes), less
 * the clean page cache the kernel reclaims before it would OOM-kill anyone:
 * active and inactive file pages that are neither dirty nor under writeback
 * (model weights read from disk sit there by the gigabyte).  shmem, and so
 * every segment, is on the anon lists and never counts as reclaimable.
 * Shared by the library (limits.c) and the CLI's doctor, which compiles this
 * file too; the roots are parameters so that tests read fixture trees.
 */
#include "config.h"

#include "cgroup.h"
#include "procfs.h"

#include <stdio.h>
#include <string.h>

/* memory.stat: v1 gives hierarchical totals under "total_" names. */
static void read_page_cache(const char *path, bool v2, struct mc_page_cache *cache)
{
	static const char *const v1_names[] = { "total_active_file", "total_inactive_file", "total_dirty",
						"total_writeback" };
	static const char *const v2_names[] = { "active_file", "inactive_file", "file_dirty",
						"file_writeback" };
	const char *const *names = v2 ? v2_names : v1_names;
	uint64_t *fields[] = { &cache->active_file, &cache->inactive_file, &cache->dirty, &cache->writeback };
	FILE *f = fopen(path, "re");
	char key[64];
	unsigned long long value;

	memset(cache, 0, sizeof(*cache));
	while (f && fscanf(f, "%63s %llu", key, &value) == 2)
		for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
			if (!strcmp(key, names[i]))
				*fields[i] = value;
	if (f)
		fclose(f);
	cache->clean = cache->active_file + cache->inactive_file;
	cache->clean = cache->clean > cache->dirty + cache->writeback
			       ? cache->clean - cache->dirty - cache->writeback
			       : 0;
}

/* One cgroup directory: room under its limit, or UINT64_MAX when unlimited. */
static uint64_t room_in(const char *dir, bool v2, uint64_t *limit_out, uint64_t *usage_out,
			struct mc_page_cache *cache)
{
	char path[1536];
	uint64_t limit, usage = 0, charged;

	snprintf(path, sizeof(path), "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
	if (!mc_read_number(path, &limit))
		return UINT64_MAX;
	/* v1 reports "no limit" as a huge page-aligned number. */
	if (limit >= (UINT64_C(1) << 62))
		return UINT64_MAX;
	snprintf(path, sizeof(path), "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
	mc_read_number(path, &usage);
	snprintf(path, sizeof(path), "%s/memory.stat", dir);
	read_page_cache(path, v2, cache);
	if (cache->clean > usage)
		cache->clean = usage;
	*limit_out = limit;
	*usage_out = usage;
	charged = usage - cache->clean;
	return limit > charged ? limit - charged : 0;
}

bool mc_cgroup_memory_path(const char *proc_cgroup, char *where, size_t size, bool *v2)
{
	FILE *f = fopen(proc_cgroup, "re");
	char line[1024];
	bool found = false;

	*v2 = false;
	/* A v1 memory controller wins over the v2 line of a hybrid hierarchy. */
	while (f && fgets(line, sizeof(line), f)) {
		char *path = strrchr(line, ':');

		line[strcspn(line, "\n")] = '\0';
		if (!path)
			continue;
		if (strstr(line, ":memory:") || strstr(line, ",memory:") || strstr(line, ":memory,")) {
			*v2 = false;
			found = true;
			snprintf(where, size, "%s", path + 1);
			break;
		}
		if (!strncmp(line, "0::", 3)) {
			*v2 = found = true;
			snprintf(where, size, "%s", path + 1);
		}
	}
	if (f)
		fclose(f);
	return found;
}

bool mc_cgroup_memory_room(const char *proc_cgroup, const char *cgroup_root, struct mc_memory_room *room)
{
	char dir[1280], where[1024] = "";
	bool v2 = false;

	memset(room, 0, sizeof(*room));
	room->room = UINT64_MAX;
	if (!mc_cgroup_memory_path(proc_cgroup, where, sizeof(where), &v2))
		return false;

	/* The cgroup and each ancestor: the tightest limit wins. */
	for (;;) {
		uint64_t limit = 0, usage = 0, r;
		struct mc_page_cache cache;
		char *slash;

		snprintf(dir, sizeof(dir), "%.200s%s%.1000s", cgroup_root, v2 ? "" : "/memory", where);
		r = room_in(dir, v2, &limit, &usage, &cache);
		if (r != UINT64_MAX) /* walking upwards: the last one is the outermost */
			snprintf(room->outermost, sizeof(room->outermost), "%.*s",
				 (int)sizeof(room->outermost) - 1, dir);
		if (r < room->room) {
			room->room = r;
			room->limit = limit;
			room->usage = usage;
			room->cache = cache;
			snprintf(room->where, sizeof(room->where), "%.*s", (int)sizeof(room->where) - 1, dir);
		}
		slash = strrchr(where, '/');
		if (!slash || !where[0] || !strcmp(where, "/"))
			break;
		if (slash == where)
			where[1] = '\0';
		else
			*slash = '\0';
	}
	return room->room != UINT64_MAX;
}
