/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two processes share one segment, exchanging their blobs over a socketpair:
 * the parent is the owner (rank 0), the child a peer (rank 1).  The child
 * writes a message into the shared pages; the parent reads it.
 *
 *   cc fork-pair.c $(pkg-config --cflags --libs mooncake-segment) -o fork-pair
 */
#include <err.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mooncake/segment.h>

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE

static void exchange(int sock, int rank, const unsigned char *mine, unsigned char *all)
{
	memcpy(all + rank * BLOB, mine, BLOB);
	if (write(sock, mine, BLOB) != BLOB || read(sock, all + (1 - rank) * BLOB, BLOB) != BLOB)
		errx(1, "rank %d: blob exchange failed", rank);
}

static int run(int rank, int sock)
{
	struct mooncake_segment_options opt;
	struct mooncake_segment *seg;
	unsigned char blob[BLOB], blobs[2 * BLOB], token = 0;
	char *base;

	mooncake_segment_options_init(&opt);
	opt.world_size = 2;
	opt.rank_id = (unsigned int)rank;
	if (mooncake_segment_create("fork-pair", 1 << 20, &opt, &seg, blob) < 0)
		errx(1, "rank %d: %s", rank, mooncake_segment_last_error());
	exchange(sock, rank, blob, blobs);
	if (mooncake_segment_complete(seg, blobs, sizeof(blobs)) < 0)
		errx(1, "rank %d: %s", rank, mooncake_segment_last_error());
	base = mooncake_segment_base(seg);
	if (rank == 1)
		snprintf(base, 64, "hello from pid %d", (int)getpid());
	/* Both completed, and the child wrote: now the owner may finish. */
	if (write(sock, &token, 1) != 1 || read(sock, &token, 1) != 1)
		errx(1, "rank %d: barrier failed", rank);
	mooncake_segment_finish(seg);
	if (rank == 0)
		printf("owner read: %s\n", base);
	mooncake_segment_destroy(seg);
	return 0;
}

int main(void)
{
	int sv[2], status;
	pid_t child;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		err(1, "socketpair");
	child = fork();
	if (child < 0)
		err(1, "fork");
	if (child == 0)
		_exit(run(1, sv[1]));
	run(0, sv[0]);
	if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		errx(1, "the peer failed");
	return 0;
}
