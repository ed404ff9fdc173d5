/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs and the call log of the fake accelerator runtimes (fake-runtime.h). */
#include "fake-runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
