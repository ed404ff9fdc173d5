/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA host VMM backend (mmap=false) against the fake CUDA driver
 * (tests/fakes/cuda), whose physical memory is a real memfd: forked ranks
 * really share pages through the exported descriptor.  What supported()
 * says for each missing capability and why; ranks in several processes on
 * one copy; the device and host grants; NUMA placement and its fallback;
 * FABRIC handles; and that every failure of a driver call is an error naming
 * the call with nothing left behind (allocations released, reservations
 * freed, contexts released, no descriptor or mapping left).
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accel/cuda-driver.h"
#include "group.h"
#include "helpers.h"
#include "internals.h"
#include "vmm-share.h"

#define BLOB MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE (UINT64_C(6) << 20)

extern const struct mc_backend_ops mc_backend_cuda_vmm;

static char log_path[64];
static char log_text[32768];

/* The fake driver, with @devices devices; no Ascend runtime, so CUDA serves mmap=false. */
static void use_fake_driver(const char *devices)
{
	use_fake_cuda_driver(devices, "cuda-vmm", log_path, sizeof(log_path));
	/* The real driver's descriptor cannot be reopened through /proc: peers must get a duplicate. */
	setenv("FAKE_CUDA_REFUSE_REOPEN", "1", 1);
}

/* Lines of the fake's call log starting with @prefix. */
static int calls(const char *prefix)
{
	return count_lines(read_text(log_path, log_text, sizeof(log_text)), prefix);
}

/* Make the @nth call of the driver's @call fail (FAKE_CUDA_FAIL_<call>). */
static void fail_call(const char *call, int nth)
{
	char variable[96], value[16];

	snprintf(variable, sizeof(variable), "FAKE_CUDA_FAIL_%s", call);
	snprintf(value, sizeof(value), "%d", nth);
	setenv(variable, value, 1);
}

/* Mappings of the fake's physical memory in this process. */
static int physical_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "fake-cuda-physical"))
			n++;
	if (f)
		fclose(f);
	return n;
}

