/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: arbitrary bytes as one packet to the keeper (the request
 * decoder, what mooncake-segmentd runs on every client's bytes) and as one
 * packet from it (the reply decoder, what the library runs).  Beyond "no
 * crash, no read past the packet": whatever a decoder accepts, its encoder
 * must write back byte for byte (the format has one encoding per message),
 * and whatever it refuses must come with a sentence.
 *
 * Built with -DMC_FUZZ_WRITE_SEEDS instead, it is the seed writer: one file
 * per message kind, made by the encoders of this very build, so that the
 * seeds can never be stale (tests/fuzz/run.sh).
 *
 *   tests/fuzz/run.sh [SECONDS] [BUILDDIR] [keeper-wire]
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/keeper-wire.h"

static uint8_t again[MC_KEEPER_MESSAGE_MAX];
static struct mc_keeper_reply reply;

#ifndef MC_FUZZ_WRITE_SEEDS

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mc_keeper_request request;
	char why[256];
	int rc, n;

	why[0] = '\0';
	rc = mc_keeper_request_decode(data, size, &request, why, sizeof(why));
	if (rc == 0) {
		n = mc_keeper_request_encode(&request, again, sizeof(again), why, sizeof(why));
		if (n < 0 || (size_t)n != size || memcmp(again, data, size) != 0)
			abort(); /* accepted, but not written back as it came */
	} else if (rc != -EPROTO || strncmp(why, "keeper request: ", 16) != 0) {
		abort(); /* a refusal must be -EPROTO with its sentence */
	}

	why[0] = '\0';
	rc = mc_keeper_reply_decode(data, size, &reply, why, sizeof(why));
	if (rc == 0) {
		n = mc_keeper_reply_encode(&reply, again, sizeof(again), why, sizeof(why));
		if (n < 0 || (size_t)n != size || memcmp(again, data, size) != 0)
			abort();
	} else if (rc != -EPROTO || strncmp(why, "keeper reply: ", 14) != 0) {
		abort();
	}
	return 0;
}

#else /* the seed writer */

static void write_seed(const char *dir, const char *name, const uint8_t *bytes, int n)
{
	char path[4096];
	FILE *f;

	if (n <= 0)
		exit(1);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(bytes, 1, (size_t)n, f) != (size_t)n || fclose(f) != 0)
		exit(1);
}

static void record(struct mc_keeper_segment *s, const char *name, uint16_t identity_bytes)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->fingerprint = UINT64_C(0x0123456789abcdef);
	s->size = UINT64_C(1) << 30;
	s->page_size = 2 << 20;
	s->control_bytes = 4096;
	s->generation = 7;
	s->created = 1700000000;
	s->world_size = 4;
	s->owner_uid = 1000;
	s->sharing = MC_KEEPER_SHARE_GROUP;
	s->gid = 100;
	s->flags = MC_KEEPER_SEGMENT_HUGETLB;
	s->mappers = 4;
	s->warm_attaches = 2;
	s->dev_major = 0; /* a memfd's, as fstat() shows it: 0:1 on most kernels */
	s->dev_minor = 1;
	s->ino = 4242;
	s->identity_bytes = identity_bytes;
	memset(s->identity, 0xa5, identity_bytes);
}

