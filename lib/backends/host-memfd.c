/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host-memory backend: an unnamed memfd, never a file in /dev/shm, so
 * nothing can leak after a SIGKILL and the size of /dev/shm does not matter.
 *
 * The owner creates, sizes and seals the memfd (no rank can shrink it and
 * make the others SIGBUS), maps it into an aligned window, advises THP before
 * the first touch, commits every page and keeps the descriptor open until
 * finish() (tracked by fork.c, so that no forked child keeps it); the size
 * is checked against RLIMIT_FSIZE first, past which the kernel would answer
 * with SIGXFSZ.  A peer reaches the owner's descriptor through peer-fd.c,
 * checks that the file is the sealed memfd of the right size, and maps it
 * over its reservation.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/error.h"
#include "base/linux-compat.h"
#include "base/tracked-fd.h"
#include "host/host.h"
#include "host/limits.h"
#include "host/placement.h"
#include "host/populate.h"
#include "host/window.h"
#include "mooncake/segment.h"
#include "route/keeper-join.h"
#include "route/route.h"
#include "backend.h"
#include "private.h"

/* The owner's own: the memfd it keeps for importers until finish(), and
 * the offer that serves it to them (peer-fd.c); a background commit's own
 * descriptor of the same file, which finish() leaves alone. */
struct memfd_state {
	int fd;
	struct mc_tracked_fd tracking; /* closes fd in a forked child */
	int commit_fd;		       /* the committer's, until the commit ends; else -1 */
	struct mc_tracked_fd commit_tracking;
	struct mc_fd_offer *offer;
	struct mc_room_need need; /* what the commit's room checks ask for */
};

/* A background commit commits this much before create() returns (at least a page). */
#define FIRST_CHUNK (UINT64_C(2) << 20)

static struct memfd_state *state_of(const struct mc_memory *mem)
{
	return mem->state;
}

int mc_memfd_descriptor(const struct mc_memory *mem)
{
	return state_of(mem) ? state_of(mem)->fd : -1;
}

static int memfd_granularity(const struct mooncake_segment_options *opt, uint64_t *page_size)
{
	uint64_t huge;

	if (!opt->hugetlb) {
		/* Round to the PMD size only where THP can actually back shmem. */
		*page_size = mc_host_shmem_thp_allowed() ? mc_host_thp_pmd_size() : mc_host_base_page_size();
		return 0;
	}
	huge = opt->hugetlb_page_size ? opt->hugetlb_page_size : mc_hugetlb_default_size();
	if (!huge)
		return mc_error(ENOTSUP, "Shared segment hugetlb=true: this kernel has no HugeTLB support "
					 "(no Hugepagesize in /proc/meminfo); use hugetlb=false");
	if (!mc_is_power_of_two(huge) || !mc_hugetlb_size_configured(huge))
		return mc_error(
			EINVAL,
			"Shared segment hugetlb page size %llu is not configured on this host "
			"(no /sys/kernel/mm/hugepages/hugepages-%llukB); use 0 for the default (%llu kB)",
			(unsigned long long)huge, (unsigned long long)(huge >> 10),
			(unsigned long long)(mc_hugetlb_default_size() >> 10));
	*page_size = huge;
	return 0;
}

static unsigned int hugetlb_size_flag(uint64_t page_size)
{
	unsigned int log2 = 0;

	while ((UINT64_C(1) << log2) < page_size)
		log2++;
	return log2 << MFD_HUGE_SHIFT;
}

/* The error for a HugeTLB pool that cannot back the segment, with the numbers and the fix. */
static int hugetlb_pool_error(const struct mc_memory *mem, int sys_errno)
{
	uint64_t needed = mem->alloc_size / mem->page_size, total = 0, available = 0;
	unsigned long long kb = (unsigned long long)(mem->page_size >> 10);
	bool known = mc_hugetlb_pool(mem->page_size, &total, &available);
	bool is_default = mem->page_size == mc_hugetlb_default_size();
	char fix[192];

	if (is_default)
		snprintf(fix, sizeof(fix), "sysctl -w vm.nr_hugepages=%llu",
			 (unsigned long long)(total + needed - (available < needed ? available : needed)));
	else
		snprintf(fix, sizeof(fix),
			 "echo %llu > /sys/kernel/mm/hugepages/hugepages-%llukB/nr_hugepages",
			 (unsigned long long)(total + needed - (available < needed ? available : needed)),
			 kb);
	if (!known)
		return mc_error_sys(
			ENOMEM, sys_errno,
			"Shared segment '%s' needs %llu HugeTLB pages of %llu kB and the pool cannot "
			"back them; raise it (%s)",
			mem->label, (unsigned long long)needed, kb, fix);
	return mc_error(ENOMEM,
			"Shared segment '%s' needs %llu HugeTLB pages of %llu kB but only %llu of the pool's "
			"%llu are free; raise the pool (%s) or use hugetlb=false",
			mem->label, (unsigned long long)needed, kb, (unsigned long long)available,
			(unsigned long long)total, fix);
}