/* What the fake says this process still holds (an "ERROR" line in its log for each). */
static int driver_leaks(void)
{
	void *lib = dlopen(getenv("FAKE_CUDA_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
	int (*report)(void) = lib ? (int (*)(void))dlsym(lib, "fake_cuda_report_leaks") : NULL;
	int leaks = report ? report() : 0;

	if (lib)
		dlclose(lib);
	return leaks;
}

/* Everything the driver handed out came back, and nothing was misused. */
static void assert_driver_balanced(void)
{
	ck_assert_int_eq(driver_leaks(), 0);
	ck_assert_int_eq(calls("create ") + calls("import "),
			 calls("release created") + calls("release imported"));
	ck_assert_int_eq(calls("reserve "), calls("free-address "));
	ck_assert_int_eq(calls("map "), calls("unmap "));
	ck_assert_int_eq(calls("retain "), calls("release 0") + calls("release 1"));
	ck_assert_msg(!strstr(log_text, "ERROR"), "%s", log_text);
	unlink(log_path);
}

static struct mooncake_segment_options vmm_options(uint32_t world, uint32_t rank, uint32_t owner, int device)
{
	struct mooncake_segment_options opt = test_options(world, rank, owner);

	opt.mmap = false;
	opt.device_id = device;
	return opt;
}

/* What the fake says of the mapping at @addr: a bit per device, bit 31 the CPU. */
static unsigned int access_of(const void *addr)
{
	void *lib = dlopen(getenv("FAKE_CUDA_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
	unsigned int (*query)(const void *) =
		lib ? (unsigned int (*)(const void *))dlsym(lib, "fake_cuda_access") : NULL;
	unsigned int bits;

	ck_assert_msg(query, "the fake driver is not loaded");
	bits = query(addr);
	dlclose(lib);
	return bits;
}

/* --- what supported() says, and why ------------------------------------------ */

/* A host lacking one thing, and the words create's error must use. */
struct missing_case {
	const char *variable, *value, *reason;
	bool registers; /* host registration still works */
};

static const struct missing_case missing[] = {
	{ "MOONCAKE_SEGMENT_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", "/nonexistent/libcuda.so.1", false },
	{ "FAKE_CUDA_DEVICES", "0", "the CUDA driver reports no usable device", false },
	{ "FAKE_CUDA_VMM", "0", "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0", true },
	{ "FAKE_CUDA_POSIX_FD", "0", "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0",
	  true },
	{ "FAKE_CUDA_HOST_NUMA", "0",
	  "CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0", true },
	{ "FAKE_CUDA_OLD_ATTRIBUTES", "1",
	  "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) failed",
	  true },
	/* A driver without the VMM entry points (the value is filled in: the fake built without them). */
	{ "MOONCAKE_SEGMENT_CUDA_LIBRARY", NULL, "the CUDA driver lacks cuDeviceGetAttribute", true },
};

/* The fake driver built without its VMM part, beside the whole one. */
static const char *driver_without_vmm(void)
{
	return fake_cuda_sibling("libfake-cuda-novmm.so");
}

START_TEST(test_supported_tells_what_is_missing)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint64_t page_size = 0;
	uint8_t blob[BLOB];

	use_fake_driver("2");
	setenv(missing[_i].variable, missing[_i].value ? missing[_i].value : driver_without_vmm(), 1);
	ck_assert(!mooncake_segment_supported(false, false, false));
	/* Host registration needs none of the VMM: an old driver still registers. */
	ck_assert(mooncake_segment_supported(true, true, false) == missing[_i].registers);
	ck_assert(!mc_backend_cuda_vmm.supported(false, false));
	/* The backend's own reason (with an Ascend VMM build too, create names the first backend's). */
	ck_assert_int_eq(mc_backend_cuda_vmm.granularity(&opt, &page_size), -ENOTSUP);
	ck_assert_msg(strstr(mooncake_segment_last_error(), missing[_i].reason), "%s",
		      mooncake_segment_last_error());
	ck_assert_msg(strstr(mooncake_segment_last_error(), "use mmap=true"), "%s",
		      mooncake_segment_last_error());
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), -ENOTSUP);
	ck_assert_ptr_null(seg);
	if (!HAVE_ASCEND_VMM)
		ck_assert_msg(strstr(mooncake_segment_last_error(), missing[_i].reason), "%s",
			      mooncake_segment_last_error());
}
END_TEST

START_TEST(test_supported_with_every_capability)
{
	use_fake_driver("2");
	ck_assert(mooncake_segment_supported(false, false, false));
	ck_assert(!mooncake_segment_supported(false, true, false)); /* host_register needs mmap */
	ck_assert(!mooncake_segment_supported(false, false, true)); /* so does hugetlb */
	/* Where an Ascend VMM backend is built too, the choice falls on the one that works. */
	ck_assert_ptr_eq(mc_backend_for(false, false, false), &mc_backend_cuda_vmm);
	/* An old driver still registers hosts. */
	ck_assert(mooncake_segment_supported(true, true, false));
}
END_TEST

/* --- N ranks in N processes ------------------------------------------------ */

/* The inode of the file mapped at @addr (the fake's memfd), 0 when none. */
static unsigned long mapped_inode(const void *addr)
{
	FILE *f = fopen("/proc/self/maps", "re");
	unsigned long start, inode = 0, found = 0;
	char line[512];

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%*x %*s %*s %*s %lu", &start, &inode) == 2 && start == (uintptr_t)addr)
			found = inode;
	if (f)
		fclose(f);
	return found;
}

/* What only the CUDA backend promises of a rank's mapping. */
static int check_cuda_rank(struct group_rank *self, struct mooncake_segment *seg)
{
	uint8_t *base = mooncake_segment_base(seg);
	struct mooncake_segment_info info;
	unsigned long inode, inodes[4];

	/* Its own device and the CPU are granted. */
	RANK_CHECK(access_of(base) == (1u << 31 | 1u << (self->rank % 2)));
	RANK_CHECK(mooncake_segment_get_info(seg, &info, sizeof(info)) == 0);
	RANK_CHECK(strcmp(info.commit_method,
			  info.flags & MOONCAKE_SEGMENT_INFO_OWNER ? "cuMemCreate" : "none (peer)") == 0);
	/* One physical copy: every rank maps the very same file. */
	inode = mapped_inode(base);
	RANK_CHECK(inode != 0);
	RANK_CHECK(group_allgather(self, &inode, sizeof(inode), inodes) == 0);
	for (uint32_t r = 0; r < self->world_size && r < 4; r++)
		RANK_CHECK(inodes[r] == inode);
	return 0;
}

static int vmm_rank(struct group_rank *self, void *arg)
{
	uint32_t owner = *(const uint32_t *)arg;
	struct mooncake_segment_options opt =
		vmm_options(self->world_size, self->rank, owner, (int)(self->rank % 2));
	const struct vmm_share expect = { SIZE,	  UINT64_C(2) << 20, "cuda-vmm",
					  "cuda", physical_mappings, check_cuda_rank };

	return vmm_share_rank(self, &opt, &expect);
}

START_TEST(test_four_processes_share_one_pinned_copy)
{
	uint32_t owner = (uint32_t)_i;
	int codes[4];

	use_fake_driver("2");
	ck_assert(mooncake_segment_supported(false, false, false)); /* loaded before the ranks count */
	ck_assert_int_eq(group_run(4, vmm_rank, &owner, 20000, codes), 0);
	for (uint32_t r = 0; r < 4; r++)
		ck_assert_msg(codes[r] == 0, "rank %u exited with %d", r, codes[r]);
	ck_assert_int_eq(calls("create 6291456 node 0 types 1"), 1);
	ck_assert_int_eq(calls("export posix"), 1);
	ck_assert_int_eq(calls("import posix"), 3);
	ck_assert_int_eq(calls("reserve "), 4);
	ck_assert_int_eq(calls("access device 0 rw"), 2);
	ck_assert_int_eq(calls("access device 1 rw"), 2);
	ck_assert_int_eq(calls("access host rw"), 4);
	assert_driver_balanced();
}
END_TEST

/* --- two ranks in one process ---------------------------------------------- */

static void two_ranks(struct mooncake_segment **owner, struct mooncake_segment **peer, uint8_t *blobs)
{
	struct mooncake_segment_options o = vmm_options(2, 0, 0, 0), p = vmm_options(2, 1, 0, 1);

	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &o, owner, blobs), 0);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &p, peer, blobs + BLOB), 0);
	ck_assert_int_eq(mooncake_segment_complete(*owner, blobs, 2 * BLOB), 0);
}

