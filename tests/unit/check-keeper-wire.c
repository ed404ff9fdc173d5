/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keeper's wire protocol (doc/keeper-protocol.md): every message makes
 * the round trip, the layout is pinned where a client of another build would
 * notice, and every rejection comes with the sentence that names it.  Inputs
 * live in buffers of exactly their length, so that valgrind and ASan catch a
 * decoder that reads one byte too far.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/little-endian.h"
#include "route/keeper-wire.h"

static char why[512];

/* Decode @len bytes copied into a buffer of exactly that size. */
static int decode_request_exact(const uint8_t *in, size_t len, struct mc_keeper_request *req)
{
	uint8_t *copy = malloc(len ? len : 1);
	int rc;

	ck_assert_ptr_nonnull(copy);
	memcpy(copy, in, len);
	why[0] = '\0';
	rc = mc_keeper_request_decode(copy, len, req, why, sizeof(why));
	free(copy);
	return rc;
}

static int decode_reply_exact(const uint8_t *in, size_t len, struct mc_keeper_reply *rep)
{
	uint8_t *copy = malloc(len ? len : 1);
	int rc;

	ck_assert_ptr_nonnull(copy);
	memcpy(copy, in, len);
	why[0] = '\0';
	rc = mc_keeper_reply_decode(copy, len, rep, why, sizeof(why));
	free(copy);
	return rc;
}

static void request_refused(const uint8_t *in, size_t len, const char *needle)
{
	struct mc_keeper_request req;

	ck_assert_int_eq(decode_request_exact(in, len, &req), -EPROTO);
	ck_assert_msg(strstr(why, needle), "expected \"%s\" in \"%s\"", needle, why);
	ck_assert_msg(strncmp(why, "keeper request: ", 16) == 0, "why: %s", why);
	ck_assert_uint_eq(req.type, 0);
}

/* Reply decoding uses a struct of 13 KiB: keep it off the check fork's small stacks. */
static struct mc_keeper_reply rep_in, rep_out;

static void reply_refused(const uint8_t *in, size_t len, const char *needle)
{
	ck_assert_int_eq(decode_reply_exact(in, len, &rep_out), -EPROTO);
	ck_assert_msg(strstr(why, needle), "expected \"%s\" in \"%s\"", needle, why);
	ck_assert_msg(strncmp(why, "keeper reply: ", 14) == 0, "why: %s", why);
	ck_assert_uint_eq(rep_out.type, 0);
}

static struct mc_keeper_request sample_create(void)
{
	struct mc_keeper_request q;

	memset(&q, 0, sizeof(q));
	q.type = MC_KEEPER_CREATE;
	q.sequence = 0x01020304;
	snprintf(q.name, sizeof(q.name), "%s", "kv-cache.llama-70b");
	q.fingerprint = UINT64_C(0x0123456789abcdef);
	q.size = UINT64_C(3) << 30;
	q.page_size = 2 << 20;
	q.control_bytes = 8192;
	q.world_size = 8;
	q.flags = MC_KEEPER_CREATE_HUGETLB | MC_KEEPER_CREATE_REPLACE;
	q.sharing = MC_KEEPER_SHARE_GROUP;
	q.gid = 4321;
	q.identity_bytes = 5;
	memcpy(q.identity, "bf16\0", 5);
	return q;
}

static size_t encode_request(const struct mc_keeper_request *q, uint8_t *out, size_t room)
{
	int n = mc_keeper_request_encode(q, out, room, why, sizeof(why));

	ck_assert_msg(n > 0, "encode: %d %s", n, why);
	return (size_t)n;
}

static size_t encode_reply(const struct mc_keeper_reply *p, uint8_t *out, size_t room)
{
	int n = mc_keeper_reply_encode(p, out, room, why, sizeof(why));

	ck_assert_msg(n > 0, "encode: %d %s", n, why);
	return (size_t)n;
}

static void sample_record(struct mc_keeper_segment *s, const char *name)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->fingerprint = UINT64_C(0xfeedface00c0ffee);
	s->size = UINT64_C(4) << 30;
	s->page_size = 4096;
	s->control_bytes = 4096;
	s->generation = 77;
	s->created = UINT64_C(1700000000);
	s->world_size = 4;
	s->owner_uid = 1000;
	s->sharing = MC_KEEPER_SHARE_UID;
	s->flags = MC_KEEPER_SEGMENT_RELEASED;
	s->mappers = 3;
	s->warm_attaches = 12;
	s->dev_major = 0;
	s->dev_minor = 0x2a;
	s->ino = UINT64_C(0x100000007);
	s->identity_bytes = 3;
	memcpy(s->identity, "abc", 3);
}

static void assert_same_record(const struct mc_keeper_segment *a, const struct mc_keeper_segment *b)
{
	ck_assert_str_eq(a->name, b->name);
	ck_assert_uint_eq(a->fingerprint, b->fingerprint);
	ck_assert_uint_eq(a->size, b->size);
	ck_assert_uint_eq(a->page_size, b->page_size);
	ck_assert_uint_eq(a->control_bytes, b->control_bytes);
	ck_assert_uint_eq(a->generation, b->generation);
	ck_assert_uint_eq(a->created, b->created);
	ck_assert_uint_eq(a->world_size, b->world_size);
	ck_assert_uint_eq(a->owner_uid, b->owner_uid);
	ck_assert_uint_eq(a->gid, b->gid);
	ck_assert_uint_eq(a->sharing, b->sharing);
	ck_assert_uint_eq(a->flags, b->flags);
	ck_assert_uint_eq(a->mappers, b->mappers);
	ck_assert_uint_eq(a->warm_attaches, b->warm_attaches);
	ck_assert_uint_eq(a->dev_major, b->dev_major);
	ck_assert_uint_eq(a->dev_minor, b->dev_minor);
	ck_assert_uint_eq(a->ino, b->ino);
	ck_assert_uint_eq(a->identity_bytes, b->identity_bytes);
	ck_assert_mem_eq(a->identity, b->identity, a->identity_bytes);
}

/* --- round trips ------------------------------------------------------------ */

