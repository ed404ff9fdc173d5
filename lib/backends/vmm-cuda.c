/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA host VMM backend (mmap=false on a CUDA device): pinned host memory
 * from the driver's virtual memory API, pinned once by the owner and mapped
 * by every rank, so that no rank registers the pages again.
 *
 * Owner: cuMemCreate (pinned, on the placement's host NUMA node), reserve an
 * address range, map, grant its device and the host read-write access, export
 * a POSIX descriptor and offer it to the peers (peer-fd.c); where the device
 * supports FABRIC handles (IMEX), a 64-byte FABRIC handle follows the
 * descriptor's bytes, as upstream's CUDA backend exported.  Peers reserve at
 * create, then at complete fetch the owner's descriptor (or, when no route
 * reaches it, import the FABRIC handle), map it over their range and grant
 * their own device and the host.  The address is the same for the CPU and
 * the device (one unified address space).
 *
 * Every call runs in the primary context of device_id, retained from create
 * to destroy and current only during the library's calls.  A HOST (no node)
 * allocation cannot be exported (cuda.h), so the fallback from a node the
 * driver refuses is another node, the device's own, not "anywhere".
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/cuda-driver.h"
#include "base/base.h"
#include "base/error.h"
#include "base/tracked-fd.h"
#include "host/placement.h"
#include "mooncake/segment.h"
#include "route/route.h"
#include "backend.h"
#include "private.h"

#define FABRIC_HANDLE_BYTES sizeof(CUmemFabricHandle)

/* Each rank's own. */
struct vmm_state {
	CUcontext ctx;				 /* device_id's primary context, retained; NULL: not yet */
	CUmemGenericAllocationHandle allocation; /* created (owner) or imported (peer); 0: none */
	bool reserved;				 /* mem->base is the driver's reservation */
	int node;				 /* owner: the host node the pages are on */
	int exported_fd;			 /* owner: the POSIX descriptor offered to peers */
	struct mc_tracked_fd tracking;		 /* closes it in a forked child (fork.c) */
	struct mc_fd_offer *offer;
};

static struct vmm_state *state_of(const struct mc_memory *mem)
{
	return mem->state;
}

static CUdeviceptr base_of(const struct mc_memory *mem)
{
	return (CUdeviceptr)(uintptr_t)mem->base;
}

/* Record a failed driver call: "cuMemX failed (<what>): NAME: text" about the segment. */
static int cu_failure(CUresult r, const char *call, const char *what)
{
	char text[160];

	return mc_segment_error(
		mc_cu_errno(r), "%s failed (%s): %s%s", call, what, mc_cu_describe(r, text, sizeof(text)),
		r == CUDA_ERROR_OUT_OF_MEMORY ? " (out of memory: a smaller segment, or free host memory)"
					      : "");
}

/* --- what a device can do ---------------------------------------------------- */

struct capability {
	CUdevice_attribute attribute;
	const char *name;
	const char *missing;
};

/* What the backend needs of a device, in the order a message names them. */
static const struct capability needed[] = {
	{ CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
	  "has no virtual memory management" },
	{ CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
	  "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED", "cannot export memory as a POSIX descriptor" },
	{ CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
	  "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
	  "cannot map pinned host memory of a NUMA node (CU_MEM_LOCATION_TYPE_HOST_NUMA)" },
};

static int device_attribute(CUdevice_attribute attribute, int device, int *value)
{
	CUdevice dev;
	CUresult r = mc_cu.cuDeviceGet(&dev, device);

	*value = 0;
	return r == CUDA_SUCCESS ? (int)mc_cu.cuDeviceGetAttribute(value, attribute, dev) : (int)r;
}

/* Whether @device has every capability; else @why names the first missing. */
static bool device_capable(int device, char *why, size_t size)
{
	int value, version = 0;
	char text[160];
	CUresult r;

	for (size_t i = 0; i < MC_ARRAY_SIZE(needed); i++) {
		r = (CUresult)device_attribute(needed[i].attribute, device, &value);
		if (r != CUDA_SUCCESS) {
			mc_cu.cuDriverGetVersion(&version);
			snprintf(
				why, size,
				"cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_%s) failed (%s; driver version %d): a "
				"driver of CUDA 12.4 or later is needed",
				needed[i].name, mc_cu_describe(r, text, sizeof(text)), version);
			return false;
		}
		if (!value) {
			snprintf(why, size, "CUDA device %d %s (CU_DEVICE_ATTRIBUTE_%s is 0)", device,
				 needed[i].missing, needed[i].name);
			return false;
		}
	}
	return true;
}

