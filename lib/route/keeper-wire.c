/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper's messages to and from bytes (doc/keeper-protocol.md).  The
 * decoders take whatever a packet held, from a client that may be hostile or
 * a keeper that may be another build: every length is checked against the
 * packet before it is used, every reserved byte must be zero, and each
 * refusal names the field.  The encoders enforce the same rules on the
 * structs, so that what one side writes the other side accepts.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "base/little-endian.h"
#include "keeper-wire.h"
#include "private.h"

/* The header, then each message's fixed part: offsets from the message's start. */
#define OFF_MAGIC    0
#define OFF_VERSION  4
#define OFF_TYPE     6
#define OFF_LENGTH   8
#define OFF_SEQUENCE 12

#define HELLO_REQUEST_BYTES  (MC_KEEPER_HEADER_BYTES + 8)
#define CREATE_REQUEST_BYTES (MC_KEEPER_HEADER_BYTES + 56) /* then the name, identity, declaration */
#define NAMED_REQUEST_BYTES  (MC_KEEPER_HEADER_BYTES + 8)  /* LIST, RELEASE, STAT; then the name */
#define JOIN_REQUEST_BYTES   (MC_KEEPER_HEADER_BYTES + 24) /* then the name */

#define REPLY_PREFIX_BYTES (MC_KEEPER_HEADER_BYTES + 8) /* status, field, text length */
#define HELLO_BODY_BYTES   32
#define CREATE_BODY_BYTES  56 /* JOIN's too */
#define RELEASE_BODY_BYTES 16
#define LIST_BODY_BYTES	   8  /* then the records */
#define RECORD_BYTES	   96 /* then the name, then the identity */
_Static_assert(RECORD_BYTES == MC_KEEPER_RECORD_COMMON_BYTES + 28, "a record's fixed bytes moved");
/* The longest LIST reply (every name and identity at its longest, the
 * longest sentence) is one message. */
#define RECORD_MAX_BYTES (RECORD_BYTES + MC_KEEPER_NAME_MAX + MC_KEEPER_IDENTITY_MAX)
_Static_assert(REPLY_PREFIX_BYTES + LIST_BODY_BYTES + MC_KEEPER_LIST_MAX * RECORD_MAX_BYTES +
			       MC_KEEPER_TEXT_MAX <=
		       MC_KEEPER_MESSAGE_MAX,
	       "a full LIST reply must fit one message");

/* Where a failure is reported, and with which errno: the encoders refuse a
 * struct with -EINVAL, the decoders a packet with -EPROTO. */
struct report {
	int err;
	const char *what; /* "keeper request", "keeper reply" */
	char *why;
	size_t why_size;
};

