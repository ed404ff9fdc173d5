/* SPDX-License-Identifier: Apache-2.0 */
/* Parsing and formatting shared by the subcommands. */
#include "config.h"

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
