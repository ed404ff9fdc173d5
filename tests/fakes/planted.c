/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A library an ordinary user plants where MOONCAKE_SEGMENT_CUDA_LIBRARY
 * points: its constructor leaves a file (named by PLANTED_MARKER) with the
 * effective uid it ran with.  check-setuid shows that a set-user-ID program
 * never loads it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void planted(void)
{
	const char *marker = getenv("PLANTED_MARKER");
	FILE *f = marker ? fopen(marker, "w") : NULL;

	if (f) {
		fprintf(f, "ran with euid %d\n", (int)geteuid());
		fclose(f);
	}
}