START_TEST(test_fabric_handle_where_the_device_has_one)
{
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];
	struct mc_blob b;

	use_fake_driver("2");
	setenv("FAKE_CUDA_FABRIC", "1", 1);
	two_ranks(&owner, &peer, blobs);
	ck_assert_int_eq(calls("create 6291456 node 0 types 9"), 1);
	ck_assert_int_eq(owner->memory.handle_bytes, MC_PEER_FD_HANDLE_BYTES + 64);
	if (_i == 1) {
		/* No route reaches the descriptor (not served on a socket, the pid is gone): the
		 * FABRIC handle still does. */
		struct mc_peer_fd h;

		ck_assert_int_eq(mc_blob_decode(blobs, 0, &b), 0);
		ck_assert(mc_peer_fd_decode(b.handle, b.handle_bytes, &h, NULL));
		h.pid = 0x3ffffffe;
		h.socket_id = 0;
		ck_assert_int_eq(mc_peer_fd_encode(&h, b.handle, sizeof(b.handle)), MC_PEER_FD_HANDLE_BYTES);
		ck_assert_int_eq(mc_blob_encode(&b, blobs), 0);
	}
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	memset(mooncake_segment_base(owner), 0x5a, 4096);
	ck_assert_int_eq(((uint8_t *)mooncake_segment_base(peer))[4095], 0x5a);
	ck_assert_int_eq(calls("export fabric"), 1);
	ck_assert_int_eq(calls(_i == 1 ? "import fabric" : "import posix"), 1);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	assert_driver_balanced();
}
END_TEST

START_TEST(test_fabric_refused_at_create_falls_back_to_a_descriptor)
{
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];

	use_fake_driver("2");
	setenv("FAKE_CUDA_FABRIC", "2", 1); /* the device says yes, the system has no IMEX channel */
	two_ranks(&owner, &peer, blobs);
	ck_assert_int_eq(calls("refused create with handle types 9"), 1);
	ck_assert_int_eq(calls("create 6291456 node 0 types 1"), 1);
	ck_assert_int_eq(owner->memory.handle_bytes, MC_PEER_FD_HANDLE_BYTES);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	assert_driver_balanced();
}
END_TEST