static uint64_t window_alignment(const struct mc_memory *mem)
{
	/* Align for huge pages even where THP is off today: address space is free. */
	uint64_t huge = mem->opt->hugetlb ? mem->page_size : mc_host_thp_pmd_size();

	return mem->opt->alignment > huge ? mem->opt->alignment : huge;
}

/* This rank's window, aligned as asked (an explicit alignment is a must). */
static int reserve_window(struct mc_memory *mem)
{
	mem->alignment = window_alignment(mem);
	mem->base = mc_window_reserve(mem->alloc_size, mem->alignment, mem->opt->alignment);
	if (!mem->base)
		return mc_address_space_error(mem->label, mem->alloc_size, errno);
	/* Without room for the huge-page slack it is only as aligned as required. */
	if ((uintptr_t)mem->base % mem->alignment) {
		uint64_t least = mem->opt->hugetlb ? mem->page_size : mc_host_base_page_size();

		mem->alignment = mem->opt->alignment > least ? mem->opt->alignment : least;
	}
	return 0;
}

static void advise_after_map(struct mc_memory *mem)
{
	if (!mem->opt->hugetlb && mc_host_shmem_thp_allowed()) {
		if (madvise(mem->base, mem->alloc_size, MADV_HUGEPAGE) == 0)
			mem->info_flags |= MOONCAKE_SEGMENT_INFO_THP_ADVISED;
		else
			mc_log(MOONCAKE_SEGMENT_LOG_INFO,
			       "Shared segment '%s': MADV_HUGEPAGE refused (%s); "
			       "4 KiB pages",
			       mem->label, strerror(errno));
	}
	/* No MADV_DONTFORK: a MAP_SHARED mapping has no copy-on-write, so a forked
	 * child shares the very pages (registered or pinned ones too) and may read
	 * them; hiding them would turn that read into SIGSEGV and let the child's
	 * own allocations land in the range (fork.c keeps the descriptors out). */
}

