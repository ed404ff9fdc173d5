/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal interfaces of libmooncake-segment: the export macro, error and log
 * helpers, the interfaces between the library's files, the segment object,
 * and the backend contract that separates the state machine (segment.c)
 * from the memory (the backends in backends.c's table).
 */
#ifndef MOONCAKE_SEGMENT_INTERNAL_H
#define MOONCAKE_SEGMENT_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "mooncake/segment.h"
#include "accel/accel.h"
#include "host/cgroup.h"
#include "private.h"
#include "host/procfs.h"

/* Only definitions marked MC_EXPORT leave the library (with the version script). */
#define MC_EXPORT __attribute__((visibility("default")))

#define MC_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

#define MC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline uint64_t mc_align_up(uint64_t value, uint64_t align)
{
	return (value + align - 1) / align * align;
}

static inline bool mc_is_power_of_two(uint64_t value)
{
	return value && !(value & (value - 1));
}

/* --- errors and logging (error.c) ------------------------------------------ */

/* Record a message for mooncake_segment_last_error(), log it at DEBUG and
 * return -err, so a failure path is `return mc_error(EINVAL, "...")`. */
int mc_error(int err, const char *fmt, ...) MC_PRINTF(2, 3);
/* Same, appending ": strerror(sys_errno)". */
int mc_error_sys(int err, int sys_errno, const char *fmt, ...) MC_PRINTF(3, 4);
void mc_clear_error(void);
/* Backends know no ranks: a message of theirs that starts "Shared segment: "
 * becomes "Shared segment rank @rank: ..." (the state machine calls this);
 * returns @err. */
int mc_error_name_rank(int err, uint32_t rank);
void mc_log(int priority, const char *fmt, ...) MC_PRINTF(2, 3);
/* Hold back this thread's log lines (delivering the last one when @defer goes
 * false again): no user callback may run while fork.c's registry is locked. */
void mc_log_defer(bool defer);
bool mc_log_enabled(int priority);

/* Map an errno from the system onto the documented set of create/complete. */
int mc_fold_errno(int sys_errno);

/* --- host facts (host.c) ----------------------------------------------------- */

#define MC_BOOT_ID_SIZE 16

/* The kernel's boot id as 16 bytes; false when unreadable. */
bool mc_host_boot_id(uint8_t id[MC_BOOT_ID_SIZE]);
/* Inode of this process's PID namespace, 0 when unknown. */
uint64_t mc_host_pid_namespace(void);
/* Inode of this process's network namespace (/proc/self/ns/net), 0 if unknown. */
uint64_t mc_host_net_namespace(void);
uint64_t mc_host_base_page_size(void);
/* THP PMD size from sysfs, 2 MiB when unreadable. */
uint64_t mc_host_thp_pmd_size(void);
/* True when shmem_enabled lets MADV_HUGEPAGE take effect on shmem. */
bool mc_host_shmem_thp_allowed(void);
/* CPUs this process may run on (at least 1). */
unsigned int mc_host_cpus_allowed(void);
/* --- HugeTLB pools (hugetlb.c) ----------------------------------------------- */

/* The default huge page size (Hugepagesize in /proc/meminfo), 0 if none. */
uint64_t mc_hugetlb_default_size(void);
/* Whether the kernel has a pool of @page_size pages (sysfs hugepages-NkB). */
bool mc_hugetlb_size_configured(uint64_t page_size);
/* mc_hugetlb_sizes() and mc_hugetlb_pool(), the CLI's too, are in private.h. */

/* --- blob wire format (blob.c) ------------------------------------------ */

#define MC_BLOB_MAGIC	UINT32_C(0x4753434D) /* bytes "MCSG" */
#define MC_BLOB_VERSION 2
#define MC_HANDLE_MAX	128

#define MC_BLOB_FLAG_MMAP	   (1u << 0)
#define MC_BLOB_FLAG_HOST_REGISTER (1u << 1)
#define MC_BLOB_FLAG_HUGETLB	   (1u << 2)
#define MC_BLOB_FLAG_HANDLE	   (1u << 3)
#define MC_BLOB_FLAGS_KNOWN \
	(MC_BLOB_FLAG_MMAP | MC_BLOB_FLAG_HOST_REGISTER | MC_BLOB_FLAG_HUGETLB | MC_BLOB_FLAG_HANDLE)
/* The flags that are part of the declaration (the fingerprint covers them). */
#define MC_BLOB_FLAGS_DECLARED (MC_BLOB_FLAG_MMAP | MC_BLOB_FLAG_HOST_REGISTER | MC_BLOB_FLAG_HUGETLB)

enum mc_backend_id {
	MC_BACKEND_MEMFD = 1,
	MC_BACKEND_ASCEND_VMM = 2,
	MC_BACKEND_CUDA_VMM = 3,
};

/* The decoded form of a blob; doc/wire-format.md is the byte layout. */
struct mc_blob {
	uint16_t version;
	uint16_t backend_id;
	uint32_t rank_id;
	uint32_t world_size;
	uint32_t owner_rank;
	uint32_t flags;
	uint64_t page_size;
	uint64_t fingerprint;
	uint64_t alloc_size;
	uint8_t boot_id[MC_BOOT_ID_SIZE];
	uint64_t pid_namespace;
	uint32_t pid;
	uint32_t uid;
	uint16_t handle_bytes;
	uint8_t handle[MC_HANDLE_MAX];
	uint64_t net_namespace;
};

uint64_t mc_fnv1a_bytes(uint64_t hash, const void *data, size_t len);
uint64_t mc_fnv1a_u64(uint64_t hash, uint64_t value);
#define MC_FNV1A_OFFSET UINT64_C(0xcbf29ce484222325)

uint64_t mc_fingerprint(const char *name, uint64_t size, const struct mooncake_segment_options *opt);
/* Encode @b into exactly MOONCAKE_SEGMENT_BLOB_SIZE bytes; -EINVAL if the handle does not fit. */
int mc_blob_encode(const struct mc_blob *b, uint8_t out[MOONCAKE_SEGMENT_BLOB_SIZE]);
/* Decode and check the format of one blob; -EPROTO with a message naming @rank. */
int mc_blob_decode(const uint8_t in[MOONCAKE_SEGMENT_BLOB_SIZE], uint32_t rank, struct mc_blob *b);

/* --- NUMA placement (placement.c) ------------------------------------------ */

enum mc_place_mode { MC_PLACE_DEFAULT, MC_PLACE_PREFERRED, MC_PLACE_BIND, MC_PLACE_INTERLEAVE };

struct mc_placement {
	enum mc_place_mode mode;
	int node;	 /* MC_PLACE_BIND, _PREFERRED: the node */
	uint64_t nodes;	 /* the node mask of the policy */
	uint64_t online; /* nodes online on this host */
	bool degraded;	 /* the kernel refused the policy */
	char why[128];
};

/* "0-3,5" -> bit mask (nodes < 64); false on junk. */
bool mc_parse_node_list(const char *text, uint64_t *mask);
bool mc_topology_online_nodes(const char *sysfs_root, uint64_t *mask);
/* The NUMA node of PCI device @pci_bus_id ("0000:3b:00.0", either case), -1 when unknown. */
int mc_topology_pci_node(const char *sysfs_root, const char *pci_bus_id);
/* -EINVAL when @numa_node names a node this host does not have (every rank checks). */
int mc_placement_check(int numa_node, const char *sysfs_root);
/* Whether automatic placement would follow the device's host node: numa_node
 * is automatic and more than one node is online.  Only then is it worth
 * asking an accelerator runtime where the device sits. */
bool mc_placement_wants_device_node(int numa_node, const char *sysfs_root);
/* The owner's policy from the requested @numa_node (a node, AUTO or
 * INTERLEAVE) and, for AUTO, the device's host node @device_node (-1:
 * unknown); -EINVAL for a node that does not exist.  Loads no runtime. */
int mc_placement_resolve(int numa_node, int device_node, const char *sysfs_root, struct mc_placement *p);
/* mbind the mapping before its first page; a refusal degrades (p->degraded). */
void mc_placement_apply(struct mc_placement *p, void *addr, uint64_t len);
/* Set this thread's policy (HugeTLB fallocate follows it); false when nothing was set. */
bool mc_placement_thread_enter(struct mc_placement *p, int *saved_mode, uint64_t *saved_nodes);
void mc_placement_thread_leave(int saved_mode, uint64_t saved_nodes);
/* Where the pages are: the node holding most sampled pages, and the mask of all. */
void mc_placement_query(void *addr, uint64_t len, uint64_t page_size, int *major_node, uint64_t *mask);

/* --- memory room (limits.c) ----------------------------------------------- */

struct mc_commit_lock;
/* VmSize of this process in bytes (what RLIMIT_AS counts), 0 when unknown. */
uint64_t mc_address_space_in_use(void);
/* MemAvailable + SwapFree in bytes (each also returned), UINT64_MAX when MemAvailable is unknown. */
uint64_t mc_host_memory_room(uint64_t *available, uint64_t *swap);
/* -ENOMEM with the numbers when the owner's segment cannot fit.  On success
 * @lock holds the cgroup's commit lock (or none): release it with
 * mc_commit_lock_release() once the pages are committed; seg->memcg_limited
 * says whether a memory cgroup limit applies. */
int mc_check_memory_room(struct mooncake_segment *seg, struct mc_commit_lock *lock);
/* Before committing more of @segment (a struct mooncake_segment) with
 * @committed bytes charged already: -ENOMEM with the numbers when the cgroup's
 * room no longer holds the rest. */
int mc_check_commit_room(const void *segment, uint64_t committed);
/* -EFBIG naming ulimit -f when the memfd would exceed RLIMIT_FSIZE (SIGXFSZ otherwise). */
int mc_check_file_size_limit(const struct mooncake_segment *seg);
/* The -ENOMEM for a failed address-space reservation, naming RLIMIT_AS when one is set. */
int mc_address_space_error(const struct mooncake_segment *seg, int sys_errno);

/* --- committing pages (populate.c) ------------------------------------------ */

struct mc_commit_request {
	int fd;
	uint8_t *addr;
	uint64_t len;
	uint64_t page_size;
	unsigned int threads;		/* 0: automatic */
	int cpu_node;			/* run the threads on this node's CPUs, -1 anywhere */
	bool thp;			/* THP was advised: measure it against base pages */
	bool hugetlb;			/* HugeTLB: the mmap reserved the pages already */
	struct mc_placement *placement; /* HugeTLB fallocate follows the thread policy */
	/* Called before each chunk is charged with the bytes committed so far;
	 * non-zero stops the commit with that error.  NULL: no check. */
	int (*check_room)(const void *ctx, uint64_t committed);
	const void *check_room_ctx;
};

struct mc_commit_result {
	uint64_t ns;
	unsigned int threads;
	bool thp_fallback; /* THP committed slower than base pages: dropped */
	char method[32];
};

/* Commit every page of the request before returning, so that lack of memory
 * is an error now (fallocate: a clean ENOSPC/ENOMEM) and never a SIGBUS later;
 * page tables are populated in parallel.  0 or a negative errno with a message. */
int mc_commit_pages(const struct mc_commit_request *req, struct mc_commit_result *result);
/* Map every page table entry of a mapping of existing pages (peers). */
int mc_populate_mapping(void *addr, uint64_t len, uint64_t page_size, unsigned int threads);

/* --- descriptors and fork() (fork.c) ------------------------------------------ */

/* A descriptor that no forked child keeps: a pthread_atfork child handler
 * closes it in the child and sets *fd to -1 there. */
struct mc_tracked_fd {
	int *fd;
	struct mc_tracked_fd *next;
};

/* Create the descriptor between these two calls (no fork() can come
 * between): begin takes the registry lock, end tracks *@fd when it is >= 0 and
 * drops the lock.  @fd must stay valid until mc_fd_close(). */
void mc_fd_track_begin(void);
void mc_fd_track_end(struct mc_tracked_fd *t, int *fd);
/* Untrack, close *t->fd and set it to -1; a never-tracked @t (zeroed) is fine. */
void mc_fd_close(struct mc_tracked_fd *t);
/* Between begin and end: let fork() in while this thread waits on another
 * process (a descriptor created meanwhile is not tracked), then take the
 * registry back before creating the one to track. */
void mc_fd_track_pause(void);
void mc_fd_track_resume(void);
/* Between begin and end: track *@fd, which this thread closes itself after
 * mc_fd_untrack_held() (a descriptor used across a pause). */
void mc_fd_track_held(struct mc_tracked_fd *t, int *fd);
void mc_fd_untrack_held(struct mc_tracked_fd *t);

/* --- one create at a time per memory cgroup (commit-lock.c) -------------------- */

/* A held lock: its socket (-1: none), closed in a forked child (fork.c). */
struct mc_commit_lock {
	int fd;
	struct mc_tracked_fd tracking;
};
#define MC_COMMIT_LOCK_NONE        \
	{                          \
		-1,                \
		{                  \
			NULL, NULL \
		}                  \
	}

/* Block until this process holds the commit lock of @cgroup_dir; false when
 * no lock can be had or its holder is stopped (the caller goes on without). */
bool mc_commit_lock_acquire(const char *cgroup_dir, struct mc_commit_lock *lock);
/* Let go of @lock (NONE is fine). */
void mc_commit_lock_release(struct mc_commit_lock *lock);

/* --- reaching another process's descriptor (peer-fd.c) ---------------------- */

struct mc_owner_ref;

/* One descriptor of the owner's: where it is, which file it must be, and
 * where the owner serves it over a Unix socket (fd-server.c). */
#define MC_PEER_FD_TOKEN_SIZE 16
struct mc_peer_fd {
	uint32_t pid;
	uint32_t fd;
	uint64_t dev;
	uint64_t ino;
	uint64_t socket_id; /* the abstract socket "mooncake-segment/<hex>"; 0: not served */
	uint8_t token[MC_PEER_FD_TOKEN_SIZE]; /* secret a peer presents to the socket */
};
/* The bytes of one encoded struct mc_peer_fd (doc/wire-format.md). */
#define MC_PEER_FD_HANDLE_BYTES 48

/* The owner's serving state for one descriptor, opaque. */
struct mc_fd_offer;

/* Owner: offer descriptor @fd to the peers of one segment.  Fills @h with
 * everything a peer needs to reach it by any route (pid, fd, dev, ino, and the
 * socket route's address and token) and starts serving it.  *@offer must be
 * NULL on entry; 0 or a negative errno with a message. */
int mc_peer_fd_offer(int fd, struct mc_peer_fd *h, struct mc_fd_offer **offer);
/* Owner: stop serving and free (finish() and release(); NULL-safe,
 * idempotent; in a forked child it only frees what it must, joins no thread
 * it does not own, and closes nothing twice). */
void mc_peer_fd_withdraw(struct mc_fd_offer **offer);
/* The handle bytes of @h, one layout for every backend that passes a
 * descriptor: returns the bytes written into @out (at most @room), 0 if it
 * does not fit. */
uint16_t mc_peer_fd_encode(const struct mc_peer_fd *h, uint8_t *out, size_t room);
/* Decode what mc_peer_fd_encode() wrote at the start of @in; false when @len
 * is too short or the bytes are not a peer-fd handle.  *@used (may be NULL)
 * gets the bytes consumed, so a backend can append its own bytes after it. */
bool mc_peer_fd_decode(const uint8_t *in, size_t len, struct mc_peer_fd *h, size_t *used);
/* Peer: open descriptor @h of the process @owner describes, by the routes
 * in order (peer-fd.c), only if it is still the file the owner published;
 * call it between mc_fd_track_begin() and _end().  The descriptor, or a
 * negative errno with a message naming the first cause that holds and its fix. */
int mc_peer_fd_open(const struct mc_owner_ref *owner, const struct mc_peer_fd *h);
/* -ESRCH saying whether the owner process is gone or only its descriptor. */
int mc_peer_fd_gone(const struct mc_peer_fd *h);

/* --- address windows (window.c) ---------------------------------------------- */

/* Reserve @len bytes of address space aligned to @align (PROT_NONE); NULL on failure (errno set). */
void *mc_window_reserve(uint64_t len, uint64_t align);
/* Put the reservation back over [addr, addr+len) after a failed import. */
int mc_window_reset(void *addr, uint64_t len);
void mc_window_release(void *addr, uint64_t len);

/* --- backends ---------------------------------------------------------------- */

struct mooncake_segment;

/* What a peer knows of the owner, from the owner's blob: enough to reach its
 * pages and to explain why they cannot be reached. */
struct mc_owner_ref {
	uint32_t pid;		/* in the owner's PID namespace */
	uint32_t uid;		/* its real uid, as its own user namespace sees it */
	uint64_t pid_namespace; /* inode of the owner's PID namespace, 0 unknown */
	uint64_t net_namespace; /* inode of the owner's network namespace, 0 unknown */
	const uint8_t *handle;	/* what the owner's backend exported */
	uint16_t handle_bytes;
};

/*
 * A backend owns the memory of a segment.  It knows nothing of blobs or ranks
 * (a message that starts "Shared segment: " gets the rank from the state
 * machine) and keeps its own state behind seg->backend_state, which nothing
 * else reads.  Adding a backend: one file defining one of these, one line in
 * backends.c, its tests.
 */
struct mc_backend_ops {
	const char *name; /* as info reports it, before any "-hugetlb" describe() adds */
	enum mc_backend_id id;
	bool mmap;		 /* serves mmap=true (host pages) or mmap=false (VMM) */
	bool device_addressable; /* the mapping's address is also the device's (SVM) */
	/* mooncake_segment_supported() for this backend's mmap value; may load its runtime. */
	bool (*supported)(bool host_register, bool hugetlb);
	/* The page size (and hence allocation granularity) for these options;
	 * -ENOTSUP naming what is missing. */
	int (*granularity)(const struct mooncake_segment_options *opt, uint64_t *page_size);
	/* Whether the owner's commit is charged to its memory cgroup, so that
	 * limits.c checks the room first. */
	bool (*charges_memory_cgroup)(const struct mooncake_segment_options *opt);
	/* Owner: allocate, place (seg->placement), map, commit; fill seg->base, seg->handle. */
	int (*create_owner)(struct mooncake_segment *seg);
	/* Non-owner: reserve seg->alloc_size bytes of address space at seg->base. */
	int (*reserve)(struct mooncake_segment *seg);
	/* Non-owner: map the pages @owner exported into the reservation. */
	int (*import)(struct mooncake_segment *seg, const struct mc_owner_ref *owner);
	/* Non-owner: undo a successful import (the reservation comes back). */
	void (*unimport)(struct mooncake_segment *seg);
	/* Owner: drop what importers needed (the memfd). */
	void (*finish)(struct mooncake_segment *seg);
	/* Release everything, backend_state included; must cope with any partly built state. */
	void (*release)(struct mooncake_segment *seg);
	/* What get_info reports of the backend: info->backend, and whatever it
	 * counts its own way (HugeTLB pages are not in Rss). */
	void (*describe)(const struct mooncake_segment *seg, struct mooncake_segment_info *info);
};

/* The backends of this build (backends.c), NULL-terminated. */
extern const struct mc_backend_ops *const mc_backends[];
/* The backend serving @mmap in this build, NULL when there is none; where
 * several do, the first whose supported() accepts the flags (else the first). */
const struct mc_backend_ops *mc_backend_for(bool mmap, bool host_register, bool hugetlb);
/* @chosen's page size for @opt; where several backends serve opt->mmap and
 * none can, the -ENOTSUP names every one's reason, not only @chosen's. */
int mc_backend_granularity(const struct mc_backend_ops *chosen, const struct mooncake_segment_options *opt,
			   uint64_t *page_size);
/* The same choice from another NULL-terminated @table (tests). */
const struct mc_backend_ops *mc_backend_choose(const struct mc_backend_ops *const *table, bool mmap,
					       bool host_register, bool hugetlb);

/* For white-box tests: the owner's memfd (-1 when none), the VMM's physical handle. */
int mc_memfd_descriptor(const struct mooncake_segment *seg);
void *mc_ascend_vmm_physical(const struct mooncake_segment *seg);

/* The page size create() would use for @opt (segment.c), or the error it would give. */
int mc_segment_page_size(const struct mooncake_segment_options *opt, uint64_t *page_size);

struct mooncake_segment {
	const struct mc_backend_ops *backend;
	struct mooncake_segment_options opt;
	char label[64]; /* the name before '|', for messages and /proc/PID/maps */
	uint64_t size;
	uint64_t alloc_size;
	uint64_t page_size;
	uint64_t fingerprint;
	bool is_owner;
	bool memcg_limited; /* owner: a memory cgroup limit applies (limits.c) */
	bool ready;
	bool finished;

	void *base;  /* this rank's mapping or reservation (written by the backend) */
	bool mapped; /* base holds the shared pages, not just a reservation (backend) */
	/* The backend's own, opaque to everything else: one malloc'd block (a
	 * forked child's destroy frees it with free(), releasing nothing it names). */
	void *backend_state;
	pid_t creator;		       /* the process that created it: only it releases anything */
	uint8_t handle[MC_HANDLE_MAX]; /* owner: what peers need to reach the pages (backend) */
	uint16_t handle_bytes;
	struct mc_registration registration; /* .ops set while registered */

	uint32_t info_flags; /* MOONCAKE_SEGMENT_INFO_* the backend learnt at create (its only writer) */
	int32_t numa_node_requested;
	struct mc_placement placement;
	struct mc_commit_result commit;
};

#endif /* MOONCAKE_SEGMENT_INTERNAL_H */
