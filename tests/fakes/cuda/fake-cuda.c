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
 */
#include <cuda.h>
#include <errno.h>

#include "../fake-runtime.h"
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
static int nregistered, register_calls, pushed, retained[MAX_DEVICES];

/* Every call is logged to the file this variable names. */
#define note(...) fake_note("FAKE_CUDA_LOG", __VA_ARGS__)

/* The entry points below name their parameters in their own words, not cuda.h's. */
/* NOLINTBEGIN(readability-inconsistent-declaration-parameter-name) */

static int devices(void)
{
	int n = fake_env_int("FAKE_CUDA_DEVICES", 2);

	return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
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

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytes, unsigned int flags)
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
	note("register %d len %zu flags %u", register_calls, bytes, flags);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
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

CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned int flags)
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

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **name)
{
	*name = error == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE";
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text)
{
	*text = error == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "fake driver error";
	return CUDA_SUCCESS;
}

/* NOLINTEND(readability-inconsistent-declaration-parameter-name) */