START_TEST(test_create_request_round_trip_and_layout)
{
	struct mc_keeper_request q = sample_create(), d;
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len = encode_request(&q, buf, sizeof(buf));

	ck_assert_uint_eq(len, 72 + strlen(q.name) + 5);
	ck_assert_mem_eq(buf, "MCKP", 4);
	ck_assert_uint_eq(mc_get_le16(buf + 4), MC_KEEPER_VERSION);
	ck_assert_uint_eq(mc_get_le16(buf + 6), MC_KEEPER_CREATE);
	ck_assert_uint_eq(mc_get_le32(buf + 8), len);
	ck_assert_uint_eq(mc_get_le32(buf + 12), 0x01020304);
	ck_assert_uint_eq(mc_get_le64(buf + 16), q.fingerprint);
	ck_assert_uint_eq(mc_get_le64(buf + 24), q.size);
	ck_assert_uint_eq(mc_get_le64(buf + 32), q.page_size);
	ck_assert_uint_eq(mc_get_le64(buf + 40), q.control_bytes);
	ck_assert_uint_eq(mc_get_le32(buf + 48), 8);
	ck_assert_uint_eq(mc_get_le32(buf + 52), q.flags);
	ck_assert_uint_eq(buf[56], MC_KEEPER_SHARE_GROUP);
	ck_assert_uint_eq(buf[57], 0); /* the caller's own segment */
	ck_assert_uint_eq(mc_get_le32(buf + 60), 4321);
	ck_assert_uint_eq(mc_get_le32(buf + 68), 0);
	ck_assert_uint_eq(mc_get_le16(buf + 64), strlen(q.name));
	ck_assert_uint_eq(mc_get_le16(buf + 66), 5);
	ck_assert_mem_eq(buf + 72, q.name, strlen(q.name));

	ck_assert_int_eq(decode_request_exact(buf, len, &d), 0);
	ck_assert_uint_eq(d.type, MC_KEEPER_CREATE);
	ck_assert_uint_eq(d.sequence, q.sequence);
	ck_assert_str_eq(d.name, q.name);
	ck_assert_uint_eq(d.fingerprint, q.fingerprint);
	ck_assert_uint_eq(d.size, q.size);
	ck_assert_uint_eq(d.page_size, q.page_size);
	ck_assert_uint_eq(d.control_bytes, q.control_bytes);
	ck_assert_uint_eq(d.world_size, q.world_size);
	ck_assert_uint_eq(d.flags, q.flags);
	ck_assert_uint_eq(d.sharing, q.sharing);
	ck_assert_uint_eq(d.gid, q.gid);
	ck_assert_uint_eq(d.identity_bytes, 5);
	ck_assert_mem_eq(d.identity, "bf16\0", 5);
	ck_assert(!d.owner_given);
	ck_assert_uint_eq(d.owner_uid, 0);
}
END_TEST

/* The declaration (the name create() was given) travels after the identity,
 * its length at 58; none is 0 bytes, as a CREATE without one always was. */
START_TEST(test_create_request_carries_the_declaration)
{
	static const char declaration[] =
		"kv|k:64:1024x8:torch.float16:16384;v:64:1024x8:torch.float16:16384";
	struct mc_keeper_request q = sample_create(), d;
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len, fixed = 72 + strlen(q.name) + 5;

	len = encode_request(&q, buf, sizeof(buf));
	ck_assert_uint_eq(len, fixed);
	ck_assert_uint_eq(mc_get_le16(buf + 58), 0);
	ck_assert_int_eq(decode_request_exact(buf, len, &d), 0);
	ck_assert_uint_eq(d.declaration_bytes, 0);
	ck_assert_str_eq(d.declaration, "");

	q.declaration_bytes = (uint16_t)strlen(declaration);
	memcpy(q.declaration, declaration, sizeof(declaration));
	len = encode_request(&q, buf, sizeof(buf));
	ck_assert_uint_eq(len, fixed + strlen(declaration));
	ck_assert_uint_eq(mc_get_le16(buf + 58), strlen(declaration));
	ck_assert_mem_eq(buf + 72 + strlen(q.name), "bf16\0", 5); /* the identity still before it */
	ck_assert_mem_eq(buf + fixed, declaration, strlen(declaration));
	ck_assert_int_eq(decode_request_exact(buf, len, &d), 0);
	ck_assert_uint_eq(d.declaration_bytes, strlen(declaration));
	ck_assert_str_eq(d.declaration, declaration);
	ck_assert_uint_eq(d.identity_bytes, 5);
	ck_assert_mem_eq(d.identity, "bf16\0", 5);
	ck_assert_str_eq(d.name, q.name);

	/* A declaration is printable ASCII: a byte outside is refused both ways. */
	buf[fixed + 2] = '\n';
	request_refused(buf, len, "declaration has byte 0x0a at 2, not printable ASCII");
	q.declaration[2] = '\x7f';
	ck_assert_int_eq(mc_keeper_request_encode(&q, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "declaration has byte 0x7f at 2"), "why: %s", why);

	/* At most MC_KEEPER_DECLARATION_MAX bytes, with the longest name and identity still one message. */
	memset(q.name, 'n', MC_KEEPER_NAME_MAX);
	q.name[MC_KEEPER_NAME_MAX] = '\0';
	q.identity_bytes = MC_KEEPER_IDENTITY_MAX;
	memset(q.declaration, 'd', MC_KEEPER_DECLARATION_MAX);
	q.declaration_bytes = MC_KEEPER_DECLARATION_MAX;
	len = encode_request(&q, buf, sizeof(buf));
	ck_assert_uint_eq(len, 72 + MC_KEEPER_NAME_MAX + MC_KEEPER_IDENTITY_MAX + MC_KEEPER_DECLARATION_MAX);
	ck_assert_int_eq(decode_request_exact(buf, len, &d), 0);
	ck_assert_uint_eq(d.declaration_bytes, MC_KEEPER_DECLARATION_MAX);
	ck_assert_uint_eq(strlen(d.declaration), MC_KEEPER_DECLARATION_MAX);
	q.declaration_bytes = MC_KEEPER_DECLARATION_MAX + 1;
	ck_assert_int_eq(mc_keeper_request_encode(&q, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "declaration of 4097 bytes, 4096 at most"), "why: %s", why);
	/* The same on the wire: the lengths agreeing, one byte too many. */
	memset(buf + len, 'd', 1);
	mc_put_le16(buf + 58, MC_KEEPER_DECLARATION_MAX + 1);
	mc_put_le32(buf + 8, (uint32_t)len + 1);
	request_refused(buf, len + 1, "declaration of 4097 bytes, 4096 at most");
	ck_assert_str_eq(mc_keeper_field_name(MC_KEEPER_FIELD_NAME), "name");
	ck_assert_str_eq(mc_keeper_field_name(MC_KEEPER_FIELD_BLOCK), "block");
}
END_TEST