START_TEST(test_every_rank_needs_a_cuda_device)
{
	struct mooncake_segment_options o = vmm_options(1, 0, 0, 2);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];

	use_fake_driver("2");
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &o, &seg, blob), EINVAL,
			"mmap=false needs device_id of a CUDA device: 2 of 2");
	o.device_id = -1;
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &o, &seg, blob), EINVAL,
			"mmap=false needs a device_id");
	ck_assert_ptr_null(seg);
	assert_driver_balanced();
}
END_TEST

/* A driver call made to fail once, the errno it must become, and what else the case needs. */
struct failure_case {
	const char *call;
	int nth, err;
	const char *fabric;
};

/* Owner-side failures of each driver call: a named error, nothing left. */
static const struct failure_case owner_failures[] = {
	/* An Ascend VMM build asks supported() first: its 3 calls pass. */
	{ "cuDeviceGetAttribute", 1 + 3 * HAVE_ASCEND_VMM, ENOTSUP, "0" },
	{ "cuMemGetAllocationGranularity", 1, EINVAL, "0" },
	{ "cuMemCreate", 1, ENOMEM, "0" },
	{ "cuMemAddressReserve", 1, ENOMEM, "0" },
	{ "cuMemMap", 1, ENOMEM, "0" },
	{ "cuMemSetAccess", 1, EINVAL, "0" },
	{ "cuMemExportToShareableHandle", 1, ENOTSUP, "0" },
	{ "cuMemExportToShareableHandle", 2, ENOTSUP, "1" }, /* the FABRIC export */
};

START_TEST(test_owner_failures_leave_nothing)
{
	const struct failure_case *c = &owner_failures[_i];
	struct mooncake_segment_options opt = vmm_options(2, 0, 0, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB];
	int maps, fds;

	use_fake_driver("2");
	setenv("FAKE_CUDA_FABRIC", c->fabric, 1);
	ck_assert(mc_cu_vmm_ready(NULL)); /* loaded before counting */
	maps = count_mappings() + physical_mappings();
	fds = count_fds();
	fail_call(c->call, c->nth);
	ck_assert_error(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), c->err, c->call);
	ck_assert_ptr_null(seg);
	ck_assert_int_eq(calls(c->call), 1); /* the failure was the injected one */
	ck_assert_int_eq(count_mappings() + physical_mappings(), maps);
	ck_assert_int_eq(count_fds(), fds);
	assert_driver_balanced();
}
END_TEST

static const struct failure_case peer_failures[] = {
	{ "cuMemAddressReserve", 2, ENOMEM, "0" }, /* the peer's, at create */
	{ "cuMemImportFromShareableHandle", 1, ENOTSUP, "0" },
	{ "cuMemMap", 2, ENOMEM, "0" },
	{ "cuMemSetAccess", 2, EINVAL, "0" },
};

START_TEST(test_peer_failures_leave_nothing_mapped)
{
	const struct failure_case *c = &peer_failures[_i];
	struct mooncake_segment_options o = vmm_options(2, 0, 0, 0), p = vmm_options(2, 1, 0, 1);
	struct mooncake_segment *owner, *peer = NULL;
	uint8_t blobs[2 * BLOB];
	int fds;

	use_fake_driver("2");
	fail_call(c->call, c->nth);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &o, &owner, blobs), 0);
	fds = count_fds();
	if (_i == 0) {
		ck_assert_error(mooncake_segment_create("vmm", SIZE, &p, &peer, blobs + BLOB), c->err,
				c->call);
		ck_assert_ptr_null(peer);
	} else {
		ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &p, &peer, blobs + BLOB), 0);
		ck_assert_int_eq(mooncake_segment_complete(owner, blobs, sizeof(blobs)), 0);
		ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), c->err, c->call);
		ck_assert_msg(strstr(mooncake_segment_last_error(), "Shared segment rank 1"), "%s",
			      mooncake_segment_last_error());
		ck_assert(!mooncake_segment_ready(peer));
		ck_assert(!peer->memory.mapped && mooncake_segment_device_addr(peer) == 0);
		/* What the failed import took is back; the reservation stays until destroy. */
		ck_assert_int_eq(calls("import "), calls("release imported"));
		ck_assert_int_eq(count_fds(), fds);
		mooncake_segment_destroy(peer);
	}
	ck_assert_int_eq(calls(c->call), 1);
	mooncake_segment_destroy(owner);
	assert_driver_balanced();
}
END_TEST

