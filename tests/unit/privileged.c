/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include "privileged.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/procfs.h"

#define MAX_SETTINGS 8

static struct {
	char path[256];
	char old[256];
} saved[MAX_SETTINGS];
static int nsaved;
static pid_t owner_pid;

void skip_all(const char *reason)
{
	printf("1..0 # SKIP %s\n", reason);
	exit(0);
}

void require_privileged_stage(const char *change)
{
	const char *stage = getenv("MOONCAKE_SEGMENT_PRIVILEGED_TESTS");
	char reason[256];

	if (!stage || strcmp(stage, "1") != 0) {
		snprintf(reason, sizeof(reason),
			 "changes the host (%s): runs only in `make check-privileged`, as root", change);
		skip_all(reason);
	}
	if (geteuid() != 0) {
		snprintf(reason, sizeof(reason), "needs root to change %s", change);
		skip_all(reason);
	}
}

void restore_all(void)
{
	/* Only the process that changed the settings puts them back, not a forked test. */
	if (getpid() != owner_pid)
		return;
	for (int i = nsaved - 1; i >= 0; i--) {
		FILE *f = fopen(saved[i].path, "w");

		if (f) {
			fputs(saved[i].old, f);
			fclose(f);
		}
	}
	nsaved = 0;
}

bool write_setting(const char *path, const char *value)
{
	char line[256], old[256];
	FILE *f;

	if (nsaved == MAX_SETTINGS || !mc_read_line(path, line, sizeof(line)))
		return false;
	/* A "[mode]" file saves as the selected mode. */
	if (!strchr(line, '[') || !mc_selected_mode(line, old, sizeof(old)))
		snprintf(old, sizeof(old), "%s", line);
	f = fopen(path, "w");
	if (!f)
		return false;
	if (fputs(value, f) < 0 || fclose(f) != 0)
		return false;
	if (!nsaved) {
		owner_pid = getpid();
		atexit(restore_all);
	}
	snprintf(saved[nsaved].path, sizeof(saved[nsaved].path), "%s", path);
	snprintf(saved[nsaved].old, sizeof(saved[nsaved].old), "%s", old);
	nsaved++;
	return true;
}

int run_suite(Suite *s)
{
	SRunner *runner = srunner_create(s);
	int failed;

	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	restore_all();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
