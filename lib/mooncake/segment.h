/* SPDX-License-Identifier: Apache-2.0 */
/*
 * <mooncake/segment.h>: one physical copy of host memory, mapped by every
 * rank of a group of processes on one host.
 *
 * The protocol has two phases and the caller owns the collective between
 * them:
 *
 *   1. mooncake_segment_create() on every rank.  The owner rank allocates and
 *      commits the pages; every other rank reserves an address window.  Each
 *      rank gets a blob of exactly MOONCAKE_SEGMENT_BLOB_SIZE bytes.
 *   2. The caller all-gathers the blobs in rank order (MPI_Allgather, a torch
 *      process group, a pipe...).
 *   3. mooncake_segment_complete() on every rank with all the blobs.  Every
 *      blob is checked; non-owners map the owner's pages into their window.
 *   4. After a barrier that tells every rank has completed,
 *      mooncake_segment_finish() lets the owner drop what it kept for
 *      importers.
 *   5. mooncake_segment_destroy() on every rank, in any order.
 *
 * Ranks agree on the byte layout of the segment, not on its address: each
 * rank's base address is its own.
 *
 * Errors: every function that can fail returns 0 or a negative errno from the
 * set documented with it; anything unexpected from the system is folded into
 * the documented set.  mooncake_segment_last_error() then holds a sentence
 * with the details (rank, sizes, paths and the fix).  The library never
 * prints and never exits; see mooncake_segment_set_log_fn().
 *
 * Thread safety: functions taking a segment must not run concurrently on the
 * same segment, except the const getters, which may run concurrently with
 * each other.  Distinct segments are independent.  The error message is per
 * thread.
 *
 * fork(): a child forked by a rank inherits the mapping (MAP_SHARED: the
 * very pages, so its reads and writes are the group's) and a copy of the
 * segment object, never a descriptor of the library's (a pthread_atfork
 * handler closes them in the child; close-on-exec covers exec).  In the
 * child, complete() fails with -EINVAL, finish() is a no-op and destroy()
 * frees only the object: nothing is unmapped, unregistered or closed, so the
 * range stays the inherited mapping unless the child itself unmaps it.  The
 * inherited mapping keeps the pages alive until the child exits, execs or
 * unmaps it.  With host_register the device address is the parent's (an
 * accelerator runtime does not carry over fork()); with mmap=false the child
 * inherits whatever the runtime's mapping gives it.  Only fork() runs the
 * handler: a raw clone() child is not covered.
 */
#ifndef MOONCAKE_SEGMENT_H
#define MOONCAKE_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOONCAKE_SEGMENT_VERSION_MAJOR 0
#define MOONCAKE_SEGMENT_VERSION_MINOR 1
#define MOONCAKE_SEGMENT_VERSION_MICRO 0

/** Every rank's blob has exactly this size. */
#define MOONCAKE_SEGMENT_BLOB_SIZE 256

/** The largest size create() accepts (64 TiB); larger is a declaration bug. */
#define MOONCAKE_SEGMENT_MAX_SIZE (UINT64_C(1) << 46)

/** numa_node value: the accelerator's host node when known, else the local policy. */
#define MOONCAKE_SEGMENT_NUMA_AUTO (-1)
/** numa_node value: interleave the pages across every node allowed to the process. */
#define MOONCAKE_SEGMENT_NUMA_INTERLEAVE (-2)

struct mooncake_segment; /* opaque */

