/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake AscendCL runtime's virtual memory management (part of
 * libfake-ascend.so): physical memory is a memfd, address reservations are
 * PROT_NONE mappings, and a shareable handle names the exporter's pid and
 * descriptor, so that forked ranks really share pages through it.  It checks
 * its use as the CANN documentation states it: sizes in whole granules, one
 * export per handle, map only over a reservation, access set only on a
 * mapping and for a device, unmap before free and before release; anything
 * else is an "ERROR" line in the log, and so is anything still held at exit.
 *
 * Knobs (environment, read at each call):
 *   FAKE_ACL_GRANULARITY=N     what aclrtMemGetAllocationGranularity says (default 2 MiB)
 *   FAKE_ACL_FABRIC=1          FABRIC handles are supported (an A3 system)
 *   FAKE_ACL_NUMA=0            HOST_NUMA placement is not supported
 *   FAKE_ACL_LOGICAL_OFFSET=N  logical device id = user id + N (ASCEND_RT_VISIBLE_DEVICES)
 *   FAKE_ACL_FAIL=NAME         the function NAME fails (aclrtMapMem, aclrtMemSetAccess, ...)
 */
#define _GNU_SOURCE
#include <acl/acl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../fake-runtime.h"

#define note(...) fake_note("FAKE_ACL_LOG", __VA_ARGS__)

#define MAX_OBJECTS  64
#define FABRIC_MAGIC "fake-acl-fabric"
/* The DEFAULT handle: pid in bits 0-31, descriptor in 32-55, bit 63 when pid validation is off. */
#define HANDLE_NO_PID_CHECK (UINT64_C(1) << 63)

struct physical {
	bool used, imported, exported;
	int fd;
	size_t size;
	void *mapped_at;
};

struct reservation {
	bool used;
	void *addr;
	size_t size;
	struct physical *mapped;
};

static struct physical physicals[MAX_OBJECTS];
static struct reservation reservations[MAX_OBJECTS];

static size_t reported_granularity(void)
{
	return (size_t)fake_env_int("FAKE_ACL_GRANULARITY", 2 << 20);
}

/* What allocations must be a multiple of, whatever the query said. */
static size_t allocation_unit(void)
{
	return reported_granularity() ? reported_granularity() : 2 << 20;
}

static bool failing(const char *function)
{
	const char *name = getenv("FAKE_ACL_FAIL");

	if (!name || strcmp(name, function) != 0)
		return false;
	note("%s failed (FAKE_ACL_FAIL)", function);
	return true;
}

static bool host_memory_prop(const aclrtPhysicalMemProp *prop)
{
	return prop && prop->handleType == ACL_MEM_HANDLE_TYPE_NONE &&
	       prop->allocationType == ACL_MEM_ALLOCATION_TYPE_PINNED &&
	       (prop->location.type == ACL_MEM_LOCATION_TYPE_HOST ||
		prop->location.type == ACL_MEM_LOCATION_TYPE_HOST_NUMA);
}

static struct physical *find_physical(aclrtDrvMemHandle handle)
{
	struct physical *p = handle;

	if (p < physicals || p >= physicals + MAX_OBJECTS || !p->used)
		return NULL;
	return p;
}

static struct reservation *find_reservation(const void *addr)
{
	for (int i = 0; i < MAX_OBJECTS; i++)
		if (reservations[i].used && reservations[i].addr == addr)
			return &reservations[i];
	return NULL;
}

static struct physical *new_physical(int fd, size_t size, bool imported)
{
	for (int i = 0; i < MAX_OBJECTS; i++)
		if (!physicals[i].used) {
			physicals[i] = (struct physical){ true, imported, false, fd, size, NULL };
			return &physicals[i];
		}
	return NULL;
}

/* NOLINTBEGIN(readability-inconsistent-declaration-parameter-name) */

aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop, aclrtMemGranularityOptions option,
					  size_t *granularity)
{
	if (!host_memory_prop(prop) || option != ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM || !granularity)
		return ACL_ERROR_INVALID_PARAM;
	*granularity = reported_granularity();
	return ACL_SUCCESS;
}

aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const aclrtPhysicalMemProp *prop,
			     uint64_t flags)
{
	struct physical *p;
	int fd;

	if (!handle || !host_memory_prop(prop) || flags != 0 || size == 0 || size % allocation_unit())
		return ACL_ERROR_INVALID_PARAM;
	if (prop->location.type == ACL_MEM_LOCATION_TYPE_HOST_NUMA && !fake_env_int("FAKE_ACL_NUMA", 1)) {
		note("refused malloc on node %u", prop->location.id);
		return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
	}
	if (failing("aclrtMallocPhysical"))
		return ACL_ERROR_RT_MEMORY_ALLOCATION;
	fd = memfd_create("fake-acl-physical", MFD_CLOEXEC);
	/* Pinned memory exists once allocated: commit it as the runtime would. */
	if (fd < 0 || fallocate(fd, 0, 0, (off_t)size) != 0 || !(p = new_physical(fd, size, false))) {
		if (fd >= 0)
			close(fd);
		return ACL_ERROR_RT_MEMORY_ALLOCATION;
	}
	note("malloc %zu %s %u attr %d", size,
	     prop->location.type == ACL_MEM_LOCATION_TYPE_HOST_NUMA ? "node" : "host", prop->location.id,
	     (int)prop->memAttr);
	*handle = p;
	return ACL_SUCCESS;
}

aclError aclrtFreePhysical(aclrtDrvMemHandle handle)
{
	struct physical *p = find_physical(handle);

	if (!p) {
		note("ERROR free of an unknown handle");
		return ACL_ERROR_INVALID_PARAM;
	}
	if (p->mapped_at) {
		note("ERROR free of mapped memory");
		return ACL_ERROR_INVALID_PARAM;
	}
	note("free %s %zu", p->imported ? "imported" : "allocated", p->size);
	close(p->fd);
	p->used = false;
	return ACL_SUCCESS;
}

/* cppcheck-suppress constParameter ; the documented prototype */
aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr, uint64_t flags)
{
	void *addr;

	if (!virPtr || size == 0 || alignment != 0 || expectPtr || flags > 1)
		return ACL_ERROR_INVALID_PARAM;
	if (failing("aclrtReserveMemAddress"))
		return ACL_ERROR_RT_MEMORY_ALLOCATION;
	addr = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (addr == MAP_FAILED)
		return ACL_ERROR_RT_MEMORY_ALLOCATION;
	for (int i = 0; i < MAX_OBJECTS; i++)
		if (!reservations[i].used) {
			reservations[i] = (struct reservation){ true, addr, size, NULL };
			note("reserve %zu", size);
			*virPtr = addr;
			return ACL_SUCCESS;
		}
	munmap(addr, size);
	return ACL_ERROR_RT_MEMORY_ALLOCATION;
}

aclError aclrtReleaseMemAddress(void *virPtr)
{
	struct reservation *r = find_reservation(virPtr);

	if (!r) {
		note("ERROR release of an unknown address");
		return ACL_ERROR_INVALID_PARAM;
	}
	if (r->mapped) {
		note("ERROR release of a mapped range");
		return ACL_ERROR_INVALID_PARAM;
	}
	munmap(r->addr, r->size);
	r->used = false;
	note("release %zu", r->size);
	return ACL_SUCCESS;
}

aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags)
{
	struct reservation *r = find_reservation(virPtr);
	struct physical *p = find_physical(handle);

	if (!r || !p || r->mapped || p->mapped_at || size != r->size || size != p->size || offset || flags) {
		note("ERROR map with wrong arguments");
		return ACL_ERROR_INVALID_PARAM;
	}
	if (failing("aclrtMapMem"))
		return ACL_ERROR_RT_MEMORY_ALLOCATION;
	if (mmap(virPtr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, p->fd, 0) == MAP_FAILED)
		return ACL_ERROR_RT_MEMORY_ALLOCATION;
	r->mapped = p;
	p->mapped_at = virPtr;
	note("map %zu %s", size, p->imported ? "imported" : "allocated");
	return ACL_SUCCESS;
}

aclError aclrtUnmapMem(void *virPtr)
{
	struct reservation *r = find_reservation(virPtr);

	if (!r || !r->mapped) {
		note("ERROR unmap of a range that is not mapped");
		return ACL_ERROR_INVALID_PARAM;
	}
	/* The range stays reserved. */
	if (mmap(virPtr, r->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
		 0) == MAP_FAILED)
		note("ERROR unmap could not keep the range reserved");
	r->mapped->mapped_at = NULL;
	r->mapped = NULL;
	note("unmap %zu", r->size);
	return ACL_SUCCESS;
}

aclError aclrtMemSetAccess(void *virPtr, size_t size, aclrtMemAccessDesc *desc, size_t count)
{
	struct reservation *r = find_reservation(virPtr);

	if (!r || !r->mapped || size != r->size || !desc || count != 1 ||
	    desc->flags != ACL_RT_MEM_ACCESS_FLAGS_READWRITE ||
	    desc->location.type != ACL_MEM_LOCATION_TYPE_DEVICE ||
	    (int)desc->location.id >=
		    fake_env_int("FAKE_ACL_DEVICES", 2) + fake_env_int("FAKE_ACL_LOGICAL_OFFSET", 0)) {
		note("ERROR access with wrong arguments");
		return ACL_ERROR_INVALID_PARAM;
	}
	if (failing("aclrtMemSetAccess"))
		return ACL_ERROR_INVALID_PARAM;
	note("access logical device %u", desc->location.id);
	return ACL_SUCCESS;
}

