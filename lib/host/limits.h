/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Will the memory fit (limits.c)?  The memory cgroup's room, the host's, the
 * process's file size and address space limits, each checked before the
 * kernel would answer with the OOM killer, SIGXFSZ or a bare ENOMEM.  The
 * checks see only what they need: how many bytes, and a label for messages.
 */
#ifndef MOONCAKE_SEGMENT_LIMITS_H
#define MOONCAKE_SEGMENT_LIMITS_H

#include <stdbool.h>
#include <stdint.h>

#include "mooncake/segment.h"
#include "commit-lock.h"

/* What a commit still being made needs, for the check before each chunk. */
struct mc_room_need {
	const char *label; /* the segment's label, as messages name it */
	uint64_t bytes;	   /* its allocation size */
};

/* What the kernel charges to the memory cgroup (and takes from the host)
 * beside the pages of a commit of @bytes: the owner's page tables, the
 * memfd's page cache index, the commit threads' stacks.  A commit needs
 * @bytes + mc_commit_overhead(@bytes) of room. */
uint64_t mc_commit_overhead(uint64_t bytes);
/* The most bytes, in whole @page_size pages, that a commit can take with its
 * overhead in @room bytes (what mooncake_segment_room() reports). */
uint64_t mc_commit_fit(uint64_t room, uint64_t page_size);

/* The most bytes, in whole @page_size pages, that a peer can map with @room
 * bytes of its own memory cgroup: the pages are the owner's, charged to the
 * owner's cgroup; the peer pays its page tables, 8 bytes a page (at complete
 * with populate_on_import, else as it touches the pages). */
uint64_t mc_import_fit(uint64_t room, uint64_t page_size);

/* How much the memory cgroup's usage can grow with no page more in use: it
 * charges in batches of 64 pages per CPU and keeps what is not yet used in a
 * per-CPU stock (MEMCG_CHARGE_BATCH), so a reading jumps by 64 pages at a
 * time on each CPU this process may run on.  mooncake_segment_room() leaves
 * this much of the cgroup's room out, so that create(room()) still passes
 * create's own check, read a moment later. */
uint64_t mc_memcg_charge_slack(void);

/* VmSize of this process in bytes (what RLIMIT_AS counts), 0 when unknown. */
uint64_t mc_address_space_in_use(void);
/* MemAvailable + SwapFree in bytes (each also returned), UINT64_MAX when MemAvailable is unknown. */
uint64_t mc_host_memory_room(uint64_t *available, uint64_t *swap);
/* -ENOMEM with the numbers when @bytes of segment @label cannot fit in this
 * process's memory cgroup or on the host.  On success @lock holds the cgroup's commit lock (or
 * none): release it with mc_commit_lock_release() once the pages are
 * committed; *@memcg_limited says whether a memory cgroup limit applies (the
 * commit then checks again per chunk). */
int mc_check_memory_room(const char *label, uint64_t bytes, bool *memcg_limited, struct mc_commit_lock *lock);
/* Before committing more of @need with @committed bytes charged already:
 * -ENOMEM with the numbers when the cgroup's room no longer holds the rest. */
int mc_check_commit_room(const struct mc_room_need *need, uint64_t committed);
/* -EFBIG naming ulimit -f when a memfd of @bytes would exceed RLIMIT_FSIZE (SIGXFSZ otherwise). */
int mc_check_file_size_limit(const char *label, uint64_t bytes);
/* The -ENOMEM for a failed address-space reservation, naming RLIMIT_AS when one is set. */
int mc_address_space_error(const char *label, uint64_t bytes, int sys_errno);

#endif