struct mooncake_segment_options {
	/* Fields may be added at the end in later versions: always call
	 * mooncake_segment_options_init() first. */
	uint32_t world_size;	    /* >= 1 */
	uint32_t rank_id;	    /* < world_size */
	uint32_t owner_rank;	    /* < world_size */
	int32_t device_id;	    /* accelerator of this rank, or -1 */
	bool mmap;		    /* true: host shared memory (memfd); false: platform VMM */
	bool host_register;	    /* register the pages with the accelerator (mmap only) */
	bool hugetlb;		    /* back with HugeTLB pages, fail if the pool cannot */
	int32_t numa_node;	    /* a node, MOONCAKE_SEGMENT_NUMA_AUTO or _INTERLEAVE */
	uint32_t commit_threads;    /* owner threads committing pages; 0: automatic */
	bool populate_on_import;    /* non-owners map every page table entry at complete */
	uint64_t hugetlb_page_size; /* with hugetlb: 0 for the default (2 MiB), or 1 GiB */
	uint64_t
		register_chunk_size; /* host_register: bytes per driver call; 0: the whole range in one call */
	/* Added in 0.3 (MOONCAKE_SEGMENT_0.3): */
	bool background_commit;	    /* owner: create returns after the first chunk, the rest commits behind
				     * the readiness front; every rank: registers behind it */
	uint32_t register_pause_us; /* background registration: pause between chunks; 0: 1000 us */
	uint64_t register_offset;   /* host_register: this rank registers only [offset, offset + length) */
	uint64_t register_length;   /* 0: to the end of the segment */
	uint32_t slot_count;	    /* publish slots beside the segment (0: none); part of the declaration */
	/* A kept segment (0.3): its pages live in the node keeper (mooncake-segmentd)
	 * under this name, past the group; see "Kept segments" below.  NULL: not kept. */
	const char *keep_name;
	const void *keep_identity;    /* the caller's own bytes (model, dtype, engine version) */
	uint32_t keep_identity_bytes; /* at most MOONCAKE_SEGMENT_KEEP_IDENTITY_MAX */
	uint32_t keep_flags;	      /* MOONCAKE_SEGMENT_KEEP_* */
	uint32_t keep_sharing;	      /* MOONCAKE_SEGMENT_KEEP_SHARE_*: who else may attach */
	uint32_t keep_gid;	      /* KEEP_SHARE_GROUP: the group */
	uint32_t keep_owner_uid;      /* with MOONCAKE_SEGMENT_KEEP_OWNER: that uid's segment, shared with us;
				  * the uid as the keeper's user namespace sees it */
	/* The base's alignment (0.3): 0 for the default, the page size in use
	 * (memfd: the HugeTLB page, else the THP size, 2 MiB on x86-64, whether
	 * THP is on or not; VMM: the runtime's granularity); else a power of two from MOONCAKE_SEGMENT_MIN_ALIGNMENT to
	 * MOONCAKE_SEGMENT_MAX_ALIGNMENT, which every rank's base then has (for
	 * an engine or a runtime that wants aligned host addresses: Ascend SVM
	 * 64 KiB, an RDMA engine's 2 MiB).  Part of the declaration: every rank
	 * passes the same.  Choose the size and the offsets that matter as
	 * multiples of it (the Python helper's alignment= aligns every block). */
	uint64_t alignment;
};

/** alignment: the least explicit value (a base page); the default is the page size in use. */
#define MOONCAKE_SEGMENT_MIN_ALIGNMENT (UINT64_C(1) << 12)
/** alignment: the largest value (1 GiB, the largest huge page). */
#define MOONCAKE_SEGMENT_MAX_ALIGNMENT (UINT64_C(1) << 30)

/**
 * Fill @opt with the defaults: world_size 1, rank 0, owner 0, device -1,
 * mmap true, everything else off or automatic.  Leaves errno alone.
 */
void mooncake_segment_options_init(struct mooncake_segment_options *opt);

/**
 * Phase one.  Validates @opt; the owner allocates, places and commits every
 * page of the segment before this returns (lack of memory is an error here,
 * never a SIGBUS later), or with background_commit only the first chunk
 * (the rest commits behind the readiness front, below: lack of memory found
 * there is the commit's error, which every rank's wait_ready() and a
 * blocking peer's complete() report, never a SIGBUS); a non-owner reserves
 * an address window.  On success
 * *@out owns a new segment (free it with mooncake_segment_destroy()) and
 * @blob holds this rank's MOONCAKE_SEGMENT_BLOB_SIZE bytes.  On failure
 * nothing is allocated and *@out and @blob are left untouched.
 *
  * With host_register, each rank registers its own mapping with its own
 * device_id (the owner here, the others in complete): one driver call over
 * the whole range, or chunks of register_chunk_size rolled back in reverse
 * on failure.  A copy whose host range crosses from one chunk into the next
 * fails (CUDA: invalid argument), so set it only for a driver that refuses
 * one call that large.
 *
 * In a memory cgroup with a limit, the owner's room check and commit run
 * under a lock shared by the owners of that cgroup (per network namespace):
 * a concurrent create waits for it, then fits or gets -ENOMEM; clean page
 * cache counts as room, since the kernel reclaims it first.
 *
 * @name is a logical name: it is only folded into the fingerprint (so ranks
 * that disagree on it cannot form a group) and shown in /proc/PID/maps.
 *
 * Returns 0 or:
  *  -EINVAL  a NULL argument, world_size 0, rank_id or owner_rank >= world_size,
 *           size 0 or above MOONCAKE_SEGMENT_MAX_SIZE, host_register without
 *           mmap or with a device_id the runtime does not have, a NUMA node
 *           that does not exist, an unsupported hugetlb page size, an
 *           alignment that is not 0 or a power of two in
 *           [MOONCAKE_SEGMENT_MIN_ALIGNMENT, MOONCAKE_SEGMENT_MAX_ALIGNMENT],
 *           slot_count above MOONCAKE_SEGMENT_MAX_SLOTS
 *  -ENOTSUP a capability this build or host lacks (VMM, host registration,
 *           HugeTLB, an accelerator runtime)
 *  -ENOMEM  not enough memory, address space, memory cgroup room or HugeTLB pages
 *  -ENOSPC  the backing filesystem is full
 *  -EFBIG   the segment is larger than the file size limit (RLIMIT_FSIZE,
 *           ulimit -f), checked before the kernel could raise SIGXFSZ
 *  -EMFILE  the process is out of file descriptors
 *  -EPERM   the kernel refused (for example a seccomp filter on memfd_create)
 *  -EIO     any other failure of the system or of a runtime
 */
