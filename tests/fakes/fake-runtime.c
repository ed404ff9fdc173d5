/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs and the call log of the fake accelerator runtimes (fake-runtime.h). */
#include "fake-runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <fcntl.h>
#include <unistd.h>

unsigned long fake_mapped_pages(const void *addr, unsigned long len)
{
	unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE), mapped = 0;
	uint64_t entries[512];
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	/* One 64-bit entry per page; bit 63: present. */
	for (unsigned long first = (uintptr_t)addr / page, n = (len + page - 1) / page, done = 0; done < n;) {
		unsigned long want = n - done < 512 ? n - done : 512;
		ssize_t got = pread(fd, entries, want * 8, (off_t)((first + done) * 8));

		if (got <= 0)
			break;
		for (unsigned long i = 0; i < (unsigned long)got / 8; i++)
			mapped += entries[i] >> 63;
		done += (unsigned long)got / 8;
	}
	close(fd);
	return mapped;
}

int fake_env_int(const char *name, int fallback)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : fallback;
}

void fake_note(const char *log_variable, const char *fmt, ...)
{
	const char *path = getenv(log_variable);
	va_list ap;
	FILE *f;

	if (!path || !(f = fopen(path, "a")))
		return;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}
