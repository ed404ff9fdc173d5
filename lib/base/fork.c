/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a forked child of a rank inherits: the mapping, never a descriptor.
 *
 * The pages are a MAP_SHARED mapping, which a child inherits and shares with
 * no copy-on-write: nothing to do there.  Our descriptors are close-on-exec,
 * which does not help a child that does not exec (a DataLoader worker, a
 * multiprocessing "fork" child): the owner's memfd would keep the pages in
 * memory for as long as that child lives, after every rank destroyed the
 * segment.  So every descriptor the library keeps open is tracked here, and a
 * pthread_atfork child handler closes them all in the child.
 *
 * The registry lock is held across fork() (prepare and parent/child
 * handlers) and around the creation of a tracked descriptor, so a fork in
 * another thread sees each descriptor either tracked or not yet created, and
 * a descriptor number is closed and untracked at once, never reused by an
 * unrelated descriptor that the child would then close.
 *
 * This is the library's only pthread_atfork: a layer with more to do around
 * fork() (the descriptor route's connections) registers with
 * mc_fork_register() (fork.h).  The order: each layer is quiesced (its
 * prepare takes its locks) before the registry's lock is taken, and released
 * after it.  The registry's lock is the innermost of the library: under it
 * fork.c only creates, closes and lists descriptors, and a layer may create
 * a tracked descriptor while it holds a lock of its own; taking the layers'
 * locks first keeps fork() to that order and cannot deadlock against such a
 * thread.  (The fd-server takes its connections' lock and the registry's
 * never one inside the other today, so this is also the order pthread_atfork
 * gave its two registrations.)  The layers' list has a lock of its own,
 * held across fork() too, so a registration never races a fork.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "mooncake/segment.h"
#include "error.h"
#include "fork.h"
#include "tracked-fd.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static struct mc_tracked_fd *tracked;

static pthread_mutex_t layers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mc_fork_handlers *layers; /* newest first */

/* The parent or child handler of every layer, oldest first (the list is
 * newest first, and as short as the library's layers). */
static void run_oldest_first(bool child)
{
	for (struct mc_fork_handlers *done = NULL, *h; done != layers; done = h) {
		for (h = layers; h->next != done; h = h->next)
			;
		(child ? h->child : h->parent)();
	}
}

static void before_fork(void)
{
	pthread_mutex_lock(&layers_lock);
	for (struct mc_fork_handlers *h = layers; h; h = h->next)
		h->prepare();
	pthread_mutex_lock(&registry_lock);
}

static void after_fork_in_parent(void)
{
	pthread_mutex_unlock(&registry_lock);
	run_oldest_first(false);
	pthread_mutex_unlock(&layers_lock);
}

/* The child is single-threaded here: close and forget every tracked descriptor. */
static void after_fork_in_child(void)
{
	for (struct mc_tracked_fd *t = tracked; t; t = t->next) {
		if (*t->fd >= 0)
			close(*t->fd);
		*t->fd = -1;
	}
	tracked = NULL;
	pthread_mutex_unlock(&registry_lock);
	run_oldest_first(true);
	pthread_mutex_unlock(&layers_lock);
}

static void install_handlers(void)
{
	/* Fails only for lack of memory; then CLOEXEC is all a child gets. */
	if (pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) != 0)
		mc_log(MOONCAKE_SEGMENT_LOG_WARNING,
		       "Shared segment: pthread_atfork failed; a forked child may keep descriptors");
}

void mc_fork_register(struct mc_fork_handlers *h)
{
	pthread_once(&handlers_once, install_handlers);
	pthread_mutex_lock(&layers_lock);
	h->next = layers;
	layers = h;
	pthread_mutex_unlock(&layers_lock);
}

void mc_fd_track_begin(void)
{
	pthread_once(&handlers_once, install_handlers);
	pthread_mutex_lock(&registry_lock);
	mc_log_defer(true);
}

void mc_fd_track_end(struct mc_tracked_fd *t, int *fd)
{
	t->fd = fd;
	t->next = NULL;
	if (*fd >= 0) {
		t->next = tracked;
		tracked = t;
	}
	pthread_mutex_unlock(&registry_lock);
	mc_log_defer(false);
}

void mc_fd_close(struct mc_tracked_fd *t)
{
	pthread_mutex_lock(&registry_lock);
	for (struct mc_tracked_fd **p = &tracked; *p; p = &(*p)->next)
		if (*p == t) {
			*p = t->next;
			break;
		}
	if (t->fd && *t->fd >= 0) {
		close(*t->fd);
		*t->fd = -1;
	}
	t->next = NULL;
	pthread_mutex_unlock(&registry_lock);
}

void mc_fd_track_held(struct mc_tracked_fd *t, int *fd)
{
	t->fd = fd;
	t->next = tracked;
	tracked = t;
}

void mc_fd_untrack_held(struct mc_tracked_fd *t)
{
	for (struct mc_tracked_fd **p = &tracked; *p; p = &(*p)->next)
		if (*p == t) {
			*p = t->next;
			break;
		}
	t->next = NULL;
}

void mc_fd_track_pause(void)
{
	pthread_mutex_unlock(&registry_lock);
}

void mc_fd_track_resume(void)
{
	pthread_mutex_lock(&registry_lock);
}
