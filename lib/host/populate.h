/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Committing pages (populate.c): the owner commits its pages in order, chunk
 * by chunk, each chunk in parallel and NUMA-local, and reports the front (the
 * committed prefix) after each chunk; a peer maps the page tables of pages
 * that exist.
 */
#ifndef MOONCAKE_SEGMENT_POPULATE_H
#define MOONCAKE_SEGMENT_POPULATE_H

#include <stdbool.h>
#include <stdint.h>

#include "mooncake/segment.h"
#include "limits.h"
#include "placement.h"

/* Who follows a commit: told the front after each chunk, asked before each
 * chunk whether to stop (destroy during a background commit). */
struct mc_commit_progress {
	/* Everything of the file below @end is committed now. */
	void (*advance)(void *ctx, uint64_t end);
	/* True: stop before the next chunk (the commit returns -ECANCELED). */
	bool (*stopping)(void *ctx);
	void *ctx;
};

struct mc_commit_request {
	int fd;
	uint8_t *addr;	      /* the mapping of the file's byte file_offset */
	uint64_t file_offset; /* the request commits [file_offset, file_offset + len) of the file */
	uint64_t len;
	uint64_t charged_before; /* bytes of the segment committed before this request */
	uint64_t page_size;
	unsigned int threads;		/* 0: automatic */
	int cpu_node;			/* run the threads on this node's CPUs, -1 anywhere */
	bool thp;			/* THP was advised: measure it against base pages */
	bool hugetlb;			/* HugeTLB: the mmap reserved the pages already */
	struct mc_placement *placement; /* HugeTLB fallocate follows the thread policy */
	/* Called before each chunk is charged with the bytes committed so far
	 * (mc_check_commit_room, or a test's); non-zero stops the commit with
	 * that error.  NULL: no check. */
	int (*check_room)(const struct mc_room_need *need, uint64_t committed);
	const struct mc_room_need *room_need;
	const struct mc_commit_progress *progress; /* NULL: nobody follows */
};

struct mc_commit_result {
	uint64_t ns;
	unsigned int threads;
	bool thp_fallback; /* THP committed slower than base pages: dropped */
	char method[32];
};

/* The bytes a commit with @threads threads commits between two reports of
 * its front (whole pages of @page_size). */
uint64_t mc_commit_front_chunk(uint64_t page_size, unsigned int threads);
/* Commit every page of the request before returning, so that lack of memory
 * is an error now (fallocate: a clean ENOSPC/ENOMEM) and never a SIGBUS later;
 * in order, one front chunk after the other, each populated in parallel.
 * 0, -ECANCELED when the progress asked to stop, or a negative errno with a
 * message. */
int mc_commit_pages(const struct mc_commit_request *req, struct mc_commit_result *result);
/* Map every page table entry of a mapping of existing pages (peers). */
int mc_populate_mapping(void *addr, uint64_t len, uint64_t page_size, unsigned int threads);

#endif
