/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake CUDA driver's virtual memory management (part of libfake-cuda.so),
 * written from NVIDIA's documentation of these calls (cuda.h): physical
 * memory is a memfd, so that forked ranks really share pages; an address
 * reservation is a PROT_NONE mapping; cuMemMap maps the memfd there with no
 * access, and cuMemSetAccess for the host opens it to the CPU (the real
 * driver's rule: a mapping starts with no access for anyone) and maps every
 * page, as the driver maps pinned memory.  The exported
 * POSIX descriptor is a separate open file description of the memfd, marked
 * by its file offset, so an import can tell a duplicate (SCM_RIGHTS,
 * pidfd_getfd) from a reopen through /proc/PID/fd, which the real driver's
 * descriptor does not allow.  A FABRIC handle names the exporter's pid and
 * memfd.
 *
 * Misuse is an "ERROR" line in the log: sizes that are not whole granules, a
 * HOST (no node) allocation that asks for a shareable handle, a map outside a
 * reservation or over a mapping, access set on an unmapped range or for the
 * host on memory of no host node, an unmap that is not the whole mapping, an
 * address range freed while mapped, a handle released twice; anything still
 * held at exit (allocations, reservations, mappings) is one too.
 *
 * Knobs (environment, read at each call):
 *   FAKE_CUDA_GRANULARITY=N         what cuMemGetAllocationGranularity says (default 2 MiB)
 *   FAKE_CUDA_VMM=0                 no virtual memory management (attribute 102)
 *   FAKE_CUDA_POSIX_FD=0            no POSIX descriptor handles (attribute 103)
 *   FAKE_CUDA_HOST_NUMA=0           no HOST_NUMA allocations (attribute 141)
 *   FAKE_CUDA_FABRIC=1              FABRIC handles (attribute 128); =2: claimed, but
 *                                   cuMemCreate refuses them (no IMEX channel)
 *   FAKE_CUDA_OLD_ATTRIBUTES=1      the driver knows no HOST_NUMA attribute (134, 141)
 *   FAKE_CUDA_HOST_NUMA_ID=N        the devices' host node (attribute 134, default 0)
 *   FAKE_CUDA_REFUSE_NODE=N         cuMemCreate on host node N is not supported
 *   FAKE_CUDA_REFUSE_REOPEN=1       an import of a descriptor reopened through /proc fails
 *   FAKE_CUDA_FAIL_<call>=N         the Nth call of <call> fails (fake-cuda.c)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../fake-runtime.h"
#include "fake-cuda.h"

#define MAX_OBJECTS 64
/* The exported description's file offset: a duplicate shares it, a reopen starts at 0. */
#define EXPORT_MARK  ((off_t)0x66616b65 << 12)
#define FABRIC_MAGIC "fake-cuda-fabric"

struct allocation {
	size_t size;
	pid_t process; /* a forked child's copies are not its own */
	int fd;	       /* the memfd (owner) or the driver's own duplicate (importer) */
	int node;
	unsigned int handle_types;
	int mappings;
	bool used, imported, released;
};

struct reservation {
	pid_t process;
	bool used;
	uintptr_t addr;
	size_t size;
	struct allocation *mapped;
	bool host_access;
	unsigned int device_access; /* bit per device */
};

static struct allocation allocations[MAX_OBJECTS];
static struct reservation reservations[MAX_OBJECTS];

static size_t granularity(void)
{
	int g = fake_env_int("FAKE_CUDA_GRANULARITY", 2 << 20);

	return g > 0 ? (size_t)g : 2 << 20;
}

static struct allocation *find_allocation(CUmemGenericAllocationHandle handle)
{
	if (handle < 1 || handle > MAX_OBJECTS || !allocations[handle - 1].used ||
	    allocations[handle - 1].released)
		return NULL;
	return &allocations[handle - 1];
}

static CUmemGenericAllocationHandle new_allocation(int fd, size_t size, int node, unsigned int types,
						   bool imported)
{
	for (int i = 0; i < MAX_OBJECTS; i++)
		if (!allocations[i].used) {
			allocations[i] = (struct allocation){ .size = size,
							      .process = getpid(),
							      .fd = fd,
							      .node = node,
							      .handle_types = types,
							      .used = true,
							      .imported = imported };
			return (CUmemGenericAllocationHandle)i + 1;
		}
	return 0;
}

/* The memory goes when its handle is released and its last mapping is gone. */
static void drop_if_unused(struct allocation *a)
{
	if (a->released && a->mappings == 0) {
		close(a->fd);
		a->used = false;
	}
}

static struct reservation *find_reservation(uintptr_t addr)
{
	for (int i = 0; i < MAX_OBJECTS; i++)
		if (reservations[i].used && reservations[i].addr <= addr &&
		    addr < reservations[i].addr + reservations[i].size)
			return &reservations[i];
	return NULL;
}

static bool valid_device(int device)
{
	return device >= 0 && device < fake_cuda_devices();
}

/* NOLINTBEGIN(readability-inconsistent-declaration-parameter-name) */

CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device)
{
	bool old = fake_env_int("FAKE_CUDA_OLD_ATTRIBUTES", 0);

	if (!value || !valid_device(device))
		return CUDA_ERROR_INVALID_DEVICE;
	if (fake_cuda_failing("cuDeviceGetAttribute"))
		return CUDA_ERROR_INVALID_VALUE;
	switch (attribute) {
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		*value = fake_env_int("FAKE_CUDA_VMM", 1) != 0;
		break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
		*value = fake_env_int("FAKE_CUDA_POSIX_FD", 1) != 0;
		break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
		*value = fake_env_int("FAKE_CUDA_FABRIC", 0) != 0;
		break;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:
		if (old)
			return CUDA_ERROR_INVALID_VALUE;
		*value = fake_env_int("FAKE_CUDA_HOST_NUMA_ID", 0);
		break;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		if (old)
			return CUDA_ERROR_INVALID_VALUE;
		*value = fake_env_int("FAKE_CUDA_HOST_NUMA", 1) != 0;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE; /* an attribute the fake does not model */
	}
	note("attribute %d device %d = %d", (int)attribute, (int)device, *value);
	return CUDA_SUCCESS;
}

