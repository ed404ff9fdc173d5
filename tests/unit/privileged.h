/* SPDX-License-Identifier: Apache-2.0 */
/*
 * For the check programs that change the host (HugeTLB pool, THP mode,
 * memory cgroups) or need root: they restore what they change, and when they
 * cannot run they say why as a TAP skip ("1..0 # SKIP reason").  Those that
 * change the host run only in the explicitly privileged stage
 * (`make check-privileged`, which sets MOONCAKE_SEGMENT_PRIVILEGED_TESTS=1),
 * never from a plain make check, so building a package never reconfigures
 * the build machine.
 */
#ifndef MOONCAKE_SEGMENT_PRIVILEGED_H
#define MOONCAKE_SEGMENT_PRIVILEGED_H

#include <check.h>
#include <stdbool.h>

/* Print the TAP skip line and exit 0. */
void skip_all(const char *reason) __attribute__((noreturn));
/* Skip unless this is the privileged stage and we are root; @change says what
 * the program changes on the host ("the HugeTLB pool"). */
void require_privileged_stage(const char *change);
/* Write @value to a sysfs/procfs file, remembering its old content for restore_all(). */
bool write_setting(const char *path, const char *value);
/* Put every setting back (also registered with atexit by write_setting). */
void restore_all(void);
/* Run @s with CK_ENV verbosity; returns the exit status for main. */
int run_suite(Suite *s);

#endif
