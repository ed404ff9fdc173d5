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
#include <stdlib.h>
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

char *declaration_copy(const struct mc_keeper_request *req)
{
	char *copy;

	if (!req->declaration_bytes)
		return NULL;
	copy = malloc((size_t)req->declaration_bytes + 1);
	if (copy) {
		memcpy(copy, req->declaration, req->declaration_bytes);
		copy[req->declaration_bytes] = '\0';
	}
	return copy;
}

/* --- the declarations, field by field ---------------------------------------
 *
 * A declaration is the name create() was given.  The Python binding folds
 * its blocks into it (bindings/python/mooncake/_shared_segment_layout.py):
 * "NAME|BLOCK;BLOCK..." with BLOCK "name:count:shape:dtype:entry_bytes"
 * (shape "AxBxC", dtype "torch.NAME"), blocks in name order; a block name
 * has no ':', ';' or '|', so the last '|' ends NAME.  Any other text is a
 * name alone.
 */

/* A slice of a declaration. */
struct span {
	const char *p;
	size_t n;
};

enum { BLOCK_NAME, BLOCK_COUNT, BLOCK_SHAPE, BLOCK_DTYPE, BLOCK_BYTES, BLOCK_FIELDS };

struct block {
	struct span f[BLOCK_FIELDS];
};

static bool span_eq(struct span a, struct span b)
{
	return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
}

/* The next block of *@rest into @b, moving *@rest past it: false at the
 * end or when the block does not have its five non-empty fields. */
static bool next_block(struct span *rest, struct block *b)
{
	const char *end = memchr(rest->p, ';', rest->n);
	size_t len = end ? (size_t)(end - rest->p) : rest->n;
	const char *p = rest->p, *stop = rest->p + len;

	if (!rest->n)
		return false;
	for (int i = 0; i < BLOCK_FIELDS; i++) {
		const char *colon = memchr(p, ':', (size_t)(stop - p));
		const char *field_end = i == BLOCK_FIELDS - 1 ? stop : colon;

		if (!field_end || field_end == p || (i == BLOCK_FIELDS - 1 && colon))
			return false;
		b->f[i] = (struct span){ p, (size_t)(field_end - p) };
		p = field_end + 1;
	}
	rest->p += end ? len + 1 : len;
	rest->n -= end ? len + 1 : len;
	return true;
}

/* Split @text into its name and its blocks, checking every block: false
 * when it is not a layout. */
static bool split(const char *text, struct span *name, struct span *blocks)
{
	const char *bar = text ? strrchr(text, '|') : NULL;
	struct span rest;
	struct block b;

	if (!bar || !bar[1])
		return false;
	*name = (struct span){ text, (size_t)(bar - text) };
	*blocks = rest = (struct span){ bar + 1, strlen(bar + 1) };
	while (rest.n)
		if (!next_block(&rest, &b) || (rest.n == 0 && rest.p[-1] == ';'))
			return false;
	return true;
}

/* The block named @name among @blocks (a checked list). */
static bool find_block(struct span blocks, struct span name, struct block *out)
{
	while (next_block(&blocks, out))
		if (span_eq(out->f[BLOCK_NAME], name))
			return true;
	return false;
}

/* @s quoted for a sentence: at most 64 bytes of it, then "...". */
static const char *quote(char *buf, size_t size, struct span s)
{
	snprintf(buf, size, "%.*s%s", (int)(s.n > 64 ? 64 : s.n), s.p, s.n > 64 ? "..." : "");
	return buf;
}

/* Bytes per element: entry bytes / the product of the shape, 0 when that
 * is no whole number. */
static uint64_t element_bytes(const struct block *b)
{
	char text[32];
	uint64_t bytes, elements = 1, dim;
	const char *p;
	char *end;

	if (b->f[BLOCK_BYTES].n >= sizeof(text))
		return 0;
	memcpy(text, b->f[BLOCK_BYTES].p, b->f[BLOCK_BYTES].n);
	text[b->f[BLOCK_BYTES].n] = '\0';
	bytes = strtoull(text, &end, 10);
	if (*end)
		return 0;
	for (p = b->f[BLOCK_SHAPE].p; p < b->f[BLOCK_SHAPE].p + b->f[BLOCK_SHAPE].n; p = end + 1) {
		dim = strtoull(p, &end, 10);
		if (end == p || !dim || elements > UINT64_MAX / dim ||
		    (*end != 'x' && end != b->f[BLOCK_SHAPE].p + b->f[BLOCK_SHAPE].n))
			return 0;
		elements *= dim;
	}
	return (bytes % elements) ? 0 : bytes / elements;
}

/* The first field in which @kept and @asked (both the same block's) differ,
 * into @kept_text and @asked_text ("count 64", "count 128"); false when
 * none does. */
static bool block_field(const struct block *kept, const struct block *asked, char *kept_text,
			char *asked_text, size_t size)
{
	static const char *const what[BLOCK_FIELDS] = { "name", "count", "shape", "dtype", "entries of" };
	char a[80], b[80];

	for (int i = BLOCK_COUNT; i < BLOCK_FIELDS; i++) {
		if (span_eq(kept->f[i], asked->f[i]))
			continue;
		quote(a, sizeof(a), kept->f[i]);
		quote(b, sizeof(b), asked->f[i]);
		if (i == BLOCK_DTYPE && element_bytes(kept) && element_bytes(asked)) {
			snprintf(kept_text, size, "dtype %s (%" PRIu64 "-byte elements)", a,
				 element_bytes(kept));
			snprintf(asked_text, size, "dtype %s (%" PRIu64 "-byte elements)", b,
				 element_bytes(asked));
		} else if (i == BLOCK_BYTES) {
			snprintf(kept_text, size, "entries of %s bytes", a);
			snprintf(asked_text, size, "entries of %s bytes", b);
		} else {
			snprintf(kept_text, size, "%s %s", what[i], a);
			snprintf(asked_text, size, "%s %s", what[i], b);
		}
		return true;
	}
	return false;
}