int mooncake_segment_create(const char *name, uint64_t size, const struct mooncake_segment_options *opt,
			    struct mooncake_segment **out, void *blob);

/**
 * Phase two.  @blobs is every rank's blob back to back in rank order, so
 * @blobs_len must be world_size * MOONCAKE_SEGMENT_BLOB_SIZE.  Every blob
 * (this rank's own included) is checked in rank order, the first failure
 * winning: format, rank id, host, backend, declaration, page and allocation
 * size; then that the owner exported a handle.  A non-owner then maps the
 * owner's pages.  A failed complete leaves nothing mapped:
 * mooncake_segment_destroy() is still needed, and enough.
 *
 * Returns 0 or:
 *  -EINVAL   NULL arguments, a wrong @blobs_len, a rank whose declaration
 *            (name, size, world size, owner, flags, page size, alignment)
 *            differs, a
 *            segment created by another process (this is a forked child)
 *  -EPROTO   a malformed blob (magic, version, checksum, fields), or an owner
 *            blob without a handle
 *  -EXDEV    a rank runs on another host (a group over several hosts gives
 *            each host's ranks a segment of their own: world_size, rank_id
 *            and owner_rank counted on the host, only its blobs here)
 *  -EALREADY complete already succeeded on this segment
 *  -ESRCH    the owner process is gone or has already called finish(), or
 *            (a blocking peer of a background_commit owner) it died while
 *            committing
 *  -ETIMEDOUT the owner is silent: stopped (SIGSTOP, a debugger, a frozen
 *            container) or stuck.  complete() never waits on the owner for
 *            longer than MOONCAKE_SEGMENT_PEER_TIMEOUT_MS (10 s) in all: its
 *            socket's answer, then (a blocking peer of a background_commit
 *            owner) each move of its front.  A stopped owner whose pages
 *            /proc still opens is no error: complete() maps them after
 *            that one wait
 *  -ECANCELED (a blocking peer of a background_commit owner) the owner
 *            destroyed the segment while committing it
 *  -ENOMEM, -ENOSPC (the same) the owner's background commit failed
 *  -EACCES   the owner's pages cannot be opened: another user, a ptrace
 *            restriction or separate PID namespaces (the message names which)
 *  -ENOMEM, -EMFILE, -EIO as for create
 */
int mooncake_segment_complete(struct mooncake_segment *seg, const void *blobs, size_t blobs_len);

/**
 * Call once the caller knows that every rank has completed (after a
 * barrier): the owner closes the descriptor it kept open for importers, so
 * that the pages live exactly as long as the mappings.  A no-op on
 * non-owners, when called again and in a forked child.
 *
 * Returns 0 or -EINVAL (NULL, or the segment is not complete).
 */
int mooncake_segment_finish(struct mooncake_segment *seg);

/**
 * Release everything this rank holds for @seg: registration, mapping,
 * descriptors.  The memory itself lives until the last rank releases it.
 * In a forked child it frees only the object (see fork() above).
 * NULL-safe.  Leaves errno alone.
 */
void mooncake_segment_destroy(struct mooncake_segment *seg);

/**
 * True once complete() succeeded on this rank (the pages are mapped, the
 * segment is usable); false for NULL.  It says nothing of the readiness
 * front: with background_commit it is true while most pages are still
 * being committed; ask mooncake_segment_ready_bytes() or wait_ready() for
 * that.
 */
bool mooncake_segment_ready(const struct mooncake_segment *seg);

/** This rank's base address, valid from create() on (reserved until complete()). */
void *mooncake_segment_base(const struct mooncake_segment *seg);

/** The size passed to create(). */
uint64_t mooncake_segment_size(const struct mooncake_segment *seg);

/** The size actually mapped: size rounded up to the page size. */
uint64_t mooncake_segment_alloc_size(const struct mooncake_segment *seg);

/** The accelerator address of the base, or 0 when the pages are not registered. */
uint64_t mooncake_segment_device_addr(const struct mooncake_segment *seg);

