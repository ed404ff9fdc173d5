/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA host registration through the driver API, dlopen'd at run time.
 *
 * libcuda.so.1 (the driver's versioned SONAME, never the libcuda.so dev
 * symlink or the toolkit's stub) is loaded once; MOONCAKE_SEGMENT_CUDA_LIBRARY
 * names another file for unusual layouts and for the tests' fake driver.
 * Only the driver API is used: its errors are returned by each call and never
 * left pending for the caller (unlike the runtime API's sticky errors).
 *
 * Registration uses the device's primary context (retained, pushed for the
 * calls, released at unregister), so no context is created on a device the
 * caller did not name, and goes in chunks (64 GiB by default) because
 * drivers cap one call; a failing chunk rolls back the ones before it in
 * reverse.
 */
#include "config.h"

#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "accel.h"
#include "internal.h"

/* The names are cuda.h's macros, so the _v2 entry points are looked up. */
#define CUDA_FUNCTIONS(X)            \
	X(cuInit)                    \
	X(cuDriverGetVersion)        \
	X(cuDeviceGetCount)          \
	X(cuDeviceGet)               \
	X(cuDeviceGetPCIBusId)       \
	X(cuDevicePrimaryCtxRetain)  \
	X(cuDevicePrimaryCtxRelease) \
	X(cuCtxPushCurrent)          \
	X(cuCtxPopCurrent)           \
	X(cuMemHostRegister)         \
	X(cuMemHostUnregister)       \
	X(cuMemHostGetDevicePointer) \
	X(cuGetErrorName)            \
	X(cuGetErrorString)

#define STRINGIFY_EXPANDED(name) STRINGIFY(name)
#define STRINGIFY(name)		 #name

static struct {
/* NOLINTNEXTLINE(bugprone-macro-parentheses): @name is a declarator */
#define DECLARE_POINTER(name) __typeof__(&name) name;
	CUDA_FUNCTIONS(DECLARE_POINTER)
#undef DECLARE_POINTER
} cuda;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int device_count; /* 0 when the driver is missing or has no device */
static char load_failure[256];

/* NOLINTNEXTLINE(bugprone-macro-parentheses): @name is a member name */
#define SYMBOL(name) { STRINGIFY_EXPANDED(name), (void **)&cuda.name },
static const struct mc_runtime_symbol cuda_symbols[] = { CUDA_FUNCTIONS(SYMBOL) };
#undef SYMBOL

static void load_driver(void)
{
	int count = 0;

	/* The library stays loaded for the life of the process, as the driver expects. */
	if (!mc_runtime_open("MOONCAKE_SEGMENT_CUDA_LIBRARY", "libcuda.so.1", "CUDA driver", cuda_symbols,
			     MC_ARRAY_SIZE(cuda_symbols), load_failure, sizeof(load_failure)))
		return;
	if (cuda.cuInit(0) != CUDA_SUCCESS || cuda.cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) {
		snprintf(load_failure, sizeof(load_failure), "the CUDA driver reports no usable device");
		return;
	}
	device_count = count;
}

static bool cuda_available(void)
{
	pthread_once(&load_once, load_driver);
	return device_count > 0;
}

/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for messages. */
static const char *describe(CUresult result, char *buf, size_t size)
{
	const char *name = NULL, *text = NULL;

	cuda.cuGetErrorName(result, &name);
	cuda.cuGetErrorString(result, &text);
	snprintf(buf, size, "%s: %s", name ? name : "CUDA error", text ? text : "unknown");
	return buf;
}

static int fold(CUresult result)
{
	switch (result) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_DEVICE:
		return EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
	case CUDA_ERROR_NOT_PERMITTED:
		return ENOTSUP;
	default:
		return EIO;
	}
}

