/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake AscendCL runtime's stream memory operations, for the publish
 * slots in stream order.  A fake stream runs each operation the moment it is
 * queued (a stream with nothing before it): a write stores the value at
 * once, a wait polls the host word until it is reached.  Each call is one
 * line in the log; each checks what the real runtime would refuse (no
 * device set on the thread, a device address that is not registered memory,
 * a misaligned word, a flag it does not know).  Left out of
 * libfake-ascend-novalue: an older runtime without them.
 *
 *   FAKE_ACL_STREAM_WAIT_MS=N   a wait gives up after N ms (default 10000)
 *                               with an ERROR line, where a real stream
 *                               would wait for ever
 *   FAKE_ACL_FAIL_VALUE_WRITE=1 aclrtValueWrite fails (feature not supported)
 */
#include <acl/acl.h>
#include <stdint.h>
#include <time.h>

#include "../fake-runtime.h"
#include "fake-ascend.h"

#define note(...) fake_note("FAKE_ACL_LOG", __VA_ARGS__)

/* NOLINTBEGIN(readability-inconsistent-declaration-parameter-name) */

/* The host word behind @devAddr, or NULL (and why, in the log). */
static uint64_t *host_word(const char *call, const void *devAddr)
{
	uint64_t *host;

	if (fake_acl_current_device() < 0) {
		note("ERROR %s without a device set on the thread", call);
		return NULL;
	}
	if ((uintptr_t)devAddr % sizeof(uint64_t)) {
		note("ERROR %s of a misaligned word", call);
		return NULL;
	}
	host = fake_acl_host_of((uintptr_t)devAddr, sizeof(uint64_t));
	if (!host)
		note("ERROR %s of device memory not registered", call);
	return host;
}

aclError aclrtValueWrite(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream)
{
	uint64_t *word = host_word("value-write", devAddr);

	if (!word)
		return ACL_ERROR_RT_PARAM_INVALID;
	if (flag != 0) {
		note("ERROR value-write flag %u: reserved, must be 0", flag);
		return ACL_ERROR_RT_PARAM_INVALID;
	}
	if (fake_env_int("FAKE_ACL_FAIL_VALUE_WRITE", 0))
		return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
	__atomic_store_n(word, value, __ATOMIC_RELEASE);
	note("value-write stream %p value %llu", stream, (unsigned long long)value);
	return ACL_SUCCESS;
}

aclError aclrtValueWait(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream)
{
	uint64_t *word = host_word("value-wait", devAddr);
	int limit_ms = fake_env_int("FAKE_ACL_STREAM_WAIT_MS", 10000);
	struct timespec tick = { 0, 100000 };

	if (!word)
		return ACL_ERROR_RT_PARAM_INVALID;
	if (flag != ACL_STREAM_WAIT_VALUE_GEQ) {
		note("ERROR value-wait flag %u: the fake knows GEQ only", flag);
		return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
	}
	note("value-wait stream %p value %llu flag %u", stream, (unsigned long long)value, flag);
	for (int i = 0; (int64_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - value) < 0; i++) {
		if (i >= limit_ms * 10) {
			note("ERROR value-wait for %llu still waiting after %d ms", (unsigned long long)value,
			     limit_ms);
			return ACL_ERROR_RT_PARAM_INVALID;
		}
		nanosleep(&tick, NULL);
	}
	note("value-waited stream %p value %llu", stream, (unsigned long long)value);
	return ACL_SUCCESS;
}

/* NOLINTEND(readability-inconsistent-declaration-parameter-name) */
