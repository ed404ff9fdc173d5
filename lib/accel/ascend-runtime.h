/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The AscendCL runtime, dlopen'd once (libascendcl.so from CANN, or the file
 * MOONCAKE_SEGMENT_ASCEND_LIBRARY names) and shared by host registration
 * (accel-ascend.c) and the VMM backend (vmm-ascend.c).
 */
#ifndef MOONCAKE_SEGMENT_ASCEND_RUNTIME_H
#define MOONCAKE_SEGMENT_ASCEND_RUNTIME_H

#include <acl/acl.h>
#include <stdbool.h>
#include <stddef.h>

/* What every use needs, host registration included. */
#define MC_ACL_BASE_FUNCTIONS(X) \
	X(aclrtGetDeviceCount)   \
	X(aclrtGetDevice)        \
	X(aclrtSetDevice)        \
	X(aclrtHostRegister)     \
	X(aclrtHostUnregister)   \
	X(aclGetRecentErrMsg)

/* The VMM backend's: optional, so an older runtime still registers. */
#if HAVE_ASCEND_VMM
#define MC_ACL_VMM_FUNCTIONS(X)                \
	X(aclrtMemGetAllocationGranularity)    \
	X(aclrtMallocPhysical)                 \
	X(aclrtFreePhysical)                   \
	X(aclrtReserveMemAddress)              \
	X(aclrtReleaseMemAddress)              \
	X(aclrtMapMem)                         \
	X(aclrtUnmapMem)                       \
	X(aclrtMemSetAccess)                   \
	X(aclrtMemExportToShareableHandleV2)   \
	X(aclrtMemImportFromShareableHandleV2) \
	X(aclrtGetLogicDevIdByUserDevId)
#else
#define MC_ACL_VMM_FUNCTIONS(X)
#endif

/* The publish slots in stream order (slots-stream.c): optional too, as only
 * CANN 8.x on Atlas A2/A3 has them. */
#if HAVE_ASCEND_VALUE_OPS
#define MC_ACL_STREAM_FUNCTIONS(X) \
	X(aclrtValueWrite)         \
	X(aclrtValueWait)
#else
#define MC_ACL_STREAM_FUNCTIONS(X)
#endif

struct mc_acl {
/* NOLINTNEXTLINE(bugprone-macro-parentheses): @name is a declarator */
#define MC_ACL_DECLARE_POINTER(name) __typeof__(&name) name;
	MC_ACL_BASE_FUNCTIONS(MC_ACL_DECLARE_POINTER)
	MC_ACL_VMM_FUNCTIONS(MC_ACL_DECLARE_POINTER)
	MC_ACL_STREAM_FUNCTIONS(MC_ACL_DECLARE_POINTER)
#undef MC_ACL_DECLARE_POINTER
};

/* The loaded entry points; valid once mc_acl_ready() returned true. */
extern struct mc_acl mc_acl;

/* The runtime loads and reports a device; otherwise @why says what is missing. */
bool mc_acl_ready(const char **why);
/* Also the VMM entry points are there. */
bool mc_acl_vmm_ready(const char **why);
/* Also the stream memory operations are there. */
bool mc_acl_stream_ready(const char **why);
/* "returned R: <the runtime's message>" for a failed call. */
void mc_acl_describe(aclError r, char *buf, size_t size);
/* The calling thread's current device, -1 when none is set. */
int mc_acl_current_device(void);
/* 0 when the calling thread's device is @device, else -EINVAL naming @what
 * ("mmap", "owner") and the call that fixes it. */
int mc_acl_require_device(int device, const char *what);

#endif
