/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper's wire protocol (keeper-wire.c): the requests a client sends to
 * mooncake-segmentd over its filesystem SOCK_SEQPACKET socket and the replies
 * it gets, one message per packet.  Pure encoders and decoders: no socket,
 * no descriptor, no logging, no global state, so that the keeper, the
 * library's client and the fuzzer share them.  Every decoder checks every
 * bound and never reads past the buffer; a failure is -EPROTO with a sentence
 * in @why naming what is wrong.  doc/keeper-protocol.md is the byte layout.
 */
#ifndef MOONCAKE_SEGMENT_KEEPER_WIRE_H
#define MOONCAKE_SEGMENT_KEEPER_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_KEEPER_MAGIC	  UINT32_C(0x504B434D) /* bytes "MCKP" */
#define MC_KEEPER_VERSION 1

/* The keeper's socket when neither --socket nor MOONCAKE_SEGMENT_KEEPER names one. */
#define MC_KEEPER_DEFAULT_SOCKET "/run/mooncake-segment/keeper.sock"

#define MC_KEEPER_HEADER_BYTES 16
/* The longest message either side sends or accepts, header included. */
#define MC_KEEPER_MESSAGE_MAX 16384
/* A kept segment's name: 1..255 bytes of 0x21..0x7e, no '/', not "." or "..". */
#define MC_KEEPER_NAME_MAX 255
/* The caller's own identity bytes (model, dtype, engine version), any bytes. */
#define MC_KEEPER_IDENTITY_MAX 64
/* A CREATE's declaration: what the library's create() was given as the
 * segment's name (the Python binding folds its block layout into it,
 * "NAME|BLOCK:COUNT:SHAPE:DTYPE:ENTRY_BYTES;..."), 0..4096 bytes of
 * printable ASCII (0x20..0x7e).  The fingerprint decides; the keeper keeps
 * the declaration only to name what differs when the fingerprint does. */
#define MC_KEEPER_DECLARATION_MAX 4096
/* A reply's sentence: printable ASCII (0x20..0x7e), no terminator on the wire. */
#define MC_KEEPER_TEXT_MAX 512
/* Segments in one LIST reply; the client asks again from the last record's
 * name and owner uid. */
#define MC_KEEPER_LIST_MAX 32

enum mc_keeper_type {
	MC_KEEPER_HELLO = 1,
	MC_KEEPER_CREATE = 2, /* create or attach */
	MC_KEEPER_LIST = 3,
	MC_KEEPER_RELEASE = 4,
	MC_KEEPER_STAT = 5,
	MC_KEEPER_JOIN = 6, /* a rank that cannot reach its owner: the group's pages and control area */
};
/* A reply's type is its request's with this bit; ERROR alone answers a
 * request the keeper could not decode (it then closes the connection). */
#define MC_KEEPER_REPLY 0x8000u
#define MC_KEEPER_ERROR MC_KEEPER_REPLY

/* CREATE request flags. */
#define MC_KEEPER_CREATE_HUGETLB     (1u << 0) /* back it with HugeTLB pages */
#define MC_KEEPER_CREATE_REPLACE     (1u << 1) /* a different layout replaces the kept one if unmapped */
#define MC_KEEPER_CREATE_ATTACH_ONLY (1u << 2) /* never create: ENOENT when absent */
#define MC_KEEPER_CREATE_CREATE_ONLY (1u << 3) /* never attach: EEXIST when present */
/* control_bytes is the size of a fresh control area for this group, made by
 * the keeper for this request and found again by JOIN with the reply's
 * token; the segment itself then keeps none (its control size is 0). */
#define MC_KEEPER_CREATE_GROUP_CONTROL (1u << 4)
#define MC_KEEPER_CREATE_FLAGS_KNOWN                                                          \
	(MC_KEEPER_CREATE_HUGETLB | MC_KEEPER_CREATE_REPLACE | MC_KEEPER_CREATE_ATTACH_ONLY | \
	 MC_KEEPER_CREATE_CREATE_ONLY | MC_KEEPER_CREATE_GROUP_CONTROL)
