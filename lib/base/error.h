/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Errors and logging (error.c): a failure records a message for
 * mooncake_segment_last_error() and returns a negative errno; log lines go
 * to the application's callback, silent by default.
 */
#ifndef MOONCAKE_SEGMENT_ERROR_H
#define MOONCAKE_SEGMENT_ERROR_H

#include <stdbool.h>
#include <stdint.h>

#include "mooncake/segment.h"
#include "base.h"

/* Record a message for mooncake_segment_last_error(), log it at DEBUG and
 * return -err, so a failure path is `return mc_error(EINVAL, "...")`. */
int mc_error(int err, const char *fmt, ...) MC_PRINTF(2, 3);
/* Same, appending ": strerror(sys_errno)". */
int mc_error_sys(int err, int sys_errno, const char *fmt, ...) MC_PRINTF(3, 4);
void mc_clear_error(void);
/* Backends know no ranks: a message of theirs that starts "Shared segment: "
 * becomes "Shared segment rank @rank: ..." (the state machine calls this);
 * returns @err. */
int mc_error_name_rank(int err, uint32_t rank);
void mc_log(int priority, const char *fmt, ...) MC_PRINTF(2, 3);
/* Hold back this thread's log lines (delivering the last one when @defer goes
 * false again): no user callback may run while fork.c's registry is locked. */
void mc_log_defer(bool defer);
bool mc_log_enabled(int priority);

/* Map an errno from the system onto the documented set of create/complete. */
int mc_fold_errno(int sys_errno);

#endif
