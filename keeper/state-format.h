/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The byte format of the keeper's saved state (state.c, doc/keeper-state.md):
 * a memfd that systemd's descriptor store keeps as "state", with two slots
 * (A and B) of which the newest valid one wins.  Pure encoders and decoders
 * over byte buffers, no descriptor and no logging, so that the loader, the
 * tests and the fuzzer (tests/fuzz/fuzz-keeper-state.c) share them.  The
 * decoder treats every byte as untrusted: it checks every bound and never
 * reads past the buffer; a failure is -EPROTO (or -ENOMEM) with @why.
 */
#ifndef MOONCAKE_SEGMENTD_STATE_FORMAT_H
#define MOONCAKE_SEGMENTD_STATE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "keeper.h"

#define STATE_SLOT_MAGIC	 UINT32_C(0x534B434D) /* bytes "MCKS" */
#define STATE_VERSION		 1
#define STATE_HEADER_BYTES	 64		      /* one slot's header; A at 0, B at 64 */
#define STATE_PAYLOAD_START	 128		      /* payloads lie at or after both headers */
#define STATE_PAYLOAD_FIXED	 16		      /* next generation, count, reserved */
#define STATE_RECORD_FIXED	 72		      /* a record before its name and identity */
#define STATE_FILE_MAX		 (UINT64_C(64) << 20) /* a bigger state file is refused unread */
#define STATE_KEEPER_HUGETLB	 (1u << 0) /* the record's keeper flags: struct kept_segment.hugetlb */
#define STATE_KEEPER_UNSEEN	 (1u << 1) /* struct kept_segment.handed_unseen */
#define STATE_KEEPER_DECLARATION (1u << 2) /* a declaration follows the identity (kept_segment.declaration) */
/* An account uid follows (kept_segment.account_uid), set only where it is not
 * the owner's: a state without subordinate ids stays byte for byte what an
 * older keeper wrote (one with the bit is refused whole by an older keeper). */
#define STATE_KEEPER_ACCOUNT (1u << 3)
#define STATE_KEEPER_KNOWN \
	(STATE_KEEPER_HUGETLB | STATE_KEEPER_UNSEEN | STATE_KEEPER_DECLARATION | STATE_KEEPER_ACCOUNT)

/* One slot's header, decoded. */
struct state_slot {
	uint64_t sequence; /* 1, 2, ...: the newest valid slot wins */
	uint64_t offset;   /* of its payload in the file */
	uint64_t length;   /* of its payload */
	uint64_t checksum; /* FNV-1a 64 of the payload */
};

/* A decoded payload: the segments' metadata (descriptors -1) and the next
 * generation.  @segments is malloc'd (NULL when count is 0), and so is each
 * segment's declaration: state_image_free() frees both. */
struct state_image {
	uint64_t next_generation;
	size_t count;
	struct kept_segment *segments;
};

uint64_t state_checksum(const uint8_t *bytes, size_t len);
/* Free @image's segments with their declarations; @image is empty after. */
void state_image_free(struct state_image *image);

/* The payload's size for these segments, or 0 when one of them cannot be
 * saved (a name, identity or declaration out of bounds). */
size_t state_payload_size(const struct kept_segment *const *segments, size_t count);
/* Write the payload into @out (@room bytes, at least state_payload_size());
 * its length, or -EINVAL/-EMSGSIZE.  What it writes always decodes. */
int state_payload_encode(const struct kept_segment *const *segments, size_t count, uint64_t next_generation,
			 uint8_t *out, size_t room);
int state_payload_decode(const uint8_t *in, size_t len, struct state_image *image, char *why,
			 size_t why_size);

/* A slot's header: write @slot into @out (STATE_HEADER_BYTES); read slot
 * @index (0 A, 1 B) of the @len bytes of a whole state file, checking the
 * header alone (its magic, version, checksum and that the payload lies
 * inside the file after the headers).  0, or -EPROTO with @why. */
void state_header_encode(const struct state_slot *slot, uint8_t out[STATE_HEADER_BYTES]);
int state_header_decode(const uint8_t *file, size_t len, unsigned int index, struct state_slot *slot,
			char *why, size_t why_size);
/* Slot @index of a whole state file, header and payload (checksum
 * included), decoded into @image. */
int state_slot_decode(const uint8_t *file, size_t len, unsigned int index, struct state_slot *slot,
		      struct state_image *image, char *why, size_t why_size);

/* service.c, for state.c alone: the highest N of the stored descriptors
 * named "pages-N" or "control-N" that nobody has taken (orphans a client
 * may still map), 0 when none. */
uint64_t service_stored_generation_max(void);

#endif
