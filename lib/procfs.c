/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small readers of /proc and /sys files, shared by the library and the CLI
 * (which compiles this file too: it links only the library's public API).
 */
#include "config.h"

#include "procfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

uint64_t mc_meminfo_field(const char *name)
{
	FILE *f = fopen("/proc/meminfo", "re");
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
