/* SPDX-License-Identifier: Apache-2.0 */
/* What the fake accelerator runtimes share (fake-runtime.c): knobs and a call log. */
#ifndef MOONCAKE_SEGMENT_FAKE_RUNTIME_H
#define MOONCAKE_SEGMENT_FAKE_RUNTIME_H

/* The integer in environment variable @name, or @fallback when unset. */
int fake_env_int(const char *name, int fallback);
/* How many of the pages of [addr, addr+len) this process has mapped now
 * (present in its page table, /proc/self/pagemap): an owner's pages are
 * mapped as they are committed, so an owner's registration of pages not yet
 * committed shows fewer than all (a peer maps them as it touches them). */
unsigned long fake_mapped_pages(const void *addr, unsigned long len);
/* Append one line to the file environment variable @log_variable names, if set. */
void fake_note(const char *log_variable, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