static int MC_PRINTF(2, 3) refuse(const struct report *r, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->why && r->why_size) {
		n = snprintf(r->why, r->why_size, "%s: ", r->what);
		if (n >= 0 && (size_t)n < r->why_size) {
			va_start(ap, fmt);
			vsnprintf(r->why + n, r->why_size - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return -r->err;
}

static bool all_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

MC_PRIVATE bool mc_keeper_list_advance(struct mc_keeper_request *req, const struct mc_keeper_reply *rep)
{
	const struct mc_keeper_segment *last = rep->count ? &rep->segments[rep->count - 1] : NULL;

	/* The decoder checked that "more" comes with a record. */
	if (last) {
		snprintf(req->name, sizeof(req->name), "%s", last->name);
		req->owner_given = true;
		req->owner_uid = last->owner_uid;
	}
	return (rep->list_flags & MC_KEEPER_LIST_MORE) != 0;
}

MC_PRIVATE const char *mc_keeper_type_name(uint16_t type)
{
	switch (type & ~MC_KEEPER_REPLY) {
	case MC_KEEPER_HELLO:
		return "HELLO";
	case MC_KEEPER_CREATE:
		return "CREATE";
	case MC_KEEPER_LIST:
		return "LIST";
	case MC_KEEPER_RELEASE:
		return "RELEASE";
	case MC_KEEPER_STAT:
		return "STAT";
	case MC_KEEPER_JOIN:
		return "JOIN";
	case 0:
		return type == MC_KEEPER_ERROR ? "ERROR" : "unknown";
	default:
		return "unknown";
	}
}

MC_PRIVATE const char *mc_keeper_field_name(uint16_t field)
{
	static const char *const names[] = {
		[MC_KEEPER_FIELD_NONE] = "none",
		[MC_KEEPER_FIELD_FINGERPRINT] = "fingerprint (name, size or block layout)",
		[MC_KEEPER_FIELD_IDENTITY] = "identity",
		[MC_KEEPER_FIELD_SIZE] = "size",
		[MC_KEEPER_FIELD_PAGE_SIZE] = "page size",
		[MC_KEEPER_FIELD_HUGETLB] = "hugetlb",
		[MC_KEEPER_FIELD_WORLD_SIZE] = "world size",
		[MC_KEEPER_FIELD_CONTROL_BYTES] = "control area size",
		[MC_KEEPER_FIELD_SHARING] = "sharing mode",
		[MC_KEEPER_FIELD_NAME] = "name",
		[MC_KEEPER_FIELD_BLOCK] = "block",
	};

	return field < MC_ARRAY_SIZE(names) ? names[field] : "unknown";
}

static bool is_request_type(uint16_t type)
{
	return type >= MC_KEEPER_HELLO && type <= MC_KEEPER_JOIN;
}

static bool is_reply_type(uint16_t type)
{
	return type == MC_KEEPER_ERROR ||
	       ((type & MC_KEEPER_REPLY) && is_request_type((uint16_t)(type & ~MC_KEEPER_REPLY)));
}

MC_PRIVATE bool mc_keeper_name_valid(const char *name, size_t len, char *why, size_t why_size)
{
	const char *problem = NULL;
	char detail[96];

	if (len == 0)
		problem = "is empty";
	else if (len > MC_KEEPER_NAME_MAX)
		snprintf(detail, sizeof(detail), "is %zu bytes, %d at most", len, MC_KEEPER_NAME_MAX),
			problem = detail;
	else if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		problem = "is \".\" or \"..\"";
	for (size_t i = 0; !problem && i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (c == '/')
			snprintf(detail, sizeof(detail), "has '/' at byte %zu", i), problem = detail;
		/* A kept memfd is named "NAME|owner=PID" (doc/list-json.md): a
		 * '|' in NAME would make list read a forged owner. */
		else if (c == '|')
			snprintf(detail, sizeof(detail), "has a '|' at byte %zu: use another character", i),
				problem = detail;
		else if (c < 0x21 || c > 0x7e)
			snprintf(detail, sizeof(detail),
				 "has byte 0x%02x at %zu: names are printable ASCII without spaces", c, i),
				problem = detail;
	}
	if (problem && why && why_size)
		snprintf(why, why_size, "segment name %s", problem);
	return !problem;
}

static int check_name(const struct report *r, const char *name, size_t len)
{
	char detail[128];

	if (!mc_keeper_name_valid(name, len, detail, sizeof(detail)))
		return refuse(r, "%s", detail);
	return 0;
}

/* Printable ASCII, at most @max bytes, so that a terminal shows it as it
 * is and a sentence may quote it: a reply's sentence ("message"), a
 * CREATE's declaration ("declaration"). */
static int check_printable(const struct report *r, const char *what, const char *text, size_t len, size_t max)
{
	if (len > max)
		return refuse(r, "%s of %zu bytes, %zu at most", what, len, max);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e)
			return refuse(r, "%s has byte 0x%02x at %zu, not printable ASCII", what,
				      (unsigned char)text[i], i);
	return 0;
}

static int check_text(const struct report *r, const char *text, size_t len)
{
	return check_printable(r, "message", text, len, MC_KEEPER_TEXT_MAX);
}

static int check_declaration(const struct report *r, const char *text, size_t len)
{
	return check_printable(r, "declaration", text, len, MC_KEEPER_DECLARATION_MAX);
}

static int check_sharing(const struct report *r, uint8_t sharing, uint32_t gid)
{
	if (sharing > MC_KEEPER_SHARE_ANY)
		return refuse(r, "unknown sharing mode %u", sharing);
	if (sharing != MC_KEEPER_SHARE_GROUP && gid)
		return refuse(r, "gid %u given without the group sharing mode", gid);
	return 0;
}

static int check_allocation(const struct report *r, uint64_t size, uint64_t page_size)
{
	if (!mc_is_power_of_two(page_size))
		return refuse(r, "page size %llu is not a power of two", (unsigned long long)page_size);
	if (size == 0 || size % page_size)
		return refuse(r, "size %llu is not a positive multiple of the page size %llu",
			      (unsigned long long)size, (unsigned long long)page_size);
	return 0;
}

/* A request's name and identity, in a struct to encode; the decoder checks
 * the same on the packet's bytes, before it copies them. */
static int check_request_lengths(const struct report *r, const struct mc_keeper_request *q, size_t name_len)
{
	int err;

	switch (q->type) {
	case MC_KEEPER_CREATE:
		if ((err = check_name(r, q->name, name_len)))
			return err;
		if (q->identity_bytes > MC_KEEPER_IDENTITY_MAX)
			return refuse(r, "identity of %u bytes, %d at most", q->identity_bytes,
				      MC_KEEPER_IDENTITY_MAX);
		if (q->declaration_bytes > MC_KEEPER_DECLARATION_MAX)
			return refuse(r, "declaration of %u bytes, %d at most", q->declaration_bytes,
				      MC_KEEPER_DECLARATION_MAX);
		return check_declaration(r, q->declaration, q->declaration_bytes);
	case MC_KEEPER_LIST:
		return name_len ? check_name(r, q->name, name_len) : 0;
	case MC_KEEPER_RELEASE:
	case MC_KEEPER_STAT:
	case MC_KEEPER_JOIN:
		return check_name(r, q->name, name_len);
	default:
		return 0;
	}
}

/* What a request's other fields must satisfy, in the struct as on the wire. */
static int check_request(const struct report *r, const struct mc_keeper_request *q)
{
	if (q->type == MC_KEEPER_HELLO)
		return 0;
	if (!q->owner_given && q->owner_uid)
		return refuse(r, "%s names owner uid %u without the owner-given flag",
			      mc_keeper_type_name(q->type), q->owner_uid);
	/* An owner uid without a name would be a cursor between nothing. */
	if (q->type == MC_KEEPER_LIST && q->owner_given && !q->name[0])
		return refuse(r, "LIST names a cursor owner uid without a cursor name");
	if (q->type == MC_KEEPER_JOIN) {
		if (!q->owner_given)
			return refuse(r, "JOIN names no owner uid");
		if (!q->generation || !q->token)
			return refuse(r, "JOIN with generation %llu and token %llu: neither may be 0",
				      (unsigned long long)q->generation, (unsigned long long)q->token);
		return 0;
	}
	if (q->type != MC_KEEPER_CREATE)
		return 0;
	if (q->size == 0)
		return refuse(r, "CREATE of size 0");
	if (q->page_size && !mc_is_power_of_two(q->page_size))
		return refuse(r, "page size %llu is neither 0 nor a power of two",
			      (unsigned long long)q->page_size);
	if (q->world_size == 0)
		return refuse(r, "CREATE with world size 0");
	if (q->flags & ~MC_KEEPER_CREATE_FLAGS_KNOWN)
		return refuse(r, "CREATE has unknown flags 0x%x", q->flags & ~MC_KEEPER_CREATE_FLAGS_KNOWN);
	if ((q->flags & MC_KEEPER_CREATE_ATTACH_ONLY) && (q->flags & MC_KEEPER_CREATE_CREATE_ONLY))
		return refuse(r, "CREATE asks for both attach-only and create-only");
	if ((q->flags & MC_KEEPER_CREATE_GROUP_CONTROL) &&
	    (!q->control_bytes || q->control_bytes % 4096 || q->control_bytes > MC_KEEPER_GROUP_CONTROL_MAX))
		return refuse(r,
			      "CREATE with a group control area of %llu bytes: a positive multiple of 4096 "
			      "up to %llu",
			      (unsigned long long)q->control_bytes,
			      (unsigned long long)MC_KEEPER_GROUP_CONTROL_MAX);
	return check_sharing(r, q->sharing, q->gid);
}

static void put_header(uint8_t *out, uint16_t type, size_t length, uint32_t sequence)
{
	mc_put_le32(out + OFF_MAGIC, MC_KEEPER_MAGIC);
	mc_put_le16(out + OFF_VERSION, MC_KEEPER_VERSION);
	mc_put_le16(out + OFF_TYPE, type);
	mc_put_le32(out + OFF_LENGTH, (uint32_t)length);
	mc_put_le32(out + OFF_SEQUENCE, sequence);
}

int mc_keeper_request_encode(const struct mc_keeper_request *req, uint8_t *out, size_t room, char *why,
			     size_t why_size)
{
	const struct report r = { EINVAL, "keeper request", why, why_size };
	size_t name_len = strnlen(req->name, sizeof(req->name));
	size_t length;
	int err;

	if (!is_request_type(req->type))
		return refuse(&r, "unknown request type %u", req->type);
	if (name_len > MC_KEEPER_NAME_MAX)
		return refuse(&r, "segment name is not terminated within %d bytes", MC_KEEPER_NAME_MAX);
	if ((err = check_request_lengths(&r, req, name_len)) || (err = check_request(&r, req)))
		return err;
	switch (req->type) {
	case MC_KEEPER_HELLO:
		length = HELLO_REQUEST_BYTES;
		break;
	case MC_KEEPER_CREATE:
		length = CREATE_REQUEST_BYTES + name_len + req->identity_bytes + req->declaration_bytes;
		break;
	case MC_KEEPER_JOIN:
		length = JOIN_REQUEST_BYTES + name_len;
		break;
	default:
		length = NAMED_REQUEST_BYTES + name_len;
		break;
	}
	if (length > room) {
		refuse(&r, "%zu bytes do not fit in %zu", length, room);
		return -EMSGSIZE;
	}

	memset(out, 0, length);
	put_header(out, req->type, length, req->sequence);
	switch (req->type) {
	case MC_KEEPER_CREATE:
		mc_put_le64(out + 16, req->fingerprint);
		mc_put_le64(out + 24, req->size);
		mc_put_le64(out + 32, req->page_size);
		mc_put_le64(out + 40, req->control_bytes);
		mc_put_le32(out + 48, req->world_size);
		mc_put_le32(out + 52, req->flags);
		out[56] = req->sharing;
		out[57] = req->owner_given ? 1 : 0;
		mc_put_le16(out + 58, req->declaration_bytes);
		mc_put_le32(out + 60, req->gid);
		mc_put_le16(out + 64, (uint16_t)name_len);
		mc_put_le16(out + 66, req->identity_bytes);
		mc_put_le32(out + 68, req->owner_uid);
		memcpy(out + CREATE_REQUEST_BYTES, req->name, name_len);
		memcpy(out + CREATE_REQUEST_BYTES + name_len, req->identity, req->identity_bytes);
		memcpy(out + CREATE_REQUEST_BYTES + name_len + req->identity_bytes, req->declaration,
		       req->declaration_bytes);
		break;
	case MC_KEEPER_LIST:
	case MC_KEEPER_RELEASE:
	case MC_KEEPER_STAT:
		mc_put_le16(out + 16, (uint16_t)name_len);
		out[18] = req->owner_given ? 1 : 0;
		mc_put_le32(out + 20, req->owner_uid);
		memcpy(out + NAMED_REQUEST_BYTES, req->name, name_len);
		break;
	case MC_KEEPER_JOIN:
		mc_put_le64(out + 16, req->generation);
		mc_put_le64(out + 24, req->token);
		mc_put_le32(out + 32, req->owner_uid);
		mc_put_le16(out + 36, (uint16_t)name_len);
		memcpy(out + JOIN_REQUEST_BYTES, req->name, name_len);
		break;
	}
	return (int)length;
}

/* The header's checks, common to both directions; fills *type and *sequence. */
static int decode_header(const struct report *r, const uint8_t *in, size_t len, uint16_t *type,
			 uint32_t *sequence)
{
	uint32_t magic, length;
	uint16_t version;

	if (len < MC_KEEPER_HEADER_BYTES)
		return refuse(r, "truncated: %zu bytes, shorter than the %d-byte header", len,
			      MC_KEEPER_HEADER_BYTES);
	magic = mc_get_le32(in + OFF_MAGIC);
	if (magic != MC_KEEPER_MAGIC)
		return refuse(
			r, "magic mismatch: 0x%08x, expected 0x%08x, not a mooncake-segment keeper message",
			magic, MC_KEEPER_MAGIC);
	version = mc_get_le16(in + OFF_VERSION);
	if (version != MC_KEEPER_VERSION)
		return refuse(r,
			      "version mismatch: protocol version %u, this build speaks %d; the keeper and "
			      "the library must be upgraded together",
			      version, MC_KEEPER_VERSION);
	*sequence = mc_get_le32(in + OFF_SEQUENCE);
	if (len > MC_KEEPER_MESSAGE_MAX)
		return refuse(r, "over-long: %zu bytes, %d at most", len, MC_KEEPER_MESSAGE_MAX);
	length = mc_get_le32(in + OFF_LENGTH);
	if (length != len)
		return refuse(r, "length mismatch: the header says %u bytes, the packet has %zu", length,
			      len);
	*type = mc_get_le16(in + OFF_TYPE);
	return 0;
}

/* The fixed part of a message of @type is @need bytes: is it all there? */
static int need_bytes(const struct report *r, uint16_t type, size_t need, size_t len)
{
	if (len < need)
		return refuse(r, "truncated: a %s message is at least %zu bytes, the packet has %zu",
			      mc_keeper_type_name(type), need, len);
	return 0;
}

/* The variable part declared by the fixed part must end exactly at the packet's end. */
static int exact_bytes(const struct report *r, uint16_t type, size_t declared, size_t len)
{
	if (declared != len)
		return refuse(
			r, "length mismatch: the %s message's fields add up to %zu bytes, the packet has %zu",
			mc_keeper_type_name(type), declared, len);
	return 0;
}

static int reserved_zero(const struct report *r, const uint8_t *in, size_t offset, size_t bytes)
{
	if (!all_zero(in + offset, bytes))
		return refuse(r, "reserved bytes %zu..%zu are not zero", offset, offset + bytes - 1);
	return 0;
}

/* The owner-given byte: 0 or 1, so that another value is never read as one. */
static int owner_flag(const struct report *r, uint16_t type, uint8_t byte)
{
	if (byte > 1)
		return refuse(r, "%s has owner-given byte %u, not 0 or 1", mc_keeper_type_name(type), byte);
	return 0;
}

static int decode_request(const struct report *rr, const uint8_t *in, size_t len,
			  struct mc_keeper_request *req)
{
	const struct report r = *rr;
	uint16_t type = 0, name_len = 0;
	int err;

	if ((err = decode_header(&r, in, len, &type, &req->sequence)))
		return err;
	if (type & MC_KEEPER_REPLY)
		return refuse(&r, "type 0x%04x is a reply, not a request", type);
	if (!is_request_type(type))
		return refuse(&r, "unknown type %u", type);
	req->type = type;
	switch (type) {
	case MC_KEEPER_HELLO:
		if ((err = need_bytes(&r, type, HELLO_REQUEST_BYTES, len)) ||
		    (err = exact_bytes(&r, type, HELLO_REQUEST_BYTES, len)) ||
		    (err = reserved_zero(&r, in, 16, 8)))
			return err;
		break;
	case MC_KEEPER_CREATE:
		if ((err = need_bytes(&r, type, CREATE_REQUEST_BYTES, len)))
			return err;
		name_len = mc_get_le16(in + 64);
		req->identity_bytes = mc_get_le16(in + 66);
		req->declaration_bytes = mc_get_le16(in + 58);
		if ((err = exact_bytes(&r, type,
				       (size_t)CREATE_REQUEST_BYTES + name_len + req->identity_bytes +
					       req->declaration_bytes,
				       len)) ||
		    (err = owner_flag(&r, type, in[57])))
			return err;
		/* Checked before the copies: none may overrun its array. */
		if ((err = check_name(&r, (const char *)in + CREATE_REQUEST_BYTES, name_len)))
			return err;
		if (req->identity_bytes > MC_KEEPER_IDENTITY_MAX)
			return refuse(&r, "identity of %u bytes, %d at most", req->identity_bytes,
				      MC_KEEPER_IDENTITY_MAX);
		if ((err = check_declaration(
			     &r, (const char *)in + CREATE_REQUEST_BYTES + name_len + req->identity_bytes,
			     req->declaration_bytes)))
			return err;
		memcpy(req->name, in + CREATE_REQUEST_BYTES, name_len);
		memcpy(req->identity, in + CREATE_REQUEST_BYTES + name_len, req->identity_bytes);
		memcpy(req->declaration, in + CREATE_REQUEST_BYTES + name_len + req->identity_bytes,
		       req->declaration_bytes);
		req->fingerprint = mc_get_le64(in + 16);
		req->size = mc_get_le64(in + 24);
		req->page_size = mc_get_le64(in + 32);
		req->control_bytes = mc_get_le64(in + 40);
		req->world_size = mc_get_le32(in + 48);
		req->flags = mc_get_le32(in + 52);
		req->sharing = in[56];
		req->gid = mc_get_le32(in + 60);
		req->owner_given = in[57] != 0;
		req->owner_uid = mc_get_le32(in + 68);
		break;
	case MC_KEEPER_JOIN:
		if ((err = need_bytes(&r, type, JOIN_REQUEST_BYTES, len)))
			return err;
		name_len = mc_get_le16(in + 36);
		if ((err = exact_bytes(&r, type, (size_t)JOIN_REQUEST_BYTES + name_len, len)) ||
		    (err = reserved_zero(&r, in, 38, 2)) ||
		    (err = check_name(&r, (const char *)in + JOIN_REQUEST_BYTES, name_len)))
			return err;
		memcpy(req->name, in + JOIN_REQUEST_BYTES, name_len);
		req->generation = mc_get_le64(in + 16);
		req->token = mc_get_le64(in + 24);
		req->owner_given = true;
		req->owner_uid = mc_get_le32(in + 32);
		break;
	default: /* LIST, RELEASE, STAT */
		if ((err = need_bytes(&r, type, NAMED_REQUEST_BYTES, len)))
			return err;
		name_len = mc_get_le16(in + 16);
		if ((err = exact_bytes(&r, type, (size_t)NAMED_REQUEST_BYTES + name_len, len)) ||
		    (err = owner_flag(&r, type, in[18])) || (err = reserved_zero(&r, in, 19, 1)))
			return err;
		if ((type != MC_KEEPER_LIST || name_len) &&
		    (err = check_name(&r, (const char *)in + NAMED_REQUEST_BYTES, name_len)))
			return err;
		memcpy(req->name, in + NAMED_REQUEST_BYTES, name_len);
		req->owner_given = in[18] != 0;
		req->owner_uid = mc_get_le32(in + 20);
		break;
	}
	return check_request(&r, req);
}

int mc_keeper_request_decode(const uint8_t *in, size_t len, struct mc_keeper_request *req, char *why,
			     size_t why_size)
{
	const struct report r = { EPROTO, "keeper request", why, why_size };
	int err;

	memset(req, 0, sizeof(*req));
	err = decode_request(&r, in, len, req);
	if (err) {
		/* Nothing half-decoded is left for a caller to trust, but the sequence for its ERROR reply. */
		uint32_t sequence = req->sequence;

		memset(req, 0, sizeof(*req));
		req->sequence = sequence;
	}
	return err;
}

/* --- replies -------------------------------------------------------------- */

static size_t record_bytes(const struct mc_keeper_segment *s)
{
	return RECORD_BYTES + strnlen(s->name, sizeof(s->name)) + s->identity_bytes;
}

/* A record's name and identity, in a struct to encode; the decoder checks
 * the same on the packet's bytes, before it copies them. */
static int check_record_lengths(const struct report *r, const struct mc_keeper_segment *s, size_t name_len,
				unsigned int index)
{
	char detail[128];

	if (!mc_keeper_name_valid(s->name, name_len, detail, sizeof(detail)))
		return refuse(r, "segment record %u: %s", index, detail);
	if (s->identity_bytes > MC_KEEPER_IDENTITY_MAX)
		return refuse(r, "segment record %u: identity of %u bytes, %d at most", index,
			      s->identity_bytes, MC_KEEPER_IDENTITY_MAX);
	return 0;
}

/* What a record's other fields must satisfy. */
static int check_record(const struct report *r, const struct mc_keeper_segment *s, unsigned int index)
{
	char detail[160];
	const struct report inner = { r->err, "", detail, sizeof(detail) };
	int err;

	if ((err = check_allocation(&inner, s->size, s->page_size)))
		;
	else if (s->world_size == 0)
		err = refuse(&inner, "world size 0");
	else if (s->flags & ~MC_KEEPER_SEGMENT_FLAGS_KNOWN)
		err = refuse(&inner, "unknown flags 0x%x", s->flags & ~MC_KEEPER_SEGMENT_FLAGS_KNOWN);
	else
		err = check_sharing(&inner, s->sharing, s->gid);
	/* inner wrote ": <why>"; say which record. */
	return err ? refuse(r, "segment record %u%s", index, detail) : 0;
}

void mc_keeper_record_put_common(uint8_t *out, const struct mc_keeper_segment *s)
{
	mc_put_le64(out + 0, s->fingerprint);
	mc_put_le64(out + 8, s->size);
	mc_put_le64(out + 16, s->page_size);
	mc_put_le64(out + 24, s->control_bytes);
	mc_put_le64(out + 32, s->generation);
	mc_put_le64(out + 40, s->created);
	mc_put_le32(out + 48, s->world_size);
	mc_put_le32(out + 52, s->owner_uid);
	mc_put_le32(out + 56, s->gid);
	out[60] = s->sharing;
	mc_put_le16(out + 62, (uint16_t)strnlen(s->name, sizeof(s->name)));
	mc_put_le16(out + 64, s->identity_bytes);
	mc_put_le16(out + 66, s->flags);
}

void mc_keeper_record_get_common(const uint8_t *in, struct mc_keeper_segment *s)
{
	s->fingerprint = mc_get_le64(in + 0);
	s->size = mc_get_le64(in + 8);
	s->page_size = mc_get_le64(in + 16);
	s->control_bytes = mc_get_le64(in + 24);
	s->generation = mc_get_le64(in + 32);
	s->created = mc_get_le64(in + 40);
	s->world_size = mc_get_le32(in + 48);
	s->owner_uid = mc_get_le32(in + 52);
	s->gid = mc_get_le32(in + 56);
	s->sharing = in[60];
	s->identity_bytes = mc_get_le16(in + 64);
	s->flags = mc_get_le16(in + 66);
}

/* The wire's record: the common bytes, byte 61 reserved, the mappers, the
 * warm attaches, 4 reserved bytes, the pages' device (major, minor) and
 * inode, then the name and the identity. */
static void put_record(uint8_t *out, const struct mc_keeper_segment *s)
{
	size_t name_len = strnlen(s->name, sizeof(s->name));

	mc_keeper_record_put_common(out, s);
	mc_put_le32(out + 68, s->mappers);
	mc_put_le32(out + 72, s->warm_attaches);
	mc_put_le32(out + 80, s->dev_major);
	mc_put_le32(out + 84, s->dev_minor);
	mc_put_le64(out + 88, s->ino);
	memcpy(out + RECORD_BYTES, s->name, name_len);
	memcpy(out + RECORD_BYTES + name_len, s->identity, s->identity_bytes);
}

/* Decode the record at @in (@avail bytes left in the body): its length, or a
 * negative errno. */
static long get_record(const struct report *r, const uint8_t *in, size_t avail, struct mc_keeper_segment *s,
		       unsigned int index)
{
	char detail[128];
	uint16_t name_len;
	size_t bytes;
	int err;

	if (avail < RECORD_BYTES)
		return refuse(r, "truncated: segment record %u needs %d bytes, %zu are left", index,
			      RECORD_BYTES, avail);
	name_len = mc_get_le16(in + 62);
	s->identity_bytes = mc_get_le16(in + 64);
	bytes = (size_t)RECORD_BYTES + name_len + s->identity_bytes;
	if (bytes > avail)
		return refuse(r, "length mismatch: segment record %u declares %zu bytes, %zu are left", index,
			      bytes, avail);
	if (in[61] || mc_get_le32(in + 76))
		return refuse(r, "segment record %u has reserved bytes that are not zero", index);
	/* Checked before the copies: neither may overrun its array. */
	if (!mc_keeper_name_valid((const char *)in + RECORD_BYTES, name_len, detail, sizeof(detail)))
		return refuse(r, "segment record %u: %s", index, detail);
	if (s->identity_bytes > MC_KEEPER_IDENTITY_MAX)
		return refuse(r, "segment record %u: identity of %u bytes, %d at most", index,
			      s->identity_bytes, MC_KEEPER_IDENTITY_MAX);
	memcpy(s->name, in + RECORD_BYTES, name_len);
	memcpy(s->identity, in + RECORD_BYTES + name_len, s->identity_bytes);
	mc_keeper_record_get_common(in, s);
	s->mappers = mc_get_le32(in + 68);
	s->warm_attaches = mc_get_le32(in + 72);
	s->dev_major = mc_get_le32(in + 80);
	s->dev_minor = mc_get_le32(in + 84);
	s->ino = mc_get_le64(in + 88);
	if ((err = check_record(r, s, index)))
		return err;
	return (long)bytes;
}

/* What a reply's fields must satisfy, in the struct as on the wire (the
 * records are checked one by one where they are read or written). */
static int check_reply(const struct report *r, const struct mc_keeper_reply *p)
{
	if (p->status > 4095)
		return refuse(r, "status %u is not an errno", p->status);
	if (p->type == MC_KEEPER_ERROR && p->status == 0)
		return refuse(r, "ERROR with status 0");
	if (p->field > MC_KEEPER_FIELD_LAST)
		return refuse(r, "unknown field %u", p->field);
	if (p->field && (p->type != (MC_KEEPER_REPLY | MC_KEEPER_CREATE) || p->status != EEXIST))
		return refuse(r, "names field %u outside a CREATE refused with EEXIST", p->field);
	if (p->status)
		return 0;
	switch (p->type & ~MC_KEEPER_REPLY) {
	case MC_KEEPER_HELLO:
		if (p->version < 1)
			return refuse(r, "HELLO names keeper version 0");
		if (p->message_max < MC_KEEPER_HEADER_BYTES)
			return refuse(r, "HELLO names a maximum message of %u bytes", p->message_max);
		if (p->hello_flags & ~MC_KEEPER_HELLO_FLAGS_KNOWN)
			return refuse(r, "HELLO has unknown flags 0x%x",
				      p->hello_flags & ~MC_KEEPER_HELLO_FLAGS_KNOWN);
		return 0;
	case MC_KEEPER_CREATE:
		if (p->attach_flags & ~MC_KEEPER_ATTACH_FLAGS_KNOWN)
			return refuse(r, "CREATE has unknown flags 0x%x",
				      p->attach_flags & ~MC_KEEPER_ATTACH_FLAGS_KNOWN);
		if (p->descriptors != (p->control_bytes ? 2 : 1))
			return refuse(r, "CREATE announces %u descriptors with a control area of %llu bytes",
				      p->descriptors, (unsigned long long)p->control_bytes);
		if (p->group_token && !p->control_bytes)
			return refuse(r, "CREATE names a group token without a control area");
		return check_allocation(r, p->size, p->page_size);
	case MC_KEEPER_JOIN:
		if (p->attach_flags & ~MC_KEEPER_ATTACH_HUGETLB)
			return refuse(r, "JOIN has flags 0x%x besides hugetlb",
				      p->attach_flags & ~MC_KEEPER_ATTACH_HUGETLB);
		if (p->descriptors != 2 || !p->control_bytes || !p->group_token)
			return refuse(r,
				      "JOIN announces %u descriptors, a control area of %llu bytes and token "
				      "%llu; it needs 2, a control area and a token",
				      p->descriptors, (unsigned long long)p->control_bytes,
				      (unsigned long long)p->group_token);
		return check_allocation(r, p->size, p->page_size);
	case MC_KEEPER_RELEASE:
		if (p->release_flags != MC_KEEPER_RELEASE_FREED &&
		    p->release_flags != MC_KEEPER_RELEASE_DEFERRED)
			return refuse(r, "RELEASE flags 0x%x are not exactly one of freed and deferred",
				      p->release_flags);
		return 0;
	case MC_KEEPER_LIST:
		if (p->count > MC_KEEPER_LIST_MAX)
			return refuse(r, "LIST of %u segments, %d at most", p->count, MC_KEEPER_LIST_MAX);
		if (p->list_flags & ~MC_KEEPER_LIST_FLAGS_KNOWN)
			return refuse(r, "LIST has unknown flags 0x%x",
				      p->list_flags & ~MC_KEEPER_LIST_FLAGS_KNOWN);
		/* Else a client following the cursor would ask again forever. */
		if ((p->list_flags & MC_KEEPER_LIST_MORE) && p->count == 0)
			return refuse(r, "LIST says more segments follow but holds none");
		return 0;
	default:
		return 0;
	}
}

/* LIST's records strictly increase by (name, owner uid, generation): one
 * key's released generations come before its live one, and the cursor
 * (name, owner uid) always moves on. */
static int check_order(const struct report *r, const struct mc_keeper_segment *s, unsigned int count)
{
	for (unsigned int i = 1; i < count; i++) {
		int order = strcmp(s[i - 1].name, s[i].name);

		if (order == 0 && s[i - 1].owner_uid == s[i].owner_uid)
			order = s[i - 1].generation < s[i].generation ? -1 : 1;
		else if (order == 0)
			order = s[i - 1].owner_uid < s[i].owner_uid ? -1 : 1;
		if (order > 0)
			return refuse(
				r,
				"LIST records are not in increasing (name, owner uid, generation) order at record %u",
				i);
	}
	return 0;
}

int mc_keeper_reply_encode(const struct mc_keeper_reply *rep, uint8_t *out, size_t room, char *why,
			   size_t why_size)
{
	const struct report r = { EINVAL, "keeper reply", why, why_size };
	size_t text_len = strnlen(rep->text, sizeof(rep->text));
	unsigned int records = 0;
	size_t body = 0, fixed = 0, length, at;
	int err;

	if (!is_reply_type(rep->type))
		return refuse(&r, "unknown reply type 0x%04x", rep->type);
	if ((err = check_text(&r, rep->text, text_len)) || (err = check_reply(&r, rep)))
		return err;
	if (rep->status == 0) {
		switch (rep->type & ~MC_KEEPER_REPLY) {
		case MC_KEEPER_HELLO:
			body = HELLO_BODY_BYTES;
			break;
		case MC_KEEPER_CREATE:
		case MC_KEEPER_JOIN:
			body = CREATE_BODY_BYTES;
			break;
		case MC_KEEPER_RELEASE:
			body = RELEASE_BODY_BYTES;
			break;
		case MC_KEEPER_STAT:
			records = 1;
			break;
		case MC_KEEPER_LIST:
			body = LIST_BODY_BYTES;
			records = rep->count;
			if ((err = check_order(&r, rep->segments, records)))
				return err;
			break;
		}
		fixed = body;
		for (unsigned int i = 0; i < records; i++) {
			size_t name_len = strnlen(rep->segments[i].name, sizeof(rep->segments[i].name));

			if ((err = check_record_lengths(&r, &rep->segments[i], name_len, i)) ||
			    (err = check_record(&r, &rep->segments[i], i)))
				return err;
			body += record_bytes(&rep->segments[i]);
		}
	}
	length = REPLY_PREFIX_BYTES + body + text_len;
	if (length > MC_KEEPER_MESSAGE_MAX)
		return refuse(&r, "%zu bytes, %d at most", length, MC_KEEPER_MESSAGE_MAX);
	if (length > room) {
		refuse(&r, "%zu bytes do not fit in %zu", length, room);
		return -EMSGSIZE;
	}

	memset(out, 0, length);
	put_header(out, rep->type, length, rep->sequence);
	mc_put_le32(out + 16, rep->status);
	mc_put_le16(out + 20, rep->field);
	mc_put_le16(out + 22, (uint16_t)text_len);
	at = REPLY_PREFIX_BYTES;
	if (rep->status == 0) {
		switch (rep->type & ~MC_KEEPER_REPLY) {
		case MC_KEEPER_HELLO:
			mc_put_le16(out + at, rep->version);
			mc_put_le32(out + at + 4, rep->keeper_pid);
			mc_put_le64(out + at + 8, rep->instance);
			mc_put_le32(out + at + 16, rep->message_max);
			mc_put_le32(out + at + 20, rep->kept);
			mc_put_le32(out + at + 24, rep->hello_flags);
			break;
		case MC_KEEPER_CREATE:
		case MC_KEEPER_JOIN:
			mc_put_le64(out + at, rep->generation);
			mc_put_le64(out + at + 8, rep->size);
			mc_put_le64(out + at + 16, rep->page_size);
			mc_put_le64(out + at + 24, rep->control_bytes);
			mc_put_le32(out + at + 32, rep->attach_flags);
			mc_put_le32(out + at + 36, rep->owner_uid);
			out[at + 40] = rep->descriptors;
			mc_put_le32(out + at + 44, rep->caller_uid);
			mc_put_le64(out + at + 48, rep->group_token);
			break;
		case MC_KEEPER_RELEASE:
			mc_put_le64(out + at, rep->generation);
			mc_put_le32(out + at + 8, rep->release_flags);
			break;
		case MC_KEEPER_LIST:
			mc_put_le16(out + at, rep->count);
			mc_put_le16(out + at + 2, rep->list_flags);
			break;
		}
		at += fixed;
		for (unsigned int i = 0; i < records; i++) {
			put_record(out + at, &rep->segments[i]);
			at += record_bytes(&rep->segments[i]);
		}
	}
	memcpy(out + at, rep->text, text_len);
	return (int)length;
}

static int decode_reply(const struct report *rr, const uint8_t *in, size_t len, struct mc_keeper_reply *rep)
{
	const struct report r = *rr;
	uint16_t type = 0, text_len;
	const uint8_t *body;
	size_t body_len, fixed = 0;
	unsigned int records = 0;
	int err;

	if ((err = decode_header(&r, in, len, &type, &rep->sequence)))
		return err;
	if (!(type & MC_KEEPER_REPLY))
		return refuse(&r, "type %u is a request, not a reply", type);
	if (!is_reply_type(type))
		return refuse(&r, "unknown type 0x%04x", type);
	if ((err = need_bytes(&r, type, REPLY_PREFIX_BYTES, len)))
		return err;
	rep->type = type;
	rep->status = mc_get_le32(in + 16);
	rep->field = mc_get_le16(in + 20);
	text_len = mc_get_le16(in + 22);
	if (text_len > len - REPLY_PREFIX_BYTES)
		return refuse(&r, "length mismatch: a message of %u bytes in a packet of %zu", text_len, len);
	if ((err = check_text(&r, (const char *)in + len - text_len, text_len)))
		return err;
	memcpy(rep->text, in + len - text_len, text_len);
	body = in + REPLY_PREFIX_BYTES;
	body_len = len - REPLY_PREFIX_BYTES - text_len;

	if (rep->status == 0) {
		switch (type & ~MC_KEEPER_REPLY) {
		case MC_KEEPER_HELLO:
			fixed = HELLO_BODY_BYTES;
			break;
		case MC_KEEPER_CREATE:
		case MC_KEEPER_JOIN:
			fixed = CREATE_BODY_BYTES;
			break;
		case MC_KEEPER_RELEASE:
			fixed = RELEASE_BODY_BYTES;
			break;
		case MC_KEEPER_LIST:
			fixed = LIST_BODY_BYTES;
			break;
		case MC_KEEPER_STAT:
			records = 1;
			break;
		}
	}
	if (body_len < fixed)
		return refuse(&r, "truncated: a %s reply's body is %zu bytes, the packet holds %zu",
			      mc_keeper_type_name(type), fixed, body_len);
	if (rep->status == 0) {
		switch (type & ~MC_KEEPER_REPLY) {
		case MC_KEEPER_HELLO:
			if ((err = reserved_zero(&r, in, REPLY_PREFIX_BYTES + 2, 2)) ||
			    (err = reserved_zero(&r, in, REPLY_PREFIX_BYTES + 28, 4)))
				return err;
			rep->version = mc_get_le16(body);
			rep->keeper_pid = mc_get_le32(body + 4);
			rep->instance = mc_get_le64(body + 8);
			rep->message_max = mc_get_le32(body + 16);
			rep->kept = mc_get_le32(body + 20);
			rep->hello_flags = mc_get_le32(body + 24);
			break;
		case MC_KEEPER_CREATE:
		case MC_KEEPER_JOIN:
			if ((err = reserved_zero(&r, in, REPLY_PREFIX_BYTES + 41, 3)))
				return err;
			rep->generation = mc_get_le64(body);
			rep->size = mc_get_le64(body + 8);
			rep->page_size = mc_get_le64(body + 16);
			rep->control_bytes = mc_get_le64(body + 24);
			rep->attach_flags = mc_get_le32(body + 32);
			rep->owner_uid = mc_get_le32(body + 36);
			rep->descriptors = body[40];
			rep->caller_uid = mc_get_le32(body + 44);
			rep->group_token = mc_get_le64(body + 48);
			break;
		case MC_KEEPER_RELEASE:
			if ((err = reserved_zero(&r, in, REPLY_PREFIX_BYTES + 12, 4)))
				return err;
			rep->generation = mc_get_le64(body);
			rep->release_flags = mc_get_le32(body + 8);
			break;
		case MC_KEEPER_LIST:
			if ((err = reserved_zero(&r, in, REPLY_PREFIX_BYTES + 4, 4)))
				return err;
			rep->count = mc_get_le16(body);
			rep->list_flags = mc_get_le16(body + 2);
			if (rep->count > MC_KEEPER_LIST_MAX)
				return refuse(&r, "LIST of %u segments, %d at most", rep->count,
					      MC_KEEPER_LIST_MAX);
			records = rep->count;
			break;
		}
		for (unsigned int i = 0; i < records; i++) {
			long used = get_record(&r, body + fixed, body_len - fixed, &rep->segments[i], i);

			if (used < 0)
				return (int)used;
			fixed += (size_t)used;
		}
	}
	if ((err = exact_bytes(&r, type, REPLY_PREFIX_BYTES + fixed + text_len, len)) ||
	    (err = check_reply(&r, rep)) || (err = check_order(&r, rep->segments, records)))
		return err;
	return 0;
}

int mc_keeper_reply_decode(const uint8_t *in, size_t len, struct mc_keeper_reply *rep, char *why,
			   size_t why_size)
{
	const struct report r = { EPROTO, "keeper reply", why, why_size };
	int err;

	memset(rep, 0, sizeof(*rep));
	err = decode_reply(&r, in, len, rep);
	if (err) {
		uint32_t sequence = rep->sequence;

		memset(rep, 0, sizeof(*rep));
		rep->sequence = sequence;
	}
	return err;
}
