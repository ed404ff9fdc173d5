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

/* Bytes of the well-formed UTF-8 sequence at @s (1 to 4; RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF), 0 when it is not one. */
static size_t utf8_sequence(const unsigned char *s)
{
	size_t n = s[0] < 0x80			  ? 1
		   : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
		   : s[0] >= 0xe0 && s[0] <= 0xef ? 3
		   : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
						  : 0;
	unsigned char low = 0x80, high = 0xbf;

	if (s[0] == 0xe0)
		low = 0xa0;
	else if (s[0] == 0xed)
		high = 0x9f;
	else if (s[0] == 0xf0)
		low = 0x90;
	else if (s[0] == 0xf4)
		high = 0x8f;
	for (size_t i = 1; i < n; i++)
		if (s[i] < (i == 1 ? low : 0x80) || s[i] > (i == 1 ? high : 0xbf))
			return 0;
	return n;
}

/* A control character: C0 (below 0x20), DEL, or C1 (U+0080..U+009F, UTF-8 C2 80..9F). */
static bool control_character(const unsigned char *s, size_t n)
{
	return (n == 1 && (*s < 0x20 || *s == 0x7f)) || (n == 2 && s[0] == 0xc2 && s[1] <= 0x9f);
}

void write_quoted_utf8(FILE *out, const char *text, bool json)
{
	const unsigned char *s = (const unsigned char *)text;

	fputc('"', out);
	while (*s) {
		size_t n = utf8_sequence(s);

		if (!n) {
			fputs("\xef\xbf\xbd", out); /* U+FFFD for each byte that is not UTF-8 */
			s++;
			continue;
		}
		if (*s == '"' || *s == '\\')
			fprintf(out, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", out);
		else if (json && *s < 0x20)
			fprintf(out, "\\u%04x", *s);
		else if (!json && control_character(s, n))
			fputs("\xef\xbf\xbd", out); /* the text format escapes only \\, " and \n */
		else
			fwrite(s, 1, n, out);
		s += n;
	}
	fputc('"', out);
}

const char *printable(const char *text, char *buf, size_t size)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t used = 0;

	while (*s && used + 5 < size) {
		size_t n = utf8_sequence(s);

		if (!n || control_character(s, n)) {
			/* Shown, never obeyed: \x1b, not an escape sequence. */
			used += (size_t)snprintf(buf + used, size - used, "\\x%02x", *s);
			s++;
			continue;
		}
		if (used + n >= size)
			break;
		memcpy(buf + used, s, n);
		used += n;
		s += n;
	}
	buf[used] = '\0';
	return buf;
}

int finish_output(FILE *out, const char *what)
{
	/* A full disk or a closed pipe shows only at the flush: never exit 0 then. */
	if (fflush(out) == 0 && !ferror(out))
		return 0;
	fprintf(stderr, "%s: writing %s failed: %s\n", PROGRAM, what, strerror(errno ? errno : EIO));
	return 1;
}

void json_string(FILE *out, const char *s)
{
	write_quoted_utf8(out, s, true);
}