/* Teardown cannot fail back to the caller: a failed call is a warning naming it, and no crash. */
static char warnings[2048];

static void keep_warnings(int priority, const char *message, void *userdata)
{
	(void)userdata;
	if (priority <= MOONCAKE_SEGMENT_LOG_WARNING)
		snprintf(warnings + strlen(warnings), sizeof(warnings) - strlen(warnings), "%s\n", message);
}

static const char *const teardown_calls[] = { "cuMemUnmap", "cuMemRelease", "cuMemAddressFree" };

START_TEST(test_teardown_failures_are_named)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];

	use_fake_driver("1");
	warnings[0] = '\0';
	mooncake_segment_set_log_fn(keep_warnings, MOONCAKE_SEGMENT_LOG_WARNING, NULL);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), 0);
	fail_call(teardown_calls[_i], 1);
	mooncake_segment_destroy(seg);
	mooncake_segment_set_log_fn(NULL, 0, NULL);
	ck_assert_msg(strstr(warnings, teardown_calls[_i]), "%s", warnings);
	/* The context is released whatever the driver said. */
	ck_assert_int_eq(calls("retain "), calls("release 0"));
	unlink(log_path);
}
END_TEST

START_TEST(test_placement_on_a_node_and_its_fallback)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];

	use_fake_driver("1");
	opt.numa_node = 0;
	if (_i == 1) {
		setenv("FAKE_CUDA_REFUSE_NODE", "0", 1); /* a driver that cannot place on node 0 */
		setenv("FAKE_CUDA_HOST_NUMA_ID", "1", 1);
	}
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_str_eq(info.commit_method, "cuMemCreate");
	ck_assert_str_eq(info.backend, "cuda-vmm");
	ck_assert_int_eq(info.numa_node_requested, 0);
	if (_i == 0) {
		ck_assert_int_eq(calls("create 6291456 node 0 "), 1);
		ck_assert(!(info.flags & MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED));
	} else {
		ck_assert_int_eq(calls("refused create on node 0"), 1);
		ck_assert_int_eq(calls("create 6291456 node 1 "), 1);
		ck_assert(info.flags & MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED);
	}
	memset(mooncake_segment_base(seg), 1, SIZE); /* the CPU may write every page */
	mooncake_segment_destroy(seg);
	assert_driver_balanced();
}
END_TEST

/* On a two-node host (a fixture sysfs) whose device 1 sits on node 1. */
START_TEST(test_automatic_placement_and_interleave_on_two_nodes)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 1);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];
	char root[64];

	use_fake_driver("2");
	setenv("FAKE_CUDA_HOST_NUMA_ID", "1", 1);
	fixture_tree_create(root, sizeof(root));
	fixture_put(root, "sys/devices/system/node/online", "0-1\n");
	fixture_put(root, "sys/bus/pci/devices/0000:3c:00.0/numa_node", "1\n");
	mc_host_root_set(root);
	opt.numa_node = _i == 0 ? MOONCAKE_SEGMENT_NUMA_AUTO : MOONCAKE_SEGMENT_NUMA_INTERLEAVE;
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	/* Automatic: the device's node; interleave: the driver cannot, so the device's node, degraded. */
	ck_assert_int_eq(calls("create 6291456 node 1 "), 1);
	ck_assert_int_eq(info.numa_node_requested, _i == 0 ? 1 : MOONCAKE_SEGMENT_NUMA_INTERLEAVE);
	ck_assert(!(info.flags & MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED) == (_i == 0));
	mooncake_segment_destroy(seg);
	mc_host_root_set(NULL);
	fixture_tree_remove(root);
	assert_driver_balanced();
}
END_TEST

START_TEST(test_granularity_from_the_driver)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];

	use_fake_driver("1");
	setenv("FAKE_CUDA_GRANULARITY", "4194304", 1);
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), 0);
	ck_assert_uint_eq(mooncake_segment_alloc_size(seg), UINT64_C(8) << 20);
	ck_assert_int_eq(calls("create 8388608 "), 1);
	mooncake_segment_destroy(seg);
	assert_driver_balanced();
}
END_TEST