aclError aclrtMemExportToShareableHandleV2(aclrtDrvMemHandle handle, uint64_t flags,
					   aclrtMemSharedHandleType shareType, void *shareableHandle)
{
	struct physical *p = find_physical(handle);
	uint64_t value;

	if (!p || p->imported || !shareableHandle || flags > ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION)
		return ACL_ERROR_INVALID_PARAM;
	if (p->exported) {
		note("ERROR second export of one handle");
		return ACL_ERROR_INVALID_PARAM;
	}
	if (shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC && !fake_env_int("FAKE_ACL_FABRIC", 0))
		return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
	if (failing("aclrtMemExportToShareableHandleV2"))
		return ACL_ERROR_INVALID_PARAM;
	value = (uint64_t)getpid() | (uint64_t)p->fd << 32 |
		((flags & ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION) ? HANDLE_NO_PID_CHECK : 0);
	if (shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC) {
		aclrtMemFabricHandle *fabric = shareableHandle;

		memset(fabric, 0, sizeof(*fabric));
		memcpy(fabric->data, FABRIC_MAGIC, sizeof(FABRIC_MAGIC));
		memcpy(fabric->data + 64, &value, sizeof(value));
	} else if (shareType == ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT) {
		memcpy(shareableHandle, &value, sizeof(value));
	} else {
		return ACL_ERROR_INVALID_PARAM;
	}
	p->exported = true;
	note("export %s", shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC ? "fabric" : "default");
	return ACL_SUCCESS;
}

aclError aclrtMemImportFromShareableHandleV2(void *shareableHandle, aclrtMemSharedHandleType shareType,
					     uint64_t flags, aclrtDrvMemHandle *handle)
{
	struct physical *p;
	uint64_t value = 0;
	char path[64];
	struct stat st;
	int fd;

	if (!shareableHandle || !handle || flags != 0)
		return ACL_ERROR_INVALID_PARAM;
	if (shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC) {
		const aclrtMemFabricHandle *fabric = shareableHandle;

		if (memcmp(fabric->data, FABRIC_MAGIC, sizeof(FABRIC_MAGIC)) != 0)
			return ACL_ERROR_INVALID_PARAM;
		memcpy(&value, fabric->data + 64, sizeof(value));
	} else if (shareType == ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT) {
		memcpy(&value, shareableHandle, sizeof(value));
	} else {
		return ACL_ERROR_INVALID_PARAM;
	}
	if (!(value & HANDLE_NO_PID_CHECK)) {
		/* The exporter trust-listed nobody: the real runtime refuses this process. */
		note("ERROR import of a pid-validated handle without a trust list");
		return ACL_ERROR_INVALID_PARAM;
	}
	if (failing("aclrtMemImportFromShareableHandleV2"))
		return ACL_ERROR_INVALID_PARAM;
	snprintf(path, sizeof(path), "/proc/%u/fd/%u", (unsigned)(value & 0xffffffffu),
		 (unsigned)((value >> 32) & 0xffffff));
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || !(p = new_physical(fd, (size_t)st.st_size, true))) {
		if (fd >= 0)
			close(fd);
		return ACL_ERROR_INVALID_PARAM;
	}
	note("import %s %zu", shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC ? "fabric" : "default", p->size);
	*handle = p;
	return ACL_SUCCESS;
}

aclError aclrtGetLogicDevIdByUserDevId(const int32_t userDevid, int32_t *const logicDevId)
{
	if (userDevid < 0 || userDevid >= fake_env_int("FAKE_ACL_DEVICES", 2) || !logicDevId)
		return ACL_ERROR_INVALID_PARAM;
	*logicDevId = userDevid + fake_env_int("FAKE_ACL_LOGICAL_OFFSET", 0);
	return ACL_SUCCESS;
}

/* NOLINTEND(readability-inconsistent-declaration-parameter-name) */

/* A process that ends holding runtime memory leaked it. */
__attribute__((destructor)) static void report_leaks(void)
{
	for (int i = 0; i < MAX_OBJECTS; i++) {
		if (physicals[i].used)
			note("ERROR %s physical memory of %zu bytes never freed",
			     physicals[i].imported ? "imported" : "allocated", physicals[i].size);
		if (reservations[i].used)
			note("ERROR reservation of %zu bytes never released", reservations[i].size);
	}
}
