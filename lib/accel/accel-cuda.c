/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA host registration through the driver API (cuda-driver.c loads it).
 *
 * Registration uses the device's primary context (retained, pushed for the
 * calls, released at unregister), so no context is created on a device the
 * caller did not name, and is one call over the whole range unless the
 * caller asks for chunks (register_chunk_size), because a copy that crosses
 * from one registration into the next fails; a failing chunk rolls back the
 * ones before it in reverse.  The publish slots' stream operations (cuStreamWriteValue64,
 * cuStreamWaitValue64, cuLaunchHostFunc) run with the same context pushed.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "accel.h"
#include "cuda-driver.h"

static bool cuda_available(void)
{
	return mc_cu_ready(NULL);
}

static int cuda_register_chunk(void *addr, uint64_t len, uint64_t *device_addr, char *why, size_t why_size)
{
	CUdeviceptr dptr = 0;
	CUresult r = mc_cu.cuMemHostRegister(addr, len,
					     CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);

	if (r == CUDA_SUCCESS) {
		r = mc_cu.cuMemHostGetDevicePointer(&dptr, addr, 0);
		if (r != CUDA_SUCCESS)
			mc_cu.cuMemHostUnregister(addr);
	}
	if (r != CUDA_SUCCESS) {
		mc_cu_describe(r, why, why_size);
		return -mc_cu_errno(r);
	}
	*device_addr = (uint64_t)dptr;
	return 0;
}

static void cuda_unregister_chunk(void *addr)
{
	mc_cu.cuMemHostUnregister(addr);
}

static const struct mc_chunk_ops cuda_chunks = {
	.runtime = "CUDA",
	.register_chunk = cuda_register_chunk,
	.unregister_chunk = cuda_unregister_chunk,
};

/* Retain the device's primary context for the calls to come. */
static int cuda_register_begin(struct mc_registration *reg)
{
	const char *why = "";
	CUcontext ctx = NULL;
	int err;

	if (!mc_cu_ready(&why))
		return mc_error(ENOTSUP, "Shared segment host_register=true: no CUDA device (%s)", why);
	err = mc_cu_enter(reg->device, &ctx, "host_register=true");
	if (err)
		return err;
	mc_cu_pop();
	reg->context = ctx;
	return 0;
}

/* One chunk, with the context pushed on whichever thread calls. */
static int cuda_register_next(struct mc_registration *reg)
{
	int err;

	if (!mc_cu_push(reg->context))
		err = mc_error(EIO,
			       "Shared segment host_register=true: cannot make device %d's context current",
			       reg->device);
	else {
		err = mc_register_next_chunk(reg, &cuda_chunks);
		mc_cu_pop();
	}
	if (err) {
		mc_cu_release(reg->device);
		reg->context = NULL;
	}
	return err;
}

static int cuda_register(struct mc_registration *reg)
{
	int err = cuda_register_begin(reg);

	while (!err && !mc_registration_done(reg))
		err = cuda_register_next(reg);
	return err;
}

static void cuda_unregister(struct mc_registration *reg)
{
	if (!reg->context)
		return; /* a failed begin or next released everything */
	if (mc_cu_push(reg->context)) {
		mc_unregister_chunks(reg, &cuda_chunks);
		mc_cu_pop();
	}
	mc_cu_release(reg->device);
	reg->context = NULL;
	reg->device_addr = 0;
}

static int cuda_stream_result(CUresult r, char *why, size_t why_size)
{
	if (r == CUDA_SUCCESS)
		return 0;
	mc_cu_describe(r, why, why_size);
	return -mc_cu_errno(r);
}

/* The context of @reg current for one call on a stream: false (and @why) when refused. */
static bool cuda_stream_enter(const struct mc_registration *reg, char *why, size_t why_size)
{
	const char *missing = "";

	if (!mc_cu_stream_ready(&missing)) {
		snprintf(why, why_size, "%s", missing);
		return false;
	}
	if (!reg->context || !mc_cu_push(reg->context)) {
		snprintf(why, why_size, "cannot make device %d's context current", reg->device);
		return false;
	}
	return true;
}

static int cuda_stream_write(const struct mc_registration *reg, void *stream, uint64_t device_addr,
			     uint64_t value, void (*after)(void *), void *arg, char *why, size_t why_size)
{
	CUresult r;

	if (!cuda_stream_enter(reg, why, why_size))
		return -ENOTSUP;
	/* The default flags: a fence before the store, so that the stream's
	 * copies before it are visible to whoever sees the value. */
	r = mc_cu.cuStreamWriteValue64((CUstream)stream, (CUdeviceptr)device_addr, value,
				       CU_STREAM_WRITE_VALUE_DEFAULT);
	if (r == CUDA_SUCCESS && after)
		r = mc_cu.cuLaunchHostFunc((CUstream)stream, after, arg);
	mc_cu_pop();
	return cuda_stream_result(r, why, why_size);
}

static int cuda_stream_wait(const struct mc_registration *reg, void *stream, uint64_t device_addr,
			    uint64_t value, char *why, size_t why_size)
{
	CUresult r;

	if (!cuda_stream_enter(reg, why, why_size))
		return -ENOTSUP;
	r = mc_cu.cuStreamWaitValue64((CUstream)stream, (CUdeviceptr)device_addr, value,
				      CU_STREAM_WAIT_VALUE_GEQ);
	mc_cu_pop();
	return cuda_stream_result(r, why, why_size);
}

static const char *cuda_stream_why_unavailable(void)
{
	const char *why = "";

	return mc_cu_stream_ready(&why) ? "" : why;
}

static bool cuda_pci_bus_id(int device, char *buf, size_t size)
{
	CUdevice dev;

	if (!cuda_available() || device < 0 || device >= mc_cu_device_count() || size > INT32_MAX)
		return false;
	return mc_cu.cuDeviceGet(&dev, device) == CUDA_SUCCESS &&
	       mc_cu.cuDeviceGetPCIBusId(buf, (int)size, dev) == CUDA_SUCCESS;
}

static const char *cuda_why_unavailable(bool *loaded)
{
	const char *why = "";
	bool available = mc_cu_ready(&why);

	*loaded = mc_cu.cuInit != NULL; /* the loader clears every entry point when one is missing */
	return available ? "" : why;
}

const struct mc_accel_ops mc_accel_cuda = {
	.name = "cuda",
	.available = cuda_available,
	.register_host = cuda_register,
	.register_begin = cuda_register_begin,
	.register_next = cuda_register_next,
	.unregister_host = cuda_unregister,
	.stream_write = cuda_stream_write,
	.stream_wait = cuda_stream_wait,
	.stream_why_unavailable = cuda_stream_why_unavailable,
	.pci_bus_id = cuda_pci_bus_id,
	.why_unavailable = cuda_why_unavailable,
};
