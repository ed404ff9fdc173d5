/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Ascend VMM backend (mmap=false): pinned host memory from the AscendCL
 * runtime's physical-memory API, shared through a V2 shareable handle.
 *
 * Owner: aclrtMallocPhysical (pinned, host, on the placement's NUMA node when
 * the runtime can), reserve an address range, map, grant the current device
 * access, export.  Peers reserve at create, then at complete import the
 * owner's handle, map it over their range and grant their own current device
 * (its logical id, as upstream #3481 fixed).  Release is the reverse: unmap,
 * free the physical handle, release the range.
 *
 * Export disables the runtime's pid trust list: our protocol has one exchange
 * before the peers import, and the owner cannot learn the peers' host pids
 * (bare TGIDs in containers) before then.  The handle reaches only the
 * group's blobs (doc/decisions.md).  A FABRIC handle (A3) is preferred, as
 * upstream's; elsewhere the in-server DEFAULT handle.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/ascend-runtime.h"
#include "base/base.h"
#include "base/error.h"
#include "host/placement.h"
#include "mooncake/segment.h"
#include "route/route.h"
#include "backend.h"
#include "private.h"

/* The runtime's fallback when it cannot say (upstream does the same). */
#define VMM_DEFAULT_GRANULARITY (UINT64_C(2) << 20)
/* aclrtReserveMemAddress: 1 = huge pages, as the P2P_HUGE memory. */
#define RESERVE_HUGE_PAGES   1
#define DEFAULT_HANDLE_BYTES sizeof(uint64_t)
#define FABRIC_HANDLE_BYTES  sizeof(aclrtMemFabricHandle)

/* Each rank's own: the runtime's physical memory handle (owner: allocated, peer: imported). */
struct vmm_state {
	void *physical;
};

static struct vmm_state *state_of(const struct mc_memory *mem)
{
	return mem->state;
}

void *mc_ascend_vmm_physical(const struct mc_memory *mem)
{
	return state_of(mem) ? state_of(mem)->physical : NULL;
}

static int acl_errno(aclError r)
{
	if (r == ACL_ERROR_RT_MEMORY_ALLOCATION)
		return ENOMEM;
	if (r == ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
		return ENOTSUP;
	return EIO;
}

/* Record a failed runtime call: "<what> failed ...: aclrtX returned R: msg". */
static int acl_failure(aclError r, const char *call, const char *what)
{
	char text[192];

	mc_acl_describe(r, text, sizeof(text));
	return mc_error(acl_errno(r), "Shared segment %s: %s %s", what, call, text);
}

static aclrtPhysicalMemProp host_memory(aclrtMemLocationType type, uint32_t id)
{
	aclrtPhysicalMemProp prop;

	memset(&prop, 0, sizeof(prop));
	prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
	prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
	prop.memAttr = ACL_MEM_P2P_HUGE;
	prop.location.type = type;
	prop.location.id = id;
	return prop;
}

static int vmm_granularity(const struct mooncake_segment_options *opt, uint64_t *page_size)
{
	aclrtPhysicalMemProp prop = host_memory(ACL_MEM_LOCATION_TYPE_HOST, 0);
	const char *why = "";
	size_t granularity = 0;

	(void)opt;
	if (!mc_acl_vmm_ready(&why))
		return mc_error_no_vmm(MC_FORM_NO_VMM, "use mmap=true", "%s", why);
	if (mc_acl.aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
						    &granularity) != ACL_SUCCESS ||
	    !mc_is_power_of_two(granularity))
		granularity = VMM_DEFAULT_GRANULARITY;
	*page_size = granularity;
	return 0;
}

/* Every rank runs on its device_id: the runtime allocates for, and grants, the current device. */
static int require_device(struct mc_memory *mem)
{
	int err;

	if (mem->opt->device_id < 0)
		return mc_error(EINVAL,
				"Shared segment mmap=false needs a device_id (the NPU that uses it), got %d",
				mem->opt->device_id);
	/* A peer's message gets its rank from the state machine. */
	err = mc_acl_require_device(mem->opt->device_id, mem->is_owner ? "owner" : NULL);
	if (err)
		return err;
	mem->state = calloc(1, sizeof(struct vmm_state));
	return mem->state ? 0 : mc_segment_error(ENOMEM, "out of memory");
}

/* The placement's node where the runtime can place there, else any host memory (degraded). */
static int allocate_physical(struct mc_memory *mem)
{
	struct mc_placement *p = &mem->placement;
	bool on_node = (p->mode == MC_PLACE_BIND || p->mode == MC_PLACE_PREFERRED) && p->node >= 0;
	aclrtPhysicalMemProp prop = on_node ? host_memory(ACL_MEM_LOCATION_TYPE_HOST_NUMA, (uint32_t)p->node)
					    : host_memory(ACL_MEM_LOCATION_TYPE_HOST, 0);
	uint64_t start = mc_now_ns();
	aclError r = mc_acl.aclrtMallocPhysical(&state_of(mem)->physical, mem->alloc_size, &prop, 0);

	if (r != ACL_SUCCESS && on_node && r != ACL_ERROR_RT_MEMORY_ALLOCATION) {
		snprintf(p->why, sizeof(p->why),
			 "the Ascend runtime cannot allocate on node %d (returned %d)", p->node, (int)r);
		p->degraded = true;
		prop = host_memory(ACL_MEM_LOCATION_TYPE_HOST, 0);
		r = mc_acl.aclrtMallocPhysical(&state_of(mem)->physical, mem->alloc_size, &prop, 0);
	} else if (p->mode == MC_PLACE_INTERLEAVE) {
		snprintf(p->why, sizeof(p->why), "the Ascend runtime cannot interleave its pinned memory");
		p->degraded = true;
	}
	if (r != ACL_SUCCESS) {
		char text[192];

		state_of(mem)->physical = NULL;
		mc_acl_describe(r, text, sizeof(text));
		return mc_error(
			acl_errno(r),
			"Shared segment aclrtMallocPhysical failed for a shared segment of %llu bytes "
			"of pinned host memory: %s%s",
			(unsigned long long)mem->alloc_size, text,
			r == ACL_ERROR_RT_MEMORY_ALLOCATION ? " (out of memory: a smaller segment, or "
							      "free host memory)"
							    : "");
	}
	if (p->degraded) {
		mem->info_flags |= MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED;
		mc_log(MOONCAKE_SEGMENT_LOG_WARNING, "Shared segment '%s': %s; default placement", mem->label,
		       p->why);
	}
	/* The runtime pins (and so commits) every page here. */
	mem->commit.ns = mc_now_ns() - start;
	mem->commit.threads = 1;
	snprintf(mem->commit.method, sizeof(mem->commit.method), "aclrtMallocPhysical");
	return 0;
}

static int vmm_reserve_range(struct mc_memory *mem)
{
	aclError r;

	/* The runtime takes no alignment (the argument must be 0): its ranges
	 * start on its granularity, and a larger one would need a reservation
	 * the mapping does not start at, which it documents nothing about. */
	if (mem->opt->alignment > mem->page_size)
		return mc_segment_error(
			ENOTSUP,
			"the Ascend runtime aligns a VMM range to its granularity, %llu "
			"bytes, not to the alignment %llu asked for; ask at most %llu, or use "
			"mmap=true",
			(unsigned long long)mem->page_size, (unsigned long long)mem->opt->alignment,
			(unsigned long long)mem->page_size);
	r = mc_acl.aclrtReserveMemAddress(&mem->base, mem->alloc_size, 0, NULL, RESERVE_HUGE_PAGES);
	if (r != ACL_SUCCESS) {
		mem->base = NULL;
		return acl_failure(r, "aclrtReserveMemAddress", "cannot reserve its address range");
	}
	mem->alignment = mem->page_size;
	return 0;
}

/* Map the physical handle over the reservation and let this rank's current device use it. */
static int map_and_grant(struct mc_memory *mem)
{
	aclrtMemAccessDesc access;
	int32_t logical = -1;
	int user = mc_acl_current_device();
	aclError r = mc_acl.aclrtMapMem(mem->base, mem->alloc_size, 0, state_of(mem)->physical, 0);

	if (r != ACL_SUCCESS)
		return acl_failure(r, "aclrtMapMem", "cannot map the pinned memory");
	mem->mapped = true;
	/* SetAccess wants the driver's logical id, not the user id (ASCEND_RT_VISIBLE_DEVICES). */
	r = mc_acl.aclrtGetLogicDevIdByUserDevId(user, &logical);
	if (r != ACL_SUCCESS)
		return acl_failure(r, "aclrtGetLogicDevIdByUserDevId", "cannot find the current device");
	memset(&access, 0, sizeof(access));
	access.flags = ACL_RT_MEM_ACCESS_FLAGS_READWRITE;
	access.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
	access.location.id = (uint32_t)logical;
	r = mc_acl.aclrtMemSetAccess(mem->base, mem->alloc_size, &access, 1);
	if (r != ACL_SUCCESS)
		return acl_failure(r, "aclrtMemSetAccess", "cannot grant the device access");
	return 0;
}

static int export_handle(struct mc_memory *mem)
{
	aclrtMemFabricHandle fabric;
	uint64_t in_server = 0;
	aclError r;

	memset(&fabric, 0, sizeof(fabric));
	r = mc_acl.aclrtMemExportToShareableHandleV2(state_of(mem)->physical,
						     ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
						     ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, &fabric);
	if (r == ACL_SUCCESS) {
		memcpy(mem->handle, &fabric, FABRIC_HANDLE_BYTES);
		mem->handle_bytes = FABRIC_HANDLE_BYTES;
		return 0;
	}
	if (r != ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
		return acl_failure(r, "aclrtMemExportToShareableHandleV2", "cannot export its pinned memory");
	r = mc_acl.aclrtMemExportToShareableHandleV2(state_of(mem)->physical,
						     ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION,
						     ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, &in_server);
	if (r != ACL_SUCCESS)
		return acl_failure(r, "aclrtMemExportToShareableHandleV2", "cannot export its pinned memory");
	memcpy(mem->handle, &in_server, DEFAULT_HANDLE_BYTES);
	mem->handle_bytes = DEFAULT_HANDLE_BYTES;
	return 0;
}

static int vmm_create_owner(struct mc_memory *mem)
{
	int err = require_device(mem);

	if (!err)
		err = allocate_physical(mem);
	if (!err)
		err = vmm_reserve_range(mem);
	if (!err)
		err = map_and_grant(mem);
	if (!err)
		err = export_handle(mem);
	return err; /* create() releases whatever was built */
}

static int vmm_reserve(struct mc_memory *mem)
{
	int err = require_device(mem);

	return err ? err : vmm_reserve_range(mem);
}

/* Unmap and free the physical handle (imported, or the owner's own); the range stays reserved. */
static void vmm_unimport(struct mc_memory *mem)
{
	struct vmm_state *state = state_of(mem);

	if (mem->mapped && mc_acl.aclrtUnmapMem(mem->base) == ACL_SUCCESS)
		mem->mapped = false;
	if (!mem->mapped && state && state->physical) {
		mc_acl.aclrtFreePhysical(state->physical);
		state->physical = NULL;
	}
}

static int vmm_import(struct mc_memory *mem, const struct mc_owner_ref *owner)
{
	aclrtMemSharedHandleType type;
	aclrtMemFabricHandle fabric;
	uint64_t in_server;
	void *handle;
	aclError r;
	int err;

	if (owner->handle_bytes == FABRIC_HANDLE_BYTES) {
		type = ACL_MEM_SHARE_HANDLE_TYPE_FABRIC;
		memcpy(&fabric, owner->handle, FABRIC_HANDLE_BYTES);
		handle = &fabric;
	} else if (owner->handle_bytes == DEFAULT_HANDLE_BYTES) {
		type = ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT;
		memcpy(&in_server, owner->handle, DEFAULT_HANDLE_BYTES);
		handle = &in_server;
	} else {
		return mc_segment_error(EPROTO,
					"the owner exported a handle of %u bytes, not an Ascend "
					"shareable handle (8 or 128 bytes)",
					owner->handle_bytes);
	}
	r = mc_acl.aclrtMemImportFromShareableHandleV2(handle, type, 0, &state_of(mem)->physical);
	if (r != ACL_SUCCESS) {
		state_of(mem)->physical = NULL;
		return acl_failure(r, "aclrtMemImportFromShareableHandleV2",
				   "cannot import the owner's memory");
	}
	err = map_and_grant(mem);
	if (err)
		vmm_unimport(mem); /* a failed complete leaves nothing mapped */
	return err;
}

static void vmm_finish(struct mc_memory *mem)
{
	(void)mem; /* peers hold their own imported handles: nothing to drop */
}

/* Only what was built is released: mapped, physical and base say what that is. */
static void vmm_release(struct mc_memory *mem)
{
	vmm_unimport(mem);
	if (mem->base)
		mc_acl.aclrtReleaseMemAddress(mem->base);
	mem->base = NULL;
	free(mem->state);
	mem->state = NULL;
}

static bool vmm_supported(bool host_register, bool hugetlb)
{
	return !host_register && !hugetlb && mc_acl_vmm_ready(NULL);
}

static bool vmm_charges_memory_cgroup(const struct mooncake_segment_options *opt)
{
	(void)opt;
	return true; /* checked as before; whether pinned runtime memory is charged is the runtime's */
}

static void vmm_describe(const struct mc_memory *mem, struct mooncake_segment_info *info)
{
	(void)mem;
	snprintf(info->backend, sizeof(info->backend), "ascend-vmm");
	if (!info->accelerator[0])
		snprintf(info->accelerator, sizeof(info->accelerator), "ascend");
}

const struct mc_backend_ops mc_backend_ascend_vmm = {
	.name = "ascend-vmm",
	.id = MC_BACKEND_ASCEND_VMM,
	.mmap = false,
	.device_addressable = true, /* one SVM address for host and device */
	.supported = vmm_supported,
	.granularity = vmm_granularity,
	.charges_memory_cgroup = vmm_charges_memory_cgroup,
	.create_owner = vmm_create_owner,
	.reserve = vmm_reserve,
	.import = vmm_import,
	.unimport = vmm_unimport,
	.finish = vmm_finish,
	.release = vmm_release,
	.describe = vmm_describe,
};
