/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The part of CANN's AscendCL runtime API (<acl/acl.h>) that mooncake-segment
 * uses, written from the public CANN documentation (the reference pages of
 * each function and type below, and "aclError"), so that the Ascend code
 * builds and is tested on machines without CANN:
 *
 *   ./configure --with-ascend=$PWD/tests/fakes/ascend
 *
 * With CANN installed, configure uses the real header ($ASCEND_HOME_PATH/include).
 */
#ifndef MOONCAKE_SEGMENT_FAKE_ACL_H
#define MOONCAKE_SEGMENT_FAKE_ACL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;

static const int ACL_SUCCESS = 0;
static const int ACL_ERROR_INVALID_PARAM = 100000;
static const int ACL_ERROR_UNINITIALIZE = 100001;
static const int ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const int ACL_ERROR_RT_PARAM_INVALID = 107000;
static const int ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000;
static const int ACL_ERROR_RT_MEMORY_ALLOCATION = 207001;

typedef enum aclrtHostRegisterType {
	ACL_HOST_REGISTER_MAPPED = 0,
} aclrtHostRegisterType;

aclError aclrtGetDeviceCount(uint32_t *count);
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtHostRegister(void *ptr, uint64_t size, aclrtHostRegisterType type, void **devPtr);
aclError aclrtHostUnregister(void *ptr);
const char *aclGetRecentErrMsg(void);

/* Stream memory operations (CANN 8.x, Atlas A2/A3 only), spelt as in CANN's
 * acl_rt.h; its documentation calls the GEQ mode ACL_VALUE_WAIT_GEQ (0x0). */

typedef void *aclrtStream;

#define ACL_STREAM_WAIT_VALUE_GEQ 0x00000000U
#define ACL_STREAM_WAIT_VALUE_EQ  0x00000001U
#define ACL_STREAM_WAIT_VALUE_AND 0x00000002U
#define ACL_STREAM_WAIT_VALUE_NOR 0x00000003U

aclError aclrtValueWrite(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream);
aclError aclrtValueWait(void *devAddr, uint64_t value, uint32_t flag, aclrtStream stream);

/* Virtual memory management: physical memory, address reservations, sharing. */

typedef void *aclrtDrvMemHandle;

typedef enum aclrtMemHandleType {
	ACL_MEM_HANDLE_TYPE_NONE = 0,
} aclrtMemHandleType;

typedef enum aclrtMemAllocationType {
	ACL_MEM_ALLOCATION_TYPE_PINNED = 0,
} aclrtMemAllocationType;

typedef enum aclrtMemAttr {
	ACL_MEM_NORMAL = 12,
	ACL_MEM_HUGE = 13,
	ACL_MEM_HUGE1G = 14,
	ACL_MEM_P2P_NORMAL = 15,
	ACL_MEM_P2P_HUGE = 16,
	ACL_MEM_P2P_HUGE1G = 17,
} aclrtMemAttr;

typedef enum aclrtMemLocationType {
	ACL_MEM_LOCATION_TYPE_HOST = 0,
	ACL_MEM_LOCATION_TYPE_DEVICE = 1,
	ACL_MEM_LOCATION_TYPE_UNREGISTERED = 2,
	ACL_MEM_LOCATION_TYPE_HOST_NUMA = 4,
} aclrtMemLocationType;

typedef struct aclrtMemLocation {
	uint32_t id;
	aclrtMemLocationType type;
} aclrtMemLocation;

typedef struct aclrtPhysicalMemProp {
	aclrtMemHandleType handleType;
	aclrtMemAllocationType allocationType;
	aclrtMemAttr memAttr;
	aclrtMemLocation location;
	uint64_t reserve;
} aclrtPhysicalMemProp;

typedef enum aclrtMemGranularityOptions {
	ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
	ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
	ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF = 0xFFFF,
} aclrtMemGranularityOptions;

typedef enum {
	ACL_RT_MEM_ACCESS_FLAGS_NONE = 0x0,
	ACL_RT_MEM_ACCESS_FLAGS_READ = 0x1,
	ACL_RT_MEM_ACCESS_FLAGS_READWRITE = 0x3,
} aclrtMemAccessFlags;

typedef struct {
	aclrtMemAccessFlags flags;
	aclrtMemLocation location;
	uint8_t rsv[12];
} aclrtMemAccessDesc;

typedef enum aclrtMemSharedHandleType {
	ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT = 0x1, /* within one AI server: a uint64_t */
	ACL_MEM_SHARE_HANDLE_TYPE_FABRIC = 0x2,	 /* across servers (A3 only) */
} aclrtMemSharedHandleType;

typedef struct aclrtMemFabricHandle {
	uint8_t data[128];
} aclrtMemFabricHandle;

#define ACL_RT_VMM_EXPORT_FLAG_DEFAULT		      0x0UL
#define ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x1UL

aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop, aclrtMemGranularityOptions option,
					  size_t *granularity);
aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const aclrtPhysicalMemProp *prop,
			     uint64_t flags);
aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr,
				uint64_t flags);
aclError aclrtReleaseMemAddress(void *virPtr);
aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags);
aclError aclrtUnmapMem(void *virPtr);
aclError aclrtMemSetAccess(void *virPtr, size_t size, aclrtMemAccessDesc *desc, size_t count);
aclError aclrtMemExportToShareableHandleV2(aclrtDrvMemHandle handle, uint64_t flags,
					   aclrtMemSharedHandleType shareType, void *shareableHandle);
aclError aclrtMemImportFromShareableHandleV2(void *shareableHandle, aclrtMemSharedHandleType shareType,
					     uint64_t flags, aclrtDrvMemHandle *handle);
aclError aclrtGetLogicDevIdByUserDevId(const int32_t userDevid, int32_t *const logicDevId);

#ifdef __cplusplus
}
#endif

#endif
