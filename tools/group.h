/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A group of forked ranks that all-gather through the parent over
 * socketpairs: the transport the demo and the multi-process tests use in
 * place of MPI or torch.distributed.  A rank that dies makes every pending and
 * later all-gather of the others fail (-EPIPE), so nobody waits forever.
 */
#ifndef MOONCAKE_SEGMENT_GROUP_H
#define MOONCAKE_SEGMENT_GROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct group_rank {
	uint32_t rank;
	uint32_t world_size;
	int sock; /* to the hub */
};

/* Rank code: returns the child's exit status (0 for success). */
typedef int (*group_rank_fn)(struct group_rank *self, void *arg);

/* Send @len bytes, receive every rank's @len bytes in rank order into @all.
 * Returns 0, or -EPIPE when another rank died or sent a different length. */
int group_allgather(struct group_rank *self, const void *mine, size_t len, void *all);
int group_barrier(struct group_rank *self);

/* Fork @world_size ranks running @fn and serve their all-gathers until all have
 * exited or @timeout_ms passed (then the rest are killed).  @exit_codes gets
 * each rank's exit status, or 128+signal.  Returns 0, or -ETIMEDOUT, or
 * -errno when forking failed. */
int group_run(uint32_t world_size, group_rank_fn fn, void *arg, int timeout_ms, int *exit_codes);

/* The pids of the last group_run's ranks (for tests that kill one): valid in
 * the caller of group_run, and in rank r for the ranks below r only. */
pid_t group_pid(uint32_t rank);

#endif
