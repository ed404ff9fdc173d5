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

/* Block until this process holds the commit lock of @cgroup_dir; false when
 * no lock can be had or its holder is stopped (the caller goes on without). */
bool mc_commit_lock_acquire(const char *cgroup_dir, struct mc_commit_lock *lock);
/* Let go of @lock (NONE is fine). */
void mc_commit_lock_release(struct mc_commit_lock *lock);

#endif