/**
 * Whether this build and this host can create a segment of this kind:
 * mmap alone is always true; hugetlb needs MFD_HUGETLB support; host_register
 * needs an accelerator runtime that loads at run time and reports at least one
 * device (CUDA: libcuda.so.1, or the file MOONCAKE_SEGMENT_CUDA_LIBRARY names;
 * Ascend: libascendcl.so, or MOONCAKE_SEGMENT_ASCEND_LIBRARY, whose current
 * device must then be device_id);
 * !mmap needs the Ascend runtime with a device and its VMM API (the same
 * library), or a CUDA driver (the same library) with a device that reports
 * virtual memory management, POSIX descriptor handles and host NUMA virtual
 * memory (CUDA 12.4+), and neither host_register nor hugetlb.  Sets no error
 * message.
 */
bool mooncake_segment_supported(bool mmap, bool host_register, bool hugetlb);

/**
 * Why a segment of this kind cannot be created here, without creating one:
 * runs the checks mooncake_segment_create() runs before it allocates (the
 * flags, the backend that would serve them on device_id, the accelerator
 * runtime for host_register).  Returns 0, and an empty @reason, when
 * mooncake_segment_supported() is true; otherwise a negative errno (-ENOTSUP,
 * or -EINVAL for flags that never go together) and, in @reason (truncated to
 * @len bytes, NUL-terminated; may be NULL when @len is 0), the message that
 * create would leave in mooncake_segment_last_error(), which it sets too.
 */
int mooncake_segment_unsupported_reason(bool mmap, bool host_register, bool hugetlb, int device_id,
					char *reason, size_t len);

/**
 * How many bytes a segment created with @opt can take on this host, into
 * *@bytes: the figures create()'s room check reads for the owner, as a
 * number.  Without hugetlb, the least of the memory cgroup's room (limit
 * minus usage, clean page cache counting as room: the kernel reclaims it
 * first) and MemAvailable + SwapFree; with hugetlb, the free, unreserved
 * pages of the pool of the page size create() would use.  Then at most the
 * file size limit (RLIMIT_FSIZE) and MOONCAKE_SEGMENT_MAX_SIZE, rounded down
 * to the page size: create() of *@bytes passes the room check (under a
 * memory cgroup *@bytes leaves out 64 pages per CPU, which the kernel's
 * charge batching can add to the usage a moment later; without one, one
 * page more is refused); the owner's room counts the kernel's page tables and page
 * cache index beside the pages (S + S/240 + 1 MiB, doc/guarantees.md).
 * With rank_id != owner_rank the answer is a peer's: the pages are charged
 * to the owner, so the peer's own room bounds only its page tables (8 bytes
 * a page, + 1 MiB), and the file size limit does not apply.  The rest of
 * @opt selects the backend and page size as for create().
 *
 * It reads this host only, now: with ranks on several hosts, take the
 * minimum over the hosts (the Python helper does); memory another program
 * takes before create() is not there.  Added in 0.2 (MOONCAKE_SEGMENT_0.2).
 *
 * Returns 0 or:
 *  -EINVAL  NULL arguments, an unsupported hugetlb page size
 *  -ENOTSUP a capability this build or host lacks, as for create(), or a
 *           HugeTLB pool that cannot be read
 */
int mooncake_segment_room(const struct mooncake_segment_options *opt, uint64_t *bytes);

/** The bytes of mooncake_segment_host_id(). */
#define MOONCAKE_SEGMENT_HOST_ID_SIZE 16

/**
 * This host as complete() tells hosts apart: the kernel's boot id
 * (/proc/sys/kernel/random/boot_id, read under MOONCAKE_SEGMENT_HOST_ROOT
 * as every host fact), into @id.  Ranks on hosts with different ids never
 * share a segment: a group that spans hosts forms one group of this API per
 * host id (the Python helper does).  Returns false, with @id zeroed, when
 * the boot id cannot be read; complete() then tells no hosts apart either.
 * Sets no error message.  Added in 0.3 (MOONCAKE_SEGMENT_0.3).
 */
bool mooncake_segment_host_id(uint8_t id[MOONCAKE_SEGMENT_HOST_ID_SIZE]);

/** The details of the last failure in this thread; never NULL, "" when none. */
const char *mooncake_segment_last_error(void);

/** The library's version, "MAJOR.MINOR.MICRO". */
const char *mooncake_segment_version(void);

/* --- The readiness front (0.3) ------------------------------------------- */