/* When the fingerprints differ and both declarations are known: the
 * refusal naming their first difference (the name, a block's name, count,
 * shape, dtype or entry size; the sizes too when they differ), and its
 * field.  MC_KEEPER_FIELD_NONE, @rep untouched, when they cannot tell. */
static uint16_t explain(const struct kept_segment *seg, const struct mc_keeper_request *req,
			uint64_t asked_alloc, const char *fix, struct mc_keeper_reply *rep)
{
	const struct mc_keeper_segment *r = &seg->record;
	struct span kept_name, kept_blocks, asked_name, asked_blocks, rest;
	struct block kb, ab, missing = { 0 }, added = { 0 };
	char q1[80], q2[80], size_note[96] = "", kept_text[160], asked_text[160];
	bool is_missing = false, is_added = false;

	if (!seg->declaration || !req->declaration_bytes || strcmp(seg->declaration, req->declaration) == 0)
		return MC_KEEPER_FIELD_NONE;
	if (asked_alloc != r->size)
		snprintf(size_note, sizeof(size_note),
			 " (so %" PRIu64 " bytes are kept, this create asks %" PRIu64 ")", r->size,
			 req->size);
	if (!split(seg->declaration, &kept_name, &kept_blocks) ||
	    !split(req->declaration, &asked_name, &asked_blocks) || !span_eq(kept_name, asked_name)) {
		/* Not both layouts (a C caller's name), or another name. */
		if (split(seg->declaration, &kept_name, &kept_blocks) &&
		    split(req->declaration, &asked_name, &asked_blocks)) {
			quote(q1, sizeof(q1), kept_name);
			quote(q2, sizeof(q2), asked_name);
		} else {
			quote(q1, sizeof(q1), (struct span){ seg->declaration, strlen(seg->declaration) });
			quote(q2, sizeof(q2), (struct span){ req->declaration, req->declaration_bytes });
		}
		refuse(rep, MC_KEEPER_FIELD_NAME,
		       "'%s' is kept with name '%s', this create declares name '%s'%s; %s", r->name, q1, q2,
		       size_note, fix);
		return MC_KEEPER_FIELD_NAME;
	}
	/* The first kept block not declared, the first declared one not kept. */
	for (rest = kept_blocks; !is_missing && next_block(&rest, &kb);)
		if (!find_block(asked_blocks, kb.f[BLOCK_NAME], &ab))
			missing = kb, is_missing = true;
	for (rest = asked_blocks; !is_added && next_block(&rest, &ab);)
		if (!find_block(kept_blocks, ab.f[BLOCK_NAME], &kb))
			added = ab, is_added = true;
	if (is_missing || is_added) {
		quote(q1, sizeof(q1), (is_missing ? missing : added).f[BLOCK_NAME]);
		quote(q2, sizeof(q2), (is_added ? added : missing).f[BLOCK_NAME]);
		if (is_missing && is_added)
			refuse(rep, MC_KEEPER_FIELD_BLOCK,
			       "'%s' is kept with block '%s', this create declares block '%s' in its "
			       "place%s; %s",
			       r->name, q1, q2, size_note, fix);
		else if (is_missing)
			refuse(rep, MC_KEEPER_FIELD_BLOCK,
			       "'%s' is kept with block '%s', this create declares no block '%s'%s; %s",
			       r->name, q1, q1, size_note, fix);
		else
			refuse(rep, MC_KEEPER_FIELD_BLOCK,
			       "'%s' is kept without block '%s', this create declares block '%s'%s; %s",
			       r->name, q1, q1, size_note, fix);
		return MC_KEEPER_FIELD_BLOCK;
	}
	for (rest = kept_blocks; next_block(&rest, &kb);) {
		(void)find_block(asked_blocks, kb.f[BLOCK_NAME], &ab);
		if (block_field(&kb, &ab, kept_text, asked_text, sizeof(kept_text))) {
			refuse(rep, MC_KEEPER_FIELD_BLOCK,
			       "'%s' is kept with block '%s' of %s, this create declares %s%s; %s", r->name,
			       quote(q1, sizeof(q1), kb.f[BLOCK_NAME]), kept_text, asked_text, size_note,
			       fix);
			return MC_KEEPER_FIELD_BLOCK;
		}
	}
	/* The same blocks, only written otherwise (their order). */
	refuse(rep, MC_KEEPER_FIELD_NAME,
	       "'%s' is kept with declaration '%s', this create declares '%s'%s; %s", r->name,
	       quote(q1, sizeof(q1), (struct span){ seg->declaration, strlen(seg->declaration) }),
	       quote(q2, sizeof(q2), (struct span){ req->declaration, req->declaration_bytes }), size_note,
	       fix);
	return MC_KEEPER_FIELD_NAME;
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
		uint16_t field = explain(seg, req, asked_alloc, fix, rep);

		if (field != MC_KEEPER_FIELD_NONE)
			return field;
	}
	/* The size before the fingerprint: a size is what a C caller changes. */
	if (asked_alloc != r->size) {
		refuse(rep, MC_KEEPER_FIELD_SIZE,
		       "'%s' is kept with %" PRIu64 " bytes, this create asks %" PRIu64 " (%" PRIu64
		       " in its pages of %" PRIu64 "); %s",
		       r->name, r->size, req->size, asked_alloc, r->page_size, fix);
		return MC_KEEPER_FIELD_SIZE;
	}
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