/* Names are per uid: CREATE, STAT, RELEASE name an owner; LIST a cursor's. */
START_TEST(test_requests_carry_the_owner)
{
	const uint16_t types[] = { MC_KEEPER_CREATE, MC_KEEPER_STAT, MC_KEEPER_RELEASE, MC_KEEPER_LIST };
	const size_t flag_at[] = { 57, 18, 18, 18 }, uid_at[] = { 68, 20, 20, 20 };

	for (unsigned int i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct mc_keeper_request q = sample_create(), d;
		uint8_t buf[MC_KEEPER_MESSAGE_MAX];
		size_t len;

		q.type = types[i];
		q.owner_given = true;
		q.owner_uid = UINT32_C(0xfffffffe);
		len = encode_request(&q, buf, sizeof(buf));
		ck_assert_uint_eq(buf[flag_at[i]], 1);
		ck_assert_uint_eq(mc_get_le32(buf + uid_at[i]), 0xfffffffe);
		ck_assert_int_eq(decode_request_exact(buf, len, &d), 0);
		ck_assert(d.owner_given);
		ck_assert_uint_eq(d.owner_uid, 0xfffffffe);
		/* Owner uid 0 given is root's segment, not "none". */
		q.owner_uid = 0;
		len = encode_request(&q, buf, sizeof(buf));
		ck_assert_int_eq(decode_request_exact(buf, len, &d), 0);
		ck_assert(d.owner_given);
		ck_assert_uint_eq(d.owner_uid, 0);
	}
}
END_TEST

START_TEST(test_create_request_at_its_limits)
{
	struct mc_keeper_request q = sample_create(), d;
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	memset(q.name, 'n', MC_KEEPER_NAME_MAX);
	q.name[MC_KEEPER_NAME_MAX] = '\0';
	q.identity_bytes = MC_KEEPER_IDENTITY_MAX;
	memset(q.identity, 0xff, MC_KEEPER_IDENTITY_MAX);
	q.page_size = 0;
	q.sharing = MC_KEEPER_SHARE_ANY;
	q.gid = 0;
	q.flags = MC_KEEPER_CREATE_ATTACH_ONLY;
	len = encode_request(&q, buf, sizeof(buf));
	ck_assert_uint_eq(len, 72 + MC_KEEPER_NAME_MAX + MC_KEEPER_IDENTITY_MAX);
	ck_assert_int_eq(decode_request_exact(buf, len, &d), 0);
	ck_assert_uint_eq(strlen(d.name), MC_KEEPER_NAME_MAX);
	ck_assert_uint_eq(d.identity_bytes, MC_KEEPER_IDENTITY_MAX);
	ck_assert_uint_eq(d.page_size, 0);
}
END_TEST

START_TEST(test_small_requests_round_trip)
{
	const uint16_t types[] = { MC_KEEPER_HELLO, MC_KEEPER_LIST, MC_KEEPER_LIST, MC_KEEPER_RELEASE,
				   MC_KEEPER_STAT };
	const char *names[] = { "", "", "after-this", "old:segment", "~x" };
	const size_t lengths[] = { 24, 24, 34, 35, 26 };

	for (unsigned int i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct mc_keeper_request q, d;
		uint8_t buf[MC_KEEPER_MESSAGE_MAX];
		size_t len;

		memset(&q, 0, sizeof(q));
		q.type = types[i];
		q.sequence = 100 + i;
		snprintf(q.name, sizeof(q.name), "%s", names[i]);
		len = encode_request(&q, buf, sizeof(buf));
		ck_assert_uint_eq(len, lengths[i]);
		ck_assert_int_eq(decode_request_exact(buf, len, &d), 0);
		ck_assert_uint_eq(d.type, types[i]);
		ck_assert_uint_eq(d.sequence, 100 + i);
		ck_assert_str_eq(d.name, names[i]);
	}
}
END_TEST

START_TEST(test_hello_reply_round_trip)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_HELLO;
	rep_in.sequence = 9;
	rep_in.version = 1;
	rep_in.keeper_pid = 31337;
	rep_in.instance = UINT64_C(0x1122334455667788);
	rep_in.message_max = MC_KEEPER_MESSAGE_MAX;
	rep_in.kept = 100;
	rep_in.hello_flags = MC_KEEPER_HELLO_FDSTORE;
	snprintf(rep_in.text, sizeof(rep_in.text), "%s", "mooncake-segmentd 0.4.0");
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_uint_eq(len, 24 + 32 + strlen(rep_in.text));
	ck_assert_uint_eq(mc_get_le16(buf + 6), 0x8001);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.type, rep_in.type);
	ck_assert_uint_eq(rep_out.sequence, 9);
	ck_assert_uint_eq(rep_out.status, 0);
	ck_assert_uint_eq(rep_out.version, 1);
	ck_assert_uint_eq(rep_out.keeper_pid, 31337);
	ck_assert_uint_eq(rep_out.instance, rep_in.instance);
	ck_assert_uint_eq(rep_out.message_max, MC_KEEPER_MESSAGE_MAX);
	ck_assert_uint_eq(rep_out.kept, 100);
	ck_assert_uint_eq(rep_out.hello_flags, MC_KEEPER_HELLO_FDSTORE);
	ck_assert_str_eq(rep_out.text, rep_in.text);
}
END_TEST

static void fill_create_reply(void)
{
	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_CREATE;
	rep_in.sequence = 5;
	rep_in.generation = 3;
	rep_in.size = UINT64_C(4) << 30;
	rep_in.page_size = 2 << 20;
	rep_in.control_bytes = 8192;
	rep_in.attach_flags = MC_KEEPER_ATTACH_WARM | MC_KEEPER_ATTACH_HUGETLB;
	rep_in.owner_uid = 1000;
	rep_in.descriptors = 2;
	rep_in.caller_uid = 100000;
	rep_in.group_token = 0x0123456789abcdefULL;
}

START_TEST(test_create_reply_round_trip)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	fill_create_reply();
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_uint_eq(len, 24 + 56);
	ck_assert_uint_eq(buf[24 + 40], 2);
	ck_assert_uint_eq(mc_get_le64(buf + 24 + 48), 0x0123456789abcdefULL);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.generation, 3);
	ck_assert_uint_eq(rep_out.size, rep_in.size);
	ck_assert_uint_eq(rep_out.page_size, rep_in.page_size);
	ck_assert_uint_eq(rep_out.control_bytes, 8192);
	ck_assert_uint_eq(rep_out.attach_flags, rep_in.attach_flags);
	ck_assert_uint_eq(rep_out.owner_uid, 1000);
	ck_assert_uint_eq(rep_out.descriptors, 2);
	ck_assert_uint_eq(mc_get_le32(buf + 24 + 44), 100000);
	ck_assert_uint_eq(rep_out.caller_uid, 100000);
	ck_assert(rep_out.group_token == rep_in.group_token);
	ck_assert_str_eq(rep_out.text, "");
}
END_TEST

static struct mc_keeper_request sample_join(void)
{
	struct mc_keeper_request q;

	memset(&q, 0, sizeof(q));
	q.type = MC_KEEPER_JOIN;
	q.sequence = 0x01020304;
	snprintf(q.name, sizeof(q.name), "kv");
	q.owner_given = true;
	q.owner_uid = 1000;
	q.generation = 0x1122334455667788ULL;
	q.token = 0x0123456789abcdefULL;
	return q;
}

