/* SPDX-License-Identifier: Apache-2.0 */
/* Parsing, formatting and /proc helpers shared by the subcommands. */
#include "config.h"

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *value)
{
	char *end;
	unsigned long long v;

	if (!text || !isdigit((unsigned char)*text))
		return false;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || *end || v < min || v > max)
		return false;
	*value = v;
	return true;
}

bool parse_size(const char *text, uint64_t *bytes)
{
	static const char units[] = "KMGT";
	char *end;
	unsigned long long v;
	const char *unit;
	int shift = 0;

	if (!text || !isdigit((unsigned char)*text))
		return false;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno)
		return false;
	if (*end) {
		unit = strchr(units, toupper((unsigned char)*end));
		if (!unit)
			return false;
		shift = 10 * (int)(unit - units + 1);
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return false;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return false;
	*bytes = (uint64_t)v << shift;
	return true;
}

const char *format_size(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	size_t u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

bool mapping_usage(const void *base, uint64_t len, struct mapping_usage *usage)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	unsigned long long start = (unsigned long long)(uintptr_t)base, end = start + len;
	char line[256];
	unsigned long long lo, hi, kb;
	bool inside = false, found = false;

	memset(usage, 0, sizeof(*usage));
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			/* A range split by madvise (THP then base pages) is several VMAs: count each. */
			inside = lo >= start && hi <= end;
			found = found || (inside && lo == start);
		} else if (inside && sscanf(line, "Rss: %llu kB", &kb) == 1) {
			usage->rss += kb << 10;
		} else if (inside && sscanf(line, "Pss: %llu kB", &kb) == 1) {
			usage->pss += kb << 10;
		} else if (inside && (sscanf(line, "Shared_Hugetlb: %llu kB", &kb) == 1 ||
				      sscanf(line, "Private_Hugetlb: %llu kB", &kb) == 1)) {
			usage->hugetlb += kb << 10;
		}
	}
	fclose(f);
	return found;
}

uint64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", out);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}
