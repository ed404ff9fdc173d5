/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control area (control.h): a one-page-or-so sealed memfd shared by the
 * group, written with atomics, waited on with a futex.
 *
 * Why a memfd of its own and not bytes after the caller's pages: a HugeTLB
 * segment would spend a whole huge page (up to 1 GiB) on a few words, and the
 * caller's file would no longer be exactly the declared size.  Why a robust
 * mutex: the death of a process changes no word that a waiter sleeps on,
 * but the kernel marks a robust mutex whose holder died, in any PID
 * namespace, and a waiter that checks it every MC_CONTROL_OWNER_CHECK_MS
 * learns of the death within that time.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/error.h"
#include "base/linux-compat.h"
#include "base/tracked-fd.h"
#include "host/limits.h"
#include "mooncake/segment.h"
#include "control.h"
#include "private.h"

/* The layout doc/wire-format.md gives (x86-64 and aarch64 glibc: a 40- or 48-byte mutex). */
_Static_assert(offsetof(struct mc_control, seq) == 8, "control area moved");
_Static_assert(offsetof(struct mc_control, committed) == 24, "control area moved");
_Static_assert(offsetof(struct mc_control, slot_count) == 64, "control area moved");
_Static_assert(offsetof(struct mc_control, message) == 72, "control area moved");
_Static_assert(offsetof(struct mc_control, owner_alive) == 1096, "control area moved");
_Static_assert(sizeof(struct mc_control) == 1136, "control area moved");
_Static_assert(sizeof(struct mc_control_rank) == 72, "control area moved");
_Static_assert(sizeof(struct mc_control_slot) == 64, "control area moved");
_Static_assert(sizeof(((struct mc_front_view *)0)->message) == MC_CONTROL_MESSAGE_BYTES,
	       "a reading holds the whole sentence");
/* A futex is 32 bits: a slot's sleepers wait on the low half of its sequence. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the futex is the low half of a 64-bit word");

static size_t slots_offset(uint32_t world_size)
{
	size_t bytes = sizeof(struct mc_control) + (size_t)world_size * sizeof(struct mc_control_rank);

	return (bytes + 63) / 64 * 64;
}

static size_t area_size(uint32_t world_size, uint32_t slot_count)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t bytes = slots_offset(world_size) + (size_t)slot_count * sizeof(struct mc_control_slot);

	return (bytes + page - 1) / page * page;
}

struct mc_control_slot *mc_control_slot(struct mc_control *c, uint32_t i)
{
	/* The slots start at a multiple of 64 bytes of the (page-aligned) area. */
	return (struct mc_control_slot *)(void *)((char *)c + slots_offset(c->world_size)) + i;
}

void mc_control_sleep_on(uint64_t *word, uint64_t seen, int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, (uint32_t)seen, &ts, NULL, 0);
}

void mc_control_wake_on(uint64_t *word)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void bump(struct mc_control *c)
{
	__atomic_add_fetch(&c->seq, 1, __ATOMIC_RELEASE);
	mc_control_wake(c);
}