START_TEST(test_join_request_round_trip_and_layout)
{
	struct mc_keeper_request q = sample_join(), out;
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	int len = mc_keeper_request_encode(&q, buf, sizeof(buf), why, sizeof(why));

	ck_assert_msg(len == 40 + 2, "%d %s", len, why);
	ck_assert_uint_eq(mc_get_le16(buf + 6), MC_KEEPER_JOIN);
	ck_assert(mc_get_le64(buf + 16) == q.generation);
	ck_assert(mc_get_le64(buf + 24) == q.token);
	ck_assert_uint_eq(mc_get_le32(buf + 32), 1000);
	ck_assert_uint_eq(mc_get_le16(buf + 36), 2);
	ck_assert_mem_eq(buf + 40, "kv", 2);
	ck_assert_int_eq(decode_request_exact(buf, (size_t)len, &out), 0);
	ck_assert_uint_eq(out.type, MC_KEEPER_JOIN);
	ck_assert_str_eq(out.name, "kv");
	ck_assert(out.owner_given);
	ck_assert_uint_eq(out.owner_uid, 1000);
	ck_assert(out.generation == q.generation && out.token == q.token);
	ck_assert_str_eq(mc_keeper_type_name(MC_KEEPER_JOIN | MC_KEEPER_REPLY), "JOIN");
	/* Refused on the wire: no generation, no token, reserved bytes, a bad name, a cut packet. */
	mc_put_le64(buf + 16, 0);
	request_refused(buf, (size_t)len, "JOIN with generation 0 and token");
	mc_put_le64(buf + 16, q.generation);
	mc_put_le64(buf + 24, 0);
	request_refused(buf, (size_t)len, "neither may be 0");
	mc_put_le64(buf + 24, q.token);
	buf[39] = 1;
	request_refused(buf, (size_t)len, "reserved bytes 38..39 are not zero");
	buf[39] = 0;
	buf[41] = '/';
	request_refused(buf, (size_t)len, "segment name has '/' at byte 1");
	buf[41] = 'v';
	mc_put_le32(buf + 8, (uint32_t)len - 1);
	request_refused(buf, (size_t)len - 1, "length mismatch");
	/* The encoder refuses the same struct. */
	q.token = 0;
	ck_assert_int_eq(mc_keeper_request_encode(&q, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	q = sample_join();
	q.owner_given = false;
	q.owner_uid = 0;
	ck_assert_int_eq(mc_keeper_request_encode(&q, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "JOIN names no owner uid"), "why: %s", why);
}
END_TEST

START_TEST(test_join_reply_round_trip_and_refusals)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	fill_create_reply();
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_JOIN;
	rep_in.attach_flags = MC_KEEPER_ATTACH_HUGETLB;
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_uint_eq(len, 24 + 56);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.generation, 3);
	ck_assert_uint_eq(rep_out.descriptors, 2);
	ck_assert(rep_out.group_token == rep_in.group_token);
	mc_put_le32(buf + 24 + 32, MC_KEEPER_ATTACH_WARM);
	reply_refused(buf, len, "JOIN has flags 0x1 besides hugetlb");
	mc_put_le32(buf + 24 + 32, 0);
	mc_put_le64(buf + 24 + 48, 0);
	reply_refused(buf, len, "JOIN announces 2 descriptors, a control area of 8192 bytes and token 0");
	/* A CREATE reply's token needs a control area. */
	fill_create_reply();
	rep_in.control_bytes = 0;
	rep_in.descriptors = 1;
	ck_assert_int_eq(mc_keeper_reply_encode(&rep_in, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "names a group token without a control area"), "why: %s", why);
}
END_TEST

START_TEST(test_refusal_carries_errno_field_and_sentence_only)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_CREATE;
	rep_in.status = EEXIST;
	rep_in.field = MC_KEEPER_FIELD_SIZE;
	snprintf(rep_in.text, sizeof(rep_in.text), "%s",
		 "kept segment \"kv\" has size 4294967296, this create asks for 2147483648");
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_uint_eq(len, 24 + strlen(rep_in.text));
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.status, EEXIST);
	ck_assert_uint_eq(rep_out.field, MC_KEEPER_FIELD_SIZE);
	ck_assert_str_eq(rep_out.text, rep_in.text);
	ck_assert_uint_eq(rep_out.descriptors, 0);
	ck_assert_str_eq(mc_keeper_field_name(rep_out.field), "size");

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_ERROR;
	rep_in.sequence = 77;
	rep_in.status = EPROTO;
	snprintf(rep_in.text, sizeof(rep_in.text), "%s", "keeper request: unknown type 9");
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.type, MC_KEEPER_ERROR);
	ck_assert_uint_eq(rep_out.sequence, 77);
	ck_assert_str_eq(rep_out.text, rep_in.text);
}
END_TEST

START_TEST(test_release_and_stat_replies_round_trip)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_RELEASE;
	rep_in.generation = 12;
	rep_in.release_flags = MC_KEEPER_RELEASE_DEFERRED;
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_uint_eq(len, 24 + 16);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.generation, 12);
	ck_assert_uint_eq(rep_out.release_flags, MC_KEEPER_RELEASE_DEFERRED);

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_STAT;
	sample_record(&rep_in.segments[0], "kv");
	rep_in.segments[0].sharing = MC_KEEPER_SHARE_GROUP;
	rep_in.segments[0].gid = 100;
	rep_in.segments[0].mappers = MC_KEEPER_MAPPERS_UNKNOWN;
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_uint_eq(len, 24 + 96 + 2 + 3);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	assert_same_record(&rep_out.segments[0], &rep_in.segments[0]);
	/* Where the record's pages are: device major, minor, inode at 80, 84, 88. */
	ck_assert_uint_eq(mc_get_le32(buf + 24 + 80), 0);
	ck_assert_uint_eq(mc_get_le32(buf + 24 + 84), 0x2a);
	ck_assert_uint_eq(mc_get_le64(buf + 24 + 88), UINT64_C(0x100000007));
	ck_assert_mem_eq(buf + 24 + 96, "kv", 2);
}
END_TEST

START_TEST(test_full_list_reply_round_trip)
{
	static uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_LIST;
	rep_in.count = MC_KEEPER_LIST_MAX;
	rep_in.list_flags = MC_KEEPER_LIST_MORE;
	/* The largest LIST: every name and identity at its maximum, and a full sentence. */
	for (unsigned int i = 0; i < MC_KEEPER_LIST_MAX; i++) {
		struct mc_keeper_segment *s = &rep_in.segments[i];

		sample_record(s, "");
		memset(s->name, 'n', MC_KEEPER_NAME_MAX);
		s->name[0] = (char)('A' + (int)i); /* 'A'..'`': increasing */
		s->identity_bytes = MC_KEEPER_IDENTITY_MAX;
		memset(s->identity, (int)i, MC_KEEPER_IDENTITY_MAX);
		s->generation = i;
	}
	memset(rep_in.text, 'x', MC_KEEPER_TEXT_MAX);
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_uint_le(len, MC_KEEPER_MESSAGE_MAX);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.count, MC_KEEPER_LIST_MAX);
	ck_assert_uint_eq(rep_out.list_flags, MC_KEEPER_LIST_MORE);
	for (unsigned int i = 0; i < MC_KEEPER_LIST_MAX; i++)
		assert_same_record(&rep_out.segments[i], &rep_in.segments[i]);
	ck_assert_uint_eq(strlen(rep_out.text), MC_KEEPER_TEXT_MAX);

	/* The last page, empty. */
	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_LIST;
	len = encode_reply(&rep_in, buf, sizeof(buf));
	ck_assert_uint_eq(len, 24 + 8);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.count, 0);
}
END_TEST

