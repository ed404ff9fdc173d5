/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Committing a kept segment's pages in the keeper's own process, exactly as
 * create() commits an owner's (lib/segment/segment.c): the memfd backend, the
 * room check of the keeper's memory cgroup (an error, never the OOM killer)
 * and the cgroup's commit lock around it.  Then the keeper keeps only a
 * descriptor: the backend's mapping is released, so that a hundred kept
 * segments cost the keeper no page tables.  The control area is a second,
 * zero-filled memfd whose contents are the library clients' business; both
 * are sealed against shrinking and growing, since a shrink under another
 * rank's mapping would SIGBUS it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/backend.h"
#include "base/error.h"
#include "host/commit-lock.h"
#include "host/limits.h"
#include "mooncake/segment.h"
#include "keeper.h"

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static void options_for(bool hugetlb, uint64_t page_size, struct mooncake_segment_options *opt)
{
	mooncake_segment_options_init(opt);
	opt->mmap = true;
	opt->hugetlb = hugetlb;
	opt->hugetlb_page_size = hugetlb ? page_size : 0;
	/* A group of one: the backend serves no peer (no socket, no thread);
	 * the keeper hands the descriptor out itself. */
	opt->world_size = 1;
	opt->rank_id = 0;
	opt->owner_rank = 0;
	opt->device_id = -1;
	opt->numa_node = MOONCAKE_SEGMENT_NUMA_AUTO;
}

int commit_page_size(uint64_t requested, bool hugetlb, uint64_t *page_size, char *why, size_t why_size)
{
	const struct mc_backend_ops *backend = mc_backend_for(true, false, hugetlb);
	struct mooncake_segment_options opt;
	uint64_t base = (uint64_t)sysconf(_SC_PAGESIZE);
	int err;

	if (!backend) {
		snprintf(why, why_size, "this build of the keeper has no host-memory backend");
		return -ENOTSUP;
	}
	options_for(hugetlb, requested, &opt);
	if (!hugetlb && requested) {
		/* Any power of two from the base page up: the allocation rounds to it. */
		if (requested < base) {
			snprintf(why, why_size, "page size %llu is below this host's base page (%llu bytes)",
				 (unsigned long long)requested, (unsigned long long)base);
			return -EINVAL;
		}
		*page_size = requested;
		return 0;
	}
	mc_clear_error();
	err = mc_backend_granularity(backend, &opt, page_size);
	if (err)
		snprintf(why, why_size, "%s", mooncake_segment_last_error());
	return err;
}

static int seal(int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0)
		return -errno;
	if ((seals & SEALS) == SEALS)
		return 0;
	return fcntl(fd, F_ADD_SEALS, SEALS) == 0 ? 0 : -errno;
}

static int make_control(const char *name, uint64_t bytes, int *out, char *why, size_t why_size)
{
	/* memfd names stop at 249 bytes; the name is for /proc only. */
	char memfd_name[250];
	int fd, err;

	snprintf(memfd_name, sizeof(memfd_name), "mooncake-segment-control:%s", name);
	fd = memfd_create(memfd_name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		err = errno;
		snprintf(why, why_size, "memfd_create for the control area of '%s' failed: %s", name,
			 strerror(err));
		return err == EMFILE || err == ENFILE ? -EMFILE : -ENOMEM;
	}
	if (ftruncate(fd, (off_t)bytes) != 0 || seal(fd) != 0) {
		err = errno;
		snprintf(why, why_size, "cannot size and seal the control area of '%s' (%llu bytes): %s",
			 name, (unsigned long long)bytes, strerror(err));
		close(fd);
		return err == EFBIG ? -EFBIG : -ENOMEM;
	}
	*out = fd;
	return 0;
}

int commit_group_area(const char *name, uint64_t bytes, int *out, char *why, size_t why_size)
{
	/* The pages' memfd name as the memfd backend writes it (host-memfd.c:
	 * 96 bytes, "mooncake-segment:LABEL|owner=PID"), whose label and owner
	 * `list` reads: the same cut, so that a long name matches too. */
	static const char pages_prefix[] = "mooncake-segment:";
	char pages_name[96];

	snprintf(pages_name, sizeof(pages_name), "%s%s%s|owner=%d", pages_prefix, "keep:", name,
		 (int)getpid());
	return make_control(pages_name + strlen(pages_prefix), bytes, out, why, why_size);
}

int commit_segment(const char *name, uint64_t alloc_size, uint64_t page_size, bool hugetlb,
		   uint64_t control_bytes, struct kept_pages *out, char *why, size_t why_size)
{
	const struct mc_backend_ops *backend = mc_backend_for(true, false, hugetlb);
	struct mc_commit_lock lock = MC_COMMIT_LOCK_NONE;
	struct mooncake_segment_options opt;
	struct mc_memory mem;
	char label[MC_KEEPER_NAME_MAX + 8];
	int err, fd = -1;

	*out = (struct kept_pages){ .pages_fd = -1, .control_fd = -1 };
	if (!backend) {
		snprintf(why, why_size, "this build of the keeper has no host-memory backend");
		return -ENOTSUP;
	}
	options_for(hugetlb, page_size, &opt);
	/* The memfd is named "mooncake-segment:keep:NAME|owner=PID" by the backend. */
	snprintf(label, sizeof(label), "keep:%s", name);
	memset(&mem, 0, sizeof(mem));
	mem.opt = &opt;
	mem.label = label;
	mem.alloc_size = alloc_size;
	mem.page_size = page_size;
	mem.is_owner = true;
	mem.placement.mode = MC_PLACE_DEFAULT;
	mem.placement.node = -1;
	mem.companion_fd = -1;
	mem.adopt_fd = -1; /* the keeper makes the pages */

	mc_clear_error();
	if (backend->charges_memory_cgroup(&opt)) {
		/* The same guarantee as create(): refuse what would wake the OOM
		 * killer, and hold the cgroup's commit lock until it is charged. */
		err = mc_check_memory_room(label, alloc_size + control_bytes, &mem.check_commit_room, &lock);
		if (err) {
			snprintf(why, why_size, "%s", mooncake_segment_last_error());
			return err;
		}
	}
	err = backend->create_owner(&mem);
	mc_commit_lock_release(&lock);
	if (!err) {
		fd = fcntl(mc_memfd_descriptor(&mem), F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			err = mc_error_sys(errno == EMFILE ? EMFILE : ENOMEM, errno,
					   "Shared segment '%s': cannot duplicate its memfd", label);
	}
	if (err)
		snprintf(why, why_size, "%s", mooncake_segment_last_error());
	/* The keeper holds the descriptor only: no mapping, no page tables. */
	backend->release(&mem);
	if (err)
		return err;
	err = seal(fd);
	if (err) {
		snprintf(why, why_size, "cannot seal the memfd of '%s': %s", name, strerror(-err));
		close(fd);
		return -ENOMEM;
	}
	if (control_bytes) {
		err = make_control(name, control_bytes, &out->control_fd, why, why_size);
		if (err) {
			close(fd);
			return err;
		}
	}
	out->pages_fd = fd;
	out->alloc_size = alloc_size;
	out->page_size = page_size;
	return 0;
}
