/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address windows: a PROT_NONE reservation of the segment's size, aligned so
 * that huge pages can back it.  A non-owner knows its base address from
 * create() on, and a failed import puts the reservation back.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "internal.h"

#define RESERVE_FLAGS (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)

void *mc_window_reserve(uint64_t len, uint64_t align)
{
	uint64_t page = mc_host_base_page_size();
	uintptr_t start, aligned;
	uint64_t head, tail;
	void *p;

	if (len == 0 || len > SIZE_MAX - align) {
		errno = ENOMEM;
		return NULL;
	}
	if (align <= page || !mc_is_power_of_two(align))
		align = page;
	/* Over-reserve by the alignment, then trim both ends. */
	p = mmap(NULL, len + align - page, PROT_NONE, RESERVE_FLAGS, -1, 0);
	if (p == MAP_FAILED) {
		p = mmap(NULL, len, PROT_NONE, RESERVE_FLAGS, -1, 0);
		return p == MAP_FAILED ? NULL : p;
	}
	start = (uintptr_t)p;
	aligned = (uintptr_t)mc_align_up(start, align);
	head = aligned - start;
	tail = align - page - head;
	if (head)
		munmap(p, head);
	if (tail)
		munmap((void *)(aligned + len), tail);
	return (void *)aligned;
}

int mc_window_reset(void *addr, uint64_t len)
{
	void *p = mmap(addr, len, PROT_NONE, RESERVE_FLAGS | MAP_FIXED, -1, 0);

	return p == MAP_FAILED ? -errno : 0;
}

void mc_window_release(void *addr, uint64_t len)
{
	if (addr)
		munmap(addr, len);
}
