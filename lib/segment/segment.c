/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The segment state machine: option validation, create (owner allocates,
 * others reserve), complete (check every rank's blob, then import), finish
 * and destroy.  It knows nothing of memfd or accelerators: a backend
 * (backends/backend.h, chosen from backends.c's table) owns the memory and
 * sees only seg->memory; the state machine names ranks in messages, places
 * the owner's pages (host/placement.h) and registers mappings (accel/accel.h).
 *
 *   create() -> created --complete()--> ready --finish()--> finished
 *                  \______________ destroy() from any state ______/
 *
 * A backend that passes descriptors gets a control area (control.h) to pass
 * with its pages: the readiness front.  With background_commit the owner's
 * create returns after the first chunk and background.c commits the rest,
 * and each rank registers behind the front; without it, create and
 * complete return with everything committed and registered, as before.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/accel.h"
#include "backends/backend.h"
#include "base/base.h"
#include "base/error.h"
#include "host/commit-lock.h"
#include "host/host.h"
#include "host/limits.h"
#include "host/placement.h"
#include "mooncake/segment.h"
#include "route/route.h"
#include "blob.h"
#include "control.h"
#include "private.h"
#include "segment.h"

MC_EXPORT void mooncake_segment_options_init(struct mooncake_segment_options *opt)
{
	if (!opt)
		return;
	memset(opt, 0, sizeof(*opt));
	opt->world_size = 1;
	opt->device_id = -1;
	opt->mmap = true;
	opt->numa_node = MOONCAKE_SEGMENT_NUMA_AUTO;
}

MC_EXPORT const char *mooncake_segment_version(void)
{
	return PACKAGE_VERSION;
}

int mc_segment_check_flags(const struct mooncake_segment_options *opt)
{
	if (opt->host_register && !opt->mmap)
		return mc_error(EINVAL, "Shared segment host_register requires mmap=true");
	if (opt->hugetlb && !opt->mmap)
		return mc_error(EINVAL, "Shared segment hugetlb requires mmap=true");
	if (opt->device_id < -1)
		return mc_error(EINVAL, "Shared segment device_id must be a device index or -1, got %d",
				opt->device_id);
	return 0;
}

static int validate(const char *name, uint64_t size, const struct mooncake_segment_options *opt,
		    struct mooncake_segment **out, const void *blob)
{
	if (!name || !opt || !out || !blob)
		return mc_error(EINVAL,
				"Shared segment create needs a name, options, an output pointer and a "
				"blob buffer (got NULL)");
	if (opt->world_size == 0)
		return mc_error(
			EINVAL,
			"Shared segment world_size must not be zero: fill the options with "
			"mooncake_segment_options_init() before setting fields (a zeroed struct is not "
			"the defaults)");
	if (opt->rank_id >= opt->world_size || opt->owner_rank >= opt->world_size)
		return mc_error(EINVAL,
				"Shared segment rank_id and owner_rank must be below world_size (rank_id %u, "
				"owner_rank %u, world_size %u)",
				opt->rank_id, opt->owner_rank, opt->world_size);
	if (size == 0 || size > MOONCAKE_SEGMENT_MAX_SIZE)
		return mc_error(EINVAL, "Shared segment size must be in (0, %llu], got %llu",
				(unsigned long long)MOONCAKE_SEGMENT_MAX_SIZE, (unsigned long long)size);
	if (mc_segment_check_flags(opt))
		return -EINVAL;
	if (opt->register_offset > size || opt->register_length > size - opt->register_offset ||
	    ((opt->register_offset || opt->register_length) && !opt->host_register))
		return mc_error(
			EINVAL,
			"Shared segment register range [%llu, +%llu) must lie within the %llu bytes of "
			"the segment, and needs host_register=true",
			(unsigned long long)opt->register_offset, (unsigned long long)opt->register_length,
			(unsigned long long)size);
	if (opt->slot_count > MOONCAKE_SEGMENT_MAX_SLOTS)
		return mc_error(EINVAL, "Shared segment slot_count must be at most %d, got %u",
				MOONCAKE_SEGMENT_MAX_SLOTS, opt->slot_count);
	if (opt->alignment &&
	    (!mc_is_power_of_two(opt->alignment) || opt->alignment < MOONCAKE_SEGMENT_MIN_ALIGNMENT ||
	     opt->alignment > MOONCAKE_SEGMENT_MAX_ALIGNMENT))
		return mc_error(EINVAL,
				"Shared segment alignment must be 0 (the page size in use) or a power of two "
				"from %llu (4 KiB) to %llu (1 GiB), got %llu",
				(unsigned long long)MOONCAKE_SEGMENT_MIN_ALIGNMENT,
				(unsigned long long)MOONCAKE_SEGMENT_MAX_ALIGNMENT,
				(unsigned long long)opt->alignment);
	if (opt->numa_node < MOONCAKE_SEGMENT_NUMA_INTERLEAVE)
		return mc_error(EINVAL,
				"Shared segment numa_node must be a node, -1 (automatic) or -2 "
				"(interleave), got %d",
				opt->numa_node);
	return mc_keep_check_options(opt);
}

/* Fields that mooncake_segment_options_init() never leaves at zero all are:
 * the struct was most likely zeroed instead of initialised. */
static bool zeroed_defaults(const struct mooncake_segment_options *opt)
{
	return !opt->mmap && opt->device_id == 0 && opt->numa_node == 0;
}

/* A VMM refusal for options that were zeroed, not initialised: say so. */
static int hint_zeroed_options(const struct mooncake_segment_options *opt, int err)
{
	if (err != -ENOTSUP || opt->mmap || !zeroed_defaults(opt))
		return err;
	return mc_error_add(ENOTSUP, " (mmap is false, as in an options struct that "
				     "mooncake_segment_options_init() did not fill: call it first, then set "
				     "the fields)");
}

/* The backend for these options, or NULL with the error recorded. */
static const struct mc_backend_ops *pick_backend(const struct mooncake_segment_options *opt)
{
	const struct mc_backend_ops *backend = mc_backend_for(opt->mmap, opt->host_register, opt->hugetlb);

	if (!backend)
		mc_error(ENOTSUP,
			 "This build has no %s backend for shared segments (mmap=%s needs one); use mmap=%s",
			 opt->mmap ? "host memory" : "VMM", opt->mmap ? "true" : "false",
			 opt->mmap ? "false" : "true");
	else if (opt->host_register && mc_accel_require_host_register() != 0)
		return NULL;
	return backend;
}

int mc_segment_page_size(const struct mooncake_segment_options *opt, uint64_t *page_size)
{
	const struct mc_backend_ops *backend = pick_backend(opt);

	if (!backend)
		return hint_zeroed_options(opt, -ENOTSUP);
	return hint_zeroed_options(opt, mc_backend_granularity(backend, opt, page_size));
}

/* The part of its mapping this rank registers: register_offset and
 * register_length widened to whole pages, or all of it. */
static void plan_registration(struct mooncake_segment *seg)
{
	uint64_t page = seg->memory.page_size, end;

	seg->register_begin = seg->opt.register_offset / page * page;
	end = seg->opt.register_length ? seg->opt.register_offset + seg->opt.register_length : seg->size;
	seg->register_end = mc_align_up(end, page);
}

/* This rank's registration, not started yet (host_register). */
static int prepare_registration(struct mooncake_segment *seg, struct mc_registration *reg)
{
	/* One call over the whole range unless the caller splits it (accel.h). */
	uint64_t len = seg->register_end - seg->register_begin,
		 chunk = seg->opt.register_chunk_size ? seg->opt.register_chunk_size : len;

	*reg = (struct mc_registration){
		.ops = mc_accel_for_host_register(),
		.device = seg->opt.device_id,
		.addr = (uint8_t *)seg->memory.base + seg->register_begin,
		.len = len,
		/* Whole pages per call, at least one. */
		.chunk = chunk < seg->memory.page_size
				 ? seg->memory.page_size
				 : chunk / seg->memory.page_size * seg->memory.page_size,
	};
	if (!reg->ops)
		return mc_error(ENOTSUP,
				"Shared segment host_register=true: the accelerator runtime went away");
	return 0;
}

/* Register this rank's mapping with its accelerator (host_register): at
 * once, or with background_commit behind the front on a thread of its own. */
static int register_mapping(struct mooncake_segment *seg)
{
	struct mc_registration reg;
	uint64_t start;
	int err;

	plan_registration(seg);
	err = prepare_registration(seg, &reg);
	if (err || reg.len == 0)
		return err;
	/* Named before a registrar runs: info() reports it while the pages register. */
	seg->register_runtime = reg.ops->name;
	if (seg->opt.background_commit && seg->control.area) {
		seg->registration = reg; /* the registrar's to take */
		err = mc_background_register_start(seg);
		if (err)
			seg->registration.ops = NULL;
		return err;
	}
	start = mc_now_ns();
	err = reg.ops->register_host(&reg);
	if (err)
		return err;
	reg.ns = mc_now_ns() - start;
	seg->registration = reg;
	seg->published_device_addr = reg.device_addr - seg->register_begin;
	return 0;
}

/* Unregister before anything is unmapped. */
static void unregister_mapping(struct mooncake_segment *seg)
{
	if (seg->registrar_running)
		return; /* the registrar's, until it is joined */
	if (!seg->registration.ops)
		return;
	seg->registration.ops->unregister_host(&seg->registration);
	seg->registration.ops = NULL;
}

static void copy_label(char *label, size_t size, const char *name)
{
	size_t len = strcspn(name, "|");

	if (len >= size) {
		len = size - 1;
		/* Never cut a UTF-8 character in two: back off its continuation bytes. */
		while (len > 0 && ((unsigned char)name[len] & 0xc0) == 0x80)
			len--;
	}
	memcpy(label, name, len);
	label[len] = '\0';
}

static void fill_blob(const struct mooncake_segment *seg, struct mc_blob *b)
{
	memset(b, 0, sizeof(*b));
	b->backend_id = (uint16_t)seg->backend->id;
	b->rank_id = seg->opt.rank_id;
	b->world_size = seg->opt.world_size;
	b->owner_rank = seg->opt.owner_rank;
	b->flags = (seg->opt.mmap ? MC_BLOB_FLAG_MMAP : 0) |
		   (seg->opt.host_register ? MC_BLOB_FLAG_HOST_REGISTER : 0) |
		   (seg->opt.hugetlb ? MC_BLOB_FLAG_HUGETLB : 0) | (seg->keep.kept ? MC_BLOB_FLAG_KEPT : 0);
	/* The owner's answer from the keeper, which the peers take at complete. */
	if (seg->keep.kept && seg->memory.is_owner) {
		b->flags |= seg->keep.warm ? MC_BLOB_FLAG_WARM : 0;
		b->keep_generation = seg->keep.generation;
	}
	b->page_size = seg->memory.page_size;
	b->fingerprint = seg->fingerprint;
	b->alloc_size = seg->memory.alloc_size;
	if (!mc_host_boot_id(b->boot_id))
		memset(b->boot_id, 0, sizeof(b->boot_id));
	b->pid_namespace = mc_host_pid_namespace();
	b->net_namespace = mc_host_net_namespace();
	b->pid = (uint32_t)getpid();
	b->uid = (uint32_t)getuid();
	b->handle_bytes = seg->memory.handle_bytes;
	memcpy(b->handle, seg->memory.handle, seg->memory.handle_bytes);
}

/* Owner only: where its pages go.  A peer places nothing, so it never asks
 * an accelerator runtime where the device sits; the owner asks only when
 * automatic placement on a multi-node host needs the answer. */
static int resolve_placement(struct mooncake_segment *seg)
{
	const struct mooncake_segment_options *opt = &seg->opt;
	int device_node = -1, err;

	if (opt->device_id >= 0 && mc_placement_wants_device_node(opt->numa_node))
		device_node = mc_accel_device_node(opt->device_id);
	err = mc_placement_resolve(opt->numa_node, device_node, &seg->memory.placement);
	/* Report the node automatic placement chose. */
	if (!err && opt->numa_node == MOONCAKE_SEGMENT_NUMA_AUTO && seg->memory.placement.node >= 0)
		seg->numa_node_requested = seg->memory.placement.node;
	return err;
}

/* Is this a forked child's copy of another process's segment? */
static bool inherited(const struct mooncake_segment *seg)
{
	return seg->creator != getpid();
}

/* A new segment object for these (validated) arguments, nothing allocated yet. */
static struct mooncake_segment *new_segment(const char *name, uint64_t size,
					    const struct mooncake_segment_options *opt)
{
	struct mooncake_segment *seg = calloc(1, sizeof(*seg));

	if (!seg)
		return NULL;
	seg->opt = *opt;
	seg->creator = getpid();
	seg->size = size;
	seg->numa_node_requested = opt->numa_node;
	copy_label(seg->label, sizeof(seg->label), name);
	/* The keeper compares the name (it carries the block layout) and the
	 * rest field by field, so that a refusal can name the field; the name
	 * itself travels too (mc_keep_acquire), to name what differs in it. */
	seg->fingerprint = mc_keep_fold(mc_fingerprint(name, size, opt), opt);
	seg->keep_fingerprint = mc_fnv1a_bytes(MC_FNV1A_OFFSET, name, strlen(name));
	seg->keep = MC_KEEP_NONE(opt->keep_name != NULL);
	if (opt->keep_name)
		snprintf(seg->keep.name, sizeof(seg->keep.name), "%s", opt->keep_name);
	seg->memory.adopt_fd = -1;
	seg->memory.opt = &seg->opt;
	seg->memory.label = seg->label;
	seg->memory.is_owner = opt->rank_id == opt->owner_rank;
	seg->memory.placement.node = -1; /* a peer places nothing */
	seg->memory.companion_fd = -1;
	seg->memory.background = opt->background_commit && seg->memory.is_owner;
	seg->memory.progress = &seg->progress;
	seg->control = (struct mc_control_map)MC_CONTROL_MAP_NONE;
	seg->commit_lock = (struct mc_commit_lock)MC_COMMIT_LOCK_NONE;
	mc_background_init(seg);
	return seg;
}

/* Choose the backend, the page size and so the allocation size, and (owner)
 * where the pages go. */
static int plan_memory(struct mooncake_segment *seg)
{
	const struct mooncake_segment_options *opt = &seg->opt;
	struct mc_memory *mem = &seg->memory;
	int err;

	seg->backend = pick_backend(opt);
	if (!seg->backend)
		return hint_zeroed_options(opt, -ENOTSUP);
	if (opt->slot_count && !seg->backend->passes_companion)
		return mc_error(
			ENOTSUP,
			"Shared segment publish slots live in a control area that the %s backend does not "
			"pass to the peers; use mmap=true for slot_count %u",
			seg->backend->name, opt->slot_count);
	err = mc_backend_granularity(seg->backend, opt, &mem->page_size);
	if (err)
		return hint_zeroed_options(opt, err);
	mem->alloc_size = mc_align_up(seg->size, mem->page_size);
	return mem->is_owner ? resolve_placement(seg) : mc_placement_check(opt->numa_node);
}

/* Owner: the control area its backend passes to the peers with the pages:
 * a kept segment's is the one the keeper made for this group, and its
 * handle says how a peer asks the keeper for both (JOIN). */
static int create_control(struct mooncake_segment *seg)
{
	int err;

	if (!seg->memory.is_owner || !seg->backend->passes_companion)
		return 0;
	if (seg->keep.fds[1] >= 0) {
		err = mc_control_create_in(seg->keep.fds[1], seg->opt.world_size, seg->opt.slot_count,
					   seg->memory.alloc_size, &seg->control);
		seg->memory.keeper = (struct mc_keeper_ref){
			.generation = seg->keep.generation,
			.owner_uid = seg->keep.keeper_owner_uid,
			.token = seg->keep.group_token,
		};
	} else {
		err = mc_control_create(seg->label, seg->opt.world_size, seg->opt.slot_count,
					seg->memory.alloc_size, &seg->control);
	}
	seg->memory.companion_fd = seg->control.fd;
	/* Declared (at most 1 GiB, so it fits the word): `list` shows it. */
	if (!err)
		seg->control.area->alignment = (uint32_t)seg->opt.alignment;
	return err;
}

/* The owner allocates and commits (with background_commit the first chunk,
 * the committer thread the rest, holding the cgroup's commit lock until the
 * last page), a peer reserves its window; then (host_register) the owner
 * registers its mapping. */
static int allocate_memory(struct mooncake_segment *seg, const char *name)
{
	struct mc_memory *mem = &seg->memory;
	bool behind;
	int err;

	if (mem->is_owner && seg->keep.kept) {
		/* The keeper commits a kept segment's pages, in its own cgroup after
		 * its own room check: there is nothing to charge here. */
		err = mc_keep_acquire(&seg->opt, name, seg->keep_fingerprint, seg->size, mem->page_size,
				      mem->alloc_size,
				      mc_control_size(seg->opt.world_size, seg->opt.slot_count), &seg->keep);
		if (err)
			return mc_error_name_rank(err, seg->opt.rank_id);
		mem->adopt_fd = seg->keep.fds[0];
	} else if (mem->is_owner && seg->backend->charges_memory_cgroup(&seg->opt)) {
		/* An oversized commit ends in the OOM killer: refuse it first, and
		 * hold the cgroup's commit lock until the pages are charged. */
		err = mc_check_memory_room(mem->label, mem->alloc_size, &mem->check_commit_room,
					   &seg->commit_lock);
		if (err)
			return err;
	}
	err = create_control(seg);
	if (!err)
		err = mem->is_owner ? seg->backend->create_owner(mem) : seg->backend->reserve(mem);
	err = mc_error_name_rank(err, seg->opt.rank_id);
	if (mem->adopt_fd >= 0) {
		/* The backend and the control map hold their own descriptors now. */
		mem->adopt_fd = -1;
		mc_keep_drop_fds(&seg->keep);
		snprintf(mem->commit.method, sizeof(mem->commit.method), "%s",
			 seg->keep.warm ? "none (kept, warm)" : "by the node keeper");
	}
	behind = !err && mem->is_owner && seg->control.area && mem->committed < mem->alloc_size;
	if (!err && mem->is_owner && seg->control.area && !behind)
		mc_control_committed(seg->control.area, mem->commit.ns);
	if (behind && !seg->backend->commit_rest)
		err = mc_error(EIO, "Shared segment backend %s left pages uncommitted", seg->backend->name);
	seg->create_info_flags = mem->info_flags;
	if (!err && behind)
		err = mc_background_commit_start(seg);
	if (!seg->committer_running)
		mc_commit_lock_release(&seg->commit_lock);
	if (!err && mem->is_owner && seg->opt.host_register)
		err = register_mapping(seg);
	if (!err && mem->is_owner)
		err = mc_slots_start(seg);
	return err;
}

MC_EXPORT int mooncake_segment_create(const char *name, uint64_t size,
				      const struct mooncake_segment_options *opt,
				      struct mooncake_segment **out, void *blob)
{
	struct mooncake_segment *seg;
	struct mc_blob b;
	int err;

	mc_clear_error();
	err = validate(name, size, opt, out, blob);
	if (err)
		return err;
	seg = new_segment(name, size, opt);
	if (!seg)
		return mc_segment_error(ENOMEM, "out of memory");
	err = plan_memory(seg);
	if (!err)
		err = allocate_memory(seg, name);
	/* The caller's keep strings are not ours past create: keep.h holds what lasts. */
	seg->opt.keep_name = NULL;
	seg->opt.keep_identity = NULL;
	if (!err) {
		fill_blob(seg, &b);
		err = mc_blob_encode(&b, blob);
	}
	if (err) {
		mc_slots_stop(seg);
		mc_background_stop(seg);
		unregister_mapping(seg);
		if (seg->backend)
			seg->backend->release(&seg->memory);
		mc_control_release(&seg->control);
		mc_commit_lock_release(&seg->commit_lock);
		free(seg);
		return err;
	}
	mc_log(MOONCAKE_SEGMENT_LOG_INFO,
	       "Shared segment %s create: rank %u of %u%s, base %p, %llu bytes (page %llu)", seg->label,
	       opt->rank_id, opt->world_size, seg->memory.is_owner ? " (owner)" : "", seg->memory.base,
	       (unsigned long long)seg->memory.alloc_size, (unsigned long long)seg->memory.page_size);
	*out = seg;
	return 0;
}

static bool boot_id_unknown(const uint8_t id[MC_BOOT_ID_SIZE])
{
	for (int i = 0; i < MC_BOOT_ID_SIZE; i++)
		if (id[i])
			return false;
	return true;
}

static const char *yes_no(uint32_t flags, uint32_t bit)
{
	return flags & bit ? "true" : "false";
}

/* Does rank @k's blob describe the same segment as ours?  -EINVAL/-EXDEV naming the difference. */
static int check_agreement(const struct mooncake_segment *seg, uint32_t k, const struct mc_blob *b,
			   const struct mc_blob *local)
{
	uint32_t theirs = b->flags & MC_BLOB_FLAGS_DECLARED, ours = local->flags & MC_BLOB_FLAGS_DECLARED;

	if (b->rank_id != k)
		return mc_error(EINVAL,
				"Shared segment blob of rank %u carries a different rank id (%u): blobs must "
				"be in rank order and rank_id must be each process's rank in the group",
				k, b->rank_id);
	/* An all-zero boot id means "unknown" (no /proc): only a known difference counts. */
	if (!boot_id_unknown(b->boot_id) && !boot_id_unknown(local->boot_id) &&
	    memcmp(b->boot_id, local->boot_id, MC_BOOT_ID_SIZE) != 0)
		return mc_error(EXDEV,
				"Shared segment rank %u runs on another host (another boot id): a shared "
				"segment spans the ranks of one host only; use a group of the local ranks",
				k);
	if (b->backend_id != local->backend_id)
		return mc_error(EINVAL, "Shared segment backend of rank %u differs (%u, this rank's %u)", k,
				b->backend_id, local->backend_id);
	if (b->world_size != local->world_size || b->owner_rank != local->owner_rank)
		return mc_error(EINVAL,
				"Shared segment rank %u declares world_size %u and owner %u, this rank %u "
				"declares %u and %u",
				k, b->world_size, b->owner_rank, seg->opt.rank_id, local->world_size,
				local->owner_rank);
	if (theirs != ours)
		return mc_error(EINVAL,
				"Shared segment rank %u declares mmap=%s host_register=%s hugetlb=%s, this "
				"rank %u mmap=%s host_register=%s hugetlb=%s",
				k, yes_no(theirs, MC_BLOB_FLAG_MMAP),
				yes_no(theirs, MC_BLOB_FLAG_HOST_REGISTER),
				yes_no(theirs, MC_BLOB_FLAG_HUGETLB), seg->opt.rank_id,
				yes_no(ours, MC_BLOB_FLAG_MMAP), yes_no(ours, MC_BLOB_FLAG_HOST_REGISTER),
				yes_no(ours, MC_BLOB_FLAG_HUGETLB));
	if (b->fingerprint != local->fingerprint)
		return mc_error(EINVAL,
				"Shared segment declaration of rank %u differs from the local one (name, "
				"size, block layout, alignment, slots or keep options)",
				k);
	if (b->page_size != local->page_size)
		return mc_error(EINVAL,
				"Shared segment page size of rank %u (%llu) differs from the local one "
				"(%llu)",
				k, (unsigned long long)b->page_size, (unsigned long long)local->page_size);
	if (b->alloc_size != local->alloc_size)
		return mc_error(EINVAL,
				"Shared segment allocation size of rank %u differs from the local one (%llu, "
				"local %llu)",
				k, (unsigned long long)b->alloc_size, (unsigned long long)local->alloc_size);
	return 0;
}

/* Peer: map the control area the owner passed with its pages, if any. */
static int attach_control(struct mooncake_segment *seg)
{
	struct mc_memory *mem = &seg->memory;
	int err;

	if (mem->companion_fd < 0)
		return 0;
	err = mc_control_attach(mem->companion_fd, seg->opt.world_size, seg->opt.slot_count, mem->alloc_size,
				&seg->control);
	mc_fd_close(&mem->companion_tracking);
	mem->companion_fd = -1;
	return err;
}

/* populate_on_import where there is a front: the page table entries of the
 * pages behind it, never past it (host-memfd.c). */
static int populate_behind_front(struct mooncake_segment *seg)
{
	const struct mc_control *c = seg->control.area;
	uint64_t ready;

	if (!c)
		return 0; /* the backend populated at import */
	ready = __atomic_load_n(&c->committed, __ATOMIC_ACQUIRE);
	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == MC_FRONT_COMMITTED ||
	    ready > seg->memory.alloc_size)
		ready = seg->memory.alloc_size;
	ready -= ready % seg->memory.page_size;
	return ready ? mc_populate_mapping(seg->memory.base, ready, seg->memory.page_size,
					   seg->opt.commit_threads)
		     : 0;
}

/* Peer: with background_commit, register behind the owner's front; without,
 * return as before only once every page is committed and registered, or
 * give up on an owner silent for the peer timeout, counted from
 * @silent_since_ms (what its socket left of the budget; 0: from now);
 * @owner_pid: the owner's pid where it is in this PID namespace, else 0,
 * guarantees.md: a stopped owner dies no death. */
static int follow_front(struct mooncake_segment *seg, pid_t owner_pid, int64_t silent_since_ms)
{
	char why[320], cgroup[1600];
	struct mc_follow follow = {
		.end = seg->memory.alloc_size,
		.waiting_for = "for its pages",
		.fix = "create with background_commit on every rank and wait_ready() with a timeout",
	};
	int err = 0, silence_ms;

	/* A background peer returns at once, unless its memory cgroup could not
	 * take the pages it may touch past the front (issue 37 item 3: the
	 * OOM killer): then it waits until they fit. */
	if (seg->opt.background_commit) {
		follow.end = mc_background_peer_front(seg, owner_pid, cgroup, sizeof(cgroup));
		follow.waiting_for = cgroup;
		follow.fix = "give this rank's memory cgroup more room";
	}
	if (follow.end) {
		silence_ms = mc_peer_timeout_ms(why, sizeof(why));
		err = silence_ms < 0 ? mc_error(EINVAL, "%s", why)
				     : mc_background_follow(seg, &follow, silent_since_ms, silence_ms);
	}
	if (!err && seg->opt.populate_on_import)
		err = populate_behind_front(seg);
	if (!err && seg->opt.host_register)
		err = register_mapping(seg);
	return err;
}

MC_EXPORT int mooncake_segment_complete(struct mooncake_segment *seg, const void *blobs, size_t blobs_len)
{
	const uint8_t *bytes = blobs;
	struct mc_blob local, b, owner = { 0 };
	size_t expected;
	int err;

	mc_clear_error();
	if (!seg || !blobs)
		return mc_error(EINVAL,
				"Shared segment complete needs a segment returned by create and the blobs");
	if (inherited(seg))
		return mc_error(
			EINVAL,
			"Shared segment complete: this segment was created by process %d, and this is "
			"a forked child of it; a child may use the mapping it inherited but cannot "
			"complete the parent's segment (create a segment in the child instead)",
			(int)seg->creator);
	if (seg->ready)
		return mc_error(EALREADY, "SharedSegment::Complete has already been called (complete() runs "
					  "once per segment)");
	expected = (size_t)seg->opt.world_size * MOONCAKE_SEGMENT_BLOB_SIZE;
	if (blobs_len != expected)
		return mc_error(EINVAL,
				"Shared segment expects one blob per rank, got %zu (%zu bytes; %u ranks need "
				"%u x %d = %zu bytes)",
				blobs_len / MOONCAKE_SEGMENT_BLOB_SIZE, blobs_len, seg->opt.world_size,
				seg->opt.world_size, MOONCAKE_SEGMENT_BLOB_SIZE, expected);

	fill_blob(seg, &local);
	for (uint32_t k = 0; k < seg->opt.world_size; k++) {
		err = mc_blob_decode(bytes + (size_t)k * MOONCAKE_SEGMENT_BLOB_SIZE, k, &b);
		if (!err)
			err = check_agreement(seg, k, &b, &local);
		if (err)
			return err;
		if (k == seg->opt.owner_rank)
			owner = b;
	}
	if (!(owner.flags & MC_BLOB_FLAG_HANDLE))
		return mc_error(EPROTO, "Shared segment owner rank did not export a handle (owner rank %u)",
				seg->opt.owner_rank);

	if (!seg->memory.is_owner) {
		int64_t silent_since_ms = 0; /* the owner's silence, one budget (route.h) */
		struct mc_owner_ref ref = {
			.pid = owner.pid,
			.uid = owner.uid,
			.pid_namespace = owner.pid_namespace,
			.net_namespace = owner.net_namespace,
			.handle = owner.handle,
			.handle_bytes = owner.handle_bytes,
			.silent_since_ms = &silent_since_ms,
		};

		seg->keep.warm = (owner.flags & MC_BLOB_FLAG_WARM) != 0;
		seg->keep.generation = owner.keep_generation;
		/* The keeper is the way to the pages when the owner cannot be reached. */
		seg->memory.keeper = (struct mc_keeper_ref){
			.name = seg->keep.kept ? seg->keep.name : NULL,
			.generation = owner.keep_generation,
		};
		err = seg->backend->import(&seg->memory, &ref);
		if (!err)
			err = attach_control(seg);
		if (!err)
			err = follow_front(seg,
					   owner.pid_namespace &&
							   owner.pid_namespace == mc_host_pid_namespace()
						   ? (pid_t)owner.pid
						   : 0,
					   silent_since_ms);
		if (!err)
			err = mc_slots_start(seg);
		if (err) {
			mc_slots_stop(seg);
			mc_background_stop(seg);
			unregister_mapping(seg);
			mc_control_release(&seg->control);
			seg->backend->unimport(&seg->memory); /* a failed complete leaves nothing mapped */
			seg->keep.warm = false;
			seg->keep.generation = 0;
			return mc_error_name_rank(err, seg->opt.rank_id);
		}
	}
	seg->ready = true;
	return 0;
}

MC_EXPORT int mooncake_segment_finish(struct mooncake_segment *seg)
{
	mc_clear_error();
	if (!seg || !seg->ready)
		return mc_error(EINVAL, "Shared segment finish needs a segment on which complete succeeded");
	/* A forked child holds no descriptor (fork.c): nothing of the parent's to drop. */
	if (seg->memory.is_owner && !seg->finished && !inherited(seg)) {
		seg->backend->finish(&seg->memory);
		mc_control_drop_fd(&seg->control);
	}
	seg->finished = true;
	return 0;
}

MC_EXPORT void mooncake_segment_destroy(struct mooncake_segment *seg)
{
	int saved_errno = errno;

	if (!seg)
		return;
	/* A forked child's copy: the mapping, registration and runtime handles are
	 * the parent's, and the range may by now hold the child's own memory. */
	if (!inherited(seg)) {
		mc_slots_stop(seg);
		mc_background_stop(seg);
		unregister_mapping(seg);
		seg->backend->release(&seg->memory);
		mc_control_release(&seg->control);
		mc_commit_lock_release(&seg->commit_lock);
	} else {
		free(seg->memory.state); /* its memory only: what it names is the parent's */
	}
	free(seg);
	errno = saved_errno;
}

MC_EXPORT bool mooncake_segment_warm(const struct mooncake_segment *seg)
{
	return seg && seg->keep.warm && (seg->memory.is_owner || seg->ready);
}

MC_EXPORT bool mooncake_segment_ready(const struct mooncake_segment *seg)
{
	return seg && seg->ready;
}

MC_EXPORT void *mooncake_segment_base(const struct mooncake_segment *seg)
{
	return seg ? seg->memory.base : NULL;
}

MC_EXPORT uint64_t mooncake_segment_size(const struct mooncake_segment *seg)
{
	return seg ? seg->size : 0;
}

MC_EXPORT uint64_t mooncake_segment_alloc_size(const struct mooncake_segment *seg)
{
	return seg ? seg->memory.alloc_size : 0;
}

MC_EXPORT uint64_t mooncake_segment_device_addr(const struct mooncake_segment *seg)
{
	if (!seg)
		return 0;
	if (seg->opt.host_register)
		return __atomic_load_n(&seg->published_device_addr, __ATOMIC_ACQUIRE);
	/* A VMM mapping is the device's address too, once mapped (and granted). */
	return seg->backend->device_addressable && seg->memory.mapped ? (uint64_t)(uintptr_t)seg->memory.base
								      : 0;
}

MC_EXPORT int mooncake_segment_wait_ready(struct mooncake_segment *seg, uint64_t offset, uint64_t length,
					  int timeout_ms)
{
	uint64_t end;

	mc_clear_error();
	if (!seg)
		return mc_error(EINVAL, "Shared segment wait_ready needs a segment");
	if (!seg->memory.is_owner && !seg->ready)
		return mc_error(
			EINVAL,
			"Shared segment wait_ready on rank %u: complete() first (a peer maps the pages "
			"there)",
			seg->opt.rank_id);
	if (offset > seg->size || length > seg->size - offset)
		return mc_error(
			EINVAL,
			"Shared segment wait_ready range [%llu, +%llu) lies outside the %llu bytes of the "
			"segment",
			(unsigned long long)offset, (unsigned long long)length,
			(unsigned long long)seg->size);
	end = length ? offset + length : seg->size;
	if (end <= offset)
		return 0; /* [size, size): an empty range is ready, as in Python */
	return mc_background_wait(seg, offset, end, timeout_ms < 0 ? -1 : timeout_ms);
}

MC_EXPORT uint64_t mooncake_segment_ready_bytes(const struct mooncake_segment *seg)
{
	uint64_t ready;

	if (!seg || (!seg->memory.is_owner && !seg->ready))
		return 0;
	ready = mc_background_ready_bytes(seg);
	return ready < seg->size ? ready : seg->size;
}
