/* SPDX-License-Identifier: Apache-2.0 */
/* What the fake accelerator runtimes share (fake-runtime.c): knobs and a call log. */
#ifndef MOONCAKE_SEGMENT_FAKE_RUNTIME_H
#define MOONCAKE_SEGMENT_FAKE_RUNTIME_H

/* The integer in environment variable @name, or @fallback when unset. */
int fake_env_int(const char *name, int fallback);
/* Append one line to the file environment variable @log_variable names, if set. */
void fake_note(const char *log_variable, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