/*
 * With background_commit, the owner's create() returns as soon as the memory
 * room is checked (and, in a memory cgroup, its commit lock held until the
 * last page) and the first chunk (2 MiB, or one huge page) is committed; its
 * threads commit the rest in order at the same speed, advancing a front that
 * every rank sees (a small control area passed with the pages).  A peer's
 * complete() then returns at once; each rank with host_register registers
 * its part of the mapping (register_offset/length) on a thread of its own,
 * once the front has passed it: in one call by default, or a chunk of
 * register_chunk_size at a time, each once the front has passed it, with
 * register_pause_us (default 1 ms) between calls.  Without
 * background_commit nothing changes: create and complete return with every
 * page committed and registered (a blocking peer's complete waits for a
 * background owner's front).
 *
 * Touching a page beyond the front is safe: it is never a SIGBUS or an OOM
 * kill past the room check, but that fault allocates and zeroes the page
 * itself (charged to the toucher's memory cgroup) and the commit skips it.
 * So a peer bound by a memory cgroup other than the owner's returns from
 * complete() only once the pages left to commit fit in half its cgroup's
 * room (the other half is the program's own): a small cgroup's peer waits
 * for the front there, with the peer timeout, and is only slower.
 * Lack of memory during the commit is the commit's error, seen by every
 * rank's wait; destroy() on the owner stops the commit (the peers' waits
 * fail with -ECANCELED); a killed owner makes them fail with -ESRCH within
 * 100 ms.  The memfd backend has a front; the VMM backends allocate
 * everything at create, and their segments are ready at once.
 */

/**
 * Wait until bytes [@offset, @offset + @length) of @seg (@length 0: to the
 * end) are committed, and registered on this rank where it registers them.
 * An empty range (@offset == size, @length 0) is ready: 0 at once.
 * Sleeps on the shared word (a futex), never spins.  @timeout_ms < 0: no
 * limit (then only the owner's death, its destroy or the commit's error
 * ends the wait: an owner stopped with SIGSTOP holds it until SIGCONT, so
 * give a timeout where that matters).  May run concurrently with itself
 * and the getters.
 *
 * Returns 0 or:
 *  -ETIMEDOUT the range was not ready within @timeout_ms
 *  -EINVAL    NULL, a range outside the segment, a peer before complete()
 *  -ESRCH     the owner died while committing
 *  -ECANCELED the owner destroyed the segment while committing
 *  the commit's error on every rank (-ENOMEM, -ENOSPC, -EIO), or this
 *  rank's registration error (-ENOMEM, -ENOTSUP, -EIO); the message names
 *  the rank and the cause.
 */
int mooncake_segment_wait_ready(struct mooncake_segment *seg, uint64_t offset, uint64_t length,
				int timeout_ms);

/**
 * How many bytes from offset 0 are ready now (committed, and registered where
 * this rank registers them): the segment's size once everything is; 0 for
 * NULL and for a peer before complete().
 */
uint64_t mooncake_segment_ready_bytes(const struct mooncake_segment *seg);

/* --- Publish slots (0.3) -------------------------------------------------- */

/** The most publish slots a segment may declare (slot_count). */
#define MOONCAKE_SEGMENT_MAX_SLOTS 65536

/*
 * slot_count publish slots live beside the segment (in the control area,
 * never in the caller's bytes) and are part of the declaration.  Each slot
 * has a 64-bit sequence: even when published, odd while a write_begin ...
 * write_end is in progress.  Ordering: a rank's stores before publish() or
 * write_end() are visible to any rank whose wait_slot() or read_begin()
 * returned that sequence or a later one (release/acquire).  Waits sleep on
 * the shared word (a futex); the slot functions touch only the shared words,
 * so they may run concurrently with each other (a wait in one thread, a
 * publish in another) and with the getters; a peer uses the slots after
 * complete().  The sequence
 * functions return the sequence (>= 0) or a negative errno: -EINVAL (no
 * slots, slot out of range, a peer before complete), -ETIMEDOUT, -EBUSY.
 *
 * A writer gone between write_begin() and write_end() (killed, or its
 * segment destroyed) leaves the sequence odd and its block half written.
 * No reader ever accepts that block: read_begin() and wait_slot() wait, a
 * copy begun before it retries.  If the writer held the slot's claim, the
 * try_claim() that takes the claim over (returns 2) gives the new holder
 * the unfinished write: its next write_begin() succeeds (the sequence moves
 * 2 on, still odd), it writes the whole block, and its write_end() makes
 * the sequence even, the new block published.  So write under a claim.
 */

/**
 * Publish @slot: the sequence grows by 2, waiters wake.  Returns the new
 * (even) sequence, or -EBUSY while a write_begin() ... write_end() is in
 * progress on it (the message names the slot: end it with write_end(), or
 * take over a dead writer's claim and write the block again).
 */
