/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Errors and logging (error.c): a failure records a message for
 * mooncake_segment_last_error() and returns a negative errno; log lines go
 * to the application's callback, silent by default.
 */
#ifndef MOONCAKE_SEGMENT_ERROR_H
#define MOONCAKE_SEGMENT_ERROR_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "mooncake/segment.h"
#include "base.h"

/* Why a call failed, as the layer that found it knows it: the errno, the
 * system's errno behind it, the reason without any layer's lead-in, the fix,
 * and the form of the sentence.  The sentence is composed from it in one place
 * (error.c), so a layer above that knows more (the state machine knows the
 * rank, backends.c the other backends) composes it again from the parts
 * instead of rewriting another layer's text. */
enum mc_cause_form {
	MC_FORM_SENTENCE,    /* the reason is the whole sentence */
	MC_FORM_SEGMENT,     /* "Shared segment: <reason>", or "Shared segment rank N: <reason>" */
	MC_FORM_NO_VMM,	     /* a VMM backend this build lacks: "... (<reason>); <fix>" */
	MC_FORM_NO_VMM_HERE, /* a VMM backend this host cannot use: "... on this host: <reason>; <fix>" */
	MC_FORM_NO_VMM_ANY, /* none of several VMM backends: "... that this host can use (<reason>); <fix>" */
};

struct mc_cause {
	int err;       /* the (positive) errno the call returns */
	int sys_errno; /* the system's errno behind it, or 0 */
	enum mc_cause_form form;
	const char *fix;   /* what to do, a static string, or NULL */
	char reason[1280]; /* what went wrong, with no lead-in and no fix */
};

/* Record @cause as this thread's last error, its reason followed by @fmt
 * formatted: compose the sentence for mooncake_segment_last_error(), log it
 * at DEBUG, keep errno, and return -cause->err.  The one recorder: the
 * entry points below are macros that fill in the cause. */
int mc_error_record(const struct mc_cause *cause, const char *fmt, ...) MC_PRINTF(2, 3);
/* Record a message and return -@code, so a failure path is
 * `return mc_error(EINVAL, "...")`. */
#define mc_error(code, ...) \
	mc_error_record(&(struct mc_cause){ .err = (code), .form = MC_FORM_SENTENCE }, __VA_ARGS__)
/* Same, appending ": strerror(@sys)". */
#define mc_error_sys(code, sys, ...)                                                                       \
	mc_error_record(&(struct mc_cause){ .err = (code), .sys_errno = (sys), .form = MC_FORM_SENTENCE }, \
			__VA_ARGS__)
/* A cause about the segment, said as "Shared segment: <fmt>" until the state
 * machine names the rank (mc_error_name_rank); the layers below know none. */
#define mc_segment_error(code, ...) \
	mc_error_record(&(struct mc_cause){ .err = (code), .form = MC_FORM_SEGMENT }, __VA_ARGS__)
#define mc_segment_error_sys(code, sys, ...)                                                              \
	mc_error_record(&(struct mc_cause){ .err = (code), .sys_errno = (sys), .form = MC_FORM_SEGMENT }, \
			__VA_ARGS__)
/* -ENOTSUP from a VMM backend, in one of the MC_FORM_NO_VMM* forms (@how). */
#define mc_error_no_vmm(how, cure, ...) \
	mc_error_record(&(struct mc_cause){ .err = ENOTSUP, .form = (how), .fix = (cure) }, __VA_ARGS__)
/* Add @fmt to the reason of this thread's last error (a fallback tried too,
 * a hint), keeping its form so that the top can still name the rank. */
#define mc_error_add(code, ...) mc_error_record(mc_error_continued(code), __VA_ARGS__)
/* mc_error_add()'s cause: the last one's form and fix, its reason so far
 * (ended by its errno text and hint), and @err; this thread's, until the next call. */
const struct mc_cause *mc_error_continued(int err);
/* The cause of this thread's last error (its reason is "" after a clear). */
const struct mc_cause *mc_last_cause(void);
void mc_clear_error(void);
/* Compose this thread's last error again naming @rank, if its cause is about
 * the segment (MC_FORM_SEGMENT); returns @err. */
int mc_error_name_rank(int err, uint32_t rank);
void mc_log(int priority, const char *fmt, ...) MC_PRINTF(2, 3);
/* Hold back this thread's log lines (delivering the last one when @defer goes
 * false again): no user callback may run while fork.c's registry is locked. */
void mc_log_defer(bool defer);
bool mc_log_enabled(int priority);

/* Map an errno from the system onto the documented set of create/complete. */
int mc_fold_errno(int sys_errno);

#endif
