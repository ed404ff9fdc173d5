/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Committing the owner's pages before create() returns, so that lack of
 * memory is an error from create and never a SIGBUS later.
 *
 * Measured on a 2-core Debian 12 VM (kernel 6.18, 4 KiB shmem, 2-4 GiB):
 * fallocate allocates without zeroing at ~13 GB/s and fails cleanly with
 * ENOSPC/ENOMEM; MADV_POPULATE_WRITE then zeroes and maps in parallel
 * (3.5 GB/s on one thread, 5 GB/s on two), faster than touching (1.9 / 4.0)
 * and far faster than MAP_POPULATE (1.3 / 1.4, which also fails silently and
 * SIGBUSes later).  So: fallocate, then MADV_POPULATE_WRITE over slices in
 * parallel threads; on kernels before 5.14 (no MADV_POPULATE_WRITE) touch one
 * byte per page instead, which is safe because fallocate already allocated.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "internal.h"

#include "linux-compat.h"

/* Below this much per thread, starting a thread costs more than it saves. */
#define MIN_BYTES_PER_THREAD (UINT64_C(64) << 20)
#define MAX_THREADS 64

enum populate_how { POPULATE_WRITE, POPULATE_READ, POPULATE_TOUCH };

struct slice {
	uint8_t *addr;
	uint64_t len;
	uint64_t page_size;
	enum populate_how how;
	int err; /* errno of the first failure, 0 */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int madvise_retrying(void *addr, uint64_t len, int advice)
{
	/* The populate advices stop early on a signal; go on from the start,
	 * already-populated pages cost only a walk. */
	while (madvise(addr, len, advice) != 0) {
		if (errno != EINTR && errno != EAGAIN)
			return errno;
	}
	return 0;
}

static void *populate_slice(void *arg)
{
	struct slice *s = arg;

	switch (s->how) {
	case POPULATE_WRITE:
		s->err = madvise_retrying(s->addr, s->len, MADV_POPULATE_WRITE);
		break;
	case POPULATE_READ:
		s->err = madvise_retrying(s->addr, s->len, MADV_POPULATE_READ);
		break;
	case POPULATE_TOUCH:
		/* A volatile read-modify-write keeps the (zero) contents. */
		for (uint64_t off = 0; off < s->len; off += s->page_size)
			((volatile uint8_t *)s->addr)[off] |= 0;
		s->err = 0;
		break;
	}
	return NULL;
}

static unsigned int pick_threads(uint64_t len, unsigned int requested)
{
	uint64_t by_size = len / MIN_BYTES_PER_THREAD;
	unsigned int n = requested ? requested : mc_host_cpus_allowed();

	if (!requested && by_size < n)
		n = by_size ? (unsigned int)by_size : 1;
	if (n > MAX_THREADS)
		n = MAX_THREADS;
	return n ? n : 1;
}

/* Run @how over @threads slices of [addr, addr+len); returns the first errno. */
static int populate_parallel(uint8_t *addr, uint64_t len, uint64_t page_size, unsigned int threads,
			     enum populate_how how)
{
	struct slice slices[MAX_THREADS];
	pthread_t tids[MAX_THREADS];
	bool started[MAX_THREADS] = {false};
	uint64_t pages = len / page_size;
	uint64_t per = pages / threads, extra = pages % threads, off = 0;
	int err = 0;

	for (unsigned int i = 0; i < threads; i++) {
		uint64_t n = per + (i < extra ? 1 : 0);

		slices[i] = (struct slice){addr + off, n * page_size, page_size, how, 0};
		off += n * page_size;
	}
	/* Slice 0 runs on the calling thread; a thread that cannot start has its
	 * slice run here too, so the work is always done. */
	for (unsigned int i = 1; i < threads; i++)
		started[i] = pthread_create(&tids[i], NULL, populate_slice, &slices[i]) == 0;
	populate_slice(&slices[0]);
	for (unsigned int i = 1; i < threads; i++) {
		if (started[i])
			pthread_join(tids[i], NULL);
		else
			populate_slice(&slices[i]);
	}
	for (unsigned int i = 0; i < threads && !err; i++)
		err = slices[i].err;
	return err;
}

int mc_commit_pages(int fd, void *addr, uint64_t len, uint64_t page_size, unsigned int threads,
		    struct mc_commit_result *result)
{
	uint64_t start = now_ns();
	const char *method = "fallocate+populate";
	int err;

	threads = pick_threads(len, threads);
	if (fallocate(fd, 0, 0, (off_t)len) != 0) {
		err = errno;
		if (err == ENOSPC || err == ENOMEM)
			return mc_error_sys(err, err,
					    "Shared segment owner cannot commit %llu bytes (fallocate)",
					    (unsigned long long)len);
		if (err != EOPNOTSUPP)
			return mc_error_sys(mc_fold_errno(err), err, "Shared segment fallocate failed");
		/* No fallocate on this filesystem: populating commits instead. */
		method = "populate";
	}
	err = populate_parallel(addr, len, page_size, threads, POPULATE_WRITE);
	if (err == EINVAL) {
		/* Kernel before 5.14. */
		method = strcmp(method, "populate") ? "fallocate+touch" : "touch";
		err = populate_parallel(addr, len, page_size, threads, POPULATE_TOUCH);
	}
	if (err)
		return mc_error_sys(mc_fold_errno(err), err,
				    "Shared segment owner cannot populate %llu bytes (MADV_POPULATE_WRITE)",
				    (unsigned long long)len);
	if (result) {
		result->ns = now_ns() - start;
		result->threads = threads;
		snprintf(result->method, sizeof(result->method), "%s", method);
	}
	return 0;
}

int mc_populate_mapping(void *addr, uint64_t len, uint64_t page_size, unsigned int threads)
{
	int err = populate_parallel(addr, len, page_size, pick_threads(len, threads), POPULATE_READ);

	if (err == EINVAL)
		return 0; /* before 5.14: pages fault in on first use instead */
	if (err)
		return mc_error_sys(mc_fold_errno(err), err, "Shared segment populate on import failed");
	return 0;
}
