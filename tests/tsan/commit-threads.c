/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ThreadSanitizer driver for the multithreaded paths: several threads each
 * create (committing with several threads of its own), query, complete and
 * destroy segments at once, with a log callback installed and swapped
 * concurrently.  Any data race report fails the run.
 *
 *   tests/tsan/run.sh
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <mooncake/segment.h>

#define THREADS 4
#define ROUNDS	20

static void quiet_log(int priority, const char *message, void *userdata)
{
	(void)priority;
	(void)message;
	__atomic_fetch_add((int *)userdata, 1, __ATOMIC_RELAXED);
}

static void *worker(void *arg)
{
	int *lines = arg;

	for (int i = 0; i < ROUNDS; i++) {
		struct mooncake_segment_options opt;
		struct mooncake_segment_info info;
		struct mooncake_segment *owner, *peer;
		unsigned char blobs[2 * MOONCAKE_SEGMENT_BLOB_SIZE];

		mooncake_segment_options_init(&opt);
		opt.world_size = 2;
		opt.commit_threads = 4;
		if (mooncake_segment_create("tsan", 8 << 20, &opt, &owner, blobs) != 0)
			return (void *)1;
		opt.rank_id = 1;
		opt.populate_on_import = i % 2;
		if (mooncake_segment_create("tsan", 8 << 20, &opt, &peer,
					    blobs + MOONCAKE_SEGMENT_BLOB_SIZE) != 0)
			return (void *)1;
		if (mooncake_segment_complete(owner, blobs, sizeof(blobs)) != 0 ||
		    mooncake_segment_complete(peer, blobs, sizeof(blobs)) != 0 ||
		    mooncake_segment_get_info(peer, &info, sizeof(info)) != 0)
			return (void *)1;
		mooncake_segment_set_log_fn(i % 2 ? quiet_log : NULL, MOONCAKE_SEGMENT_LOG_DEBUG, lines);
		mooncake_segment_finish(owner);
		mooncake_segment_destroy(peer);
		mooncake_segment_destroy(owner);
	}
	return NULL;
}

int main(void)
{
	pthread_t threads[THREADS];
	int lines = 0, failed = 0;

	for (int i = 0; i < THREADS; i++)
		pthread_create(&threads[i], NULL, worker, &lines);
	for (int i = 0; i < THREADS; i++) {
		void *ret;

		pthread_join(threads[i], &ret);
		failed += ret != NULL;
	}
	mooncake_segment_set_log_fn(NULL, 0, NULL);
	printf("%d threads x %d rounds: %s\n", THREADS, ROUNDS, failed ? "FAILED" : "ok");
	return failed ? 1 : 0;
}
