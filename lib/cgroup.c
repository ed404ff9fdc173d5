/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the memory cgroup of a process: the room left under the tightest
 * limit of the cgroup and its ancestors, cgroup v2 (memory.max,
 * memory.current) or v1 (memory.limit_in_bytes, memory.usage_in_bytes), plus
 * the clean page cache it could reclaim (inactive_file).  Shared by the
 * library (limits.c) and the CLI's doctor, which compiles this file too; the
 * roots are parameters so that tests read fixture trees.
 */
#include "config.h"

#include "cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "procfs.h"

static bool read_u64(const char *path, uint64_t *value)
{
	char line[64], *end;

	if (!mc_read_line(path, line, sizeof(line)))
		return false;
	if (!strcmp(line, "max")) {
		*value = UINT64_MAX;
		return true;
	}
	errno = 0;
	*value = strtoull(line, &end, 10);
	return !errno && end != line;
}

static uint64_t stat_field(const char *path, const char *name)
{
	FILE *f = fopen(path, "re");
	char key[64];
	unsigned long long value;
	uint64_t found = 0;

	while (f && fscanf(f, "%63s %llu", key, &value) == 2)
		if (!strcmp(key, name)) {
			found = value;
			break;
		}
	if (f)
		fclose(f);
	return found;
}

/* One cgroup directory: room under its limit, or UINT64_MAX when unlimited. */
static uint64_t room_in(const char *dir, bool v2, uint64_t *limit_out, uint64_t *usage_out)
{
	char path[1536];
	uint64_t limit, usage = 0, reclaimable;

	snprintf(path, sizeof(path), "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
	if (!read_u64(path, &limit))
		return UINT64_MAX;
	/* v1 reports "no limit" as a huge page-aligned number. */
	if (limit >= (UINT64_C(1) << 62))
		return UINT64_MAX;
	snprintf(path, sizeof(path), "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
	read_u64(path, &usage);
	snprintf(path, sizeof(path), "%s/memory.stat", dir);
	reclaimable = stat_field(path, v2 ? "inactive_file" : "total_inactive_file");
	*limit_out = limit;
	*usage_out = usage;
	usage = usage > reclaimable ? usage - reclaimable : 0;
	return limit > usage ? limit - usage : 0;
}

bool mc_cgroup_memory_room(const char *proc_cgroup, const char *cgroup_root, struct mc_memory_room *room)
{
	FILE *f = fopen(proc_cgroup, "re");
	char line[1024], dir[1280], where[1024] = "";
	bool v2 = false, found = false;

	memset(room, 0, sizeof(*room));
	room->room = UINT64_MAX;
	/* A v1 memory controller wins over the v2 line of a hybrid hierarchy. */
	while (f && fgets(line, sizeof(line), f)) {
		char *path = strrchr(line, ':');

		line[strcspn(line, "\n")] = '\0';
		if (!path)
			continue;
		if (strstr(line, ":memory:") || strstr(line, ",memory:") || strstr(line, ":memory,")) {
			v2 = false;
			found = true;
			snprintf(where, sizeof(where), "%s", path + 1);
			break;
		}
		if (!strncmp(line, "0::", 3)) {
			v2 = found = true;
			snprintf(where, sizeof(where), "%s", path + 1);
		}
	}
	if (f)
		fclose(f);
	if (!found)
		return false;

	/* The cgroup and each ancestor: the tightest limit wins. */
	for (;;) {
		uint64_t limit = 0, usage = 0, r;
		char *slash;

		snprintf(dir, sizeof(dir), "%.200s%s%.1000s", cgroup_root, v2 ? "" : "/memory", where);
		r = room_in(dir, v2, &limit, &usage);
		if (r < room->room) {
			room->room = r;
			room->limit = limit;
			room->usage = usage;
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
