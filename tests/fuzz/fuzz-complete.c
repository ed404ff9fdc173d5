/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: arbitrary bytes as the blobs of a group, through the
 * blob decoder and every check of mooncake_segment_complete() (and, when a
 * forged owner blob passes them, the import path, which must refuse any file
 * but the owner's memfd).
 *
 * Input: byte 0 picks the world size (1-4) and this rank; the rest are the
 * world's blobs back to back (zero-padded, or truncated to test lengths).
 * Bit 6 of byte 0 points rank 0's blob at the socket of a live owner in this
 * process (its socket id and token, and this network namespace) and reseals
 * every blob's checksum, so the fields behind the checksum and the socket
 * route (fd-client.c, fd-server.c) are explored too.  Bit 5 instead sends
 * the rest of the input to that owner's socket as a raw request, which the
 * server must answer or drop without ever handing out its descriptor.
 *
 *   tests/fuzz/run.sh [SECONDS]     builds with clang and runs on tests/fuzz/corpus
 */
#include "config.h"

#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "route/fd-socket.h"
#include "../unit/internals.h"

#define MAX_WORLD 4

/* One segment per (world, rank), created on first use and after a success. */
static struct mooncake_segment *segments[MAX_WORLD + 1][MAX_WORLD];

static struct mooncake_segment *segment_for(uint32_t world, uint32_t rank)
{
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];

	if (!segments[world][rank]) {
		mooncake_segment_options_init(&opt);
		opt.world_size = world;
		opt.rank_id = rank;
		opt.owner_rank = 0;
		if (mooncake_segment_create("fuzz", 1 << 16, &opt, &segments[world][rank], blob) != 0)
			abort();
	}
	return segments[world][rank];
}

/* A live owner (rank 0 of 2) whose socket the inputs reach, and its handle. */
static struct mooncake_segment *live_owner;
static struct mc_peer_fd live;

static const struct mc_peer_fd *live_handle(void)
{
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mc_blob b;

	if (!live_owner) {
		mooncake_segment_options_init(&opt);
		opt.world_size = 2;
		if (mooncake_segment_create("fuzz-live", 1 << 16, &opt, &live_owner, blob) != 0 ||
		    mc_blob_decode(blob, 0, &b) != 0 ||
		    !mc_peer_fd_decode(b.handle, b.handle_bytes, &live, NULL))
			abort();
	}
	return &live;
}

/* Rank 0's blob names the live owner's socket; every checksum is made right again. */
static void point_at_live_owner(uint8_t *blobs, uint32_t world)
{
	const struct mc_peer_fd *h = live_handle();
	uint64_t net = mc_host_net_namespace();

	if (blobs[80] >= 48 || blobs[81]) { /* a handle long enough to hold the socket fields */
		for (int i = 0; i < 8; i++)
			blobs[88 + 24 + i] = (uint8_t)(h->socket_id >> (8 * i));
		memcpy(blobs + 88 + 32, h->token, MC_PEER_FD_TOKEN_SIZE);
	}
	for (int i = 0; i < 8; i++)
		blobs[216 + i] = (uint8_t)(net >> (8 * i));
	for (uint32_t k = 0; k < world; k++) {
		uint8_t *blob = blobs + k * MOONCAKE_SEGMENT_BLOB_SIZE;
		uint64_t sum = mc_fnv1a_bytes(MC_FNV1A_OFFSET, blob, MOONCAKE_SEGMENT_BLOB_SIZE - 8);

		for (int i = 0; i < 8; i++)
			blob[MOONCAKE_SEGMENT_BLOB_SIZE - 8 + i] = (uint8_t)(sum >> (8 * i));
	}
}

/* Send @len bytes to the live owner's socket as one request; never a descriptor back. */
static void raw_request(const uint8_t *data, size_t len)
{
	const struct mc_peer_fd *h = live_handle();
	struct sockaddr_un addr;
	socklen_t addr_len = mc_fd_socket_address(h->socket_id, &addr);
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} control;
	uint8_t reply[64];
	struct iovec iov = { reply, sizeof(reply) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = control.buf,
			      .msg_controllen = sizeof(control.buf) };
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct pollfd pfd = { s, POLLIN, 0 };

	if (s < 0 || connect(s, (struct sockaddr *)&addr, addr_len) != 0)
		abort(); /* the live owner always listens */
	if (len > 0 && send(s, data, len > 512 ? 512 : len, MSG_NOSIGNAL) < 0)
		abort();
	/* An empty request is a silent peer: the server drops it after its deadline. */
	if (len > 0 && poll(&pfd, 1, 5000) == 1 && recvmsg(s, &msg, MSG_CMSG_CLOEXEC) > 0 &&
	    (msg.msg_controllen > 0 || reply[0] == MC_FD_REPLY_OK))
		abort(); /* nobody without the token gets the pages */
	close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t blobs[MAX_WORLD * MOONCAKE_SEGMENT_BLOB_SIZE] = { 0 };
	struct mc_blob decoded;
	uint32_t world, rank;
	size_t len;
	struct mooncake_segment *seg;

	if (size < 1)
		return 0;
	if (data[0] & 0x20) {
		raw_request(data + 1, size - 1);
		return 0;
	}
	world = (uint32_t)(data[0] & 3) + 1;
	rank = (uint32_t)(data[0] >> 2 & 3) % world;
	len = size - 1 < sizeof(blobs) ? size - 1 : sizeof(blobs);
	memcpy(blobs, data + 1, len);
	if (data[0] & 0x40)
		point_at_live_owner(blobs, world);
	for (uint32_t k = 0; k < MAX_WORLD; k++)
		(void)mc_blob_decode(blobs + k * MOONCAKE_SEGMENT_BLOB_SIZE, k, &decoded);

	seg = segment_for(world, rank);
	/* The top bits of byte 0 also try a wrong total length. */
	len = (size_t)world * MOONCAKE_SEGMENT_BLOB_SIZE - (data[0] & 0x80 ? 1 : 0);
	if (mooncake_segment_complete(seg, blobs, len) == 0) {
		mooncake_segment_destroy(seg);
		segments[world][rank] = NULL;
	}
	return 0;
}
