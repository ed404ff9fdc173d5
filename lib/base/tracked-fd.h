/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Descriptors that no forked child keeps (fork.c): every descriptor the
 * library holds open is tracked, and a pthread_atfork child handler closes
 * them all in the child.
 */
#ifndef MOONCAKE_SEGMENT_TRACKED_FD_H
#define MOONCAKE_SEGMENT_TRACKED_FD_H

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

#endif
