/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The backend contract.  A backend owns the memory of a segment: it
 * allocates, places, maps and commits the owner's pages, exports what peers
 * need to reach them, and maps them into a peer's window.  It sees one
 * struct mc_memory (what the state machine asks for, and what the backend
 * fills), never the segment object: it knows nothing of blobs, ranks or
 * registration, and a cause of its about the segment (mc_segment_error) is
 * said with the rank by the state machine.  Adding a backend: one file defining one
 * struct mc_backend_ops, one line in backends.c's table, its tests.
 */
#ifndef MOONCAKE_SEGMENT_BACKEND_H
#define MOONCAKE_SEGMENT_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "base/tracked-fd.h"
#include "host/placement.h"
#include "host/populate.h"
#include "mooncake/segment.h"
#include "route/keeper-join.h"
#include "route/route.h"

/* The most bytes a backend may export for peers (the blob's handle field). */
#define MC_HANDLE_MAX 128

/* Backend ids as blobs carry them: never renumber. */
enum mc_backend_id {
	MC_BACKEND_MEMFD = 1,
	MC_BACKEND_ASCEND_VMM = 2,
	MC_BACKEND_CUDA_VMM = 3,
};

/* One segment's memory as its backend sees it. */
struct mc_memory {
	/* Set by the state machine before the backend's first call. */
	const struct mooncake_segment_options *opt;
	const char *label; /* for messages and the memfd's name */
	uint64_t alloc_size;
	uint64_t page_size;
	bool is_owner;
	bool check_commit_room;	       /* owner: a memory cgroup limit applies: check before each chunk */
	struct mc_placement placement; /* owner: where the pages go; the backend records a refusal */
	/* Owner: commit only the first chunk in create_owner, the rest in
	 * commit_rest (a background commit); false: everything in create_owner. */
	bool background;
	const struct mc_commit_progress *progress; /* owner: follows the commit, NULL: nobody */
	/* Owner: a descriptor to pass to the peers with the pages (the control
	 * area), -1: none.  Peer, after import: the one received (the caller
	 * closes it), -1 when the owner passed none. */
	int companion_fd;
	struct mc_tracked_fd companion_tracking; /* peer: closes companion_fd in a forked child */
	/* Owner: pages that exist already, committed and sealed (a kept
	 * segment's memfd from the node keeper), to map instead of allocating;
	 * the backend takes a descriptor of its own.  -1: allocate. */
	int adopt_fd;
	/* A kept segment's way through the node keeper (route/keeper-join.h).
	 * Owner: its JOIN offer (generation, the keeper's owner uid, the
	 * group's token), for the handle; token 0: none.  Peer: the name and
	 * the owner's generation, to JOIN with when the owner cannot be
	 * reached; name NULL: not kept. */
	struct mc_keeper_ref keeper;

	/* Written by the backend. */
	void *base;	    /* this rank's mapping or reservation */
	uint64_t alignment; /* base is a multiple of it: opt->alignment, or the backend's default */
	bool mapped;	    /* base holds the shared pages, not just a reservation */
	/* The backend's own, opaque to everything else: one malloc'd block (a
	 * forked child's destroy frees it with free(), releasing nothing it names). */
	void *state;
	uint8_t handle[MC_HANDLE_MAX]; /* owner: what peers need to reach the pages */
	uint16_t handle_bytes;
	uint32_t info_flags;		/* MOONCAKE_SEGMENT_INFO_* learnt at create */
	uint64_t committed;		/* owner: [0, committed) committed by create_owner */
	struct mc_commit_result commit; /* owner: written when the last page is committed */
};

struct mc_backend_ops {
	const char *name; /* as info reports it, before any "-hugetlb" describe() adds */
	enum mc_backend_id id;
	bool mmap;		 /* serves mmap=true (host pages) or mmap=false (VMM) */
	bool device_addressable; /* the mapping's address is also the device's (SVM) */
	bool passes_companion;	 /* serves mem->companion_fd with its pages (a descriptor route) */
	/* mooncake_segment_supported() for this backend's mmap value; may load its runtime. */
	bool (*supported)(bool host_register, bool hugetlb);
	/* The page size (and hence allocation granularity) for these options;
	 * -ENOTSUP naming what is missing. */
	int (*granularity)(const struct mooncake_segment_options *opt, uint64_t *page_size);
	/* Whether the owner's commit is charged to its memory cgroup, so that
	 * the state machine checks the room first (host/limits.h). */
	bool (*charges_memory_cgroup)(const struct mooncake_segment_options *opt);
	/* Owner: allocate, place (mem->placement), map, commit (all of it, or
	 * with mem->background the first chunk); fill base, handle, committed. */
	int (*create_owner)(struct mc_memory *mem);
	/* Owner, with mem->background: commit [committed, alloc_size) in order,
	 * telling mem->progress; runs on a thread of the state machine's.  NULL:
	 * create_owner always commits everything (the VMM backends). */
	int (*commit_rest)(struct mc_memory *mem);
	/* Non-owner: reserve mem->alloc_size bytes of address space at mem->base. */
	int (*reserve)(struct mc_memory *mem);
	/* Non-owner: map the pages @owner exported into the reservation. */
	int (*import)(struct mc_memory *mem, const struct mc_owner_ref *owner);
	/* Non-owner: undo a successful import (the reservation comes back). */
	void (*unimport)(struct mc_memory *mem);
	/* Owner: drop what importers needed (the memfd). */
	void (*finish)(struct mc_memory *mem);
	/* Release everything, mem->state included; must cope with any partly built state. */
	void (*release)(struct mc_memory *mem);
	/* What get_info reports of the backend: info->backend, and whatever it
	 * counts its own way (HugeTLB pages are not in Rss). */
	void (*describe)(const struct mc_memory *mem, struct mooncake_segment_info *info);
};

/* The backends of this build (backends.c), NULL-terminated. */
extern const struct mc_backend_ops *const mc_backends[];
/* The backend serving @mmap in this build, NULL when there is none; where
 * several do, the first whose supported() accepts the flags (else the first). */
const struct mc_backend_ops *mc_backend_for(bool mmap, bool host_register, bool hugetlb);
/* @chosen's page size for @opt; where several backends serve opt->mmap and
 * none can, the -ENOTSUP names every one's reason, not only @chosen's. */
int mc_backend_granularity(const struct mc_backend_ops *chosen, const struct mooncake_segment_options *opt,
			   uint64_t *page_size);
/* The same choice from another NULL-terminated @table (tests). */
const struct mc_backend_ops *mc_backend_choose(const struct mc_backend_ops *const *table, bool mmap,
					       bool host_register, bool hugetlb);

/* For white-box tests: the owner's memfd (-1 when none), the VMM's physical handle. */
int mc_memfd_descriptor(const struct mc_memory *mem);
void *mc_ascend_vmm_physical(const struct mc_memory *mem);

#endif
