/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address windows (window.c): every rank maps the segment into a window of
 * its own, reserved PROT_NONE first so that nothing else lands in the range.
 */
#ifndef MOONCAKE_SEGMENT_WINDOW_H
#define MOONCAKE_SEGMENT_WINDOW_H

#include <stdint.h>

/* Reserve @len bytes of address space aligned to @align (PROT_NONE) where
 * the address space allows, and in any case to @required (0: a page); NULL
 * on failure (errno set). */
void *mc_window_reserve(uint64_t len, uint64_t align, uint64_t required);
/* Put the reservation back over [addr, addr+len) after a failed import. */
int mc_window_reset(void *addr, uint64_t len);
void mc_window_release(void *addr, uint64_t len);

#endif