void mc_control_wake(struct mc_control *c)
{
	/* A shared futex (no FUTEX_PRIVATE_FLAG): the sleepers are other processes. */
	syscall(SYS_futex, &c->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

uint32_t mc_control_seq(const struct mc_control *c)
{
	return __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
}

void mc_control_sleep(struct mc_control *c, uint32_t seq, int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	/* EAGAIN (the word moved already), EINTR and ETIMEDOUT all mean: look again. */
	syscall(SYS_futex, &c->seq, FUTEX_WAIT, seq, &ts, NULL, 0);
}

static void init_robust_mutex(pthread_mutex_t *m)
{
	pthread_mutexattr_t attr;

	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(m, &attr);
	pthread_mutexattr_destroy(&attr);
}

size_t mc_control_size(uint32_t world_size, uint32_t slot_count)
{
	return area_size(world_size, slot_count);
}

/* Map the sized and sealed m->fd and write the words a fresh area starts with. */
static int init_area(const char *what, uint32_t world_size, uint32_t slot_count, uint64_t alloc_size,
		     struct mc_control_map *m)
{
	size_t size = area_size(world_size, slot_count);
	struct mc_control *c;
	void *p;

	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
	if (p == MAP_FAILED)
		return mc_error_sys(mc_fold_errno(errno), errno, "Shared segment cannot map %s", what);
	/* Its page exists from now on: writing the words below commits it. */
	c = p;
	m->area = c;
	m->size = size;
	c->magic = MC_CONTROL_MAGIC;
	c->version = MC_CONTROL_VERSION;
	c->alloc_size = alloc_size;
	c->world_size = world_size;
	c->slot_count = slot_count;
	c->owner_pid = (uint32_t)getpid();
	c->commit_started_ns = mc_now_ns();
	init_robust_mutex(&c->owner_alive);
	for (uint32_t r = 0; r < world_size; r++)
		init_robust_mutex(&c->ranks[r].alive);
	return 0;
}

int mc_control_create(const char *label, uint32_t world_size, uint32_t slot_count, uint64_t alloc_size,
		      struct mc_control_map *m)
{
	char name[128]; /* the prefix, a 63-byte label and "|owner=" with a pid fit */
	size_t size = area_size(world_size, slot_count);
	int err;

	snprintf(name, sizeof(name), "mooncake-segment-control:%s|owner=%d", label, (int)getpid());
	mc_fd_track_begin();
	m->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	mc_fd_track_end(&m->tracking, &m->fd);
	if (m->fd < 0)
		return mc_error_sys(mc_fold_errno(errno), errno,
				    "Shared segment memfd_create for its control area failed%s",
				    errno == EPERM ? " (a seccomp filter may block memfd_create)" : "");
	/* A page, and 64 bytes a slot: past RLIMIT_FSIZE ftruncate would raise SIGXFSZ. */
	err = mc_check_file_size_limit(label, size);
	if (err)
		return err;
	if (ftruncate(m->fd, (off_t)size) != 0 ||
	    fcntl(m->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return mc_error_sys(mc_fold_errno(errno), errno,
				    "Shared segment cannot size and seal its control area");
	return init_area("its control area", world_size, slot_count, alloc_size, m);
}

/* Whether the @size bytes of @fd are all zero (a fresh area), read, not mapped. */
static bool all_zero(int fd, size_t size)
{
	char buf[4096];

	for (size_t at = 0; at < size;) {
		ssize_t got = pread(fd, buf, sizeof(buf), (off_t)at);

		if (got <= 0)
			return false;
		for (ssize_t i = 0; i < got; i++)
			if (buf[i])
				return false;
		at += (size_t)got;
	}
	return true;
}

int mc_control_create_in(int fd, uint32_t world_size, uint32_t slot_count, uint64_t alloc_size,
			 struct mc_control_map *m)
{
	const int needed = F_SEAL_SHRINK | F_SEAL_GROW, unwritable = F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;
	size_t size = area_size(world_size, slot_count);
	struct stat st;
	int seals;

	if (fstat(fd, &st) != 0)
		return mc_error_sys(EIO, errno,
				    "Shared segment fstat of the node keeper's control area failed");
	seals = fcntl(fd, F_GET_SEALS);
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size || seals < 0 || (seals & needed) != needed ||
	    (seals & unwritable))
		return mc_error(
			EPROTO,
			"Shared segment: the node keeper's control area holds %llu bytes with seals "
			"0x%x, not %zu writable bytes sealed against shrinking and growing (%u ranks, "
			"%u slots)",
			(unsigned long long)st.st_size, seals < 0 ? 0 : seals, size, world_size, slot_count);
	/* A group starts its words anew: an area someone wrote is another group's. */
	if (!all_zero(fd, size))
		return mc_error(EPROTO, "Shared segment: the node keeper's control area is not a fresh one "
					"(it holds words already); refusing another group's area");
	mc_fd_track_begin();
	m->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	mc_fd_track_end(&m->tracking, &m->fd);
	if (m->fd < 0)
		return mc_error_sys(mc_fold_errno(errno), errno,
				    "Shared segment cannot duplicate the node keeper's control area");
	return init_area("the node keeper's control area", world_size, slot_count, alloc_size, m);
}

int mc_control_attach(int fd, uint32_t world_size, uint32_t slot_count, uint64_t alloc_size,
		      struct mc_control_map *m)
{
	size_t size = area_size(world_size, slot_count);
	struct stat st;
	struct mc_control *c;
	void *p;
	int seals;

	if (fstat(fd, &st) != 0)
		return mc_error_sys(EIO, errno, "Shared segment fstat of the owner's control area failed");
	seals = fcntl(fd, F_GET_SEALS);
	if ((uint64_t)st.st_size != size || seals < 0 || !(seals & F_SEAL_SHRINK))
		return mc_error(EPROTO,
				"Shared segment owner's control area holds %llu bytes (%s), %zu sealed ones "
				"expected for %u ranks and %u slots",
				(unsigned long long)st.st_size,
				seals >= 0 && (seals & F_SEAL_SHRINK) ? "sealed" : "not sealed", size,
				world_size, slot_count);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return mc_error_sys(mc_fold_errno(errno), errno,
				    "Shared segment cannot map the owner's control area");
	c = p;
	if (c->magic != MC_CONTROL_MAGIC || c->version != MC_CONTROL_VERSION || c->world_size != world_size ||
	    c->alloc_size != alloc_size || c->slot_count != slot_count) {
		munmap(p, size);
		return mc_error(
			EPROTO,
			"Shared segment owner's control area does not match (magic 0x%08x version %u, "
			"%u ranks, %u slots, %llu bytes; expected version %d, %u ranks, %u slots, %llu "
			"bytes): the ranks run different library versions",
			c->magic, c->version, c->world_size, c->slot_count, (unsigned long long)c->alloc_size,
			MC_CONTROL_VERSION, world_size, slot_count, (unsigned long long)alloc_size);
	}
	m->area = c;
	m->size = size;
	return 0;
}

void mc_control_drop_fd(struct mc_control_map *m)
{
	mc_fd_close(&m->tracking);
	m->fd = -1;
}

void mc_control_release(struct mc_control_map *m)
{
	mc_control_drop_fd(m);
	if (m->area)
		munmap(m->area, m->size);
	m->area = NULL;
}

void mc_control_advance(struct mc_control *c, uint64_t committed)
{
	__atomic_store_n(&c->committed, committed, __ATOMIC_RELEASE);
	bump(c);
}

void mc_control_committed(struct mc_control *c, uint64_t ns)
{
	uint32_t committing = MC_FRONT_COMMITTING;

	c->commit_ns = ns;
	__atomic_store_n(&c->committed, c->alloc_size, __ATOMIC_RELEASE);
	__atomic_compare_exchange_n(&c->state, &committing, MC_FRONT_COMMITTED, false, __ATOMIC_ACQ_REL,
				    __ATOMIC_ACQUIRE);
	bump(c);
}

void mc_control_fail(struct mc_control *c, int err, uint32_t rank, const char *message)
{
	uint32_t committing = MC_FRONT_COMMITTING;

	/* The error is written before the state says it is there; only the
	 * first failure may write it, so it is claimed with a state of its own. */
	if (!__atomic_compare_exchange_n(&c->state, &committing, UINT32_MAX, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return;
	c->error = err;
	c->error_rank = rank;
	snprintf(c->message, sizeof(c->message), "%s", message);
	__atomic_store_n(&c->state, MC_FRONT_FAILED, __ATOMIC_RELEASE);
	bump(c);
}

bool mc_control_hold_owner(struct mc_control *c)
{
	return pthread_mutex_lock(&c->owner_alive) == 0;
}

void mc_control_let_go_owner(struct mc_control *c)
{
	pthread_mutex_unlock(&c->owner_alive);
}

bool mc_control_owner_died(struct mc_control *c, uint32_t owner_rank)
{
	char message[MC_CONTROL_MESSAGE_BYTES];
	int r;

	if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != MC_FRONT_COMMITTING)
		return false;
	r = pthread_mutex_trylock(&c->owner_alive);
	if (r == 0) {
		/* Not held while committing: the owner is between two states; look again later. */
		pthread_mutex_unlock(&c->owner_alive);
		return false;
	}
	if (r != EOWNERDEAD)
		return false; /* EBUSY: the owner's commit thread lives */
	snprintf(message, sizeof(message),
		 "Shared segment owner (rank %u, pid %u) died while committing the pages, %llu of %llu "
		 "bytes committed; create the segment again",
		 owner_rank, c->owner_pid,
		 (unsigned long long)__atomic_load_n(&c->committed, __ATOMIC_ACQUIRE),
		 (unsigned long long)c->alloc_size);
	mc_control_fail(c, ESRCH, owner_rank, message);
	pthread_mutex_consistent(&c->owner_alive);
	pthread_mutex_unlock(&c->owner_alive);
	return true;
}

void mc_control_rank_update(struct mc_control *c, uint32_t rank, const struct mc_control_rank *r)
{
	struct mc_control_rank *slot = &c->ranks[rank];

	slot->begin = r->begin;
	slot->end = r->end;
	slot->error = r->error;
	__atomic_store_n(&slot->registered_end, r->registered_end, __ATOMIC_RELEASE);
	__atomic_store_n(&slot->state, r->state, __ATOMIC_RELEASE);
	bump(c);
}

_Static_assert(MC_FRONT_VIEW_COMMITTING == MC_FRONT_COMMITTING &&
		       MC_FRONT_VIEW_COMMITTED == MC_FRONT_COMMITTED &&
		       MC_FRONT_VIEW_FAILED == MC_FRONT_FAILED,
	       "private.h numbers the front's states as control.h does");

/* The owner's commit thread died holding the life mutex: the kernel set
 * FUTEX_OWNER_DIED in its word (glibc keeps the robust futex word first).
 * Read only, so a reader without write access learns it too; elsewhere
 * false, and the first waiter's trylock tells. */
static bool owner_died(const struct mc_control *c)
{
#ifdef __GLIBC__
	return __atomic_load_n(&c->owner_alive.__data.__lock, __ATOMIC_ACQUIRE) & FUTEX_OWNER_DIED;
#else
	(void)c;
	return false;
#endif
}

/* One reading of @c into @out: the state is read after the word, so a
 * failed state's sentence was written before it was read. */
static void read_front(const struct mc_control *c, struct mc_front_view *out)
{
	memset(out, 0, sizeof(*out));
	out->state = __atomic_load_n(&c->state, __ATOMIC_ACQUIRE);
	out->alloc_size = c->alloc_size;
	out->committed = __atomic_load_n(&c->committed, __ATOMIC_ACQUIRE);
	out->owner_pid = c->owner_pid;
	out->world_size = c->world_size;
	out->slot_count = c->slot_count;
	out->alignment = c->alignment;
	out->commit_started_ns = c->commit_started_ns;
	if (out->state == MC_FRONT_COMMITTED)
		out->commit_ns = c->commit_ns;
	if (out->state == MC_FRONT_FAILED) {
		out->error = c->error;
		out->error_rank = c->error_rank;
		memcpy(out->message, c->message, sizeof(out->message));
		out->message[sizeof(out->message) - 1] = '\0';
	}
	if (out->state == MC_FRONT_COMMITTING)
		out->owner_died = owner_died(c);
	else if (out->state != MC_FRONT_COMMITTED && out->state != MC_FRONT_FAILED)
		out->state = MC_FRONT_COMMITTING; /* a failure being written: the next reading has it */
}

MC_PRIVATE int mc_control_read(int fd, struct mc_front_view *out)
{
	struct stat st;
	const struct mc_control *c;
	size_t size;
	void *p;

	if (fstat(fd, &st) != 0)
		return -errno;
	if ((uint64_t)st.st_size < sizeof(struct mc_control) || (uint64_t)st.st_size > (UINT64_C(1) << 30))
		return -EPROTO;
	size = (size_t)st.st_size;
	p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	c = p;
	if (c->magic != MC_CONTROL_MAGIC || c->version != MC_CONTROL_VERSION ||
	    size != area_size(c->world_size, c->slot_count)) {
		munmap(p, size);
		return -EPROTO;
	}
	/* A reading that a change overlapped is read again (a few times at most). */
	for (int tries = 0; tries < 8; tries++) {
		uint32_t seq = mc_control_seq(c);

		read_front(c, out);
		if (mc_control_seq(c) == seq)
			break;
	}
	munmap(p, size);
	return 0;
}