/* --- what the header and the lengths refuse ------------------------------ */

static size_t valid_create(uint8_t *buf)
{
	struct mc_keeper_request q = sample_create();

	return encode_request(&q, buf, MC_KEEPER_MESSAGE_MAX);
}

START_TEST(test_truncated_packets)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len = valid_create(buf);

	request_refused(buf, 0, "truncated: 0 bytes, shorter than the 16-byte header");
	request_refused(buf, 15, "truncated: 15 bytes");
	/* A header that agrees with a packet cut inside the fixed part. */
	mc_put_le32(buf + 8, 40);
	request_refused(buf, 40, "truncated: a CREATE message is at least 72 bytes, the packet has 40");
	/* Every shorter prefix of a valid message, whatever its header says. */
	mc_put_le32(buf + 8, (uint32_t)len);
	for (size_t cut = 0; cut < len; cut++) {
		struct mc_keeper_request req;

		ck_assert_int_eq(decode_request_exact(buf, cut, &req), -EPROTO);
	}
}
END_TEST

START_TEST(test_over_long_packet)
{
	static uint8_t buf[MC_KEEPER_MESSAGE_MAX + 1];

	valid_create(buf);
	mc_put_le32(buf + 8, MC_KEEPER_MESSAGE_MAX + 1);
	request_refused(buf, sizeof(buf), "over-long: 16385 bytes, 16384 at most");
	reply_refused(buf, sizeof(buf), "over-long: 16385 bytes");
}
END_TEST

START_TEST(test_bad_magic_and_version)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len = valid_create(buf);

	buf[0] = 'X';
	request_refused(buf, len, "magic mismatch: 0x504b4358, expected 0x504b434d");
	buf[0] = 'M';
	mc_put_le16(buf + 4, 2);
	request_refused(buf, len, "version mismatch: protocol version 2, this build speaks 1");
	reply_refused(buf, len, "version mismatch");
}
END_TEST

START_TEST(test_length_mismatch)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len = valid_create(buf);

	/* The header disagrees with the packet. */
	request_refused(buf, len - 1, "length mismatch: the header says");
	/* The header agrees, the name length does not. */
	mc_put_le16(buf + 64, (uint16_t)(mc_get_le16(buf + 64) + 1));
	request_refused(buf, len, "length mismatch: the CREATE message's fields add up to");
	mc_put_le16(buf + 64, 0xffff);
	request_refused(buf, len, "length mismatch");
	/* Trailing bytes after a HELLO. */
	memset(buf, 0, 32);
	mc_put_le32(buf, MC_KEEPER_MAGIC);
	mc_put_le16(buf + 4, 1);
	mc_put_le16(buf + 6, MC_KEEPER_HELLO);
	mc_put_le32(buf + 8, 32);
	request_refused(buf, 32, "length mismatch: the HELLO message's fields add up to 24 bytes");
}
END_TEST

START_TEST(test_unknown_types)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len = valid_create(buf);
	struct mc_keeper_request req;

	mc_put_le16(buf + 6, 9);
	request_refused(buf, len, "unknown type 9");
	mc_put_le16(buf + 6, 0);
	request_refused(buf, len, "unknown type 0");
	mc_put_le16(buf + 6, MC_KEEPER_REPLY | MC_KEEPER_CREATE);
	request_refused(buf, len, "type 0x8002 is a reply, not a request");
	mc_put_le16(buf + 6, MC_KEEPER_REPLY | 9);
	reply_refused(buf, len, "unknown type 0x8009");
	mc_put_le16(buf + 6, MC_KEEPER_CREATE);
	reply_refused(buf, len, "type 2 is a request, not a reply");
	/* The sequence survives a refusal, for the ERROR reply. */
	mc_put_le16(buf + 6, 9);
	ck_assert_int_eq(decode_request_exact(buf, len, &req), -EPROTO);
	ck_assert_uint_eq(req.sequence, 0x01020304);
}
END_TEST

START_TEST(test_reserved_bytes_must_be_zero)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	struct mc_keeper_request q;
	size_t len;

	/* CREATE's bytes 58..59 are the declaration's length: one not in the packet is refused. */
	for (unsigned int at = 58; at <= 59; at++) {
		len = valid_create(buf);
		buf[at] = 1;
		request_refused(buf, len, "length mismatch: the CREATE message's fields add up to");
	}
	memset(&q, 0, sizeof(q));
	q.type = MC_KEEPER_STAT;
	snprintf(q.name, sizeof(q.name), "%s", "kv");
	len = encode_request(&q, buf, sizeof(buf));
	buf[19] = 0x80;
	request_refused(buf, len, "reserved bytes 19..19 are not zero");
	buf[19] = 0;
	/* The owner's fields: a flag that is 0 or 1, a uid only with it. */
	buf[18] = 2;
	request_refused(buf, len, "STAT has owner-given byte 2, not 0 or 1");
	buf[18] = 0;
	buf[23] = 0x80;
	request_refused(buf, len, "STAT names owner uid 2147483648 without the owner-given flag");
	q.type = MC_KEEPER_LIST;
	q.name[0] = '\0';
	len = encode_request(&q, buf, sizeof(buf));
	buf[18] = 1;
	request_refused(buf, len, "LIST names a cursor owner uid without a cursor name");
	len = valid_create(buf);
	buf[57] = 2;
	request_refused(buf, len, "CREATE has owner-given byte 2, not 0 or 1");
	buf[57] = 0;
	buf[68] = 1;
	request_refused(buf, len, "CREATE names owner uid 1 without the owner-given flag");
	q.type = MC_KEEPER_HELLO;
	len = encode_request(&q, buf, sizeof(buf));
	buf[16] = 1;
	request_refused(buf, len, "reserved bytes 16..23 are not zero");
}
END_TEST

/* --- what the fields refuse ------------------------------------------------- */

