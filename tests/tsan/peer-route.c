/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ThreadSanitizer driver for the socket route (lib/route/fd-server.c,
 * lib/route/fd-client.c): in each round one owner and PEERS peers of one segment
 * live in this process; the peers complete from their own threads at once,
 * so their connections reach the owner's server thread together, while the
 * owner finishes after a few of them; another thread forks meanwhile (the
 * atfork handlers against the server thread).  Each peer either maps the
 * owner's pages or gets the error that the owner finished; any data race
 * report, or any other outcome, fails the run.
 *
 *   tests/tsan/run.sh
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mooncake/segment.h>

#define PEERS  6
#define ROUNDS 15
#define SIZE   (1 << 20)

struct round {
	struct mooncake_segment *owner;
	struct mooncake_segment *peers[PEERS];
	unsigned char blobs[(PEERS + 1) * MOONCAKE_SEGMENT_BLOB_SIZE];
	int done; /* peers that returned, atomically */
	int mapped;
	int refused;
	int wrong;
};

struct peer_arg {
	struct round *r;
	int index;
};

static void *peer(void *arg)
{
	struct peer_arg *a = arg;
	struct round *r = a->r;
	int ret = mooncake_segment_complete(r->peers[a->index], r->blobs, sizeof(r->blobs));

	if (ret == 0 && ((volatile unsigned char *)mooncake_segment_base(r->peers[a->index]))[42] == 42)
		__atomic_fetch_add(&r->mapped, 1, __ATOMIC_RELAXED);
	else if (ret == -ESRCH)
		__atomic_fetch_add(&r->refused, 1, __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(&r->wrong, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&r->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *forker(void *arg)
{
	int *stop = arg;

	while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
		pid_t child = fork();

		if (child == 0)
			_exit(0);
		if (child > 0)
			waitpid(child, NULL, 0);
		usleep(2000);
	}
	return NULL;
}

static int one_round(int finish_after)
{
	struct round r;
	struct peer_arg args[PEERS];
	pthread_t threads[PEERS];
	struct mooncake_segment_options opt;

	memset(&r, 0, sizeof(r));
	mooncake_segment_options_init(&opt);
	opt.world_size = PEERS + 1;
	for (int k = 0; k <= PEERS; k++) {
		opt.rank_id = (uint32_t)k;
		if (mooncake_segment_create("tsan-route", SIZE, &opt, k ? &r.peers[k - 1] : &r.owner,
					    r.blobs + (size_t)k * MOONCAKE_SEGMENT_BLOB_SIZE) != 0)
			return -1;
	}
	((unsigned char *)mooncake_segment_base(r.owner))[42] = 42;
	if (mooncake_segment_complete(r.owner, r.blobs, sizeof(r.blobs)) != 0)
		return -1;
	for (int i = 0; i < PEERS; i++) {
		args[i] = (struct peer_arg){ &r, i };
		pthread_create(&threads[i], NULL, peer, &args[i]);
	}
	/* Finish while the others still connect. */
	while (__atomic_load_n(&r.done, __ATOMIC_ACQUIRE) < finish_after)
		usleep(100);
	mooncake_segment_finish(r.owner);
	for (int i = 0; i < PEERS; i++)
		pthread_join(threads[i], NULL);
	for (int i = 0; i < PEERS; i++)
		mooncake_segment_destroy(r.peers[i]);
	mooncake_segment_destroy(r.owner);
	if (r.wrong || r.mapped < finish_after || r.mapped + r.refused != PEERS) {
		fprintf(stderr, "round: %d mapped, %d refused (owner finished), %d other outcomes\n",
			r.mapped, r.refused, r.wrong);
		return -1;
	}
	return r.mapped;
}

int main(void)
{
	pthread_t fork_thread;
	int stop = 0, failed = 0, mapped = 0;

	pthread_create(&fork_thread, NULL, forker, &stop);
	for (int i = 0; i < ROUNDS; i++) {
		int got = one_round(i % (PEERS + 1));

		failed += got < 0;
		mapped += got > 0 ? got : 0;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(fork_thread, NULL);
	printf("%d rounds of %d peers, %d mapped before the owner finished: %s\n", ROUNDS, PEERS, mapped,
	       failed ? "FAILED" : "ok");
	return failed ? 1 : 0;
}