static bool vmm_supported(bool host_register, bool hugetlb)
{
	char why[256];

	if (host_register || hugetlb || !mc_cu_vmm_ready(NULL))
		return false;
	/* Any device will do here: create() says when device_id's cannot. */
	for (int device = 0; device < mc_cu_device_count(); device++)
		if (device_capable(device, why, sizeof(why)))
			return true;
	return false;
}

/* -ENOTSUP naming what this host or build lacks, and the fix. */
#define VMM_CUDA_FIX "use mmap=true (with host_register=true for the GPU)"
static int require_capable_device(int device)
{
	const char *why = "";
	char text[256];

	if (!mc_cu_vmm_ready(&why))
		return mc_error_no_vmm(MC_FORM_NO_VMM, VMM_CUDA_FIX, "%s", why);
	if (device >= 0 && device < mc_cu_device_count() && !device_capable(device, text, sizeof(text)))
		return mc_error_no_vmm(MC_FORM_NO_VMM_HERE, VMM_CUDA_FIX, "%s", text);
	return 0;
}

/* --- allocation -------------------------------------------------------------- */

static CUmemAllocationProp pinned_on_node(int node, unsigned int handle_types)
{
	CUmemAllocationProp prop;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	prop.location.id = node;
	return prop;
}

static int vmm_granularity(const struct mooncake_segment_options *opt, uint64_t *page_size)
{
	CUmemAllocationProp prop = pinned_on_node(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	size_t granularity = 0;
	CUresult r;
	int err = require_capable_device(opt->device_id);

	if (err)
		return err;
	r = mc_cu.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS)
		return cu_failure(r, "cuMemGetAllocationGranularity", "the size of its pinned memory");
	if (!mc_is_power_of_two(granularity))
		return mc_segment_error(EIO,
					"cuMemGetAllocationGranularity gave %zu bytes, not a power of "
					"two; the CUDA driver is not usable for mmap=false",
					granularity);
	*page_size = granularity;
	return 0;
}

/* The host node nearest the device, -1 when the driver does not say. */
static int device_host_node(int device)
{
	int node = -1;

	if (device_attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device, &node) != CUDA_SUCCESS)
		return -1;
	return node;
}

static int fabric_supported(int device)
{
	int value = 0;

	return device_attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, device, &value) ==
		       CUDA_SUCCESS &&
	       value;
}

/* cuMemCreate on @node; FABRIC too when asked, dropped when the system refuses it (no IMEX channel). */
static CUresult create_on_node(struct mc_memory *mem, int node, bool *fabric)
{
	unsigned int types =
		CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | (*fabric ? CU_MEM_HANDLE_TYPE_FABRIC : 0);
	CUmemAllocationProp prop = pinned_on_node(node, types);
	CUresult r = mc_cu.cuMemCreate(&state_of(mem)->allocation, mem->alloc_size, &prop, 0);

	if (*fabric && (r == CUDA_ERROR_NOT_PERMITTED || r == CUDA_ERROR_NOT_SUPPORTED)) {
		mc_log(MOONCAKE_SEGMENT_LOG_INFO,
		       "Shared segment '%s': no FABRIC handle (no IMEX channel for this user?); POSIX "
		       "descriptor only",
		       mem->label);
		*fabric = false;
		prop = pinned_on_node(node, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		r = mc_cu.cuMemCreate(&state_of(mem)->allocation, mem->alloc_size, &prop, 0);
	}
	if (r != CUDA_SUCCESS)
		state_of(mem)->allocation = 0;
	return r;
}

/*
 * The placement's node where the driver can place there; else the device's
 * host node, else node 0 (what cuda.h asks for on a host without NUMA), with
 * the placement marked degraded as the Ascend backend does.  Interleaving
 * is not something the driver does with pinned memory: degraded too.
 */
static int allocate_pinned(struct mc_memory *mem, bool *fabric)
{
	struct mc_placement *p = &mem->placement;
	bool on_node = (p->mode == MC_PLACE_BIND || p->mode == MC_PLACE_PREFERRED) && p->node >= 0;
	int device_node = device_host_node(mem->opt->device_id);
	int fallback = device_node >= 0 ? device_node : 0;
	int node = on_node ? p->node : fallback;
	uint64_t start = mc_now_ns();
	char text[160];
	CUresult r = create_on_node(mem, node, fabric);

	if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && on_node && fallback != node) {
		snprintf(p->why, sizeof(p->why), "the CUDA driver cannot allocate on node %d (%s)", node,
			 mc_cu_describe(r, text, sizeof(text)));
		p->degraded = true;
		node = fallback;
		r = create_on_node(mem, node, fabric);
	} else if (p->mode == MC_PLACE_INTERLEAVE) {
		snprintf(p->why, sizeof(p->why), "the CUDA driver cannot interleave its pinned memory");
		p->degraded = true;
	}
	if (r != CUDA_SUCCESS)
		return mc_segment_error(
			mc_cu_errno(r),
			"cuMemCreate failed for %llu bytes of pinned host memory on node %d: %s%s",
			(unsigned long long)mem->alloc_size, node, mc_cu_describe(r, text, sizeof(text)),
			r == CUDA_ERROR_OUT_OF_MEMORY
				? " (out of memory: a smaller segment, or free host memory)"
				: "; use mmap=true (with host_register=true for the GPU)");
	if (p->degraded) {
		mem->info_flags |= MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED;
		mc_log(MOONCAKE_SEGMENT_LOG_WARNING, "Shared segment '%s': %s; pages on node %d", mem->label,
		       p->why, node);
	}
	state_of(mem)->node = node;
	/* The driver pins (and so commits) every page here. */
	mem->commit.ns = mc_now_ns() - start;
	mem->commit.threads = 1;
	snprintf(mem->commit.method, sizeof(mem->commit.method), "cuMemCreate");
	return 0;
}

