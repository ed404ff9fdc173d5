/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading the CUDA driver (cuda-driver.h): libcuda.so.1, the driver's
 * versioned SONAME, never the libcuda.so dev symlink or the toolkit's stub;
 * loaded and initialised once, on first use, and kept for the life of the
 * process, as the driver expects.  The VMM entry points are a group of their
 * own, so that a driver without them still serves host registration.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "base/base.h"
#include "base/error.h"
#include "mooncake/segment.h"
#include "accel.h"
#include "cuda-driver.h"

struct mc_cu mc_cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int device_count; /* 0 when the driver is missing or has no device */
static bool have_vmm, have_stream;
static char load_failure[256], vmm_failure[256], stream_failure[256];

#define STRINGIFY_EXPANDED(name) STRINGIFY(name)
#define STRINGIFY(name)		 #name

/* NOLINTNEXTLINE(bugprone-macro-parentheses): @name is a member name */
#define SYMBOL(name) { STRINGIFY_EXPANDED(name), (void **)&mc_cu.name },
static const struct mc_runtime_symbol base_symbols[] = { MC_CU_BASE_FUNCTIONS(SYMBOL) };
#if HAVE_CUDA_VMM
static const struct mc_runtime_symbol vmm_symbols[] = { MC_CU_VMM_FUNCTIONS(SYMBOL) };
#endif
static const struct mc_runtime_symbol stream_symbols[] = { MC_CU_STREAM_FUNCTIONS(SYMBOL) };
#undef SYMBOL

static void load_driver(void)
{
	int count = 0;
	void *lib;

	snprintf(vmm_failure, sizeof(vmm_failure), "no CUDA driver");
	snprintf(stream_failure, sizeof(stream_failure), "no CUDA driver");
	lib = mc_runtime_open("MOONCAKE_SEGMENT_CUDA_LIBRARY", "libcuda.so.1", "CUDA driver", base_symbols,
			      MC_ARRAY_SIZE(base_symbols), load_failure, sizeof(load_failure));
	if (!lib)
		return;
	if (mc_cu.cuInit(0) != CUDA_SUCCESS || mc_cu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) {
		snprintf(load_failure, sizeof(load_failure), "the CUDA driver reports no usable device");
		snprintf(vmm_failure, sizeof(vmm_failure), "%s", load_failure);
		snprintf(stream_failure, sizeof(stream_failure), "%s", load_failure);
		return;
	}
	device_count = count;
	have_stream = mc_runtime_resolve(lib, "CUDA driver", stream_symbols, MC_ARRAY_SIZE(stream_symbols),
					 stream_failure, sizeof(stream_failure));
#if HAVE_CUDA_VMM
	have_vmm = mc_runtime_resolve(lib, "CUDA driver", vmm_symbols, MC_ARRAY_SIZE(vmm_symbols),
				      vmm_failure, sizeof(vmm_failure));
#else
	snprintf(vmm_failure, sizeof(vmm_failure),
		 "this build's cuda.h declares no host NUMA virtual memory API (CUDA 12.4 or later needed)");
#endif
}

bool mc_cu_ready(const char **why)
{
	pthread_once(&load_once, load_driver);
	if (!device_count && why)
		*why = load_failure;
	return device_count > 0;
}

bool mc_cu_vmm_ready(const char **why)
{
	if (!mc_cu_ready(why))
		return false;
	if (!have_vmm && why)
		*why = vmm_failure;
	return have_vmm;
}

bool mc_cu_stream_ready(const char **why)
{
	if (!mc_cu_ready(why))
		return false;
	if (!have_stream && why)
		*why = stream_failure;
	return have_stream;
}

int mc_cu_device_count(void)
{
	return mc_cu_ready(NULL) ? device_count : 0;
}

const char *mc_cu_describe(CUresult result, char *buf, size_t size)
{
	const char *name = NULL, *text = NULL;

	mc_cu.cuGetErrorName(result, &name);
	mc_cu.cuGetErrorString(result, &text);
	snprintf(buf, size, "%s: %s", name ? name : "CUDA error", text ? text : "unknown");
	return buf;
}

int mc_cu_errno(CUresult result)
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

int mc_cu_enter(int device, CUcontext *ctx, const char *what)
{
	char why[160];
	CUdevice dev;
	CUresult r;

	if (device < 0 || device >= device_count)
		return mc_error(EINVAL, "Shared segment %s needs device_id of a CUDA device: %d of %d", what,
				device, device_count);
	r = mc_cu.cuDeviceGet(&dev, device);
	if (r == CUDA_SUCCESS)
		r = mc_cu.cuDevicePrimaryCtxRetain(ctx, dev);
	if (r != CUDA_SUCCESS)
		return mc_error(mc_cu_errno(r), "Shared segment cannot use CUDA device %d: %s", device,
				mc_cu_describe(r, why, sizeof(why)));
	/* The device's primary context, current only for the library's calls. */
	r = mc_cu.cuCtxPushCurrent(*ctx);
	if (r != CUDA_SUCCESS) {
		mc_cu.cuDevicePrimaryCtxRelease(dev);
		return mc_error(mc_cu_errno(r), "Shared segment cannot make CUDA device %d current: %s",
				device, mc_cu_describe(r, why, sizeof(why)));
	}
	return 0;
}

bool mc_cu_push(CUcontext ctx)
{
	return mc_cu.cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
}

void mc_cu_pop(void)
{
	CUcontext popped;

	mc_cu.cuCtxPopCurrent(&popped);
}

void mc_cu_release(int device)
{
	CUdevice dev;

	if (mc_cu.cuDeviceGet(&dev, device) == CUDA_SUCCESS)
		mc_cu.cuDevicePrimaryCtxRelease(dev);
}
