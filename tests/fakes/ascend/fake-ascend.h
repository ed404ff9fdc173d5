/* SPDX-License-Identifier: Apache-2.0 */
/* What the fake AscendCL runtime's parts share (fake-ascend.c). */
#ifndef MOONCAKE_SEGMENT_FAKE_ASCEND_H
#define MOONCAKE_SEGMENT_FAKE_ASCEND_H

#include <stddef.h>
#include <stdint.h>

/* The host address behind device address @device_addr, if the @len bytes
 * there lie in memory aclrtHostRegister gave a device address; else NULL. */
void *fake_acl_host_of(uintptr_t device_addr, size_t len);
/* The calling thread's device (aclrtSetDevice, else FAKE_ACL_CURRENT_DEVICE); -1: none. */
int fake_acl_current_device(void);

#endif