static int cuda_register_chunk(void *addr, uint64_t len, uint64_t *device_addr, char *why, size_t why_size)
{
	CUdeviceptr dptr = 0;
	CUresult r =
		cuda.cuMemHostRegister(addr, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);

	if (r == CUDA_SUCCESS) {
		r = cuda.cuMemHostGetDevicePointer(&dptr, addr, 0);
		if (r != CUDA_SUCCESS)
			cuda.cuMemHostUnregister(addr);
	}
	if (r != CUDA_SUCCESS) {
		describe(r, why, why_size);
		return -fold(r);
	}
	*device_addr = (uint64_t)dptr;
	return 0;
}

static void cuda_unregister_chunk(void *addr)
{
	cuda.cuMemHostUnregister(addr);
}

static const struct mc_chunk_ops cuda_chunks = {
	.runtime = "CUDA",
	.register_chunk = cuda_register_chunk,
	.unregister_chunk = cuda_unregister_chunk,
};

static int cuda_register(struct mc_registration *reg)
{
	CUdevice dev;
	CUcontext ctx = NULL, popped;
	CUresult r;
	char why[160];
	int err;

	if (!cuda_available())
		return mc_error(ENOTSUP, "Shared segment host_register=true: no CUDA device (%s)",
				load_failure);
	if (reg->device < 0 || reg->device >= device_count)
		return mc_error(
			EINVAL,
			"Shared segment host_register=true needs device_id of a CUDA device: %d of %d",
			reg->device, device_count);
	r = cuda.cuDeviceGet(&dev, reg->device);
	if (r == CUDA_SUCCESS)
		r = cuda.cuDevicePrimaryCtxRetain(&ctx, dev);
	if (r != CUDA_SUCCESS)
		return mc_error(fold(r), "Shared segment cannot use CUDA device %d: %s", reg->device,
				describe(r, why, sizeof(why)));
	/* The device's primary context, current only for these calls. */
	r = cuda.cuCtxPushCurrent(ctx);
	if (r != CUDA_SUCCESS) {
		cuda.cuDevicePrimaryCtxRelease(dev);
		return mc_error(fold(r), "Shared segment cannot make CUDA device %d current: %s", reg->device,
				describe(r, why, sizeof(why)));
	}
	err = mc_register_chunks(reg, &cuda_chunks);
	cuda.cuCtxPopCurrent(&popped);
	if (err) {
		cuda.cuDevicePrimaryCtxRelease(dev);
		return err;
	}
	reg->context = ctx;
	return 0;
}

static void cuda_unregister(struct mc_registration *reg)
{
	CUcontext popped;
	CUdevice dev;

	if (cuda.cuCtxPushCurrent(reg->context) == CUDA_SUCCESS) {
		mc_unregister_chunks(reg, &cuda_chunks);
		cuda.cuCtxPopCurrent(&popped);
	}
	if (cuda.cuDeviceGet(&dev, reg->device) == CUDA_SUCCESS)
		cuda.cuDevicePrimaryCtxRelease(dev);
	reg->context = NULL;
	reg->device_addr = 0;
}

static bool cuda_pci_bus_id(int device, char *buf, size_t size)
{
	CUdevice dev;

	if (!cuda_available() || device < 0 || device >= device_count || size > INT32_MAX)
		return false;
	return cuda.cuDeviceGet(&dev, device) == CUDA_SUCCESS &&
	       cuda.cuDeviceGetPCIBusId(buf, (int)size, dev) == CUDA_SUCCESS;
}

static const char *cuda_why_unavailable(bool *loaded)
{
	bool available = cuda_available();

	*loaded = cuda.cuInit != NULL; /* the loader clears every entry point when one is missing */
	return available ? "" : load_failure;
}

const struct mc_accel_ops mc_accel_cuda = {
	.name = "cuda",
	.available = cuda_available,
	.register_host = cuda_register,
	.unregister_host = cuda_unregister,
	.pci_bus_id = cuda_pci_bus_id,
	.why_unavailable = cuda_why_unavailable,
};
