/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One create at a time per memory cgroup (commit-lock.c), from the room
 * check to the last committed page, so that two owners never both see the
 * room that only one of them can have.
 */
#ifndef MOONCAKE_SEGMENT_COMMIT_LOCK_H
#define MOONCAKE_SEGMENT_COMMIT_LOCK_H

#include <stdbool.h>

#include "base/tracked-fd.h"
#include "mooncake/segment.h"

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

/* How long a waiter waits for a holder that is stopped or that it cannot
 * see (another PID namespace) before it goes on without the lock. */
#define MC_COMMIT_LOCK_GRACE_MS 1000

/* Block until this process holds the commit lock of @cgroup_dir (the
 * outermost limited memory cgroup directory, as struct mc_memory_room names
 * it) while a running member of that cgroup holds it; false when no lock
 * can be had, its holder is not a member (at once), or is stopped or unseen
 * past MC_COMMIT_LOCK_GRACE_MS: the caller goes on without. */
bool mc_commit_lock_acquire(const char *cgroup_dir, struct mc_commit_lock *lock);
/* Let go of @lock (NONE is fine). */
void mc_commit_lock_release(struct mc_commit_lock *lock);

#endif