/* A group's control area: a positive multiple of 4096 bytes, at most this. */
#define MC_KEEPER_GROUP_CONTROL_MAX (UINT64_C(16) << 20)
/* The group control areas one segment remembers: a new one drops the oldest. */
#define MC_KEEPER_GROUPS_PER_SEGMENT 8

/* Who may attach to a kept segment besides root (decided at its creation). */
enum mc_keeper_sharing {
	MC_KEEPER_SHARE_UID = 0,   /* the creator's uid only */
	MC_KEEPER_SHARE_GROUP = 1, /* and the members of gid */
	MC_KEEPER_SHARE_ANY = 2,   /* every uid that reaches the socket */
};

/* The field of a CREATE that differs from the kept segment's (a reply's
 * field, with status EEXIST); 0 when none is named. */
enum mc_keeper_field {
	MC_KEEPER_FIELD_NONE = 0,
	MC_KEEPER_FIELD_FINGERPRINT = 1,
	MC_KEEPER_FIELD_IDENTITY = 2,
	MC_KEEPER_FIELD_SIZE = 3,
	MC_KEEPER_FIELD_PAGE_SIZE = 4,
	MC_KEEPER_FIELD_HUGETLB = 5,
	MC_KEEPER_FIELD_WORLD_SIZE = 6,
	MC_KEEPER_FIELD_CONTROL_BYTES = 7,
	MC_KEEPER_FIELD_SHARING = 8,
	/* From the declarations, when the fingerprints differ: */
	MC_KEEPER_FIELD_NAME = 9,   /* the name create() was given */
	MC_KEEPER_FIELD_BLOCK = 10, /* a block: its name, count, shape, dtype or entry size */
	MC_KEEPER_FIELD_LAST = MC_KEEPER_FIELD_BLOCK,
};

/* HELLO reply flags. */
#define MC_KEEPER_HELLO_FDSTORE	    (1u << 0) /* kept segments survive the keeper's restart */
#define MC_KEEPER_HELLO_FLAGS_KNOWN MC_KEEPER_HELLO_FDSTORE
/* CREATE reply flags. */
#define MC_KEEPER_ATTACH_WARM	  (1u << 0) /* the pages existed before this request */
#define MC_KEEPER_ATTACH_HUGETLB  (1u << 1)
#define MC_KEEPER_ATTACH_REPLACED (1u << 2) /* a kept segment of another layout was replaced */
#define MC_KEEPER_ATTACH_FLAGS_KNOWN \
	(MC_KEEPER_ATTACH_WARM | MC_KEEPER_ATTACH_HUGETLB | MC_KEEPER_ATTACH_REPLACED)
/* A segment record's flags. */
#define MC_KEEPER_SEGMENT_HUGETLB     (1u << 0)
#define MC_KEEPER_SEGMENT_RELEASED    (1u << 1) /* released: freed when its last mapper goes */
#define MC_KEEPER_SEGMENT_FLAGS_KNOWN (MC_KEEPER_SEGMENT_HUGETLB | MC_KEEPER_SEGMENT_RELEASED)
/* LIST reply flags. */
#define MC_KEEPER_LIST_MORE	   (1u << 0) /* more segments follow the last one: ask again */
#define MC_KEEPER_LIST_FLAGS_KNOWN MC_KEEPER_LIST_MORE
/* RELEASE reply flags: exactly one is set. */
#define MC_KEEPER_RELEASE_FREED	      (1u << 0) /* nobody mapped it: the pages are gone */
#define MC_KEEPER_RELEASE_DEFERRED    (1u << 1) /* still mapped: freed with the last mapping */
#define MC_KEEPER_RELEASE_FLAGS_KNOWN (MC_KEEPER_RELEASE_FREED | MC_KEEPER_RELEASE_DEFERRED)

/* The mappers count when the keeper cannot tell. */
#define MC_KEEPER_MAPPERS_UNKNOWN UINT32_MAX

