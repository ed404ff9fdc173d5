/* SPDX-License-Identifier: Apache-2.0 */
/* One scenario for every VMM (mmap=false) backend's fake: ranks in several processes share one copy. */
#ifndef MOONCAKE_SEGMENT_TEST_VMM_SHARE_H
#define MOONCAKE_SEGMENT_TEST_VMM_SHARE_H

#include <stdint.h>

#include <mooncake/segment.h>

#include "group.h"

struct vmm_share {
	uint64_t size, page_size;	   /* what create is asked for, and the page size info must report */
	const char *backend, *accelerator; /* what info must report */
	int (*count_mappings)(void);	   /* the backend's mappings in this process */
	/* Backend checks on this rank's completed segment (every rank calls it:
	 * it may be collective); 0, or 1 after saying why on stderr.  May be NULL. */
	int (*check)(struct group_rank *self, struct mooncake_segment *seg);
};

/* One rank: create with @opt, exchange blobs, complete, finish; the address is
 * the device's too; each rank writes its slice and reads every rank's; destroy
 * leaves no descriptor or mapping.  0, or 1 after saying why on stderr. */
int vmm_share_rank(struct group_rank *self, const struct mooncake_segment_options *opt,
		   const struct vmm_share *expect);

#endif
