/* SPDX-License-Identifier: Apache-2.0 */
/* What the fake CUDA driver's files share (fake-cuda.c, fake-cuda-vmm.c). */
#ifndef MOONCAKE_SEGMENT_FAKE_CUDA_H
#define MOONCAKE_SEGMENT_FAKE_CUDA_H

#include <cuda.h>

/* Every call is logged to the file this variable names. */
#define note(...) fake_note("FAKE_CUDA_LOG", __VA_ARGS__)

/* Devices the fake reports (FAKE_CUDA_DEVICES, default 2). */
int fake_cuda_devices(void);
/* Primary contexts this process retained and has not released; an "ERROR" line for each device. */
int fake_cuda_retained_contexts(void);
/* Whether the call FAKE_CUDA_FAIL_<@call>=N names fails now (its Nth call); logs it. */
int fake_cuda_failing(const char *call);

/* The host address registered memory's device address @device stands for, or NULL. */
void *fake_cuda_host_of(CUdeviceptr device);
/* Contexts the calling thread has pushed and not popped. */
int fake_cuda_context_pushed(void);

#endif