int64_t mooncake_segment_publish(struct mooncake_segment *seg, uint32_t slot);
/** Wait until @slot's sequence is even and not @seen; returns it. @timeout_ms < 0: no limit. */
int64_t mooncake_segment_wait_slot(struct mooncake_segment *seg, uint32_t slot, uint64_t seen,
				   int timeout_ms);
/**
 * Seqlock writer: make the sequence odd; returns it.  -EBUSY while another
 * write runs, except a write its gone claimer left unfinished, which the
 * claim's new holder writes over (see above).
 */
int64_t mooncake_segment_write_begin(struct mooncake_segment *seg, uint32_t slot);
/** Seqlock writer: make it even again and wake the waiters; returns it. */
int64_t mooncake_segment_write_end(struct mooncake_segment *seg, uint32_t slot);
/** Seqlock reader: wait until no write is in progress; returns the (even) sequence. */
int64_t mooncake_segment_read_begin(struct mooncake_segment *seg, uint32_t slot, int timeout_ms);
/** Seqlock reader, after copying: 1 when the block may have changed since @seq (copy again), 0 when not. */
int mooncake_segment_read_retry(const struct mooncake_segment *seg, uint32_t slot, uint64_t seq);
/**
 * Claim @slot (the right to fill its block): 1 when this rank holds it now,
 * 2 when it took it over from a rank that is gone (died, or destroyed its
 * segment: noticed at once), 0 when a live rank holds it; or a negative errno.
 * A takeover of a claimer gone mid-write gives this rank that write: its
 * next write_begin() succeeds.
 */
int mooncake_segment_try_claim(struct mooncake_segment *seg, uint32_t slot);
/** Let go of this rank's claim on @slot: 0, or -EPERM when it does not hold it. */
int mooncake_segment_release_claim(struct mooncake_segment *seg, uint32_t slot);
/**
 * The slots' sequences as words, for a caller that checks many slots at once
 * (a poll loop, a tensor view): the address of slot 0's 64-bit sequence in
 * this rank's mapping, slot i's at that address + i * *@stride bytes
 * (*@stride is 64: a cache line per slot), slot_count of them.  Valid from
 * the time the slot functions are (the owner at create, a peer after
 * complete()) until destroy().  Read only, with atomic loads: a sequence read
 * this way orders nothing, so call wait_slot() (timeout 0) or read_begin() on
 * a slot that moved before reading its block.  Never write through it.
 * Returns NULL, with the message set and *@stride untouched, for a NULL
 * argument, no slots or a peer before complete().
 */
const uint64_t *mooncake_segment_slot_words(const struct mooncake_segment *seg, size_t *stride);

/*
 * Publish slots in accelerator stream order (host_register=true: every rank
 * registers the slot words with its device_id, as it does the pages).
 * @stream is the runtime's stream handle (CUDA: a CUstream or cudaStream_t,
 * NULL the legacy default stream; Ascend: an aclrtStream) of this rank's
 * device.  Nothing blocks the host: the calls queue work on @stream.
 *
 * publish_on_stream(): once the work queued on @stream before it is done (a
 * device-to-host copy into the block, say), the slot's sequence becomes the
 * returned value, behind a system-scope fence: a rank that sees that
 * sequence (wait_slot(), read_begin(), a stream wait) sees the bytes those
 * copies wrote.  Then, unless @flags has MOONCAKE_SEGMENT_STREAM_NO_HOST_WAKE,
 * a host function of the runtime wakes the slot's CPU waiters (without it
 * they notice within 100 ms).  Ascend has no such host function: there the
 * CPU waiters always notice within 100 ms, as if the flag were given.  The
 * value is 2 past the larger of the
 * sequence now and the last value this rank queued for the slot, so a slot
 * published in stream order has one writer: do not also publish it from the
 * CPU or write_begin() it while stream publishes are queued.  Returns the
 * value, or a negative errno.
 *
 * wait_slot_on_stream(): the work queued on @stream after it starts once the
 * slot's sequence is published past @seen (at least the next even value
 * above @seen, wrap-aware; a write in progress does not count), on the
 * device.  Returns that value, or a negative errno.  A wait for a publish
 * that never comes holds the stream for ever: pass a @seen the writer will
 * pass.
 *
 * Both return -ENOTSUP (the message says why) without host_register, or
 * where the runtime has no stream memory operations (CUDA:
 * cuStreamWriteValue64, cuStreamWaitValue64, cuLaunchHostFunc; Ascend:
 * aclrtValueWrite, aclrtValueWait), -EINVAL as the slot functions do, and
 * the runtime's refusal of the call as an errno (-EINVAL, -ENOMEM, -EIO;
 * the message quotes the runtime).  On Ascend the calling thread must be on device_id (AscendCL's rule; the
 * library never moves it): -EINVAL otherwise, the message naming
 * aclrtSetDevice.
 */