/* A CREATE whose name is @name (@name_len bytes, any bytes). */
static size_t create_named(uint8_t *buf, const char *name, size_t name_len)
{
	struct mc_keeper_request q = sample_create();
	size_t len = 72 + name_len;

	q.identity_bytes = 0;
	snprintf(q.name, sizeof(q.name), "%s", "x");
	ck_assert_uint_eq(encode_request(&q, buf, MC_KEEPER_MESSAGE_MAX), 72 + 1);
	memcpy(buf + 72, name, name_len);
	mc_put_le16(buf + 64, (uint16_t)name_len);
	mc_put_le32(buf + 8, (uint32_t)len);
	return len;
}

START_TEST(test_bad_names)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	char long_name[MC_KEEPER_NAME_MAX + 1];
	size_t len;

	len = create_named(buf, "", 0);
	request_refused(buf, len, "segment name is empty");
	len = create_named(buf, "a/b", 3);
	request_refused(buf, len, "segment name has '/' at byte 1");
	len = create_named(buf, "a b", 3);
	request_refused(buf, len, "segment name has byte 0x20 at 1");
	len = create_named(buf, "ab\n", 3);
	request_refused(buf, len, "segment name has byte 0x0a at 2");
	len = create_named(buf, "a\0b", 3);
	request_refused(buf, len, "segment name has byte 0x00 at 1");
	len = create_named(buf, "\xc3\xa9", 2);
	request_refused(buf, len, "segment name has byte 0xc3 at 0");
	len = create_named(buf, "\x7f", 1);
	request_refused(buf, len, "segment name has byte 0x7f at 0");
	len = create_named(buf, ".", 1);
	request_refused(buf, len, "segment name is \".\" or \"..\"");
	len = create_named(buf, "..", 2);
	request_refused(buf, len, "segment name is \".\" or \"..\"");
	memset(long_name, 'n', sizeof(long_name));
	len = create_named(buf, long_name, sizeof(long_name));
	request_refused(buf, len, "segment name is 256 bytes, 255 at most");
	/* "..." and ".x" are names like any other. */
	ck_assert(mc_keeper_name_valid("...", 3, NULL, 0));
	ck_assert(mc_keeper_name_valid(".x", 2, NULL, 0));
}
END_TEST

START_TEST(test_named_requests_need_a_name_list_does_not)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	struct mc_keeper_request q;
	size_t len;

	memset(&q, 0, sizeof(q));
	q.type = MC_KEEPER_LIST;
	len = encode_request(&q, buf, sizeof(buf));
	mc_put_le16(buf + 6, MC_KEEPER_RELEASE);
	request_refused(buf, len, "segment name is empty");
	mc_put_le16(buf + 6, MC_KEEPER_STAT);
	request_refused(buf, len, "segment name is empty");
	q.type = MC_KEEPER_LIST;
	snprintf(q.name, sizeof(q.name), "%s", "c/d");
	ck_assert_int_eq(mc_keeper_request_encode(&q, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "segment name has '/' at byte 1"), "why: %s", why);
}
END_TEST

START_TEST(test_bad_create_fields)
{
	static const struct {
		size_t offset;
		unsigned int bytes;
		uint64_t value;
		const char *needle;
	} cases[] = {
		{ 24, 8, 0, "CREATE of size 0" },
		{ 32, 8, 3 << 20, "page size 3145728 is neither 0 nor a power of two" },
		{ 48, 4, 0, "CREATE with world size 0" },
		{ 52, 4, 1u << 7, "CREATE has unknown flags 0x80" },
		{ 52, 4, MC_KEEPER_CREATE_ATTACH_ONLY | MC_KEEPER_CREATE_CREATE_ONLY,
		  "both attach-only and create-only" },
		{ 56, 1, 3, "unknown sharing mode 3" },
		{ 56, 1, MC_KEEPER_SHARE_ANY, "gid 4321 given without the group sharing mode" },
	};
	static const uint64_t group_sizes[] = { 0, 4097, MC_KEEPER_GROUP_CONTROL_MAX + 4096 };
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	struct mc_keeper_request q;
	size_t len;

	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		len = valid_create(buf);
		mc_put_le(buf + cases[i].offset, cases[i].value, cases[i].bytes);
		request_refused(buf, len, cases[i].needle);
	}
	/* A group control area: a positive multiple of 4096, 16 MiB at most. */
	for (unsigned int i = 0; i < sizeof(group_sizes) / sizeof(group_sizes[0]); i++) {
		len = valid_create(buf);
		mc_put_le32(buf + 52, MC_KEEPER_CREATE_GROUP_CONTROL);
		mc_put_le64(buf + 40, group_sizes[i]);
		request_refused(buf, len, "CREATE with a group control area of");
	}
	len = valid_create(buf);
	mc_put_le32(buf + 52, MC_KEEPER_CREATE_GROUP_CONTROL);
	mc_put_le64(buf + 40, MC_KEEPER_GROUP_CONTROL_MAX);
	ck_assert_int_eq(decode_request_exact(buf, len, &q), 0);
	ck_assert_uint_eq(q.flags, MC_KEEPER_CREATE_GROUP_CONTROL);
	/* An identity over 64 bytes, the length agreeing. */
	len = valid_create(buf);
	mc_put_le16(buf + 66, MC_KEEPER_IDENTITY_MAX + 1);
	memset(buf + len, 0, MC_KEEPER_IDENTITY_MAX + 1 - 5);
	len += MC_KEEPER_IDENTITY_MAX + 1 - 5;
	mc_put_le32(buf + 8, (uint32_t)len);
	request_refused(buf, len, "identity of 65 bytes, 64 at most");
	/* One that fills the largest packet: copied unchecked, it would run far past the struct. */
	len = valid_create(buf);
	mc_put_le16(buf + 66, (uint16_t)(MC_KEEPER_MESSAGE_MAX - len + 5));
	memset(buf + len, 0, MC_KEEPER_MESSAGE_MAX - len);
	mc_put_le32(buf + 8, MC_KEEPER_MESSAGE_MAX);
	request_refused(buf, MC_KEEPER_MESSAGE_MAX, "at most");
	ck_assert_msg(strstr(why, "identity of 16294 bytes, 64 at most"), "why: %s", why);
	/* The encoder refuses the same. */
	q = sample_create();
	q.world_size = 0;
	ck_assert_int_eq(mc_keeper_request_encode(&q, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "CREATE with world size 0"), "why: %s", why);
	q = sample_create();
	q.identity_bytes = MC_KEEPER_IDENTITY_MAX + 1;
	ck_assert_int_eq(mc_keeper_request_encode(&q, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	q = sample_create();
	ck_assert_int_eq(mc_keeper_request_encode(&q, buf, 72, why, sizeof(why)), -EMSGSIZE);
	ck_assert_msg(strstr(why, "do not fit in 72"), "why: %s", why);
}
END_TEST

/* --- what a reply's fields refuse ------------------------------------------- */

START_TEST(test_bad_reply_fields)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	fill_create_reply();
	len = encode_reply(&rep_in, buf, sizeof(buf));
	buf[24 + 40] = 1;
	reply_refused(buf, len, "CREATE announces 1 descriptors with a control area of 8192 bytes");
	buf[24 + 40] = 2;
	buf[24 + 43] = 1;
	reply_refused(buf, len, "reserved bytes 65..67 are not zero");
	buf[24 + 43] = 0;
	mc_put_le64(buf + 24 + 16, 3000);
	reply_refused(buf, len, "page size 3000 is not a power of two");
	mc_put_le64(buf + 24 + 16, 2 << 20);
	mc_put_le32(buf + 24 + 32, 1u << 5);
	reply_refused(buf, len, "CREATE has unknown flags 0x20");
	mc_put_le32(buf + 24 + 32, 0);
	/* A refusal has no body: the body's bytes are then a length mismatch. */
	mc_put_le32(buf + 16, ENOENT);
	reply_refused(buf, len, "length mismatch: the CREATE message's fields add up to 24 bytes");
	len = 24;
	mc_put_le32(buf + 8, 24);
	mc_put_le32(buf + 16, 70000);
	reply_refused(buf, len, "status 70000 is not an errno");
	mc_put_le32(buf + 16, ENOENT);
	/* The field is named only by a CREATE refused with EEXIST. */
	mc_put_le16(buf + 20, MC_KEEPER_FIELD_SIZE);
	reply_refused(buf, len, "names field 3 outside a CREATE refused with EEXIST");
	mc_put_le32(buf + 16, EEXIST);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	mc_put_le16(buf + 20, MC_KEEPER_FIELD_BLOCK);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	ck_assert_uint_eq(rep_out.field, MC_KEEPER_FIELD_BLOCK);
	mc_put_le16(buf + 20, MC_KEEPER_FIELD_LAST + 1);
	reply_refused(buf, len, "unknown field 11");
	/* ERROR carries a non-zero status. */
	mc_put_le16(buf + 20, 0);
	mc_put_le16(buf + 6, MC_KEEPER_ERROR);
	mc_put_le32(buf + 16, 0);
	reply_refused(buf, len, "ERROR with status 0");
}
END_TEST