int main(int argc, char **argv)
{
	static const uint16_t named[] = { MC_KEEPER_LIST, MC_KEEPER_RELEASE, MC_KEEPER_STAT };
	static const char *const named_files[] = { "request-list", "request-release", "request-stat" };
	uint8_t out[MC_KEEPER_MESSAGE_MAX];
	struct mc_keeper_request q;
	const char *dir;

	if (argc != 2)
		return 2;
	dir = argv[1];

	memset(&q, 0, sizeof(q));
	q.type = MC_KEEPER_HELLO;
	write_seed(dir, "request-hello", out, mc_keeper_request_encode(&q, out, sizeof(out), NULL, 0));
	q.type = MC_KEEPER_CREATE;
	q.sequence = 1;
	snprintf(q.name, sizeof(q.name), "%s", "kv-cache");
	q.fingerprint = UINT64_C(0x0123456789abcdef);
	q.size = UINT64_C(1) << 30;
	q.page_size = 2 << 20;
	q.control_bytes = 4096;
	q.world_size = 4;
	q.flags = MC_KEEPER_CREATE_HUGETLB;
	q.sharing = MC_KEEPER_SHARE_GROUP;
	q.gid = 100;
	q.identity_bytes = 12;
	memcpy(q.identity, "llama|bf16|1", 12);
	write_seed(dir, "request-create", out, mc_keeper_request_encode(&q, out, sizeof(out), NULL, 0));
	/* Another uid's segment: the owner fields set. */
	q.owner_given = true;
	q.owner_uid = 1000;
	write_seed(dir, "request-create-owner", out, mc_keeper_request_encode(&q, out, sizeof(out), NULL, 0));
	/* The library's own: a fresh control area for its group. */
	q.owner_given = false;
	q.owner_uid = 0;
	q.flags |= MC_KEEPER_CREATE_GROUP_CONTROL;
	write_seed(dir, "request-create-group", out, mc_keeper_request_encode(&q, out, sizeof(out), NULL, 0));
	/* With the declaration the library sends: the name create() was given, its blocks folded in. */
	snprintf(q.declaration, sizeof(q.declaration), "%s",
		 "kv|k:64:1024x8:torch.float16:16384;v:64:8:torch.int8:8");
	q.declaration_bytes = (uint16_t)strlen(q.declaration);
	write_seed(dir, "request-create-declaration", out,
		   mc_keeper_request_encode(&q, out, sizeof(out), NULL, 0));
	memset(&q, 0, sizeof(q));
	q.type = MC_KEEPER_JOIN;
	snprintf(q.name, sizeof(q.name), "%s", "kv-cache");
	q.owner_given = true;
	q.owner_uid = 1000;
	q.generation = 3;
	q.token = UINT64_C(0x5eed5eed5eed5eed);
	write_seed(dir, "request-join", out, mc_keeper_request_encode(&q, out, sizeof(out), NULL, 0));
	for (unsigned int i = 0; i < 3; i++) {
		char file[64];

		memset(&q, 0, sizeof(q));
		q.type = named[i];
		snprintf(q.name, sizeof(q.name), "%s", "kv-cache");
		write_seed(dir, named_files[i], out, mc_keeper_request_encode(&q, out, sizeof(out), NULL, 0));
		q.owner_given = true;
		q.owner_uid = 1000;
		snprintf(file, sizeof(file), "%s-owner", named_files[i]);
		write_seed(dir, file, out, mc_keeper_request_encode(&q, out, sizeof(out), NULL, 0));
	}

	memset(&reply, 0, sizeof(reply));
	reply.type = MC_KEEPER_REPLY | MC_KEEPER_HELLO;
	reply.version = 1;
	reply.keeper_pid = 42;
	reply.instance = UINT64_C(0x1122334455667788);
	reply.message_max = MC_KEEPER_MESSAGE_MAX;
	reply.hello_flags = MC_KEEPER_HELLO_FDSTORE;
	snprintf(reply.text, sizeof(reply.text), "%s", "mooncake-segmentd");
	write_seed(dir, "reply-hello", out, mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));

	memset(&reply, 0, sizeof(reply));
	reply.type = MC_KEEPER_REPLY | MC_KEEPER_CREATE;
	reply.generation = 3;
	reply.size = UINT64_C(1) << 30;
	reply.page_size = 2 << 20;
	reply.control_bytes = 4096;
	reply.attach_flags = MC_KEEPER_ATTACH_WARM;
	reply.owner_uid = 100000;
	reply.caller_uid = 100000;
	reply.descriptors = 2;
	write_seed(dir, "reply-create", out, mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));
	reply.group_token = UINT64_C(0x5eed5eed5eed5eed);
	write_seed(dir, "reply-create-group", out, mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));
	reply.type = MC_KEEPER_REPLY | MC_KEEPER_JOIN;
	reply.attach_flags = MC_KEEPER_ATTACH_HUGETLB;
	write_seed(dir, "reply-join", out, mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));

	memset(&reply, 0, sizeof(reply));
	reply.type = MC_KEEPER_REPLY | MC_KEEPER_CREATE;
	reply.status = EEXIST;
	reply.field = MC_KEEPER_FIELD_FINGERPRINT;
	snprintf(reply.text, sizeof(reply.text), "%s",
		 "kept segment \"kv-cache\" was declared with another layout");
	write_seed(dir, "reply-create-mismatch", out,
		   mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));

	memset(&reply, 0, sizeof(reply));
	reply.type = MC_KEEPER_ERROR;
	reply.status = EPROTO;
	snprintf(reply.text, sizeof(reply.text), "%s", "keeper request: unknown type 9");
	write_seed(dir, "reply-error", out, mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));

	memset(&reply, 0, sizeof(reply));
	reply.type = MC_KEEPER_REPLY | MC_KEEPER_RELEASE;
	reply.generation = 3;
	reply.release_flags = MC_KEEPER_RELEASE_DEFERRED;
	write_seed(dir, "reply-release", out, mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));

	memset(&reply, 0, sizeof(reply));
	reply.type = MC_KEEPER_REPLY | MC_KEEPER_STAT;
	record(&reply.segments[0], "kv-cache", 12);
	write_seed(dir, "reply-stat", out, mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));

	memset(&reply, 0, sizeof(reply));
	reply.type = MC_KEEPER_REPLY | MC_KEEPER_LIST;
	reply.count = 3;
	reply.list_flags = MC_KEEPER_LIST_MORE;
	record(&reply.segments[0], "a", 0);
	record(&reply.segments[1], "b.kv", 64);
	record(&reply.segments[2], "c~1", 5);
	write_seed(dir, "reply-list", out, mc_keeper_reply_encode(&reply, out, sizeof(out), NULL, 0));
	return 0;
}

#endif