static bool pinned_host_prop(const CUmemAllocationProp *prop)
{
	return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
	       (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
		prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
		prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE);
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *result, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option)
{
	if (!result || !pinned_host_prop(prop) ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
		note("ERROR granularity with wrong arguments");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (fake_cuda_failing("cuMemGetAllocationGranularity"))
		return CUDA_ERROR_INVALID_VALUE;
	*result = granularity();
	note("granularity %zu", *result);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			     const CUmemAllocationProp *prop, unsigned long long flags)
{
	unsigned int types;
	int fd, node;

	if (!handle || !pinned_host_prop(prop) || flags || size == 0 || size % granularity()) {
		note("ERROR create with wrong arguments (size %zu)", size);
		return CUDA_ERROR_INVALID_VALUE;
	}
	types = (unsigned int)prop->requestedHandleTypes;
	node = prop->location.id;
	/* cuda.h: HOST allocations are not IPC capable, requestedHandleTypes must be 0. */
	if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST && types) {
		note("ERROR create of HOST memory with a shareable handle type");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA &&
	    (!fake_env_int("FAKE_CUDA_HOST_NUMA", 1) || node == fake_env_int("FAKE_CUDA_REFUSE_NODE", -1))) {
		note("refused create on node %d", node);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (((types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) && !fake_env_int("FAKE_CUDA_POSIX_FD", 1)) ||
	    ((types & CU_MEM_HANDLE_TYPE_FABRIC) && fake_env_int("FAKE_CUDA_FABRIC", 0) != 1)) {
		note("refused create with handle types %u", types);
		return fake_env_int("FAKE_CUDA_FABRIC", 0) == 2 ? CUDA_ERROR_NOT_PERMITTED
								: CUDA_ERROR_NOT_SUPPORTED;
	}
	if (fake_cuda_failing("cuMemCreate"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	fd = memfd_create("fake-cuda-physical", MFD_CLOEXEC);
	/* Pinned memory exists once allocated: commit it as the driver would. */
	if (fd < 0 || fallocate(fd, 0, 0, (off_t)size) != 0 ||
	    !(*handle = new_allocation(fd, size, node, types, false))) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	note("create %zu node %d types %u", size, node, types);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct allocation *a = find_allocation(handle);

	if (!a) {
		note("ERROR release of an unknown or released handle");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (fake_cuda_failing("cuMemRelease"))
		return CUDA_ERROR_INVALID_VALUE;
	note("release %s %zu%s", a->imported ? "imported" : "created", a->size,
	     a->mappings ? " (mapped)" : "");
	a->released = true;
	drop_if_unused(a);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				     unsigned long long flags)
{
	size_t align = alignment ? alignment : granularity();
	uint8_t *p;
	uintptr_t start;

	if (!ptr || size == 0 || size % (size_t)sysconf(_SC_PAGESIZE) || (align & (align - 1)) || flags) {
		note("ERROR reserve with wrong arguments");
		return CUDA_ERROR_INVALID_VALUE;
	}
	(void)addr; /* a hint only */
	if (fake_cuda_failing("cuMemAddressReserve"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Over-reserve, then trim to the alignment asked for. */
	p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	start = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
	if (start > (uintptr_t)p)
		munmap(p, start - (uintptr_t)p);
	munmap((void *)(start + size), (uintptr_t)p + align - start);
	for (int i = 0; i < MAX_OBJECTS; i++)
		if (!reservations[i].used) {
			reservations[i] = (struct reservation){ getpid(), true, start, size, NULL, false, 0 };
			note("reserve %zu", size);
			*ptr = (CUdeviceptr)start;
			return CUDA_SUCCESS;
		}
	munmap((void *)start, size);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct reservation *r = find_reservation((uintptr_t)ptr);

	if (!r || r->addr != (uintptr_t)ptr || r->size != size) {
		note("ERROR free of an address range not reserved as such");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (r->mapped) {
		note("ERROR free of an address range still mapped");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (fake_cuda_failing("cuMemAddressFree"))
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)r->addr, r->size);
	r->used = false;
	note("free-address %zu", size);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			  unsigned long long flags)
{
	struct reservation *r = find_reservation((uintptr_t)ptr);
	struct allocation *a = find_allocation(handle);

	if (!r) {
		note("ERROR map of an address that is not reserved");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!a || r->mapped || r->addr != (uintptr_t)ptr || size != r->size || size != a->size || offset ||
	    flags) {
		note("ERROR map with wrong arguments");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (fake_cuda_failing("cuMemMap"))
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* A new mapping has no access for anyone until cuMemSetAccess. */
	if (mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0) == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r->mapped = a;
	r->host_access = false;
	r->device_access = 0;
	a->mappings++;
	note("map %zu %s", size, a->imported ? "imported" : "created");
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	struct reservation *r = find_reservation((uintptr_t)ptr);
	struct allocation *a;

	if (!r || !r->mapped || r->addr != (uintptr_t)ptr || r->size != size) {
		note("ERROR unmap of a range that is not one whole mapping");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (fake_cuda_failing("cuMemUnmap"))
		return CUDA_ERROR_INVALID_VALUE;
	/* The range becomes a reservation again. */
	if (mmap((void *)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
		 0) == MAP_FAILED)
		note("ERROR unmap could not keep the range reserved");
	a = r->mapped;
	r->mapped = NULL;
	a->mappings--;
	note("unmap %zu", size);
	drop_if_unused(a);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	struct reservation *r = find_reservation((uintptr_t)ptr);

	if (!r || !r->mapped || r->addr != (uintptr_t)ptr || r->size != size) {
		note("ERROR access set on a range that is not mapped");
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; i < count; i++) {
		const CUmemLocation *where = &desc[i].location;

		if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
			note("ERROR access with unknown flags");
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (where->type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(where->id)) {
			note("ERROR access for device %d, which does not exist", where->id);
			return CUDA_ERROR_INVALID_DEVICE;
		}
		/* cuda.h: no HOST_NUMA access for memory of another location type. */
		if ((where->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
		     where->type == CU_MEM_LOCATION_TYPE_HOST) &&
		    r->mapped->node < 0) {
			note("ERROR host access to memory of no host node");
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (where->type != CU_MEM_LOCATION_TYPE_DEVICE &&
		    where->type != CU_MEM_LOCATION_TYPE_HOST_NUMA &&
		    where->type != CU_MEM_LOCATION_TYPE_HOST) {
			note("ERROR access for location type %d", (int)where->type);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	if (fake_cuda_failing("cuMemSetAccess"))
		return CUDA_ERROR_INVALID_DEVICE;
	for (size_t i = 0; i < count; i++) {
		int prot = desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
			   : desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
									       : PROT_NONE;

		if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
			if (prot)
				r->device_access |= 1u << desc[i].location.id;
			note("access device %d %s", desc[i].location.id, prot & PROT_WRITE ? "rw" : "r");
		} else {
			/* The CPU's access is the mapping's protection; the driver maps every pinned page. */
			mprotect((void *)r->addr, r->size, prot);
#ifdef MADV_POPULATE_READ
			if (prot)
				madvise((void *)r->addr, r->size, MADV_POPULATE_READ);
#endif
			r->host_access = prot != PROT_NONE;
			note("access host %s", prot & PROT_WRITE ? "rw" : "r");
		}
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
					      CUmemAllocationHandleType type, unsigned long long flags)
{
	struct allocation *a = find_allocation(handle);
	char path[64];
	int fd;

	if (!a || !shareable || flags || a->imported || !(a->handle_types & (unsigned int)type)) {
		note("ERROR export with wrong arguments (type %d)", (int)type);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (fake_cuda_failing("cuMemExportToShareableHandle"))
		return CUDA_ERROR_NOT_PERMITTED;
	if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
		CUmemFabricHandle *fabric = shareable;
		uint32_t ids[2] = { (uint32_t)getpid(), (uint32_t)a->fd };

		memset(fabric, 0, sizeof(*fabric));
		memcpy(fabric->data, FABRIC_MAGIC, sizeof(FABRIC_MAGIC));
		memcpy(fabric->data + 32, ids, sizeof(ids));
		note("export fabric");
		return CUDA_SUCCESS;
	}
	/* A description of its own, marked: duplicates keep the mark, reopens do not. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", a->fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 || lseek(fd, EXPORT_MARK, SEEK_SET) != EXPORT_MARK) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*(int *)shareable = fd;
	note("export posix");
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
						CUmemAllocationHandleType type)
{
	struct stat st;
	int fd;

	if (!handle ||
	    (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && type != CU_MEM_HANDLE_TYPE_FABRIC)) {
		note("ERROR import with wrong arguments");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
		const CUmemFabricHandle *fabric = os_handle;
		uint32_t ids[2];
		char path[64];

		if (!fabric || memcmp(fabric->data, FABRIC_MAGIC, sizeof(FABRIC_MAGIC)) != 0) {
			note("ERROR import of something that is not a fabric handle");
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (fake_cuda_failing("cuMemImportFromShareableHandle"))
			return CUDA_ERROR_NOT_PERMITTED;
		memcpy(ids, fabric->data + 32, sizeof(ids));
		snprintf(path, sizeof(path), "/proc/%u/fd/%u", ids[0], ids[1]);
		fd = open(path, O_RDWR | O_CLOEXEC);
	} else {
		int given = (int)(intptr_t)os_handle;

		if (fstat(given, &st) != 0) {
			note("ERROR import of descriptor %d, which is not open", given);
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (lseek(given, 0, SEEK_CUR) != EXPORT_MARK) {
			note("%sreopened through /proc: the descriptor imported is not the exported one",
			     fake_env_int("FAKE_CUDA_REFUSE_REOPEN", 0) ? "ERROR " : "");
			if (fake_env_int("FAKE_CUDA_REFUSE_REOPEN", 0))
				return CUDA_ERROR_INVALID_VALUE;
		}
		if (fake_cuda_failing("cuMemImportFromShareableHandle"))
			return CUDA_ERROR_NOT_PERMITTED;
		/* The driver keeps its own reference: the caller may close its descriptor. */
		fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
	}
	if (fd < 0 || fstat(fd, &st) != 0 ||
	    !(*handle = new_allocation(fd, (size_t)st.st_size, 0, 0, true))) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	note("import %s %zu", type == CU_MEM_HANDLE_TYPE_FABRIC ? "fabric" : "posix", (size_t)st.st_size);
	return CUDA_SUCCESS;
}

/* NOLINTEND(readability-inconsistent-declaration-parameter-name) */

/* For tests: which devices may use the mapping at @addr, and whether the CPU may (bit 31). */
unsigned int fake_cuda_access(const void *addr);
unsigned int fake_cuda_access(const void *addr)
{
	struct reservation *r = find_reservation((uintptr_t)addr);

	return !r || !r->mapped ? 0 : r->device_access | (r->host_access ? 1u << 31 : 0);
}

/* An "ERROR" line for each allocation or reservation this process still holds; how many. */
static int report_objects(void)
{
	int leaks = 0;

	for (int i = 0; i < MAX_OBJECTS; i++) {
		if (allocations[i].used && !allocations[i].released && allocations[i].process == getpid()) {
			note("ERROR %s allocation of %zu bytes never released",
			     allocations[i].imported ? "imported" : "created", allocations[i].size);
			leaks++;
		}
		if (reservations[i].used && reservations[i].process == getpid()) {
			note("ERROR reservation of %zu bytes never freed%s", reservations[i].size,
			     reservations[i].mapped ? " (still mapped)" : "");
			leaks++;
		}
	}
	return leaks;
}

/* For tests: what this process still holds (contexts included), reported now; how many. */
int fake_cuda_report_leaks(void);
int fake_cuda_report_leaks(void)
{
	return fake_cuda_retained_contexts() + report_objects();
}

/* A process that ends holding driver memory it made leaked it (fake-cuda.c reports contexts). */
__attribute__((destructor)) static void report_leaks(void)
{
	report_objects();
}
