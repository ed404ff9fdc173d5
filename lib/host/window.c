/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address windows: a PROT_NONE reservation of the segment's size, aligned so
 * that huge pages can back it.  A non-owner knows its base address from
 * create() on, and a failed import puts the reservation back.
 *
 * A window maps an empty memfd named "mooncake-segment-window" rather than
 * anonymous memory, so /proc/PID/maps says what the range is (operators,
 * `mooncake-segment list`, and tests that count only the library's own
 * mappings).  PROT_NONE: no page of the empty file is ever touched.  Where
 * memfd_create is refused, the window is anonymous.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "base/base.h"
#include "base/tracked-fd.h"
#include "host.h"
#include "window.h"

#define RESERVE_FLAGS (MAP_PRIVATE | MAP_NORESERVE)
#define WINDOW_NAME   "mooncake-segment-window"

/* mmap(PROT_NONE) of @len bytes of the named empty file (anonymous without one). */
static void *map_window(void *addr, uint64_t len, int extra_flags)
{
	struct mc_tracked_fd tracking = { NULL, NULL };
	int fd, flags = RESERVE_FLAGS | extra_flags;
	void *p;

	/* Tracked (fork.c) for the microseconds it is open. */
	mc_fd_track_begin();
	fd = memfd_create(WINDOW_NAME, MFD_CLOEXEC);
	mc_fd_track_end(&tracking, &fd);
	p = mmap(addr, len, PROT_NONE, fd >= 0 ? flags : flags | MAP_ANONYMOUS, fd, 0);
	mc_fd_close(&tracking);
	return p;
}

void *mc_window_reserve(uint64_t len, uint64_t align, uint64_t required)
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
	p = map_window(NULL, len + align - page, 0);
	if (p == MAP_FAILED) {
		/* No room for the slack: a window where one fits, if it is aligned enough. */
		p = map_window(NULL, len, 0);
		if (p == MAP_FAILED)
			return NULL;
		if (required > page && (uintptr_t)p % required) {
			munmap(p, len);
			errno = ENOMEM;
			return NULL;
		}
		return p;
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
	void *p = map_window(addr, len, MAP_FIXED);

	return p == MAP_FAILED ? -errno : 0;
}

void mc_window_release(void *addr, uint64_t len)
{
	if (addr)
		munmap(addr, len);
}