/* A request, decoded.  Only the fields of its type are encoded; the decoder
 * zeroes the rest. */
struct mc_keeper_request {
	uint16_t type;	   /* enum mc_keeper_type */
	uint32_t sequence; /* the client's choice, echoed by the reply */
	/* CREATE, RELEASE, STAT: the segment; LIST: the cursor (list the names
	 * after it in byte order; "" from the first). NUL-terminated. */
	char name[MC_KEEPER_NAME_MAX + 1];
	/* CREATE, STAT, RELEASE: whose segment.  false: the caller's own uid
	 * (SO_PEERCRED); true: owner_uid's, which the caller may reach only
	 * when that segment is shared with it (root: any).  LIST: true makes
	 * the cursor (name, owner_uid): the records after it in (name, owner
	 * uid) order; false lists the names after the cursor's name. */
	bool owner_given;
	uint32_t owner_uid; /* 0 unless owner_given */
	/* CREATE */
	uint64_t fingerprint;	/* mc_fingerprint(), as the blob carries it */
	uint64_t size;		/* as requested, before rounding */
	uint64_t page_size;	/* 0: the backing's default; else a power of two */
	uint64_t control_bytes; /* the control area's size; 0: none */
	uint32_t world_size;	/* at least 1 */
	uint32_t flags;		/* MC_KEEPER_CREATE_* */
	uint8_t sharing;	/* enum mc_keeper_sharing */
	uint32_t gid;		/* MC_KEEPER_SHARE_GROUP only; else 0 */
	uint16_t identity_bytes;
	uint8_t identity[MC_KEEPER_IDENTITY_MAX];
	uint16_t declaration_bytes;			 /* 0: none given */
	char declaration[MC_KEEPER_DECLARATION_MAX + 1]; /* NUL-terminated */
	/* JOIN: the group's segment (name, owner_uid: always given) at this
	 * generation, and its control area's token from the owner's CREATE
	 * reply; both not 0. */
	uint64_t generation;
	uint64_t token;
};

/* One kept segment, as STAT and LIST describe it. */
struct mc_keeper_segment {
	char name[MC_KEEPER_NAME_MAX + 1];
	uint64_t fingerprint;
	uint64_t size; /* the allocation: a multiple of page_size */
	uint64_t page_size;
	uint64_t control_bytes;
	uint64_t generation; /* never given twice to one name, across the keeper's restarts too */
	uint64_t created;    /* CLOCK_REALTIME, seconds */
	uint32_t world_size;
	uint32_t owner_uid; /* the creator's, as the keeper's user namespace sees it */
	uint32_t gid;
	uint8_t sharing;
	uint16_t flags;		/* MC_KEEPER_SEGMENT_* */
	uint32_t mappers;	/* processes that map it, or MC_KEEPER_MAPPERS_UNKNOWN */
	uint32_t warm_attaches; /* attaches that found it existing */
	/* The pages' memfd as fstat() of the keeper's descriptor shows it, and
	 * /proc/PID/maps and stat() in every process that maps or holds it: the
	 * key `mooncake-segment list` joins the segments it scans by.  It
	 * survives the keeper's restart (the descriptor store keeps the file),
	 * where the "owner=PID" in the memfd's name does not.  All 0: unknown. */
	uint32_t dev_major, dev_minor;
	uint64_t ino;
	uint16_t identity_bytes;
	uint8_t identity[MC_KEEPER_IDENTITY_MAX];
};

/* A reply, decoded.  status 0 is success and carries the body of its type;
 * any other status (a positive Linux errno) carries only the sentence. */
