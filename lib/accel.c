/* SPDX-License-Identifier: Apache-2.0 */
/* Which accelerator runtime, if any, serves this host (accel.h). */
#include "config.h"

#include "accel.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* In order of preference; each is compiled in only when configure found its headers. */
static const struct mc_accel_ops *const runtimes[] = {
#if HAVE_CUDA
	&mc_accel_cuda,
#endif
#if HAVE_ASCEND
	&mc_accel_ascend,
#endif
	NULL,
};

const struct mc_accel_ops *mc_accel_for_host_register(void)
{
	for (size_t i = 0; runtimes[i]; i++)
		if (runtimes[i]->available())
			return runtimes[i];
	return NULL;
}

int mc_accel_require_host_register(void)
{
	if (mc_accel_for_host_register())
		return 0;
	return mc_error(ENOTSUP,
			"Shared segment host_register=true needs an accelerator runtime with a device, and "
			"none was found (%s); use host_register=false",
			HAVE_CUDA || HAVE_ASCEND
				? "CUDA: libcuda.so.1 or MOONCAKE_SEGMENT_CUDA_LIBRARY; Ascend: "
				  "libascendcl.so or MOONCAKE_SEGMENT_ASCEND_LIBRARY"
				: "this build has neither CUDA nor Ascend support");
}

int mc_accel_device_node(int device, const char *sysfs_root)
{
	char bus[32];

	for (size_t i = 0; runtimes[i]; i++)
		if (runtimes[i]->pci_bus_id(device, bus, sizeof(bus)))
			return mc_topology_pci_node(sysfs_root, bus);
	return -1;
}

bool mc_runtime_resolve(void *lib, const char *what, const struct mc_runtime_symbol *symbols, size_t count,
			char *failure, size_t size)
{
	for (size_t i = 0; i < count; i++) {
		*symbols[i].slot = dlsym(lib, symbols[i].name);
		if (!*symbols[i].slot) {
			snprintf(failure, size, "the %s lacks %s", what, symbols[i].name);
			for (size_t j = 0; j <= i; j++)
				*symbols[j].slot = NULL;
			return false;
		}
	}
	return true;
}

void *mc_runtime_open(const char *env, const char *soname, const char *what,
		      const struct mc_runtime_symbol *symbols, size_t count, char *failure, size_t size)
{
	const char *path = getenv(env);
	void *lib = dlopen(path && *path ? path : soname, RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		snprintf(failure, size, "%s", dlerror());
		return NULL;
	}
	if (!mc_runtime_resolve(lib, what, symbols, count, failure, size)) {
		dlclose(lib);
		return NULL;
	}
	return lib;
}

void mc_unregister_chunks(struct mc_registration *reg, const struct mc_chunk_ops *ops)
{
	while (reg->chunks > 0) {
		reg->chunks--;
		ops->unregister_chunk((char *)reg->addr + (uint64_t)reg->chunks * reg->chunk);
	}
}

int mc_register_chunks(struct mc_registration *reg, const struct mc_chunk_ops *ops)
{
	unsigned int total = (unsigned int)((reg->len + reg->chunk - 1) / reg->chunk);
	uint64_t base = 0;
	char why[160];

	for (reg->chunks = 0; reg->chunks < total; reg->chunks++) {
		uint64_t off = (uint64_t)reg->chunks * reg->chunk, device_addr = 0, done;
		uint64_t len = reg->len - off < reg->chunk ? reg->len - off : reg->chunk;
		int err = ops->register_chunk((char *)reg->addr + off, len, &device_addr, why, sizeof(why));

		if (!err && reg->chunks == 0)
			base = device_addr;
		if (!err && device_addr != base + off) {
			/* Registered, but not where the range continues: undo it too. */
			ops->unregister_chunk((char *)reg->addr + off);
			snprintf(why, sizeof(why),
				 "the chunks are not contiguous on the device (no unified addressing)");
			err = -ENOTSUP;
		}
		if (err) {
			unsigned int before = reg->chunks;

			mc_unregister_chunks(reg, ops);
			return mc_error(
				-err,
				"Shared segment %s host registration of chunk %u of %u (%llu bytes at offset "
				"%llu) on device %d failed: %s; the %u chunk(s) before it were unregistered",
				ops->runtime, before + 1, total, (unsigned long long)len,
				(unsigned long long)off, reg->device, why, before);
		}
		done = off + len;
		mc_log(MOONCAKE_SEGMENT_LOG_INFO,
		       "Shared segment: registered %llu of %llu bytes with %s device %d",
		       (unsigned long long)done, (unsigned long long)reg->len, ops->runtime, reg->device);
	}
	reg->device_addr = base;
	return 0;
}
