/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CREATE's declaration against a kept segment's (declaration.c): which
 * field differs, and the sentence that names it with the kept and the
 * declared value and the fix.  store.c decides what to do about it (attach,
 * replace or refuse).
 */
#ifndef MOONCAKE_SEGMENTD_DECLARATION_H
#define MOONCAKE_SEGMENTD_DECLARATION_H

#include <stdint.h>

#include "keeper.h"

/* The control area a CREATE asks the segment to keep: none when it asks
 * for one of its group's. */
static inline uint64_t kept_control_bytes(const struct mc_keeper_request *req)
{
	return (req->flags & MC_KEEPER_CREATE_GROUP_CONTROL) ? 0 : req->control_bytes;
}

/* The fresh control area a CREATE asks for its group: 0 when none. */
static inline uint64_t group_control_bytes(const struct mc_keeper_request *req)
{
	return (req->flags & MC_KEEPER_CREATE_GROUP_CONTROL) ? req->control_bytes : 0;
}

/* A copy of @req's declaration for a kept segment (kept_segment.declaration):
 * NULL when it gives none, or without memory (refusals then name the
 * fingerprint, as for a segment from a state without declarations). */
char *declaration_copy(const struct mc_keeper_request *req);

/* The first field of @req that differs from @seg's (enum mc_keeper_field),
 * with its sentence and status EEXIST in @rep; MC_KEEPER_FIELD_NONE, @rep
 * untouched, when the declarations agree.  @page_size is the one @req
 * resolves to on this host.  When the fingerprints differ and both
 * declarations are known, the first field in which they differ (the name,
 * a block's name, count, shape, dtype or entry size) is named, with the
 * sizes when those differ too; else the size, then the fingerprint. */
uint16_t declaration_compare(const struct kept_segment *seg, const struct mc_keeper_request *req,
			     uint64_t page_size, struct mc_keeper_reply *rep);

#endif
