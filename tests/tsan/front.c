/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ThreadSanitizer driver for the background commit: an owner and a peer in
 * this process create with background_commit, and two threads read the
 * front (wait_ready with short timeouts, ready_bytes, get_info) while the
 * owner's commit thread advances it; then once more with destroy during the
 * commit.  Any data race report fails the run.
 *
 *   tests/tsan/run.sh
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <mooncake/segment.h>

#define SIZE (UINT64_C(96) << 20)

static void *reader(void *arg)
{
	struct mooncake_segment *seg = arg;
	struct mooncake_segment_info info;
	int err;

	do {
		err = mooncake_segment_wait_ready(seg, 0, 0, 1);
		(void)mooncake_segment_ready_bytes(seg);
		if (mooncake_segment_get_info(seg, &info, sizeof(info)) != 0)
			return (void *)1;
	} while (err == -ETIMEDOUT);
	return err ? (void *)1 : NULL;
}

static int run(int destroy_early)
{
	struct mooncake_segment_options opt;
	struct mooncake_segment *owner, *peer;
	unsigned char blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];
	pthread_t readers[2];
	void *failed[2] = { NULL, NULL };

	mooncake_segment_options_init(&opt);
	opt.world_size = 2;
	opt.commit_threads = 2;
	opt.background_commit = 1;
	if (mooncake_segment_create("tsan-front", SIZE, &opt, &owner, blobs) != 0)
		return 1;
	if (destroy_early) {
		mooncake_segment_destroy(owner);
		return 0;
	}
	opt.rank_id = 1;
	if (mooncake_segment_create("tsan-front", SIZE, &opt, &peer, blobs + MOONCAKE_SEGMENT_BLOB_SIZE) !=
		    0 ||
	    mooncake_segment_complete(owner, blobs, sizeof(blobs)) != 0 ||
	    mooncake_segment_complete(peer, blobs, sizeof(blobs)) != 0)
		return 1;
	pthread_create(&readers[0], NULL, reader, owner);
	pthread_create(&readers[1], NULL, reader, peer);
	pthread_join(readers[0], &failed[0]);
	pthread_join(readers[1], &failed[1]);
	mooncake_segment_finish(owner);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	return failed[0] || failed[1];
}

int main(void)
{
	if (run(0) || run(1)) {
		fprintf(stderr, "front: %s\n", mooncake_segment_last_error());
		return 1;
	}
	puts("front: no race");
	return 0;
}
