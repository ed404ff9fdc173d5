/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Accelerator runtimes, each loaded at run time (dlopen of its real SONAME)
 * through one table of function pointers, so that one library serves CPU-only
 * hosts and GPU/NPU nodes and links no accelerator library.
 */
#ifndef MOONCAKE_SEGMENT_ACCEL_H
#define MOONCAKE_SEGMENT_ACCEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Registration is one driver call over the whole range unless the caller
 * sets register_chunk_size: a copy whose host range crosses from one
 * registration into the next fails (CUDA: cudaErrorInvalidValue, seen on an
 * H200 with tests/gpu/straddle_check.py), so chunks are the caller's choice,
 * for a driver that refuses one call that large.  Between chunks of a
 * background registration the registrar pauses (1 ms by default), so that
 * the neighbours' calls get in between. */
#define MC_REGISTER_PAUSE_US_DEFAULT 1000

/* One registered mapping: what unregistering needs. */
struct mc_registration {
	const struct mc_accel_ops *ops;
	int device;
	void *addr;
	uint64_t len;
	uint64_t chunk;	     /* bytes per registration call */
	unsigned int chunks; /* calls that succeeded */
	void *context;	     /* runtime state (CUDA: the retained primary context) */
	uint64_t device_addr;
	uint64_t ns; /* time register_host took */
};

struct mc_accel_ops {
	const char *name;
	/* The runtime loads and reports at least one device. */
	bool (*available)(void);
	/* Register [addr, addr+len) with @device in chunks of @chunk bytes; on
	 * failure everything done is undone and a negative errno returned. */
	int (*register_host)(struct mc_registration *reg);
	/* The same, a chunk at a time (a background registration, on a thread
	 * of its own): begin checks the device and takes what the calls need,
	 * next registers chunk reg->chunks; on failure of either, everything
	 * done is undone and a negative errno returned. */
	int (*register_begin)(struct mc_registration *reg);
	int (*register_next)(struct mc_registration *reg);
	/* Undo a successful register_host, or the chunks a begin and nexts did. */
	void (*unregister_host)(struct mc_registration *reg);
	/* Publish slots in stream order (segment/slots-stream.c), with the
	 * runtime state of @reg (a registration of the slot words): on @stream,
	 * once the work queued before it is done, store @value at @device_addr
	 * behind a system-scope fence, then run @after(@arg) on a host thread
	 * (@after NULL: nothing); and make @stream wait until the 64-bit word at
	 * @device_addr is at least @value, wrap-aware ((int64_t)(word - value)
	 * >= 0).  0, or a negative errno with the runtime's words in @why.  NULL
	 * where the runtime has no such calls; stream_why_unavailable says why a
	 * loaded runtime lacks them ("" when it has them).  Ascend has no host
	 * function: its stream_write ignores @after (CPU waiters then notice
	 * within their 100 ms sleep), and both refuse (-EINVAL) on a thread
	 * whose current device is not @reg's. */
	int (*stream_write)(const struct mc_registration *reg, void *stream, uint64_t device_addr,
			    uint64_t value, void (*after)(void *), void *arg, char *why, size_t why_size);
	int (*stream_wait)(const struct mc_registration *reg, void *stream, uint64_t device_addr,
			   uint64_t value, char *why, size_t why_size);
	const char *(*stream_why_unavailable)(void);
	/* The PCI bus id of @device as the runtime spells it ("0000:3B:00.0");
	 * false when unknown. */
	bool (*pci_bus_id)(int device, char *buf, size_t size);
	/* Why available() is false ("" when it is true); *@loaded says whether
	 * the runtime's library and entry points loaded (for doctor). */
	const char *(*why_unavailable)(bool *loaded);
};

#if HAVE_CUDA
extern const struct mc_accel_ops mc_accel_cuda;
#endif
#if HAVE_ASCEND
extern const struct mc_accel_ops mc_accel_ascend;
#endif

/* One entry point of a runtime: its exported name and where to store it. */
struct mc_runtime_symbol {
	const char *name;
	void **slot;
};

/* dlopen the file environment variable @env names, or else @soname, and
 * resolve every symbol; NULL with the reason in @failure (the runtime
 * @what: "CUDA driver", "Ascend runtime") when anything is missing. */
void *mc_runtime_open(const char *env, const char *soname, const char *what,
		      const struct mc_runtime_symbol *symbols, size_t count, char *failure, size_t size);
/* Resolve a further, optional group of symbols of an open runtime; false
 * (the group's slots NULL) with the missing one named in @failure. */
bool mc_runtime_resolve(void *lib, const char *what, const struct mc_runtime_symbol *symbols, size_t count,
			char *failure, size_t size);

/* One runtime's registration of one chunk, for mc_register_next_chunk(). */
struct mc_chunk_ops {
	const char *runtime; /* "CUDA", "Ascend": for messages */
	/* Register [addr, addr+len) and give its device address; 0, or a
	 * negative errno with the runtime's description in @why. */
	int (*register_chunk)(void *addr, uint64_t len, uint64_t *device_addr, char *why, size_t why_size);
	void (*unregister_chunk)(void *addr);
};

/* Register chunk reg->chunks of reg->addr..+len (chunks of reg->chunk); the
 * chunks must be one contiguous device range.  On failure the chunks done
 * are unregistered in reverse and the error names the chunk.  Advances
 * reg->chunks; sets reg->device_addr with the first chunk. */
int mc_register_next_chunk(struct mc_registration *reg, const struct mc_chunk_ops *ops);
/* Every chunk of the registration is registered. */
bool mc_registration_done(const struct mc_registration *reg);
/* The registration's offset up to which it is registered. */
uint64_t mc_registration_end(const struct mc_registration *reg);
/* Unregister every chunk, last first. */
void mc_unregister_chunks(struct mc_registration *reg, const struct mc_chunk_ops *ops);

/* The runtime host registration would use here, or NULL when none is available. */
const struct mc_accel_ops *mc_accel_for_host_register(void);
/* 0 when a runtime can register host memory here, else -ENOTSUP naming the
 * runtimes this build would load and how to point at them. */
int mc_accel_require_host_register(void);
/* The host NUMA node of @device (its PCI device's numa_node in sysfs under
 * the host root), from whichever runtime names the device; -1 when unknown.
 * Loads runtimes: call it only when the answer is needed. */
int mc_accel_device_node(int device);

#endif