struct mc_keeper_reply {
	uint16_t type; /* the request's type | MC_KEEPER_REPLY, or MC_KEEPER_ERROR */
	uint32_t sequence;
	uint32_t status;
	uint16_t field;			   /* enum mc_keeper_field: CREATE with EEXIST only */
	char text[MC_KEEPER_TEXT_MAX + 1]; /* the sentence, NUL-terminated; may be "" */
	/* HELLO */
	uint16_t version;     /* the highest version the keeper speaks */
	uint32_t keeper_pid;  /* in the keeper's PID namespace */
	uint64_t instance;    /* random at each start of the keeper */
	uint32_t message_max; /* the longest message it accepts */
	uint32_t kept;	      /* segments it holds */
	uint32_t hello_flags; /* MC_KEEPER_HELLO_* */
	/* CREATE; JOIN has the same body (its control area is the group's) */
	uint64_t generation; /* RELEASE too */
	uint64_t size;
	uint64_t page_size;
	uint64_t control_bytes;
	uint32_t attach_flags; /* MC_KEEPER_ATTACH_* */
	uint32_t owner_uid;    /* the segment's owner, as the keeper's user namespace sees it */
	uint8_t descriptors;   /* by SCM_RIGHTS: 1, or 2 with a control area (pages, control) */
	uint64_t
		group_token; /* not 0: the control area is the group's, JOIN finds it by this (JOIN: always) */
	uint32_t caller_uid; /* the caller's uid as the keeper sees it (SO_PEERCRED there): what a
			      * client in a user namespace of its own compares owner_uid with */
	/* RELEASE */
	uint32_t release_flags; /* MC_KEEPER_RELEASE_* */
	/* STAT: segments[0]; LIST: segments[0..count) */
	uint16_t count;
	uint16_t list_flags; /* MC_KEEPER_LIST_* */
	struct mc_keeper_segment segments[MC_KEEPER_LIST_MAX];
};

/* Whether @name (@len bytes, no terminator needed) may name a kept segment;
 * when not, @why (may be NULL) says why. */
bool mc_keeper_name_valid(const char *name, size_t len, char *why, size_t why_size);

/* Encode @req into @out (@room bytes): the message's length, or -EINVAL
 * (a field breaks a rule the decoder enforces) or -EMSGSIZE (@room is too
 * small), @why saying which.  What it encodes always decodes. */
int mc_keeper_request_encode(const struct mc_keeper_request *req, uint8_t *out, size_t room, char *why,
			     size_t why_size);
/* Decode the @len bytes of one received packet: 0, or -EPROTO with @why.
 * @req is zeroed first; its sequence is set as soon as the header is read,
 * so that an ERROR reply can echo it. */
int mc_keeper_request_decode(const uint8_t *in, size_t len, struct mc_keeper_request *req, char *why,
			     size_t why_size);

/* As for requests. */
int mc_keeper_reply_encode(const struct mc_keeper_reply *rep, uint8_t *out, size_t room, char *why,
			   size_t why_size);
int mc_keeper_reply_decode(const uint8_t *in, size_t len, struct mc_keeper_reply *rep, char *why,
			   size_t why_size);

/* After LIST reply @rep to @req: move @req's cursor past @rep's last record
 * (its name and owner uid) and say whether more records follow. */
bool mc_keeper_list_advance(struct mc_keeper_request *req, const struct mc_keeper_reply *rep);

/* A segment record's fixed bytes that LIST's and STAT's records and the
 * keeper's saved state (doc/keeper-state.md) lay out alike: 0..60 (the
 * fingerprint to the sharing mode) and 62..67 (the name's and the identity's
 * lengths, the flags).  Each format adds its own byte 61 and bytes from 68,
 * then the name and the identity. */
#define MC_KEEPER_RECORD_COMMON_BYTES 68
void mc_keeper_record_put_common(uint8_t *out, const struct mc_keeper_segment *s);
/* All but the name and the identity, whose lengths the caller checks first
 * (mc_get_le16 at 62 and 64) and copies itself. */
void mc_keeper_record_get_common(const uint8_t *in, struct mc_keeper_segment *s);

/* The name of a request type or a field, for messages ("CREATE", "size"). */
const char *mc_keeper_type_name(uint16_t type);
const char *mc_keeper_field_name(uint16_t field);

#endif
