/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ascend host registration (mmap=true, host_register=true) through the
 * AscendCL runtime (ascend-runtime.h).
 *
 * As upstream, registration follows the calling thread's current device,
 * which must be the segment's device_id: switching devices inside the library
 * would leave the caller on a device it never asked for.  The publish slots'
 * stream operations (aclrtValueWrite, aclrtValueWait) follow the same rule.
 * AscendCL has no host function that runs without a subscribed report
 * thread, so a stream publish wakes no CPU waiter: they notice within their
 * 100 ms sleep.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "base/error.h"
#include "accel.h"
#include "ascend-runtime.h"

static bool ascend_available(void)
{
	return mc_acl_ready(NULL);
}

static int ascend_register_chunk(void *addr, uint64_t len, uint64_t *device_addr, char *why, size_t why_size)
{
	void *dev_ptr = NULL;
	aclError r = mc_acl.aclrtHostRegister(addr, len, ACL_HOST_REGISTER_MAPPED, &dev_ptr);
	char text[128];

	if (r != ACL_SUCCESS) {
		mc_acl_describe(r, text, sizeof(text));
		snprintf(why, why_size, "aclrtHostRegister failed for shared segment mmap, ret %d: %s",
			 (int)r, text);
		return r == ACL_ERROR_RT_MEMORY_ALLOCATION ? -ENOMEM : -EIO;
	}
	*device_addr = (uint64_t)(uintptr_t)dev_ptr;
	return 0;
}

static void ascend_unregister_chunk(void *addr)
{
	mc_acl.aclrtHostUnregister(addr);
}

static const struct mc_chunk_ops ascend_chunks = {
	.runtime = "Ascend",
	.register_chunk = ascend_register_chunk,
	.unregister_chunk = ascend_unregister_chunk,
};

/* The caller's thread must run on the device (AscendCL's rule for every call). */
static int ascend_register_begin(struct mc_registration *reg)
{
	const char *why = "";

	if (!mc_acl_ready(&why))
		return mc_error(ENOTSUP, "Shared segment host_register=true: no Ascend device (%s)", why);
	return mc_acl_require_device(reg->device, "mmap");
}

/* One chunk; a background thread first makes the device its own. */
static int ascend_register_next(struct mc_registration *reg)
{
	aclError r;

	if (mc_acl_current_device() != reg->device &&
	    (r = mc_acl.aclrtSetDevice(reg->device)) != ACL_SUCCESS) {
		char text[160];

		mc_acl_describe(r, text, sizeof(text));
		mc_unregister_chunks(reg, &ascend_chunks);
		return mc_error(EIO,
				"Shared segment host_register=true: aclrtSetDevice(%d) on the registration "
				"thread %s",
				reg->device, text);
	}
	return mc_register_next_chunk(reg, &ascend_chunks);
}

static int ascend_register(struct mc_registration *reg)
{
	int err = ascend_register_begin(reg);

	while (!err && !mc_registration_done(reg))
		err = ascend_register_next(reg);
	return err;
}

static void ascend_unregister(struct mc_registration *reg)
{
	mc_unregister_chunks(reg, &ascend_chunks);
	reg->device_addr = 0;
}

#if HAVE_ASCEND_VALUE_OPS
/* The GEQ mode: ACL_VALUE_WAIT_GEQ in CANN 8.5's documentation,
 * ACL_STREAM_WAIT_VALUE_GEQ in its headers, 0 in both. */
#define ASCEND_VALUE_WAIT_GEQ 0x0u

static int ascend_stream_result(aclError r, char *why, size_t why_size)
{
	if (r == ACL_SUCCESS)
		return 0;
	mc_acl_describe(r, why, why_size);
	if (r == ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
		return -ENOTSUP;
	if (r == ACL_ERROR_INVALID_PARAM || r == ACL_ERROR_RT_PARAM_INVALID)
		return -EINVAL;
	return r == ACL_ERROR_RT_MEMORY_ALLOCATION ? -ENOMEM : -EIO;
}

/* 0 when a stream call may go ahead on this thread, else a negative errno
 * and @why: the runtime lacks the calls, or the thread is not on the
 * device the words are registered with (the caller's thread is never moved
 * to another device). */
static int ascend_stream_enter(const struct mc_registration *reg, char *why, size_t why_size)
{
	const char *missing = "";
	int current;

	if (!mc_acl_stream_ready(&missing)) {
		snprintf(why, why_size, "%s", missing);
		return -ENOTSUP;
	}
	current = mc_acl_current_device();
	if (current != reg->device) {
		snprintf(why, why_size,
			 "the stream's thread must run on device %d, but the current device is %d "
			 "(call torch.npu.set_device(%d) or aclrtSetDevice on this thread first)",
			 reg->device, current, reg->device);
		return -EINVAL;
	}
	return 0;
}

/* No host function: @after is not run (see the top of the file). */
static int ascend_stream_write(const struct mc_registration *reg, void *stream, uint64_t device_addr,
			       uint64_t value, void (*after)(void *), void *arg, char *why, size_t why_size)
{
	int err = ascend_stream_enter(reg, why, why_size);

	(void)after;
	(void)arg;
	if (err)
		return err;
	/* flag is reserved (0): AscendCL has no fence option; the store is a
	 * task of its own, run once the tasks queued before it are done. */
	return ascend_stream_result(
		mc_acl.aclrtValueWrite((void *)(uintptr_t)device_addr, value, 0, (aclrtStream)stream), why,
		why_size);
}

static int ascend_stream_wait(const struct mc_registration *reg, void *stream, uint64_t device_addr,
			      uint64_t value, char *why, size_t why_size)
{
	int err = ascend_stream_enter(reg, why, why_size);

	if (err)
		return err;
	return ascend_stream_result(mc_acl.aclrtValueWait((void *)(uintptr_t)device_addr, value,
							  ASCEND_VALUE_WAIT_GEQ, (aclrtStream)stream),
				    why, why_size);
}
#endif

static const char *ascend_stream_why_unavailable(void)
{
	const char *why = "";

	return mc_acl_stream_ready(&why) ? "" : why;
}

static bool ascend_pci_bus_id(int device, char *buf, size_t size)
{
	(void)device;
	(void)buf;
	(void)size;
	return false; /* AscendCL names no PCI device: automatic placement keeps the local policy */
}

static const char *ascend_why_unavailable(bool *loaded)
{
	const char *why = "";

	mc_acl_ready(&why);
	*loaded = mc_acl.aclrtGetDeviceCount !=
		  NULL; /* the loader clears every entry point when one is missing */
	return why;
}

const struct mc_accel_ops mc_accel_ascend = {
	.name = "ascend",
	.available = ascend_available,
	.register_host = ascend_register,
	.register_begin = ascend_register_begin,
	.register_next = ascend_register_next,
	.unregister_host = ascend_unregister,
#if HAVE_ASCEND_VALUE_OPS
	.stream_write = ascend_stream_write,
	.stream_wait = ascend_stream_wait,
#endif
	.stream_why_unavailable = ascend_stream_why_unavailable,
	.pci_bus_id = ascend_pci_bus_id,
	.why_unavailable = ascend_why_unavailable,
};
