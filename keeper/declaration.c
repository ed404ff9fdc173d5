/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CREATE's declaration against a kept segment's (declaration.h): the
 * fields in the order the keeper compares them, each refusal naming the
 * field, the kept value, the declared one and the fix.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "declaration.h"

static void refuse(struct mc_keeper_reply *rep, uint16_t field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Status EEXIST with @field and its sentence. */
static void refuse(struct mc_keeper_reply *rep, uint16_t field, const char *fmt, ...)
{
	va_list ap;

	rep->status = EEXIST;
	rep->field = field;
	va_start(ap, fmt);
	vsnprintf(rep->text, sizeof(rep->text), fmt, ap);
	va_end(ap);
}

static const char *sharing_name(uint8_t sharing)
{
	switch (sharing) {
	case MC_KEEPER_SHARE_UID:
		return "uid";
	case MC_KEEPER_SHARE_GROUP:
		return "group";
	default:
		return "any";
	}
}

static void hex(const uint8_t *bytes, size_t len, char *out, size_t size)
{
	size_t i, used = 0;

	out[0] = '\0';
	for (i = 0; i < len && used + 3 <= size; i++)
		used += (size_t)snprintf(out + used, size - used, "%02x", bytes[i]);
	if (!len)
		snprintf(out, size, "(none)");
}

uint16_t declaration_compare(const struct kept_segment *seg, const struct mc_keeper_request *req,
			     uint64_t page_size, struct mc_keeper_reply *rep)
{
	const struct mc_keeper_segment *r = &seg->record;
	bool hugetlb = (req->flags & MC_KEEPER_CREATE_HUGETLB) != 0;
	uint64_t asked_alloc = req->size + (r->page_size - 1) < req->size
				       ? UINT64_MAX
				       : (req->size + r->page_size - 1) / r->page_size * r->page_size;
	char kept_text[2 * MC_KEEPER_IDENTITY_MAX + 8], asked_text[2 * MC_KEEPER_IDENTITY_MAX + 8];
	const char *fix = "use the same declaration, another name, or replace it (only when nobody maps it)";

	if (req->fingerprint != r->fingerprint) {
		refuse(rep, MC_KEEPER_FIELD_FINGERPRINT,
		       "'%s' is kept with fingerprint %016" PRIx64 ", this create declares %016" PRIx64
		       " (the name, size or block layout differ); %s",
		       r->name, r->fingerprint, req->fingerprint, fix);
		return MC_KEEPER_FIELD_FINGERPRINT;
	}
	if (req->identity_bytes != r->identity_bytes ||
	    memcmp(req->identity, r->identity, r->identity_bytes) != 0) {
		hex(r->identity, r->identity_bytes, kept_text, sizeof(kept_text));
		hex(req->identity, req->identity_bytes, asked_text, sizeof(asked_text));
		refuse(rep, MC_KEEPER_FIELD_IDENTITY,
		       "'%s' is kept with identity %s, this create gives %s; %s", r->name, kept_text,
		       asked_text, fix);
		return MC_KEEPER_FIELD_IDENTITY;
	}
	if (asked_alloc != r->size) {
		refuse(rep, MC_KEEPER_FIELD_SIZE,
		       "'%s' is kept with %" PRIu64 " bytes, this create asks %" PRIu64 " (%" PRIu64
		       " in its pages of %" PRIu64 "); %s",
		       r->name, r->size, req->size, asked_alloc, r->page_size, fix);
		return MC_KEEPER_FIELD_SIZE;
	}
	if (page_size != r->page_size) {
		refuse(rep, MC_KEEPER_FIELD_PAGE_SIZE,
		       "'%s' is kept with pages of %" PRIu64 " bytes, this create asks %" PRIu64 "; %s",
		       r->name, r->page_size, page_size, fix);
		return MC_KEEPER_FIELD_PAGE_SIZE;
	}
	if (hugetlb != seg->hugetlb) {
		refuse(rep, MC_KEEPER_FIELD_HUGETLB, "'%s' is kept with hugetlb %s, this create asks %s; %s",
		       r->name, seg->hugetlb ? "true" : "false", hugetlb ? "true" : "false", fix);
		return MC_KEEPER_FIELD_HUGETLB;
	}
	if (req->world_size != r->world_size) {
		refuse(rep, MC_KEEPER_FIELD_WORLD_SIZE,
		       "'%s' is kept for world size %u, this create declares %u; %s", r->name, r->world_size,
		       req->world_size, fix);
		return MC_KEEPER_FIELD_WORLD_SIZE;
	}
	if (kept_control_bytes(req) != r->control_bytes) {
		refuse(rep, MC_KEEPER_FIELD_CONTROL_BYTES,
		       "'%s' is kept with a control area of %" PRIu64 " bytes, this create asks %" PRIu64
		       " (0: its groups' own); %s",
		       r->name, r->control_bytes, kept_control_bytes(req), fix);
		return MC_KEEPER_FIELD_CONTROL_BYTES;
	}
	if (req->sharing != r->sharing || req->gid != r->gid) {
		refuse(rep, MC_KEEPER_FIELD_SHARING,
		       "'%s' is kept with sharing %s (gid %u), this create asks sharing %s (gid %u); %s",
		       r->name, sharing_name(r->sharing), r->gid, sharing_name(req->sharing), req->gid, fix);
		return MC_KEEPER_FIELD_SHARING;
	}
	return MC_KEEPER_FIELD_NONE;
}