static int map_over_window(struct mc_memory *mem, int fd)
{
	void *p = mmap(mem->base, mem->alloc_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	mem->mapped = true;
	return 0;
}

/* The request that commits the owner's pages [from, alloc_size). */
static struct mc_commit_request commit_request(struct mc_memory *mem, uint64_t from)
{
	struct memfd_state *state = state_of(mem);

	return (struct mc_commit_request){
		.fd = state->commit_fd >= 0 ? state->commit_fd : state->fd,
		.addr = (uint8_t *)mem->base + from,
		.file_offset = from,
		.len = mem->alloc_size - from,
		.charged_before = from,
		.page_size = mem->page_size,
		.threads = mem->opt->commit_threads,
		.cpu_node = mem->placement.node >= 0 && !mem->placement.degraded ? mem->placement.node : -1,
		.thp = (mem->info_flags & MOONCAKE_SEGMENT_INFO_THP_ADVISED) != 0,
		.hugetlb = mem->opt->hugetlb,
		.placement = &mem->placement,
		/* Only under a memory cgroup limit; HugeTLB is not charged to it. */
		.check_room = mem->check_commit_room && !mem->opt->hugetlb ? mc_check_commit_room : NULL,
		.room_need = &state->need,
		.progress = mem->progress,
	};
}

/* What a commit's end tells: the flags it learnt, or its error in this backend's words. */
static int commit_ended(struct mc_memory *mem, int err)
{
	if (mem->placement.degraded)
		mem->info_flags |= MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED;
	if (err) {
		if (mem->opt->hugetlb && err == -ENOSPC)
			return hugetlb_pool_error(mem, ENOSPC);
		return err;
	}
	if (mem->commit.thp_fallback) {
		mem->info_flags |= MOONCAKE_SEGMENT_INFO_THP_FALLBACK;
		mc_log(MOONCAKE_SEGMENT_LOG_INFO,
		       "Shared segment '%s': THP committed slower than base pages; the "
		       "rest uses base pages",
		       mem->label);
	}
	return 0;
}

/* create(): every page, or with a background commit the first chunk. */
static int commit_first(struct mc_memory *mem)
{
	struct mc_commit_request req = commit_request(mem, 0);
	uint64_t first = mc_align_up(FIRST_CHUNK, mem->page_size);
	int err;

	if (mem->background && first < req.len)
		req.len = first;
	err = commit_ended(mem, mc_commit_pages(&req, &mem->commit));
	if (!err)
		mem->committed = req.len;
	return err;
}

/* The background commit: [committed, alloc_size), on the state machine's thread. */
static int memfd_commit_rest(struct mc_memory *mem)
{
	struct mc_commit_request req = commit_request(mem, mem->committed);
	struct mc_commit_result first = mem->commit, rest;
	int err = mc_commit_pages(&req, &rest);

	mc_fd_close(&state_of(mem)->commit_tracking);

	if (!err) {
		rest.ns += first.ns;
		rest.thp_fallback |= first.thp_fallback;
		mem->commit = rest;
		mem->committed = mem->alloc_size;
	}
	return commit_ended(mem, err);
}

/* A kept segment's pages (mem->adopt_fd): a descriptor of our own, and
 * nothing to commit; the caller checked its size and seals. */
static int adopt_pages(struct mc_memory *mem, struct memfd_state *state)
{
	mc_fd_track_begin();
	state->fd = fcntl(mem->adopt_fd, F_DUPFD_CLOEXEC, 0);
	mc_fd_track_end(&state->tracking, &state->fd);
	if (state->fd < 0)
		return mc_error_sys(mc_fold_errno(errno), errno,
				    "Shared segment cannot duplicate the kept segment's memfd");
	return 0;
}

/* A new memfd of alloc_size bytes, sealed against shrinking and growing. */
static int make_pages(struct mc_memory *mem, struct memfd_state *state)
{
	char name[96];
	unsigned int flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
	int err;

	if (mem->opt->hugetlb)
		flags |= MFD_HUGETLB | hugetlb_size_flag(mem->page_size);
	snprintf(name, sizeof(name), "mooncake-segment:%s|owner=%d", mem->label, (int)getpid());
	mc_fd_track_begin();
	state->fd = memfd_create(name, flags);
	mc_fd_track_end(&state->tracking, &state->fd);
	if (state->fd < 0) {
		err = errno;
		if (mem->opt->hugetlb && err == EINVAL)
			return mc_error_sys(ENOTSUP, err,
					    "Shared segment hugetlb=true: memfd_create(MFD_HUGETLB) refused");
		return mc_error_sys(mc_fold_errno(err), err, "Shared segment memfd_create failed%s",
				    err == EPERM ? " (a seccomp filter may block memfd_create)" : "");
	}
	/* Above RLIMIT_FSIZE, ftruncate (and fallocate) would raise SIGXFSZ and kill us. */
	err = mc_check_file_size_limit(mem->label, mem->alloc_size);
	if (err)
		return err;
	if (ftruncate(state->fd, (off_t)mem->alloc_size) != 0)
		return mc_error_sys(mc_fold_errno(errno), errno,
				    "Shared segment ftruncate to %llu bytes failed",
				    (unsigned long long)mem->alloc_size);
	/* Nobody may shrink or grow the file under the others' mappings. */
	if (fcntl(state->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return mc_error_sys(mc_fold_errno(errno), errno, "Shared segment cannot seal its memfd");
	return 0;
}

static int memfd_create_owner(struct mc_memory *mem)
{
	struct mc_peer_fd handle, companion;
	struct memfd_state *state = calloc(1, sizeof(*state));
	bool adopted = mem->adopt_fd >= 0;
	int err;

	if (!state)
		return mc_segment_error(ENOMEM, "out of memory");
	state->fd = -1;
	state->commit_fd = -1;
	state->need = (struct mc_room_need){ .label = mem->label, .bytes = mem->alloc_size };
	mem->state = state;
	err = adopted ? adopt_pages(mem, state) : make_pages(mem, state);
	if (err)
		return err;

	err = reserve_window(mem);
	if (err)
		return err;
	err = map_over_window(mem, state->fd);
	if (err) {
		/* HugeTLB reserves the pool at mmap: ENOMEM means the pool is short. */
		if (mem->opt->hugetlb && err == -ENOMEM)
			return hugetlb_pool_error(mem, ENOMEM);
		return mc_error_sys(mc_fold_errno(-err), -err, "Shared segment mmap of %llu bytes failed",
				    (unsigned long long)mem->alloc_size);
	}
	if (mem->opt->hugetlb)
		mem->info_flags |= MOONCAKE_SEGMENT_INFO_HUGETLB;
	advise_after_map(mem);
	if (adopted) {
		mem->committed = mem->alloc_size; /* the keeper committed them */
	} else {
		/* The policy is in place before the first page exists. */
		mc_placement_apply(&mem->placement, mem->base, mem->alloc_size);
		err = commit_first(mem);
		if (err)
			return err;
	}
	if (mem->committed < mem->alloc_size) {
		/* finish() may close fd while the committer still fallocates: it
		 * gets a descriptor of its own (a closed number could be reused by
		 * any file the process opens next). */
		mc_fd_track_begin();
		state->commit_fd = fcntl(state->fd, F_DUPFD_CLOEXEC, 0);
		mc_fd_track_end(&state->commit_tracking, &state->commit_fd);
		if (state->commit_fd < 0)
			return mc_error_sys(
				mc_fold_errno(errno), errno,
				"Shared segment cannot duplicate its memfd for the background commit");
	}
	/* A group of one has no peer to serve: no thread, no socket. */
	err = mem->opt->world_size > 1
		      ? mc_peer_fd_offer(state->fd, mem->companion_fd, &handle, &companion, &state->offer)
		      : mc_peer_fd_describe(state->fd, &handle);
	if (err)
		return err;
	mem->handle_bytes = mc_peer_fd_encode(&handle, mem->handle, sizeof(mem->handle));
	if (mem->opt->world_size > 1 && mem->companion_fd >= 0) {
		mem->handle_bytes += mc_peer_fd_encode_companion(&companion, mem->handle + mem->handle_bytes,
								 sizeof(mem->handle) - mem->handle_bytes);
		/* A kept segment: a rank that cannot reach us asks the keeper (JOIN). */
		if (mem->keeper.token)
			mem->handle_bytes +=
				mc_keeper_ref_encode(&mem->keeper, mem->handle + mem->handle_bytes,
						     sizeof(mem->handle) - mem->handle_bytes);
	}
	return 0;
}

static int memfd_reserve(struct mc_memory *mem)
{
	return reserve_window(mem);
}

/* The file we opened must be the sealed memfd the owner published. */
static int check_owner_file(const struct mc_memory *mem, int fd, const struct mc_peer_fd *h)
{
	struct stat st;
	int seals;

	if (fstat(fd, &st) != 0)
		return mc_error_sys(EIO, errno, "Shared segment fstat of the owner's memfd failed");
	if ((uint64_t)st.st_dev != h->dev || (uint64_t)st.st_ino != h->ino) {
		errno = 0;
		return mc_peer_fd_gone(h);
	}
	if ((uint64_t)st.st_size != mem->alloc_size)
		return mc_error(EPROTO, "Shared segment owner's memfd holds %llu bytes, the blobs say %llu",
				(unsigned long long)st.st_size, (unsigned long long)mem->alloc_size);
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return mc_error(EPROTO, "Shared segment owner's memfd is not sealed against shrinking");
	return 0;
}

static void memfd_unimport(struct mc_memory *mem)
{
	if (mem->companion_fd >= 0)
		mc_fd_close(&mem->companion_tracking);
	mem->companion_fd = -1;
	if (mem->mapped && mc_window_reset(mem->base, mem->alloc_size) == 0)
		mem->mapped = false;
}

/* What the owner's handle names besides its pages: its control area (a
 * companion) and, for a kept segment, the keeper's JOIN (a trailer). */
struct owner_handle {
	struct mc_peer_fd pages;
	struct mc_peer_fd control;
	bool has_control;
	struct mc_keeper_ref keeper; /* token 0: no JOIN offered */
};

static int decode_handle(const struct mc_owner_ref *owner, const struct mc_keeper_ref *keeper,
			 struct owner_handle *oh)
{
	size_t used = 0, rest;

	*oh = (struct owner_handle){ .keeper = *keeper };
	oh->keeper.token = 0;
	if (!mc_peer_fd_decode(owner->handle, owner->handle_bytes, &oh->pages, &used))
		return mc_segment_error(EPROTO, "the owner exported a handle that is not a memfd handle");
	rest = owner->handle_bytes - used;
	if (rest == 0)
		return 0;
	if (rest != MC_PEER_FD_COMPANION_BYTES && rest != MC_PEER_FD_COMPANION_BYTES + MC_KEEPER_REF_BYTES)
		return mc_segment_error(EPROTO, "the owner exported a handle that is not a memfd handle");
	if (!mc_peer_fd_decode_companion(owner->handle + used, MC_PEER_FD_COMPANION_BYTES, &oh->pages,
					 &oh->control))
		return mc_segment_error(EPROTO, "the owner's handle names a malformed control area");
	oh->has_control = true;
	used += MC_PEER_FD_COMPANION_BYTES;
	if (rest > MC_PEER_FD_COMPANION_BYTES &&
	    !mc_keeper_ref_decode(owner->handle + used, MC_KEEPER_REF_BYTES, &oh->keeper))
		return mc_segment_error(EPROTO, "the owner's handle names a malformed node keeper offer");
	return 0;
}

/* The owner's companion descriptor (its control area), when its handle names one. */
static int open_companion(struct mc_memory *mem, const struct mc_owner_ref *owner,
			  const struct owner_handle *oh)
{
	if (!oh->has_control)
		return 0;
	/* Closed by the state machine once mapped; a child forked meanwhile never holds it. */
	mc_fd_track_begin();
	mem->companion_fd = mc_peer_fd_open(owner, &oh->control);
	mc_fd_track_end(&mem->companion_tracking, &mem->companion_fd);
	return mem->companion_fd < 0 ? mem->companion_fd : 0;
}

/* The keeper handed the very files the owner's handle names. */
static int check_joined(const struct mc_memory *mem, const struct owner_handle *oh, const int fds[2])
{
	const struct mc_peer_fd *want[2] = { &oh->pages, &oh->control };
	struct stat st;

	for (int i = 0; i < 2; i++)
		if (fstat(fds[i], &st) != 0 || (uint64_t)st.st_dev != want[i]->dev ||
		    (uint64_t)st.st_ino != want[i]->ino)
			return mc_segment_error(
				EPROTO,
				"the node keeper handed kept segment '%s' %s that is not the owner's (inode "
				"%llu, the owner's %llu)",
				oh->keeper.name, i ? "a control area" : "pages",
				(unsigned long long)st.st_ino, (unsigned long long)want[i]->ino);
	return check_owner_file(mem, fds[0], &oh->pages);
}

/* Every route to the owner failed (recorded): a kept segment's pages and
 * control area from the node keeper, when the owner offers a JOIN.  On
 * success *@fd holds the pages (tracked by @tracking) and companion_fd the
 * area; on failure the error names both causes. */
static int join_keeper(struct mc_memory *mem, const struct owner_handle *oh, int route_err, int *fd,
		       struct mc_tracked_fd *tracking)
{
	struct mc_cause route = *mc_last_cause();
	struct mc_tracked_fd joined_tracking[2];
	int joined[2], err;

	if (!oh->keeper.name || !oh->keeper.token || !oh->has_control)
		return route_err;
	err = mc_keeper_join(&oh->keeper, joined, joined_tracking);
	if (!err)
		err = check_joined(mem, oh, joined);
	if (err) {
		char keeper_reason[sizeof(route.reason)];

		snprintf(keeper_reason, sizeof(keeper_reason), "%s", mc_last_cause()->reason);
		mc_fd_close(&joined_tracking[0]);
		mc_fd_close(&joined_tracking[1]);
		route.reason[sizeof(route.reason) - 1] = '\0';
		return mc_error_record(&route, "; and the node keeper could not hand them either: %s",
				       keeper_reason);
	}
	mc_log(MOONCAKE_SEGMENT_LOG_INFO,
	       "Shared segment %s: the owner cannot be reached (%s); kept segment '%s' joined through the "
	       "node keeper",
	       mem->label, route.reason, oh->keeper.name);
	mc_clear_error();
	/* Our own descriptors, where the caller tracks them. */
	mc_fd_track_begin();
	*fd = fcntl(joined[0], F_DUPFD_CLOEXEC, 0);
	mem->companion_fd = *fd < 0 ? -1 : fcntl(joined[1], F_DUPFD_CLOEXEC, 0);
	err = mem->companion_fd < 0 ? errno : 0;
	if (mem->companion_fd >= 0)
		mc_fd_track_held(&mem->companion_tracking, &mem->companion_fd);
	mc_fd_track_end(tracking, fd);
	mc_fd_close(&joined_tracking[0]);
	mc_fd_close(&joined_tracking[1]);
	if (err) {
		mc_fd_close(tracking);
		return mc_segment_error_sys(mc_fold_errno(err), err,
					    "cannot duplicate the node keeper's descriptors");
	}
	return 0;
}

static int memfd_import(struct mc_memory *mem, const struct mc_owner_ref *owner)
{
	struct owner_handle oh;
	struct mc_tracked_fd tracking;
	bool joined = false;
	int fd, err;

	err = decode_handle(owner, &mem->keeper, &oh);
	if (err)
		return err;
	/* Opened under the fork registry: a child forked meanwhile never holds it. */
	mc_fd_track_begin();
	fd = mc_peer_fd_open(owner, &oh.pages);
	mc_fd_track_end(&tracking, &fd);
	if (fd < 0) {
		err = join_keeper(mem, &oh, fd, &fd, &tracking);
		if (err)
			return err;
		joined = true;
	}
	err = joined ? 0 : check_owner_file(mem, fd, &oh.pages);
	if (!err) {
		err = map_over_window(mem, fd);
		if (err)
			err = mc_segment_error_sys(mc_fold_errno(-err), -err,
						   "cannot map the owner's %llu bytes",
						   (unsigned long long)mem->alloc_size);
	}
	mc_fd_close(&tracking);
	if (!err && !joined)
		err = open_companion(mem, owner, &oh);
	if (err) {
		memfd_unimport(mem);
		return err;
	}

	advise_after_map(mem);
	/* With a control area the pages may still be committing: complete()
	 * populates what the front has passed once it followed it (a read
	 * fault past the front would allocate the page, charged to this rank). */
	if (mem->opt->populate_on_import && mem->companion_fd < 0) {
		err = mc_populate_mapping(mem->base, mem->alloc_size, mem->page_size,
					  mem->opt->commit_threads);
		if (err) {
			memfd_unimport(mem); /* a failed complete leaves nothing mapped */
			return err;
		}
	}
	return 0;
}

static void memfd_finish(struct mc_memory *mem)
{
	if (!state_of(mem))
		return;
	/* Stop serving before the descriptor it serves is closed. */
	mc_peer_fd_withdraw(&state_of(mem)->offer);
	mc_fd_close(&state_of(mem)->tracking);
}

static void memfd_release(struct mc_memory *mem)
{
	mc_window_release(mem->base, mem->alloc_size);
	mem->base = NULL;
	mem->mapped = false;
	memfd_finish(mem);
	if (state_of(mem))
		mc_fd_close(&state_of(mem)->commit_tracking); /* a commit that never started */
	free(mem->state);
	mem->state = NULL;
}

static bool kernel_has_hugetlb_memfd(void)
{
	int saved_errno = errno;
	int fd;

	if (!mc_hugetlb_default_size())
		return false;
	fd = memfd_create("mooncake-segment-probe", MFD_CLOEXEC | MFD_HUGETLB);
	if (fd >= 0)
		close(fd);
	errno = saved_errno;
	return fd >= 0;
}

static bool memfd_supported(bool host_register, bool hugetlb)
{
	/* host_register is the runtimes' answer (probe.c); HugeTLB is this kernel's. */
	(void)host_register;
	return !hugetlb || kernel_has_hugetlb_memfd();
}

static bool memfd_charges_memory_cgroup(const struct mooncake_segment_options *opt)
{
	return !opt->hugetlb; /* HugeTLB pages come from their own pool */
}

static void memfd_describe(const struct mc_memory *mem, struct mooncake_segment_info *info)
{
	snprintf(info->backend, sizeof(info->backend), "memfd%s", mem->opt->hugetlb ? "-hugetlb" : "");
	/* HugeTLB pages are counted by the *_Hugetlb fields, not in Rss. */
	if (mem->opt->hugetlb)
		info->resident_bytes = info->huge_bytes;
}

const struct mc_backend_ops mc_backend_memfd = {
	.name = "memfd",
	.id = MC_BACKEND_MEMFD,
	.mmap = true,
	.passes_companion = true,
	.supported = memfd_supported,
	.granularity = memfd_granularity,
	.charges_memory_cgroup = memfd_charges_memory_cgroup,
	.create_owner = memfd_create_owner,
	.commit_rest = memfd_commit_rest,
	.reserve = memfd_reserve,
	.import = memfd_import,
	.unimport = memfd_unimport,
	.finish = memfd_finish,
	.release = memfd_release,
	.describe = memfd_describe,
};
