/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA driver API, dlopen'd once (libcuda.so.1, or the file
 * MOONCAKE_SEGMENT_CUDA_LIBRARY names) and shared by host registration
 * (accel-cuda.c) and the VMM backend (vmm-cuda.c).  Only the driver API:
 * each call returns its own error, none is left pending for the caller.
 */
#ifndef MOONCAKE_SEGMENT_CUDA_DRIVER_H
#define MOONCAKE_SEGMENT_CUDA_DRIVER_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

/* What every use needs, host registration included.  The names are cuda.h's
 * macros, so the _v2 entry points are looked up. */
#define MC_CU_BASE_FUNCTIONS(X)      \
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

/* The VMM backend's: optional, so an older driver still registers hosts. */
#if HAVE_CUDA_VMM
#define MC_CU_VMM_FUNCTIONS(X)           \
	X(cuDeviceGetAttribute)          \
	X(cuMemGetAllocationGranularity) \
	X(cuMemCreate)                   \
	X(cuMemRelease)                  \
	X(cuMemAddressReserve)           \
	X(cuMemAddressFree)              \
	X(cuMemMap)                      \
	X(cuMemUnmap)                    \
	X(cuMemSetAccess)                \
	X(cuMemExportToShareableHandle)  \
	X(cuMemImportFromShareableHandle)
#else
#define MC_CU_VMM_FUNCTIONS(X)
#endif

/* The publish slots in stream order (slots-stream.c): optional too, so that a
 * driver without them still registers hosts. */
#define MC_CU_STREAM_FUNCTIONS(X) \
	X(cuStreamWriteValue64)   \
	X(cuStreamWaitValue64)    \
	X(cuLaunchHostFunc)

struct mc_cu {
/* NOLINTNEXTLINE(bugprone-macro-parentheses): @name is a declarator */
#define MC_CU_DECLARE_POINTER(name) __typeof__(&name) name;
	MC_CU_BASE_FUNCTIONS(MC_CU_DECLARE_POINTER)
	MC_CU_VMM_FUNCTIONS(MC_CU_DECLARE_POINTER)
	MC_CU_STREAM_FUNCTIONS(MC_CU_DECLARE_POINTER)
#undef MC_CU_DECLARE_POINTER
};

/* The loaded entry points; valid once mc_cu_ready() returned true. */
extern struct mc_cu mc_cu;

/* The driver loads, initialises and reports a device; otherwise @why says what is missing. */
bool mc_cu_ready(const char **why);
/* Also the VMM entry points are there. */
bool mc_cu_vmm_ready(const char **why);
/* Also the stream memory operations are there. */
bool mc_cu_stream_ready(const char **why);
/* Devices the driver reports (0 when it is not ready). */
int mc_cu_device_count(void);
/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for messages; returns @buf. */
const char *mc_cu_describe(CUresult result, char *buf, size_t size);
/* The errno a failed driver call becomes. */
int mc_cu_errno(CUresult result);

/* Retain @device's primary context (no context is created on a device the
 * caller did not name) and make it current for this thread; 0, or a negative
 * errno with a message naming @what ("host_register=true", "mmap=false"). */
int mc_cu_enter(int device, CUcontext *ctx, const char *what);
/* Make @ctx current again for more calls (it is retained); false when refused. */
bool mc_cu_push(CUcontext ctx);
/* Undo one push (mc_cu_enter's included). */
void mc_cu_pop(void);
/* Drop the retain of @device's primary context that mc_cu_enter took. */
void mc_cu_release(int device);

#endif
