/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_segment_room(): how many bytes a segment created with these
 * options can take on this host, so that an engine sizes its layout from the
 * figures create() checks instead of guessing.
 *
 * The figures are the ones create's room check reads (limits.c, through the
 * same functions): the memory cgroup's room (clean page cache counts: the
 * kernel reclaims it first) and MemAvailable + SwapFree, or with hugetlb the
 * pool's free, unreserved pages; then the file size limit (RLIMIT_FSIZE) and
 * MOONCAKE_SEGMENT_MAX_SIZE.  The result is rounded down to the page size
 * create() would use, so that create() of exactly that many bytes passes the
 * check.  Under a memory cgroup it is short of the check's own figure by the
 * cgroup's charge batching (64 pages a CPU, limits.h), which a reading can
 * jump by with nothing more in use; without one, one page more is refused.
 * It is a snapshot: memory another program takes meanwhile is not there at
 * create.
 */
#include "config.h"

#include <errno.h>
#include <sys/resource.h>

#include "base/base.h"
#include "base/error.h"
#include "host/cgroup.h"
#include "host/limits.h"
#include "mooncake/segment.h"
#include "private.h"
#include "segment.h"

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Bytes the memory cgroup and the host leave for base pages or THP.  The
 * cgroup's charge batching is left out (limits.h): its usage can read up to
 * that much higher when create() checks again, with nothing more in use. */
static uint64_t memory_room(void)
{
	struct mc_memory_room cgroup;
	uint64_t available, swap, slack, room = mc_host_memory_room(&available, &swap);

	if (mc_self_cgroup_room(&cgroup)) {
		slack = mc_memcg_charge_slack();
		room = min_u64(room, cgroup.room > slack ? cgroup.room - slack : 0);
	}
	return room;
}

/* Bytes of the HugeTLB pool of @page_size that are free and not reserved. */
static int hugetlb_room(uint64_t page_size, uint64_t *room)
{
	uint64_t total, available;

	if (!mc_hugetlb_pool(page_size, &total, &available))
		return mc_error(
			ENOTSUP,
			"Shared segment room: the HugeTLB pool of %llu kB pages cannot be read "
			"(/sys/kernel/mm/hugepages/hugepages-%llukB); use hugetlb=false or configure the "
			"pool",
			(unsigned long long)(page_size >> 10), (unsigned long long)(page_size >> 10));
	*room = available > UINT64_MAX / page_size ? UINT64_MAX : available * page_size;
	return 0;
}

MC_EXPORT int mooncake_segment_room(const struct mooncake_segment_options *opt, uint64_t *bytes)
{
	uint64_t page_size = 0, room = 0;
	struct rlimit fsize;
	int err;

	mc_clear_error();
	if (!opt || !bytes)
		return mc_error(EINVAL, "Shared segment room needs options and an output pointer");
	err = mc_segment_page_size(opt, &page_size);
	if (err)
		return err;
	if (opt->rank_id != opt->owner_rank) {
		/* A peer imports: its own cgroup pays only its page tables. */
		room = mc_import_fit(memory_room(), page_size);
	} else if (opt->hugetlb) {
		err = hugetlb_room(page_size, &room);
		if (err)
			return err;
	} else {
		/* Room for the pages and for what the kernel charges beside them. */
		room = mc_commit_fit(memory_room(), page_size);
	}
	/* The file size limit binds only the owner, which sizes the memfd (mmap=true). */
	if (opt->rank_id == opt->owner_rank && opt->mmap && getrlimit(RLIMIT_FSIZE, &fsize) == 0 &&
	    fsize.rlim_cur != RLIM_INFINITY)
		room = min_u64(room, fsize.rlim_cur);
	room = min_u64(room, MOONCAKE_SEGMENT_MAX_SIZE);
	*bytes = room / page_size * page_size;
	return 0;
}
