/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ascend host registration through the AscendCL runtime, dlopen'd at run time
 * (libascendcl.so from CANN, or the file MOONCAKE_SEGMENT_ASCEND_LIBRARY
 * names: sites with unusual layouts, and the tests' fake runtime).
 *
 * As upstream, registration follows the calling thread's current device,
 * which must be the segment's device_id: switching devices inside the library
 * would leave the caller on a device it never asked for.  The library never
 * calls aclInit: the application (torch_npu) owns the runtime's
 * initialisation.
 */
#include "config.h"

#include <acl/acl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "accel.h"
#include "internal.h"

#define ACL_FUNCTIONS(X)       \
	X(aclrtGetDeviceCount) \
	X(aclrtGetDevice)      \
	X(aclrtHostRegister)   \
	X(aclrtHostUnregister) \
	X(aclGetRecentErrMsg)

static struct {
/* NOLINTNEXTLINE(bugprone-macro-parentheses): @name is a declarator */
#define DECLARE_POINTER(name) __typeof__(&name) name;
	ACL_FUNCTIONS(DECLARE_POINTER)
#undef DECLARE_POINTER
} acl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static uint32_t device_count;
static char load_failure[256];

/* NOLINTNEXTLINE(bugprone-macro-parentheses): @name is a member name */
#define SYMBOL(name) { #name, (void **)&acl.name },
static const struct mc_runtime_symbol acl_symbols[] = { ACL_FUNCTIONS(SYMBOL) };
#undef SYMBOL

static void load_runtime(void)
{
	uint32_t count = 0;

	if (!mc_runtime_open("MOONCAKE_SEGMENT_ASCEND_LIBRARY", "libascendcl.so", "Ascend runtime",
			     acl_symbols, MC_ARRAY_SIZE(acl_symbols), load_failure, sizeof(load_failure)))
		return;
	if (acl.aclrtGetDeviceCount(&count) != ACL_SUCCESS || count == 0) {
		snprintf(
			load_failure, sizeof(load_failure),
			"the Ascend runtime reports no device (is it initialised? import torch_npu or call aclInit first)");
		return;
	}
	device_count = count;
}

static bool ascend_available(void)
{
	pthread_once(&load_once, load_runtime);
	return device_count > 0;
}

static int ascend_register_chunk(void *addr, uint64_t len, uint64_t *device_addr, char *why, size_t why_size)
{
	void *dev_ptr = NULL;
	aclError r = acl.aclrtHostRegister(addr, len, ACL_HOST_REGISTER_MAPPED, &dev_ptr);

	if (r != ACL_SUCCESS) {
		const char *msg = acl.aclGetRecentErrMsg();

		snprintf(why, why_size, "aclrtHostRegister returned %d%s%s", r, msg ? ": " : "",
			 msg ? msg : "");
		return r == ACL_ERROR_RT_MEMORY_ALLOCATION ? -ENOMEM : -EIO;
	}
	*device_addr = (uint64_t)(uintptr_t)dev_ptr;
	return 0;
}

static void ascend_unregister_chunk(void *addr)
{
	acl.aclrtHostUnregister(addr);
}

static const struct mc_chunk_ops ascend_chunks = {
	.runtime = "Ascend",
	.register_chunk = ascend_register_chunk,
	.unregister_chunk = ascend_unregister_chunk,
};

static int ascend_register(struct mc_registration *reg)
{
	int32_t current = -1;

	if (!ascend_available())
		return mc_error(ENOTSUP, "Shared segment host_register=true: no Ascend device (%s)",
				load_failure);
	if (acl.aclrtGetDevice(&current) != ACL_SUCCESS)
		current = -1;
	if (current != reg->device)
		return mc_error(EINVAL,
				"Shared segment mmap must run on device %d, but the current device is %d "
				"(call torch.npu.set_device(%d) or aclrtSetDevice on this thread first)",
				reg->device, current, reg->device);
	return mc_register_chunks(reg, &ascend_chunks);
}

static void ascend_unregister(struct mc_registration *reg)
{
	mc_unregister_chunks(reg, &ascend_chunks);
	reg->device_addr = 0;
}

static bool ascend_pci_bus_id(int device, char *buf, size_t size)
{
	(void)device;
	(void)buf;
	(void)size;
	return false; /* AscendCL names no PCI device: automatic placement keeps the local policy */
}

const struct mc_accel_ops mc_accel_ascend = {
	.name = "ascend",
	.available = ascend_available,
	.register_host = ascend_register,
	.unregister_host = ascend_unregister,
	.pci_bus_id = ascend_pci_bus_id,
};
