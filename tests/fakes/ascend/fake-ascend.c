/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake AscendCL runtime (libascendcl.so) for the tests of Ascend host
 * registration on a machine without an NPU.  It checks its use: registration
 * only of 4 KiB-aligned memory, never twice, unregistration only of
 * registered and still mapped memory.
 *
 * Controlled by the environment, read at each call:
 *   FAKE_ACL_DEVICES=N               devices (default 2)
 *   FAKE_ACL_CURRENT_DEVICE=N        a thread's device until it calls aclrtSetDevice (default 0; -1: none set)
 *   FAKE_ACL_FAIL_REGISTER_AT=N      the Nth aclrtHostRegister fails (allocation)
 *   FAKE_ACL_LOG=PATH                one line per call, appended
 *
 * Its virtual memory management (mmap=false) is fake-ascend-vmm.c, its
 * stream memory operations (aclrtValueWrite, aclrtValueWait) are
 * fake-ascend-stream.c.
 */
#include <acl/acl.h>
#include <errno.h>
#include <pthread.h>

#include "../fake-runtime.h"
#include "fake-ascend.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define MAX_REGISTERED 4096
/* Where the fake pretends the device sees host memory. */
#define DEVICE_WINDOW UINT64_C(0x100000000000)

static struct {
	uintptr_t addr;
	uint64_t len;
} registered[MAX_REGISTERED];
static int nregistered, register_calls;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every call is logged to the file this variable names. */
#define note(...) fake_note("FAKE_ACL_LOG", __VA_ARGS__)

/* NOLINTBEGIN(readability-inconsistent-declaration-parameter-name) */

aclError aclrtGetDeviceCount(uint32_t *count)
{
	int n = fake_env_int("FAKE_ACL_DEVICES", 2);

	*count = n < 0 ? 0 : (uint32_t)n;
	return ACL_SUCCESS;
}

/* A thread's own aclrtSetDevice, over FAKE_ACL_CURRENT_DEVICE: -2 when it set none. */
static __thread int thread_device = -2;

aclError aclrtSetDevice(int32_t device)
{
	int n = fake_env_int("FAKE_ACL_DEVICES", 2);

	if (device < 0 || device >= n)
		return ACL_ERROR_INVALID_PARAM;
	thread_device = device;
	note("set-device %d", device);
	return ACL_SUCCESS;
}

int fake_acl_current_device(void)
{
	int current = thread_device != -2 ? thread_device : fake_env_int("FAKE_ACL_CURRENT_DEVICE", 0);

	return current < 0 ? -1 : current;
}

aclError aclrtGetDevice(int32_t *device)
{
	int current = fake_acl_current_device();

	if (current < 0)
		return ACL_ERROR_INVALID_PARAM; /* no device set on this thread */
	*device = current;
	return ACL_SUCCESS;
}

static aclError aclrtHostRegister_locked(void *ptr, uint64_t size, aclrtHostRegisterType type, void **devPtr)
{
	uintptr_t a = (uintptr_t)ptr;

	register_calls++;
	if (type != ACL_HOST_REGISTER_MAPPED || a % 4096 || size == 0)
		return ACL_ERROR_INVALID_PARAM;
	for (int i = 0; i < nregistered; i++)
		if (a < registered[i].addr + registered[i].len && registered[i].addr < a + size) {
			note("ERROR register over registered memory");
			return ACL_ERROR_INVALID_PARAM;
		}
	if (register_calls == fake_env_int("FAKE_ACL_FAIL_REGISTER_AT", 0) || nregistered == MAX_REGISTERED) {
		note("register %d failed", register_calls);
		return ACL_ERROR_RT_MEMORY_ALLOCATION;
	}
	registered[nregistered].addr = a;
	registered[nregistered].len = size;
	nregistered++;
	*devPtr = (void *)(a + DEVICE_WINDOW);
	note("register %d len %llu device %d at %p mapped %lu of %lu", register_calls,
	     (unsigned long long)size,
	     thread_device != -2 ? thread_device : fake_env_int("FAKE_ACL_CURRENT_DEVICE", 0), ptr,
	     fake_mapped_pages(ptr, (unsigned long)size), (unsigned long)((size + 4095) / 4096));
	return ACL_SUCCESS;
}

/* Registrar threads of two ranks call at once: one call at a time. */
aclError aclrtHostRegister(void *ptr, uint64_t size, aclrtHostRegisterType type, void **devPtr)
{
	aclError r;

	pthread_mutex_lock(&table_lock);
	r = aclrtHostRegister_locked(ptr, size, type, devPtr);
	pthread_mutex_unlock(&table_lock);
	return r;
}

static aclError aclrtHostUnregister_locked(void *ptr)
{
	uintptr_t a = (uintptr_t)ptr;

	for (int i = 0; i < nregistered; i++) {
		if (registered[i].addr != a)
			continue;
		if (msync(ptr, 4096, MS_ASYNC) != 0 && errno == ENOMEM)
			note("ERROR unregister of unmapped memory");
		note("unregister len %llu", (unsigned long long)registered[i].len);
		registered[i] = registered[--nregistered];
		return ACL_SUCCESS;
	}
	note("ERROR unregister of memory not registered");
	return ACL_ERROR_INVALID_PARAM;
}

/* Registrar threads of two ranks call at once: one call at a time. */
aclError aclrtHostUnregister(void *ptr)
{
	aclError r;

	pthread_mutex_lock(&table_lock);
	r = aclrtHostUnregister_locked(ptr);
	pthread_mutex_unlock(&table_lock);
	return r;
}

void *fake_acl_host_of(uintptr_t device_addr, size_t len)
{
	uintptr_t host = device_addr - DEVICE_WINDOW;
	void *found = NULL;

	if (device_addr < DEVICE_WINDOW)
		return NULL;
	pthread_mutex_lock(&table_lock);
	for (int i = 0; i < nregistered && !found; i++)
		if (host >= registered[i].addr && host + len <= registered[i].addr + registered[i].len)
			found = (void *)host;
	pthread_mutex_unlock(&table_lock);
	return found;
}

const char *aclGetRecentErrMsg(void)
{
	return "fake AscendCL error";
}

/* NOLINTEND(readability-inconsistent-declaration-parameter-name) */
