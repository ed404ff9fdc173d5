/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake CUDA driver (libcuda.so.1) for the tests of host registration on a
 * machine without a GPU.  It implements the few driver API entry points the
 * library uses, with the names and types of the real <cuda.h>, and checks
 * that they are used correctly: registration only with a pushed context,
 * never twice over the same memory, unregistration only of registered and
 * still mapped memory, every retained primary context released.
 *
 * Controlled by the environment, read at each call:
 *   FAKE_CUDA_DEVICES=N              devices (default 2)
 *   FAKE_CUDA_FAIL_REGISTER_AT=N     the Nth cuMemHostRegister fails (out of memory)
 *   FAKE_CUDA_NO_UVA=1               device pointers are not the host addresses
 *   FAKE_CUDA_REGISTER_DELAY_MS=N    each cuMemHostRegister takes N ms (a slow driver)
 *   FAKE_CUDA_LOG=PATH               one line per call, appended
 *   FAKE_CUDA_FAIL_<call>=N          the Nth call of <call> fails (fake-cuda-vmm.c's entry points)
 *
 * A primary context still retained at exit is an "ERROR" line in the log.
 */
#include <cuda.h>
#include <errno.h>
#include <pthread.h>

#include "../fake-runtime.h"
#include "fake-cuda.h"
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_REGISTERED 4096
#define MAX_DEVICES    16

static struct {
	uintptr_t addr;
	size_t len;
} registered[MAX_REGISTERED];
static int nregistered, register_calls, retained[MAX_DEVICES];
/* The calling thread's context stack, as the driver keeps it. */
static __thread int pushed;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t retained_in; /* a forked child's copies of the counts are not its own */

/* The entry points below name their parameters in their own words, not cuda.h's. */
/* NOLINTBEGIN(readability-inconsistent-declaration-parameter-name) */

static int devices(void)
{
	int n = fake_env_int("FAKE_CUDA_DEVICES", 2);

	return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

int fake_cuda_devices(void)
{
	return devices();
}

int fake_cuda_failing(const char *call)
{
	static struct {
		const char *call;
		int count;
	} counts[32];
	char name[96];
	int i;

	for (i = 0; i < 32 && counts[i].call && strcmp(counts[i].call, call) != 0; i++)
		;
	if (i == 32)
		return 0;
	counts[i].call = call;
	counts[i].count++;
	snprintf(name, sizeof(name), "FAKE_CUDA_FAIL_%s", call);
	if (counts[i].count != fake_env_int(name, 0))
		return 0;
	note("%s %d failed (%s)", call, counts[i].count, name);
	return 1;
}

CUresult CUDAAPI cuInit(unsigned int flags)
{
	note("init %u", flags);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *version)
{
	*version = 13000;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	*count = devices();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	if (ordinal < 0 || ordinal >= devices())
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *bus, int len, CUdevice device)
{
	if (device < 0 || device >= devices())
		return CUDA_ERROR_INVALID_DEVICE;
	/* In capitals, as the real driver spells it (sysfs uses small letters). */
	snprintf(bus, (size_t)len, "0000:%02X:00.0", 0x3b + device);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device)
{
	if (device < 0 || device >= devices())
		return CUDA_ERROR_INVALID_DEVICE;
	retained[device]++;
	retained_in = getpid();
	*ctx = (CUcontext)(uintptr_t)(0x1000 + device);
	note("retain %d", device);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device)
{
	if (device < 0 || device >= devices() || retained[device] == 0) {
		note("ERROR release of a context not retained: %d", device);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	retained[device]--;
	note("release %d", device);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
	(void)ctx;
	pushed++;
	note("push");
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *ctx)
{
	if (pushed == 0) {
		note("ERROR pop without push");
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	pushed--;
	*ctx = NULL;
	note("pop");
	return CUDA_SUCCESS;
}

static CUresult cuMemHostRegister_locked(void *p, size_t bytes, unsigned int flags)
{
	uintptr_t a = (uintptr_t)p;

	register_calls++;
	if (fake_env_int("FAKE_CUDA_REGISTER_DELAY_MS", 0) > 0)
		usleep((useconds_t)fake_env_int("FAKE_CUDA_REGISTER_DELAY_MS", 0) * 1000);
	if (!pushed) {
		note("ERROR register without a current context");
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	for (int i = 0; i < nregistered; i++)
		if (a < registered[i].addr + registered[i].len && registered[i].addr < a + bytes) {
			note("ERROR register over registered memory");
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	if (register_calls == fake_env_int("FAKE_CUDA_FAIL_REGISTER_AT", 0)) {
		note("register %d failed", register_calls);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (nregistered == MAX_REGISTERED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	registered[nregistered].addr = a;
	registered[nregistered].len = bytes;
	nregistered++;
	note("register %d len %zu flags %u at %p mapped %lu of %lu", register_calls, bytes, flags, p,
	     fake_mapped_pages(p, bytes), (unsigned long)((bytes + 4095) / 4096));
	return CUDA_SUCCESS;
}

/* Registrar threads of two ranks call at once: one call at a time. */
CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytes, unsigned int flags)
{
	CUresult r;

	pthread_mutex_lock(&table_lock);
	r = cuMemHostRegister_locked(p, bytes, flags);
	pthread_mutex_unlock(&table_lock);
	return r;
}

static CUresult cuMemHostUnregister_locked(void *p)
{
	uintptr_t a = (uintptr_t)p;

	for (int i = 0; i < nregistered; i++) {
		if (registered[i].addr != a)
			continue;
		/* The library must unregister before it unmaps. */
		if (msync(p, 4096, MS_ASYNC) != 0 && errno == ENOMEM)
			note("ERROR unregister of unmapped memory");
		note("unregister len %zu", registered[i].len);
		registered[i] = registered[--nregistered];
		return CUDA_SUCCESS;
	}
	note("ERROR unregister of memory not registered");
	return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* Registrar threads of two ranks call at once: one call at a time. */
CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	CUresult r;

	pthread_mutex_lock(&table_lock);
	r = cuMemHostUnregister_locked(p);
	pthread_mutex_unlock(&table_lock);
	return r;
}

static CUresult cuMemHostGetDevicePointer_locked(CUdeviceptr *dptr, void *p, unsigned int flags)
{
	uintptr_t a = (uintptr_t)p;

	(void)flags;
	for (int i = 0; i < nregistered; i++)
		if (a >= registered[i].addr && a < registered[i].addr + registered[i].len) {
			/* Without UVA, each registration lands somewhere else on the device. */
			uintptr_t device =
				a + (fake_env_int("FAKE_CUDA_NO_UVA", 0) ? (uintptr_t)(i + 1) << 20 : 0);

			*dptr = (CUdeviceptr)device;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

/* Registrar threads of two ranks call at once: one call at a time. */
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned int flags)
{
	CUresult r;

	pthread_mutex_lock(&table_lock);
	r = cuMemHostGetDevicePointer_locked(dptr, p, flags);
	pthread_mutex_unlock(&table_lock);
	return r;
}

void *fake_cuda_host_of(CUdeviceptr device)
{
	void *host = NULL;

	pthread_mutex_lock(&table_lock);
	for (int i = 0; i < nregistered && !host; i++) {
		uintptr_t shift = fake_env_int("FAKE_CUDA_NO_UVA", 0) ? (uintptr_t)(i + 1) << 20 : 0;
		uintptr_t start = registered[i].addr + shift;

		if (device >= start && device < start + registered[i].len)
			host = (void *)(registered[i].addr + (device - start));
	}
	pthread_mutex_unlock(&table_lock);
	return host;
}

int fake_cuda_context_pushed(void)
{
	return pushed;
}

/* The names and texts of the errors this fake returns, as the driver words them. */
static const struct {
	CUresult error;
	const char *name, *text;
} errors[] = {
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
};

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **name)
{
	*name = "CUDA_ERROR_FAKE";
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].error == error)
			*name = errors[i].name;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text)
{
	*text = "fake driver error";
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].error == error)
			*text = errors[i].text;
	return CUDA_SUCCESS;
}

/* NOLINTEND(readability-inconsistent-declaration-parameter-name) */

int fake_cuda_retained_contexts(void)
{
	int leaks = 0;

	for (int device = 0; device < MAX_DEVICES && retained_in == getpid(); device++)
		if (retained[device]) {
			note("ERROR primary context of device %d still retained %d times", device,
			     retained[device]);
			leaks++;
		}
	return leaks;
}

/* A process that ends holding a primary context leaked it. */
__attribute__((destructor)) static void report_retained_contexts(void)
{
	fake_cuda_retained_contexts();
}
