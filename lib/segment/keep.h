/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A segment's side of the node keeper (keep.c): the keep_* options checked,
 * folded into the group's declaration, and the owner's one request that
 * gets a kept segment's pages (a sealed, committed memfd) from
 * mooncake-segmentd.  Only the owner asks: the peers reach the pages through
 * it as for any segment, so the group agrees on one generation by
 * construction, and a peer needs no access to the keeper's socket.
 */
#ifndef MOONCAKE_SEGMENT_KEEP_H
#define MOONCAKE_SEGMENT_KEEP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/tracked-fd.h"
#include "mooncake/segment.h"

struct mc_keep {
	bool kept;	     /* keep_name was set */
	bool warm;	     /* the pages existed before this group */
	uint64_t generation; /* the keeper's for these pages (owner: create; peers: complete) */
	int fd;		     /* owner, during create: the keeper's memfd; else -1 */
	struct mc_tracked_fd tracking;
};

/* Whether the keep_* options of @opt are well formed: 0 or -EINVAL/-ENOTSUP
 * with the message. */
int mc_keep_check_options(const struct mooncake_segment_options *opt);

/* @fingerprint (the layout's) with the keep_* options that every rank must
 * agree on folded in; @fingerprint itself when keep_name is NULL. */
uint64_t mc_keep_fold(uint64_t fingerprint, const struct mooncake_segment_options *opt);

/* Owner: ask the keeper for the pages of @opt->keep_name as declared by
 * @layout_fingerprint, @size and @page_size; on success keep->fd holds the
 * memfd (tracked: no forked child keeps it), checked to be sealed and of
 * @alloc_size bytes, and keep->warm and keep->generation say what the
 * keeper answered.  0 or a negative errno (create()'s set) with the message. */
int mc_keep_acquire(const struct mooncake_segment_options *opt, uint64_t layout_fingerprint, uint64_t size,
		    uint64_t page_size, uint64_t alloc_size, struct mc_keep *keep);

/* Close keep->fd if still open (the pages stay the keeper's). */
void mc_keep_drop_fd(struct mc_keep *keep);

#endif
