/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The part of CANN's AscendCL runtime API (<acl/acl.h>) that mooncake-segment
 * uses, written from the public CANN documentation (the "aclrtHostRegister",
 * "aclrtGetDevice", "aclrtGetDeviceCount" and "aclError" reference pages), so
 * that the Ascend code builds and is tested on machines without CANN:
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
static const int ACL_ERROR_RT_MEMORY_ALLOCATION = 207001;

typedef enum aclrtHostRegisterType {
	ACL_HOST_REGISTER_MAPPED = 0,
} aclrtHostRegisterType;

aclError aclrtGetDeviceCount(uint32_t *count);
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclrtHostRegister(void *ptr, uint64_t size, aclrtHostRegisterType type, void **devPtr);
aclError aclrtHostUnregister(void *ptr);
const char *aclGetRecentErrMsg(void);

#ifdef __cplusplus
}
#endif

#endif