START_TEST(test_bad_reply_text)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_ERROR;
	rep_in.status = EPROTO;
	snprintf(rep_in.text, sizeof(rep_in.text), "%s", "abc");
	len = encode_reply(&rep_in, buf, sizeof(buf));
	buf[len - 2] = '\033';
	reply_refused(buf, len, "message has byte 0x1b at 1, not printable ASCII");
	buf[len - 2] = 'b';
	mc_put_le16(buf + 22, 4);
	reply_refused(buf, len, "length mismatch: a message of 4 bytes in a packet of 27");
	mc_put_le16(buf + 22, MC_KEEPER_TEXT_MAX + 1);
	reply_refused(buf, len, "length mismatch");
	/* A sentence over 512 bytes, the lengths agreeing. */
	memset(buf + 24, 'y', MC_KEEPER_TEXT_MAX + 1);
	len = 24 + MC_KEEPER_TEXT_MAX + 1;
	mc_put_le32(buf + 8, (uint32_t)len);
	mc_put_le16(buf + 22, MC_KEEPER_TEXT_MAX + 1);
	reply_refused(buf, len, "message of 513 bytes, 512 at most");
	/* The encoder refuses a control character. */
	snprintf(rep_in.text, sizeof(rep_in.text), "%s", "a\tb");
	ck_assert_int_eq(mc_keeper_reply_encode(&rep_in, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "byte 0x09"), "why: %s", why);
}
END_TEST

static size_t list_of_two(uint8_t *buf)
{
	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_LIST;
	rep_in.count = 2;
	sample_record(&rep_in.segments[0], "a");
	sample_record(&rep_in.segments[1], "b");
	return encode_reply(&rep_in, buf, MC_KEEPER_MESSAGE_MAX);
}

START_TEST(test_bad_list_replies)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	const size_t rec0 = 24 + 8, rec1 = rec0 + 96 + 1 + 3;
	size_t len;

	len = list_of_two(buf);
	ck_assert_uint_eq(len, rec1 + 96 + 1 + 3);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	/* Names out of order. */
	buf[rec1 + 96] = '0';
	reply_refused(buf, len,
		      "LIST records are not in increasing (name, owner uid, generation) order at record 1");
	/* One name of two owners: by owner uid, increasing, each once. */
	buf[rec1 + 96] = 'a';
	reply_refused(buf, len,
		      "LIST records are not in increasing (name, owner uid, generation) order at record 1");
	mc_put_le32(buf + rec1 + 52, 1001);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	mc_put_le32(buf + rec1 + 52, 999);
	reply_refused(buf, len,
		      "LIST records are not in increasing (name, owner uid, generation) order at record 1");
	mc_put_le32(buf + rec1 + 52, 1000);
	/* One key twice: a released generation before a newer one, never equal. */
	mc_put_le64(buf + rec1 + 32, 78);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	mc_put_le64(buf + rec1 + 32, 76);
	reply_refused(buf, len,
		      "LIST records are not in increasing (name, owner uid, generation) order at record 1");
	mc_put_le64(buf + rec1 + 32, 77);
	buf[rec1 + 96] = 'b';
	/* One record more than there are. */
	mc_put_le16(buf + 24, 3);
	reply_refused(buf, len, "truncated: segment record 2 needs 96 bytes, 0 are left");
	mc_put_le16(buf + 24, MC_KEEPER_LIST_MAX + 1);
	reply_refused(buf, len, "LIST of 33 segments, 32 at most");
	mc_put_le16(buf + 24, 2);
	/* A record whose name runs past the packet. */
	mc_put_le16(buf + rec1 + 62, 200);
	reply_refused(buf, len, "length mismatch: segment record 1 declares 299 bytes, 100 are left");
	mc_put_le16(buf + rec1 + 62, 1);
	/* A record whose name is longer than a name may be, the lengths agreeing:
	 * copied unchecked, it would run past the record's array. */
	{
		static uint8_t big[MC_KEEPER_MESSAGE_MAX];
		size_t big_len = rec1 + 96 + 4000 + 3;

		memcpy(big, buf, rec1 + 96);
		memset(big + rec1 + 96, 'z', 4000 + 3);
		mc_put_le16(big + rec1 + 62, 4000);
		mc_put_le32(big + 8, (uint32_t)big_len);
		reply_refused(big, big_len, "segment record 1: segment name is 4000 bytes, 255 at most");
	}
	/* Reserved bytes of a record, of the LIST body. */
	buf[rec0 + 61] = 1;
	reply_refused(buf, len, "segment record 0 has reserved bytes that are not zero");
	buf[rec0 + 61] = 0;
	buf[rec0 + 79] = 1;
	reply_refused(buf, len, "segment record 0 has reserved bytes that are not zero");
	buf[rec0 + 79] = 0;
	buf[24 + 7] = 1;
	reply_refused(buf, len, "reserved bytes 28..31 are not zero");
	buf[24 + 7] = 0;
	/* A record's fields. */
	buf[rec1 + 96] = '/';
	reply_refused(buf, len, "segment record 1: segment name has '/' at byte 0");
	buf[rec1 + 96] = 'b';
	mc_put_le16(buf + rec0 + 64, MC_KEEPER_IDENTITY_MAX + 1);
	reply_refused(buf, len, "segment record 0: identity of 65 bytes, 64 at most");
	mc_put_le16(buf + rec0 + 64, 3);
	mc_put_le64(buf + rec0 + 8, 4097);
	reply_refused(buf, len,
		      "segment record 0: size 4097 is not a positive multiple of the page size 4096");
	mc_put_le64(buf + rec0 + 8, 4096);
	mc_put_le32(buf + rec0 + 48, 0);
	reply_refused(buf, len, "segment record 0: world size 0");
	mc_put_le32(buf + rec0 + 48, 4);
	mc_put_le16(buf + rec0 + 66, 1u << 4);
	reply_refused(buf, len, "segment record 0: unknown flags 0x10");
	mc_put_le16(buf + rec0 + 66, 0);
	mc_put_le32(buf + rec0 + 56, 5);
	reply_refused(buf, len, "segment record 0: gid 5 given without the group sharing mode");
	mc_put_le32(buf + rec0 + 56, 0);
	ck_assert_int_eq(decode_reply_exact(buf, len, &rep_out), 0);
	/* "More" with nothing in it would have a client ask forever. */
	len = 24 + 8;
	mc_put_le32(buf + 8, (uint32_t)len);
	mc_put_le16(buf + 24, 0);
	mc_put_le16(buf + 26, MC_KEEPER_LIST_MORE);
	reply_refused(buf, len, "LIST says more segments follow but holds none");
	mc_put_le16(buf + 26, 1u << 3);
	reply_refused(buf, len, "LIST has unknown flags 0x8");
	/* The encoder refuses a record's bad name or identity. */
	list_of_two(buf);
	snprintf(rep_in.segments[1].name, sizeof(rep_in.segments[1].name), "%s", "b/c");
	ck_assert_int_eq(mc_keeper_reply_encode(&rep_in, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "segment record 1: segment name has '/' at byte 1"), "why: %s", why);
	list_of_two(buf);
	rep_in.segments[0].identity_bytes = MC_KEEPER_IDENTITY_MAX + 1;
	ck_assert_int_eq(mc_keeper_reply_encode(&rep_in, buf, sizeof(buf), why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "segment record 0: identity of 65 bytes, 64 at most"), "why: %s", why);
}
END_TEST