/* --- address range, mapping, access ---------------------------------------- */

static int reserve_range(struct mc_memory *mem)
{
	CUdeviceptr ptr = 0;
	uint64_t alignment = mem->opt->alignment > mem->page_size ? mem->opt->alignment : mem->page_size;
	CUresult r = mc_cu.cuMemAddressReserve(&ptr, mem->alloc_size, alignment, 0, 0);

	if (r != CUDA_SUCCESS)
		return cu_failure(r, "cuMemAddressReserve", "its address range");
	mem->base = (void *)(uintptr_t)ptr;
	mem->alignment = alignment;
	state_of(mem)->reserved = true;
	return 0;
}

/* Map the allocation over the reservation; grant this rank's device and the CPU. */
static int map_and_grant(struct mc_memory *mem, int node)
{
	CUmemAccessDesc access[2];
	CUresult r = mc_cu.cuMemMap(base_of(mem), mem->alloc_size, 0, state_of(mem)->allocation, 0);

	if (r != CUDA_SUCCESS)
		return cu_failure(r, "cuMemMap", "mapping the pinned memory");
	mem->mapped = true;
	memset(access, 0, sizeof(access));
	access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	access[0].location.id = mem->opt->device_id;
	access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	/* Without this grant the CPU cannot touch the pages at all (the id is ignored, cuda.h). */
	access[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	access[1].location.id = node;
	access[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = mc_cu.cuMemSetAccess(base_of(mem), mem->alloc_size, access, MC_ARRAY_SIZE(access));
	if (r != CUDA_SUCCESS)
		return cu_failure(r, "cuMemSetAccess", "access for its device and the host");
	return 0;
}

/* --- owner --------------------------------------------------------------------- */

/* Export the POSIX descriptor (tracked: no forked child keeps it), offer it, and append the FABRIC handle. */
static int export_and_offer(struct mc_memory *mem, bool fabric)
{
	struct vmm_state *state = state_of(mem);
	CUmemFabricHandle fabric_handle;
	struct mc_peer_fd h;
	uint16_t used;
	CUresult r;
	int err;

	mc_fd_track_begin();
	r = mc_cu.cuMemExportToShareableHandle(&state->exported_fd, state->allocation,
					       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r != CUDA_SUCCESS)
		state->exported_fd = -1;
	mc_fd_track_end(&state->tracking, &state->exported_fd);
	if (r != CUDA_SUCCESS)
		return cu_failure(r, "cuMemExportToShareableHandle", "exporting the pinned memory");
	if (fabric) {
		r = mc_cu.cuMemExportToShareableHandle(&fabric_handle, state->allocation,
						       CU_MEM_HANDLE_TYPE_FABRIC, 0);
		if (r != CUDA_SUCCESS)
			return cu_failure(r, "cuMemExportToShareableHandle(FABRIC)",
					  "exporting the pinned memory");
	}
	/* A group of one has no peer to serve: no thread, no socket. */
	err = mem->opt->world_size > 1 ? mc_peer_fd_offer(state->exported_fd, -1, &h, NULL, &state->offer)
				       : mc_peer_fd_describe(state->exported_fd, &h);
	if (err)
		return err;
	used = mc_peer_fd_encode(&h, mem->handle, sizeof(mem->handle));
	if (!used || (fabric && used + FABRIC_HANDLE_BYTES > sizeof(mem->handle)))
		return mc_segment_error(EPROTO, "the CUDA VMM handle does not fit in a blob");
	if (fabric) {
		memcpy(mem->handle + used, &fabric_handle, FABRIC_HANDLE_BYTES);
		used += FABRIC_HANDLE_BYTES;
	}
	mem->handle_bytes = used;
	return 0;
}

/* Every rank: state, a device to run on, its primary context retained and current. */
static int enter_device(struct mc_memory *mem)
{
	struct vmm_state *state;
	int err;

	if (mem->opt->device_id < 0)
		return mc_error(EINVAL,
				"Shared segment mmap=false needs a device_id (the CUDA device that uses it), "
				"got %d",
				mem->opt->device_id);
	state = calloc(1, sizeof(*state));
	if (!state)
		return mc_segment_error(ENOMEM, "out of memory");
	state->exported_fd = -1;
	mem->state = state;
	err = mc_cu_enter(mem->opt->device_id, &state->ctx, "mmap=false");
	if (err)
		state->ctx = NULL;
	return err;
}

static int vmm_create_owner(struct mc_memory *mem)
{
	bool fabric;
	int err = enter_device(mem);

	if (err)
		return err;
	fabric = fabric_supported(mem->opt->device_id);
	err = allocate_pinned(mem, &fabric);
	if (!err)
		err = reserve_range(mem);
	if (!err)
		err = map_and_grant(mem, state_of(mem)->node);
	if (!err)
		err = export_and_offer(mem, fabric);
	mc_cu_pop();
	return err; /* create() releases whatever was built */
}

/* --- peers ----------------------------------------------------------------------- */

static int vmm_reserve(struct mc_memory *mem)
{
	int err = enter_device(mem);

	if (err)
		return err;
	err = reserve_range(mem);
	mc_cu_pop();
	return err;
}

/* Unmap and release the allocation (imported, or the owner's own); the range stays reserved. */
static void unmap_and_release(struct mc_memory *mem)
{
	struct vmm_state *state = state_of(mem);
	char text[160];
	CUresult r;

	if (mem->mapped) {
		r = mc_cu.cuMemUnmap(base_of(mem), mem->alloc_size);
		if (r == CUDA_SUCCESS)
			mem->mapped = false;
		else
			mc_log(MOONCAKE_SEGMENT_LOG_WARNING,
			       "Shared segment '%s': cuMemUnmap failed (%s); its range stays mapped",
			       mem->label, mc_cu_describe(r, text, sizeof(text)));
	}
	/* Legal while mapped too: the driver frees the pages with the last mapping. */
	if (state && state->allocation) {
		r = mc_cu.cuMemRelease(state->allocation);
		if (r != CUDA_SUCCESS)
			mc_log(MOONCAKE_SEGMENT_LOG_WARNING, "Shared segment '%s': cuMemRelease failed (%s)",
			       mem->label, mc_cu_describe(r, text, sizeof(text)));
		state->allocation = 0;
	}
}

static void vmm_unimport(struct mc_memory *mem)
{
	struct vmm_state *state = state_of(mem);

	if (!state || !state->ctx || !mc_cu_push(state->ctx))
		return;
	unmap_and_release(mem);
	mc_cu_pop();
}

/* The owner's descriptor through peer-fd.c's routes, else its FABRIC handle. */
static int import_allocation(struct mc_memory *mem, const struct mc_owner_ref *owner)
{
	struct vmm_state *state = state_of(mem);
	struct mc_tracked_fd tracking;
	CUmemFabricHandle fabric;
	struct mc_peer_fd h;
	size_t used = 0, rest;
	CUresult r;
	int fd;

	if (!mc_peer_fd_decode(owner->handle, owner->handle_bytes, &h, &used) ||
	    ((rest = owner->handle_bytes - used) != 0 && rest != FABRIC_HANDLE_BYTES))
		return mc_segment_error(EPROTO,
					"the owner exported a handle of %u bytes, not a CUDA VMM handle "
					"(a descriptor's %d bytes, then an optional FABRIC handle of %zu)",
					owner->handle_bytes, MC_PEER_FD_HANDLE_BYTES, FABRIC_HANDLE_BYTES);
	/* Opened under the fork registry: a child forked meanwhile never holds it. */
	mc_fd_track_begin();
	fd = mc_peer_fd_open(owner, &h);
	mc_fd_track_end(&tracking, &fd);
	if (fd >= 0) {
		/* The driver takes its own reference: the descriptor is ours to close. */
		r = mc_cu.cuMemImportFromShareableHandle(&state->allocation, (void *)(uintptr_t)fd,
							 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		mc_fd_close(&tracking);
		if (r != CUDA_SUCCESS) {
			state->allocation = 0;
			return cu_failure(r, "cuMemImportFromShareableHandle",
					  "cannot import the owner's memory");
		}
		return 0;
	}
	if (!rest)
		return fd; /* peer-fd.c said why and what fixes it */
	/* No route to the descriptor: the FABRIC handle needs none (IMEX). */
	memcpy(&fabric, owner->handle + used, FABRIC_HANDLE_BYTES);
	r = mc_cu.cuMemImportFromShareableHandle(&state->allocation, &fabric, CU_MEM_HANDLE_TYPE_FABRIC);
	if (r != CUDA_SUCCESS) {
		char text[160];

		state->allocation = 0;
		return mc_error_add(
			mc_cu_errno(r),
			"; and cuMemImportFromShareableHandle(FABRIC) failed too (%s: grant every "
			"rank the same IMEX channel)",
			mc_cu_describe(r, text, sizeof(text)));
	}
	return 0;
}

static int vmm_import(struct mc_memory *mem, const struct mc_owner_ref *owner)
{
	struct vmm_state *state = state_of(mem);
	int err;

	if (!state || !state->ctx || !mc_cu_push(state->ctx))
		return mc_segment_error(EIO, "cannot make CUDA device %d current", mem->opt->device_id);
	err = import_allocation(mem, owner);
	/* The host grant's node is ignored by the driver for HOST_NUMA (cuda.h). */
	if (!err)
		err = map_and_grant(mem, 0);
	if (err)
		unmap_and_release(mem); /* a failed complete leaves nothing mapped */
	mc_cu_pop();
	return err;
}

/* --- teardown ---------------------------------------------------------------------- */

/* Owner: stop offering the descriptor and close it; peers hold their own imports. */
static void vmm_finish(struct mc_memory *mem)
{
	if (!state_of(mem))
		return;
	mc_peer_fd_withdraw(&state_of(mem)->offer);
	mc_fd_close(&state_of(mem)->tracking);
}

/* Only what was built is released, in reverse: mapping, allocation, range, descriptor, context. */
static void vmm_release(struct mc_memory *mem)
{
	struct vmm_state *state = state_of(mem);
	char text[160];
	CUresult r;

	if (state && state->ctx && mc_cu_push(state->ctx)) {
		unmap_and_release(mem);
		if (state->reserved && !mem->mapped) {
			r = mc_cu.cuMemAddressFree(base_of(mem), mem->alloc_size);
			if (r != CUDA_SUCCESS)
				mc_log(MOONCAKE_SEGMENT_LOG_WARNING,
				       "Shared segment '%s': cuMemAddressFree failed (%s)", mem->label,
				       mc_cu_describe(r, text, sizeof(text)));
		}
		mc_cu_pop();
	}
	vmm_finish(mem);
	if (state && state->ctx)
		mc_cu_release(mem->opt->device_id);
	mem->base = NULL;
	mem->mapped = false;
	free(mem->state);
	mem->state = NULL;
}

static bool vmm_charges_memory_cgroup(const struct mooncake_segment_options *opt)
{
	(void)opt;
	return true; /* checked as before; whether the driver's pinned pages are charged is the driver's */
}

static void vmm_describe(const struct mc_memory *mem, struct mooncake_segment_info *info)
{
	(void)mem;
	snprintf(info->backend, sizeof(info->backend), "cuda-vmm");
	if (!info->accelerator[0])
		snprintf(info->accelerator, sizeof(info->accelerator), "cuda");
}

const struct mc_backend_ops mc_backend_cuda_vmm = {
	.name = "cuda-vmm",
	.id = MC_BACKEND_CUDA_VMM,
	.mmap = false,
	.device_addressable = true, /* one unified address for the CPU and the device */
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
