/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's one pthread_atfork (fork.c): a layer that holds more than
 * tracked descriptors across fork() (the descriptor route's connections and
 * their locks) registers its handlers here, and fork.c runs them in one
 * order around its own descriptor registry.
 */
#ifndef MOONCAKE_SEGMENT_FORK_H
#define MOONCAKE_SEGMENT_FORK_H

/* A layer's work around fork(); static storage, registered once. */
struct mc_fork_handlers {
	void (*prepare)(void); /* quiesce: take the layer's locks */
	void (*parent)(void);  /* release them */
	void (*child)(void);   /* the child is single-threaded: drop what it must not keep, release */
	struct mc_fork_handlers *next;
};

/* Run @h around every later fork(): each layer's prepare before the
 * descriptor registry's lock is taken, newest layer first; parent and child
 * after the registry's, oldest layer first (pthread_atfork's own order). */
void mc_fork_register(struct mc_fork_handlers *h);

#endif
