/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small readers of /proc and /sys files and the host root that host facts
 * are read under (see procfs.h).  The CLI reads host lines and meminfo
 * through the library (private.h), so that it sees what create() sees.
 */
#include "config.h"

#include "base/environment.h"
#include "mooncake/segment.h"
#include "private.h"
#include "procfs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char host_root[512];
static pthread_once_t host_root_once = PTHREAD_ONCE_INIT;

static void host_root_from_environment(void)
{
	const char *root = mc_env("MOONCAKE_SEGMENT_HOST_ROOT");

	if (root && strcmp(root, "/") != 0)
		snprintf(host_root, sizeof(host_root), "%s", root);
}

const char *mc_host_root(void)
{
	pthread_once(&host_root_once, host_root_from_environment);
	return host_root;
}

void mc_host_root_set(const char *root)
{
	pthread_once(&host_root_once, host_root_from_environment);
	snprintf(host_root, sizeof(host_root), "%s", root && strcmp(root, "/") != 0 ? root : "");
}

const char *mc_host_path(char *buf, size_t size, const char *path)
{
	snprintf(buf, size, "%s%s", mc_host_root(), path);
	return buf;
}

MC_PRIVATE bool mc_read_host_line(const char *path, char *buf, size_t size)
{
	char full[1024];

	return mc_read_line(mc_host_path(full, sizeof(full), path), buf, size);
}

bool mc_read_number(const char *path, uint64_t *value)
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

bool mc_read_host_number(const char *path, uint64_t *value)
{
	char full[1024];

	return mc_read_number(mc_host_path(full, sizeof(full), path), value);
}

bool mc_read_line(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");
	bool ok;

	if (!f)
		return false;
	ok = fgets(buf, (int)size, f) != NULL;
	fclose(f);
	if (ok)
		buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

char mc_process_state(pid_t pid)
{
	char path[64], line[512], *close;

	if (pid <= 0)
		return '\0';
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!mc_read_line(path, line, sizeof(line)))
		return '\0';
	close = strrchr(line, ')'); /* the command name may hold anything, ')' included */
	return close && close[1] == ' ' ? close[2] : '\0';
}

bool mc_selected_mode(const char *line, char *mode, size_t size)
{
	const char *open = strchr(line, '[');
	const char *close = open ? strchr(open, ']') : NULL;
	size_t len;

	if (!close)
		return false;
	len = (size_t)(close - open - 1);
	if (len + 1 > size)
		return false;
	memcpy(mode, open + 1, len);
	mode[len] = '\0';
	return true;
}

MC_PRIVATE uint64_t mc_meminfo_field(const char *name)
{
	char path[1024];
	FILE *f = fopen(mc_host_path(path, sizeof(path), "/proc/meminfo"), "re");
	char line[128];
	size_t len = strlen(name);
	unsigned long long v = 0;
	bool kb = false;

	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, name, len) != 0 || line[len] != ':')
			continue;
		v = strtoull(line + len + 1, NULL, 10);
		kb = strstr(line, " kB") != NULL;
		break;
	}
	if (f)
		fclose(f);
	return kb ? (uint64_t)v << 10 : (uint64_t)v;
}