/* options.alignment reaches cuMemAddressReserve: the base has it, info says so. */
START_TEST(test_the_reservation_has_the_declared_alignment)
{
	struct mooncake_segment_options opt = vmm_options(1, 0, 0, 0);
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	uint8_t blob[BLOB];
	const uint64_t gib = UINT64_C(1) << 30;

	use_fake_driver("1");
	opt.alignment = gib;
	ck_assert_int_eq(mooncake_segment_create("vmm", SIZE, &opt, &seg, blob), 0);
	ck_assert_uint_eq((uintptr_t)mooncake_segment_base(seg) % gib, 0);
	ck_assert_int_eq(mooncake_segment_get_info(seg, &info, sizeof(info)), 0);
	ck_assert_uint_eq(info.alignment, gib);
	mooncake_segment_destroy(seg);
	assert_driver_balanced();
}
END_TEST

START_TEST(test_a_handle_of_another_size_is_refused_before_the_driver)
{
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];
	struct mc_blob b;

	use_fake_driver("2");
	two_ranks(&owner, &peer, blobs);
	ck_assert_int_eq(mc_blob_decode(blobs, 0, &b), 0);
	b.handle_bytes = MC_PEER_FD_HANDLE_BYTES + 8;
	ck_assert_int_eq(mc_blob_encode(&b, blobs), 0);
	ck_assert_error(mooncake_segment_complete(peer, blobs, sizeof(blobs)), EPROTO,
			"not a CUDA VMM handle");
	ck_assert_int_eq(calls("import "), 0);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	assert_driver_balanced();
}
END_TEST

START_TEST(test_a_forked_child_frees_only_its_memory)
{
	struct mooncake_segment *owner, *peer;
	uint8_t blobs[2 * BLOB];
	int status, before;
	pid_t child;

	use_fake_driver("2");
	two_ranks(&owner, &peer, blobs);
	ck_assert_int_eq(mooncake_segment_complete(peer, blobs, sizeof(blobs)), 0);
	memset(mooncake_segment_base(owner), 0x33, 4096);
	before = calls("");
	fflush(NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* The child reads the pages it inherited, then drops the parent's segments. */
		int ok = ((uint8_t *)mooncake_segment_base(peer))[100] == 0x33;

		mooncake_segment_destroy(peer);
		mooncake_segment_destroy(owner);
		exit(ok ? 0 : 1); /* exit, not _exit: the fake's leak report runs in the child too */
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Not one driver call from the child: the parent's handles are untouched. */
	ck_assert_int_eq(calls(""), before);
	ck_assert_int_eq(((uint8_t *)mooncake_segment_base(peer))[100], 0x33);
	mooncake_segment_destroy(peer);
	mooncake_segment_destroy(owner);
	assert_driver_balanced();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cuda-vmm");
	TCase *tc = tcase_create("fake-driver");
	SRunner *runner;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_supported_tells_what_is_missing, 0, (int)MC_ARRAY_SIZE(missing));
	tcase_add_test(tc, test_supported_with_every_capability);
	tcase_add_loop_test(tc, test_four_processes_share_one_pinned_copy, 0, 4);
	tcase_add_loop_test(tc, test_fabric_handle_where_the_device_has_one, 0, 2);
	tcase_add_test(tc, test_fabric_refused_at_create_falls_back_to_a_descriptor);
	tcase_add_test(tc, test_every_rank_needs_a_cuda_device);
	tcase_add_loop_test(tc, test_owner_failures_leave_nothing, 0, (int)MC_ARRAY_SIZE(owner_failures));
	tcase_add_loop_test(tc, test_peer_failures_leave_nothing_mapped, 0,
			    (int)MC_ARRAY_SIZE(peer_failures));
	tcase_add_loop_test(tc, test_teardown_failures_are_named, 0, (int)MC_ARRAY_SIZE(teardown_calls));
	tcase_add_loop_test(tc, test_placement_on_a_node_and_its_fallback, 0, 2);
	tcase_add_loop_test(tc, test_automatic_placement_and_interleave_on_two_nodes, 0, 2);
	tcase_add_test(tc, test_granularity_from_the_driver);
	tcase_add_test(tc, test_the_reservation_has_the_declared_alignment);
	tcase_add_test(tc, test_a_handle_of_another_size_is_refused_before_the_driver);
	tcase_add_test(tc, test_a_forked_child_frees_only_its_memory);
	suite_add_tcase(s, tc);
	runner = srunner_create(s);
	srunner_set_fork_status(runner, CK_FORK); /* each test loads the driver afresh */
	srunner_run_all(runner, CK_ENV);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