START_TEST(test_bad_hello_release_stat_replies)
{
	uint8_t buf[MC_KEEPER_MESSAGE_MAX];
	size_t len;

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_HELLO;
	rep_in.version = 1;
	rep_in.message_max = MC_KEEPER_MESSAGE_MAX;
	len = encode_reply(&rep_in, buf, sizeof(buf));
	buf[24 + 2] = 1;
	reply_refused(buf, len, "reserved bytes 26..27 are not zero");
	buf[24 + 2] = 0;
	mc_put_le16(buf + 24, 0);
	reply_refused(buf, len, "HELLO names keeper version 0");
	mc_put_le16(buf + 24, 1);
	mc_put_le32(buf + 24 + 24, 2);
	reply_refused(buf, len, "HELLO has unknown flags 0x2");
	/* Cut inside the body, the lengths agreeing. */
	mc_put_le32(buf + 8, 40);
	reply_refused(buf, 40, "truncated: a HELLO reply's body is 32 bytes, the packet holds 16");

	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_RELEASE;
	rep_in.release_flags = MC_KEEPER_RELEASE_FREED;
	len = encode_reply(&rep_in, buf, sizeof(buf));
	mc_put_le32(buf + 24 + 8, MC_KEEPER_RELEASE_FREED | MC_KEEPER_RELEASE_DEFERRED);
	reply_refused(buf, len, "RELEASE flags 0x3 are not exactly one of freed and deferred");

	/* STAT carries exactly one record. */
	memset(&rep_in, 0, sizeof(rep_in));
	rep_in.type = MC_KEEPER_REPLY | MC_KEEPER_STAT;
	sample_record(&rep_in.segments[0], "kv");
	len = encode_reply(&rep_in, buf, sizeof(buf));
	mc_put_le32(buf + 8, (uint32_t)len + 1);
	buf[len] = 0;
	reply_refused(buf, len + 1, "length mismatch: the STAT message's fields add up to");
}
END_TEST

static Suite *suite_keeper_wire(void)
{
	Suite *s = suite_create("keeper-wire");
	TCase *round_trips = tcase_create("round-trips");
	TCase *refusals = tcase_create("refusals");

	tcase_add_test(round_trips, test_create_request_round_trip_and_layout);
	tcase_add_test(round_trips, test_create_request_at_its_limits);
	tcase_add_test(round_trips, test_create_request_carries_the_declaration);
	tcase_add_test(round_trips, test_small_requests_round_trip);
	tcase_add_test(round_trips, test_hello_reply_round_trip);
	tcase_add_test(round_trips, test_create_reply_round_trip);
	tcase_add_test(round_trips, test_join_request_round_trip_and_layout);
	tcase_add_test(round_trips, test_join_reply_round_trip_and_refusals);
	tcase_add_test(round_trips, test_refusal_carries_errno_field_and_sentence_only);
	tcase_add_test(round_trips, test_release_and_stat_replies_round_trip);
	tcase_add_test(round_trips, test_full_list_reply_round_trip);
	tcase_add_test(refusals, test_truncated_packets);
	tcase_add_test(refusals, test_over_long_packet);
	tcase_add_test(refusals, test_bad_magic_and_version);
	tcase_add_test(refusals, test_length_mismatch);
	tcase_add_test(refusals, test_unknown_types);
	tcase_add_test(refusals, test_reserved_bytes_must_be_zero);
	tcase_add_test(refusals, test_requests_carry_the_owner);
	tcase_add_test(refusals, test_bad_names);
	tcase_add_test(refusals, test_named_requests_need_a_name_list_does_not);
	tcase_add_test(refusals, test_bad_create_fields);
	tcase_add_test(refusals, test_bad_reply_fields);
	tcase_add_test(refusals, test_bad_reply_text);
	tcase_add_test(refusals, test_bad_list_replies);
	tcase_add_test(refusals, test_bad_hello_release_stat_replies);
	suite_add_tcase(s, round_trips);
	suite_add_tcase(s, refusals);
	return s;
}

int main(void)
{
	SRunner *runner = srunner_create(suite_keeper_wire());
	int failed;

	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
