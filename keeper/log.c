/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper's one log (keeper.h): a line on stderr per event, with the
 * journal's priority prefix when stderr is the journal (JOURNAL_STREAM names
 * stderr's device and inode, systemd.exec(5)), else the program's name.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "keeper.h"

static bool stderr_is_the_journal(void)
{
	const char *stream = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	return stream && sscanf(stream, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
	       st.st_dev == dev && st.st_ino == ino;
}

void keeper_vsay(int priority, const char *fmt, va_list ap)
{
	char line[1024];

	vsnprintf(line, sizeof(line), fmt, ap);
	if (stderr_is_the_journal())
		fprintf(stderr, "<%d>%s\n", priority, line);
	else
		fprintf(stderr, "mooncake-segmentd: %s\n", line);
}

void keeper_say(int priority, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	keeper_vsay(priority, fmt, ap);
	va_end(ap);
}

void keeper_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	keeper_vsay(KEEPER_LOG_INFO, fmt, ap);
	va_end(ap);
}

void keeper_debug(const char *fmt, ...)
{
	static int enabled = -1;
	va_list ap;

	/* Off by default: one line per /proc scan would flood the journal. */
	if (enabled < 0) {
		const char *value = getenv("MOONCAKE_SEGMENTD_DEBUG");

		enabled = value && value[0] == '1';
	}
	if (!enabled)
		return;
	va_start(ap, fmt);
	keeper_vsay(KEEPER_LOG_DEBUG, fmt, ap);
	va_end(ap);
}

void keeper_say_limited(struct keeper_log_limit *limit, int priority, const char *fmt, ...)
{
	const uint64_t window_ns = (uint64_t)limit->window_s * 1000000000ULL;
	struct timespec ts;
	uint64_t now;
	va_list ap;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	if (!limit->window_start_ns || now - limit->window_start_ns >= window_ns) {
		limit->window_start_ns = now;
		limit->said = 0;
	}
	if (limit->said >= limit->burst) {
		limit->left_out++;
		return;
	}
	limit->said++;
	if (limit->left_out) {
		keeper_say(priority, "(%u more such lines left out before this one)", limit->left_out);
		limit->left_out = 0;
	}
	va_start(ap, fmt);
	keeper_vsay(priority, fmt, ap);
	va_end(ap);
}
