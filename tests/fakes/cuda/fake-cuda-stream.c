/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake CUDA driver's stream memory operations, for the publish slots in
 * stream order.  A fake stream runs each operation the moment it is queued
 * (a stream with nothing before it): a write stores the value at once, a
 * wait polls the host word until it is reached, a host function runs on the
 * caller's thread.  Each call is one line in the log, so that a test reads
 * their order; each checks what the real driver would refuse (no current
 * context, a device address that is not registered memory, a misaligned
 * word).  Left out of libfake-cuda-novmm: an older driver without them.
 *
 *   FAKE_CUDA_STREAM_WAIT_MS=N   a wait gives up after N ms (default 10000)
 *                                with an ERROR line, where a real stream
 *                                would wait for ever
 *   FAKE_CUDA_STREAM_DEFER=1     writes and host functions queue up instead,
 *                                run in order by cuStreamSynchronize (which
 *                                a test calls itself: a stream still busy
 *                                with the work before them)
 */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "../fake-runtime.h"
#include "fake-cuda.h"

/* NOLINTBEGIN(readability-inconsistent-declaration-parameter-name) */

/* FAKE_CUDA_STREAM_DEFER's queue: a write (fn NULL) or a host function. */
#define MAX_QUEUED 256
static struct queued {
	uint64_t *word;
	uint64_t value;
	CUhostFn fn;
	void *data;
} queue[MAX_QUEUED];
static int nqueued;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;

/* Queue @op when deferring; false when it is to run now. */
static bool deferred(struct queued op)
{
	bool queued = false;

	if (!fake_env_int("FAKE_CUDA_STREAM_DEFER", 0))
		return false;
	pthread_mutex_lock(&queue_lock);
	if (nqueued < MAX_QUEUED) {
		queue[nqueued++] = op;
		queued = true;
	}
	pthread_mutex_unlock(&queue_lock);
	if (!queued)
		note("ERROR more than %d operations queued", MAX_QUEUED);
	return queued;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream)
{
	pthread_mutex_lock(&queue_lock);
	note("synchronize stream %p: %d queued", (void *)stream, nqueued);
	for (int i = 0; i < nqueued; i++) {
		if (queue[i].fn) {
			note("host-func ran data %p", queue[i].data);
			queue[i].fn(queue[i].data);
		} else {
			__atomic_store_n(queue[i].word, queue[i].value, __ATOMIC_RELEASE);
			note("stream-write ran value %llu", (unsigned long long)queue[i].value);
		}
	}
	nqueued = 0;
	pthread_mutex_unlock(&queue_lock);
	return CUDA_SUCCESS;
}

/* The host word behind @addr, or NULL (and why, in the log). */
static uint64_t *host_word(const char *call, CUdeviceptr addr)
{
	void *host;

	if (!fake_cuda_context_pushed()) {
		note("ERROR %s without a current context", call);
		return NULL;
	}
	if (addr % sizeof(uint64_t)) {
		note("ERROR %s of a misaligned word", call);
		return NULL;
	}
	host = fake_cuda_host_of(addr);
	if (!host)
		note("ERROR %s of device memory not registered", call);
	return host;
}

CUresult CUDAAPI cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	uint64_t *word = host_word("stream-write", addr);

	if (!word)
		return CUDA_ERROR_INVALID_VALUE;
	if (fake_cuda_failing("cuStreamWriteValue64"))
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!deferred((struct queued){ .word = word, .value = value }))
		__atomic_store_n(word, value, __ATOMIC_RELEASE);
	note("stream-write stream %p value %llu flags %u", (void *)stream, (unsigned long long)value, flags);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	uint64_t *word = host_word("stream-wait", addr);
	int limit_ms = fake_env_int("FAKE_CUDA_STREAM_WAIT_MS", 10000);
	struct timespec tick = { 0, 100000 };

	if (!word)
		return CUDA_ERROR_INVALID_VALUE;
	if (flags != CU_STREAM_WAIT_VALUE_GEQ) {
		note("ERROR stream-wait flags %u: the fake knows GEQ only", flags);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	note("stream-wait stream %p value %llu flags %u", (void *)stream, (unsigned long long)value, flags);
	for (int i = 0; (int64_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - value) < 0; i++) {
		if (i >= limit_ms * 10) {
			note("ERROR stream-wait for %llu still waiting after %d ms",
			     (unsigned long long)value, limit_ms);
			return CUDA_ERROR_LAUNCH_TIMEOUT;
		}
		nanosleep(&tick, NULL);
	}
	note("stream-waited stream %p value %llu", (void *)stream, (unsigned long long)value);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream stream, CUhostFn fn, void *data)
{
	if (!fake_cuda_context_pushed()) {
		note("ERROR host-func without a current context");
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	note("host-func stream %p data %p", (void *)stream, data);
	if (!deferred((struct queued){ .fn = fn, .data = data }))
		fn(data);
	return CUDA_SUCCESS;
}

/* NOLINTEND(readability-inconsistent-declaration-parameter-name) */
