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
	char name[256];	     /* keep_name, kept past create for a peer's JOIN */
	/* Owner, during create: the keeper's memfd [0] and the group's control
	 * area [1]; else -1. */
	int fds[2];
	struct mc_tracked_fd tracking[2];
	/* Owner: what its handle offers a peer for JOIN (keeper-join.h). */
	uint32_t keeper_owner_uid; /* the segment's owner as the keeper sees it */
	uint64_t group_token;	   /* the group's control area at the keeper */
};
#define MC_KEEP_NONE(is_kept) ((struct mc_keep){ .kept = (is_kept), .fds = { -1, -1 } })

/* Whether the keep_* options of @opt are well formed: 0 or -EINVAL/-ENOTSUP
 * with the message. */
int mc_keep_check_options(const struct mooncake_segment_options *opt);

/* @fingerprint (the layout's) with the keep_* options that every rank must
 * agree on folded in; @fingerprint itself when keep_name is NULL. */
uint64_t mc_keep_fold(uint64_t fingerprint, const struct mooncake_segment_options *opt);

/* Owner: ask the keeper for the pages of @opt->keep_name as declared by
 * @layout_fingerprint (of @declaration: the name create() was given, which
 * travels with the request so that the keeper can name the field that
 * differs), @size and @page_size, and for a fresh control area
 * of @control_bytes for this group; on success keep->fds hold the memfd,
 * checked to be sealed and of @alloc_size bytes, and the control area
 * (both tracked: no forked child keeps them), and keep->warm,
 * keep->generation, keep->keeper_owner_uid and keep->group_token say what
 * the keeper answered.  0 or a negative errno (create()'s set) with the
 * message. */
int mc_keep_acquire(const struct mooncake_segment_options *opt, const char *declaration,
		    uint64_t layout_fingerprint, uint64_t size, uint64_t page_size, uint64_t alloc_size,
		    uint64_t control_bytes, struct mc_keep *keep);

/* Close keep->fds still open (the pages and the area stay the keeper's). */
void mc_keep_drop_fds(struct mc_keep *keep);

#endif