#define MOONCAKE_SEGMENT_STREAM_NO_HOST_WAKE 0x1u
int64_t mooncake_segment_publish_on_stream(struct mooncake_segment *seg, uint32_t slot, void *stream,
					   unsigned int flags);
int64_t mooncake_segment_wait_slot_on_stream(struct mooncake_segment *seg, uint32_t slot, uint64_t seen,
					     void *stream);
/**
 * The device address of slot 0's sequence in this rank's registration
 * (slot i's at that + i * *@stride), for kernels that poll or batch their own
 * checks: 0, or -ENOTSUP without host_register, -EINVAL as slot_words().
 */
int mooncake_segment_slot_device_words(const struct mooncake_segment *seg, uint64_t *device_addr,
				       size_t *stride);

/* --- Kept segments (0.3) ----------------------------------------------- */

/*
 * With keep_name set, the owner's create() asks the node keeper
 * (mooncake-segmentd, doc/keeper.md) for the pages instead of allocating
 * them: at its socket, MOONCAKE_SEGMENT_KEEPER or
 * /run/mooncake-segment/keeper.sock.  The first create of a name makes the
 * segment in the keeper, which commits the pages (charged to the keeper's
 * memory cgroup, after its own room check) and keeps them past the group;
 * a later create of the same name and declaration attaches to those pages
 * (no commit, no copy) and mooncake_segment_warm() says so.  The other
 * ranks reach the pages through the owner as for any segment, and learn at
 * complete() whether they are warm.  The declaration the keeper compares is
 * the name passed to create() (which carries the block layout), the size,
 * the page size, hugetlb, world_size, keep_sharing and keep_identity: a
 * create that differs is -EEXIST naming the field, unless keep_flags has
 * MOONCAKE_SEGMENT_KEEP_REPLACE and nobody maps the old pages.  keep_name,
 * keep_identity, keep_sharing, keep_gid and keep_owner_uid are part of the
 * group's declaration: every rank passes the same.
 *
 * A kept segment is mmap=true only, with numa_node automatic (the keeper
 * places its pages); background_commit changes nothing (the pages come
 * committed).  The control area (the readiness front, publish slots) is the
 * group's own and starts anew with each group: durable state belongs in the
 * pages.  create() also returns:
 *  -ENOENT  no keeper answers at the socket (the message names it and the
 *           fix), or KEEP_ATTACH_ONLY and no such kept segment
 *  -EEXIST  a kept segment of that name with another declaration (the
 *           message names the field), or KEEP_CREATE_ONLY and it exists
 *  -EBUSY   KEEP_REPLACE while the old pages are still mapped
 *  -EACCES  another user's segment not shared with this one, a keeper
 *           run by neither root nor this user, or a keeper in a user
 *           namespace that does not map this user's ids
 *  -EUSERS  the keeper refused the connection: its --max-connections, or
 *           this user's --max-connections-per-uid, are all taken (retry)
 *  -ENOMEM  the keeper's cgroup or the host has no room for it
 *  -ENOSPC  it would exceed the keeper's --budget or --uid-budget
 *  -EMFILE  the keeper holds its --max-segments (or this user its
 *           --uid-max-segments)
 *  -EINVAL, -ENOTSUP  the keeper refuses the declaration (the message
 *           quotes it); any other refusal is -EIO
 *  -ETIMEDOUT, -ECONNRESET, -EPROTO  the keeper did not answer in time,
 *           went away, or does not speak this library's protocol
 */

/** keep_identity_bytes: at most this many. */
#define MOONCAKE_SEGMENT_KEEP_IDENTITY_MAX 64
/** keep_name: 1 to this many bytes of printable ASCII, no space or '/', not "." or "..". */
#define MOONCAKE_SEGMENT_KEEP_NAME_MAX 255

/** keep_flags: a declaration that differs replaces the kept segment when nobody maps it. */
#define MOONCAKE_SEGMENT_KEEP_REPLACE (1u << 0)
/** keep_flags: attach only; -ENOENT when the keeper holds no such segment. */
#define MOONCAKE_SEGMENT_KEEP_ATTACH_ONLY (1u << 1)
/** keep_flags: create only; -EEXIST when it exists. */
#define MOONCAKE_SEGMENT_KEEP_CREATE_ONLY (1u << 2)
/** keep_flags: attach to keep_owner_uid's segment (shared with this user), not this user's own. */
#define MOONCAKE_SEGMENT_KEEP_OWNER (1u << 3)

