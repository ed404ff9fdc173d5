/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading the AscendCL runtime (ascend-runtime.h).  The library never calls
 * aclInit: the application (torch_npu) owns the runtime's initialisation, so
 * a runtime that reports no device usually means nobody initialised it yet.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "base/base.h"
#include "base/error.h"
#include "mooncake/segment.h"
#include "accel.h"
#include "ascend-runtime.h"

struct mc_acl mc_acl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool have_device, have_vmm, have_stream;
static char load_failure[256], vmm_failure[256], stream_failure[256];

/* NOLINTNEXTLINE(bugprone-macro-parentheses): @name is a member name */
#define SYMBOL(name) { #name, (void **)&mc_acl.name },
static const struct mc_runtime_symbol base_symbols[] = { MC_ACL_BASE_FUNCTIONS(SYMBOL) };
#if HAVE_ASCEND_VMM
static const struct mc_runtime_symbol vmm_symbols[] = { MC_ACL_VMM_FUNCTIONS(SYMBOL) };
#endif
#if HAVE_ASCEND_VALUE_OPS
static const struct mc_runtime_symbol stream_symbols[] = { MC_ACL_STREAM_FUNCTIONS(SYMBOL) };
#endif
#undef SYMBOL

static void load_runtime(void)
{
	uint32_t count = 0;
	void *lib;

	snprintf(vmm_failure, sizeof(vmm_failure), "no Ascend runtime");
	snprintf(stream_failure, sizeof(stream_failure), "no Ascend runtime");
	lib = mc_runtime_open("MOONCAKE_SEGMENT_ASCEND_LIBRARY", "libascendcl.so", "Ascend runtime",
			      base_symbols, MC_ARRAY_SIZE(base_symbols), load_failure, sizeof(load_failure));
	if (!lib)
		return;
	if (mc_acl.aclrtGetDeviceCount(&count) != ACL_SUCCESS || count == 0) {
		snprintf(
			load_failure, sizeof(load_failure),
			"the Ascend runtime reports no device (is it initialised? import torch_npu or call aclInit first)");
		return;
	}
	have_device = true;
#if HAVE_ASCEND_VMM
	have_vmm = mc_runtime_resolve(lib, "Ascend runtime", vmm_symbols, MC_ARRAY_SIZE(vmm_symbols),
				      vmm_failure, sizeof(vmm_failure));
#else
	snprintf(vmm_failure, sizeof(vmm_failure),
		 "this build's Ascend headers declare no V2 shareable-handle API (CANN 8.5 or later needed)");
#endif
#if HAVE_ASCEND_VALUE_OPS
	have_stream = mc_runtime_resolve(lib, "Ascend runtime", stream_symbols, MC_ARRAY_SIZE(stream_symbols),
					 stream_failure, sizeof(stream_failure));
#else
	snprintf(
		stream_failure, sizeof(stream_failure),
		"this build's Ascend headers declare no aclrtValueWrite or aclrtValueWait (CANN 8.x needed)");
#endif
}

bool mc_acl_ready(const char **why)
{
	pthread_once(&load_once, load_runtime);
	if (!have_device && why)
		*why = load_failure;
	return have_device;
}

bool mc_acl_vmm_ready(const char **why)
{
	if (!mc_acl_ready(why))
		return false;
	if (!have_vmm && why)
		*why = vmm_failure;
	return have_vmm;
}

bool mc_acl_stream_ready(const char **why)
{
	if (!mc_acl_ready(why))
		return false;
	if (!have_stream && why)
		*why = stream_failure;
	return have_stream;
}

void mc_acl_describe(aclError r, char *buf, size_t size)
{
	const char *msg = mc_acl.aclGetRecentErrMsg();

	snprintf(buf, size, "returned %d%s%s", (int)r, msg && *msg ? ": " : "", msg ? msg : "");
}

int mc_acl_current_device(void)
{
	int32_t current = -1;

	if (mc_acl.aclrtGetDevice(&current) != ACL_SUCCESS)
		return -1;
	return current;
}

int mc_acl_require_device(int device, const char *what)
{
	int current = mc_acl_current_device();

	if (current == device)
		return 0;
	/* "Shared segment owner must...", or a cause about the segment for the state machine to name the rank. */
	if (what)
		return mc_error(EINVAL,
				"Shared segment %s must run on device %d, but the current device is %d "
				"(call torch.npu.set_device(%d) or aclrtSetDevice on this thread first)",
				what, device, current, device);
	return mc_segment_error(EINVAL,
				"must run on device %d, but the current device is %d "
				"(call torch.npu.set_device(%d) or aclrtSetDevice on this thread first)",
				device, current, device);
}