/** keep_sharing: only the creating uid (and root) may attach (the default). */
#define MOONCAKE_SEGMENT_KEEP_SHARE_UID 0
/** keep_sharing: and the members of keep_gid. */
#define MOONCAKE_SEGMENT_KEEP_SHARE_GROUP 1
/** keep_sharing: every uid that reaches the keeper's socket. */
#define MOONCAKE_SEGMENT_KEEP_SHARE_ANY 2

/**
 * Whether this rank's pages existed before this group: a kept segment that
 * this create attached to rather than made.  The owner knows from create(),
 * the other ranks from complete(); false before, for a segment that is not
 * kept, and for NULL.
 */
bool mooncake_segment_warm(const struct mooncake_segment *seg);

/* --- What a segment actually got ---------------------------------------- */

/** info.flags: THP was advised on the mapping before the first touch. */
#define MOONCAKE_SEGMENT_INFO_THP_ADVISED (1u << 0)
/** info.flags: the pages are HugeTLB pages. */
#define MOONCAKE_SEGMENT_INFO_HUGETLB (1u << 1)
/** info.flags: the NUMA policy could not be applied (see the log); default placement. */
#define MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED (1u << 2)
/** info.flags: the pages are registered with an accelerator. */
#define MOONCAKE_SEGMENT_INFO_REGISTERED (1u << 3)
/** info.flags: this rank owns the pages. */
#define MOONCAKE_SEGMENT_INFO_OWNER (1u << 4)
/** info.flags: THP was dropped because it committed slower than base pages. */
#define MOONCAKE_SEGMENT_INFO_THP_FALLBACK (1u << 5)
/** info.flags: the pages are a kept segment's, held by the node keeper. */
#define MOONCAKE_SEGMENT_INFO_KEPT (1u << 6)
/** info.flags: a kept segment that existed before this group (mooncake_segment_warm()). */
#define MOONCAKE_SEGMENT_INFO_WARM (1u << 7)

struct mooncake_segment_info {
	uint64_t size;		     /* as create() was asked */
	uint64_t alloc_size;	     /* mapped size */
	uint64_t page_size;	     /* the page size the backing asks for */
	uint64_t resident_bytes;     /* mapped in this process now */
	uint64_t huge_bytes;	     /* of those, mapped by huge pages (THP or HugeTLB) */
	uint64_t commit_ns;	     /* owner: time spent committing the pages */
	uint32_t commit_threads;     /* owner: threads that committed them */
	uint32_t flags;		     /* MOONCAKE_SEGMENT_INFO_* */
	int32_t numa_node_requested; /* as in the options; the owner's after automatic selection */
	int32_t numa_node;	     /* the node holding most of the pages, -1 unknown */
	uint64_t numa_node_mask;     /* bit n: some page sits on node n (nodes < 64) */
	char backend[16];	     /* "memfd", "memfd-hugetlb", ... NUL-terminated */
	char commit_method[32];	     /* how the owner committed, e.g. "fallocate+populate" */
	char accelerator[16];	     /* the runtime the pages are registered with ("cuda"), or "" */
	uint64_t register_ns;	     /* time this rank spent registering its mapping */
	uint64_t keep_generation;    /* a kept segment's generation in its keeper (0.3), else 0 */
	uint64_t alignment;	     /* this rank's base is a multiple of it (0.3): options.alignment,
				      * or by default the page size in use (HugeTLB page, THP size) */
};

/**
 * Fill @info (of @info_size bytes, normally sizeof(*info); a smaller, older
 * struct gets its prefix) with what the segment actually got.  It reads this
 * process's page tables, so it costs time proportional to the segment.
 *
 * Returns 0 or -EINVAL (NULL arguments or @info_size below the first field).
 */
int mooncake_segment_get_info(const struct mooncake_segment *seg, struct mooncake_segment_info *info,
			      size_t info_size);

/* --- Logging ---------------------------------------------------------------- */

/** Log priorities, as syslog's. */
#define MOONCAKE_SEGMENT_LOG_ERR     3
#define MOONCAKE_SEGMENT_LOG_WARNING 4
#define MOONCAKE_SEGMENT_LOG_INFO    6
#define MOONCAKE_SEGMENT_LOG_DEBUG   7

typedef void (*mooncake_segment_log_fn)(int priority, const char *message, void *userdata);

/**
 * Route the library's log lines with a priority at most @max_priority to
 * @fn (NULL: silence, the default).  Process-wide; @fn may be called from
 * any thread that calls into the library, and must not call back into it.
 * No lock of the library is held while @fn runs, so it may fork().
 */
void mooncake_segment_set_log_fn(mooncake_segment_log_fn fn, int max_priority, void *userdata);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_SEGMENT_H */
