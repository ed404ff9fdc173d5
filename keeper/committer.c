/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The committer threads (keeper.h): a cold create's commit (commit.c) takes
 * seconds a GiB, so it runs on a thread of its own while the poll loop goes
 * on serving every other client.  At most --max-commits run at once, and at
 * most --uid-max-commits of one owner uid, so that one tenant's creates
 * cannot take every thread; the rest wait in a queue, in order, each
 * started as soon as a thread of its kind ends.  A thread touches only its
 * job (the loop never reads it until it is done) and hands it back on the
 * done list under the one mutex, waking the loop through an eventfd.  The
 * room check and the commit lock stay the commit's own: two threads commit
 * one after the other in the keeper's cgroup, as two processes would.
 *
 * At the stop, queued jobs are dropped and running ones abandoned: a commit
 * cannot be interrupted cleanly, and waiting for a terabyte's would hang the
 * stop.  A thread that ends after the stop closes what it made; one still
 * committing ends with the process, the kernel freeing its memfd.  Nothing
 * of a job reaches the descriptor store or the saved state before the loop
 * takes it back done.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "keeper.h"

static const struct keeper_config *conf;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct commit_job *queued, *running_jobs, *done_jobs; /* singly linked, in order */
static uint32_t running_count;
static bool stopping;
static int event_fd = -1;

int committer_start(const struct keeper_config *config)
{
	conf = config;
	event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (event_fd < 0) {
		int err = -errno;

		keeper_log("cannot make the committers' eventfd: %s", strerror(-err));
		return err;
	}
	return 0;
}

int committer_fd(void)
{
	return event_fd;
}

static void append(struct commit_job **list, struct commit_job *job)
{
	job->next = NULL;
	while (*list)
		list = &(*list)->next;
	*list = job;
}

static void unlink_job(struct commit_job **list, const struct commit_job *job)
{
	for (; *list; list = &(*list)->next)
		if (*list == job) {
			*list = job->next;
			return;
		}
}

static uint32_t running_of(uint32_t uid)
{
	const struct commit_job *job;
	uint32_t count = 0;

	for (job = running_jobs; job; job = job->next)
		count += job->account_uid == uid;
	return count;
}

static void close_pages(struct kept_pages *pages)
{
	if (pages->pages_fd >= 0)
		close(pages->pages_fd);
	if (pages->control_fd >= 0)
		close(pages->control_fd);
	pages->pages_fd = pages->control_fd = -1;
}

static void start_queued(void);

static void *commit_thread(void *arg)
{
	struct commit_job *job = arg;
	const uint64_t one = 1;

	job->err = commit_segment(job->name, job->alloc_size, job->page_size, job->hugetlb,
				  job->control_bytes, &job->pages, job->why, sizeof(job->why));
	pthread_mutex_lock(&lock);
	unlink_job(&running_jobs, job);
	running_count--;
	job->running = false;
	if (stopping) {
		/* The loop is gone: nobody takes this job back. */
		close_pages(&job->pages);
		free(job);
	} else {
		append(&done_jobs, job);
		start_queued();
		/* A full counter (never, at 2^64 - 1) still leaves the eventfd readable. */
		if (write(event_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			keeper_say(KEEPER_LOG_ERR, "cannot wake the loop after a commit: %s",
				   strerror(errno));
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* Start what the bounds allow, in queue order; with the lock held. */
static void start_queued(void)
{
	uint32_t uid_max = conf->uid_max_commits ? conf->uid_max_commits : conf->max_commits;
	struct commit_job **at = &queued;

	while (*at && running_count < conf->max_commits) {
		struct commit_job *job = *at;
		pthread_attr_t attr;
		pthread_t thread;
		int err;

		if (running_of(job->account_uid) >= uid_max) {
			at = &job->next;
			continue;
		}
		*at = job->next;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		job->running = true;
		append(&running_jobs, job);
		running_count++;
		err = pthread_create(&thread, &attr, commit_thread, job);
		pthread_attr_destroy(&attr);
		if (err) {
			/* Answered as a failed commit, like one that ran out of memory. */
			unlink_job(&running_jobs, job);
			running_count--;
			job->running = false;
			job->err = -EAGAIN;
			snprintf(job->why, sizeof(job->why),
				 "cannot start a committer thread (%s); try again, or lower --max-commits",
				 strerror(err));
			append(&done_jobs, job);
			if (write(event_fd, &(uint64_t){ 1 }, sizeof(uint64_t)) < 0 && errno != EAGAIN)
				keeper_say(KEEPER_LOG_ERR, "cannot wake the loop: %s", strerror(errno));
		}
	}
}

int committer_submit(struct commit_job *job, char *why, size_t why_size)
{
	if (event_fd < 0) {
		snprintf(why, why_size, "the keeper has no committer (its eventfd failed at start)");
		return -ENOMEM;
	}
	job->pages = (struct kept_pages){ .pages_fd = -1, .control_fd = -1 };
	job->err = 0;
	job->why[0] = '\0';
	job->running = false;
	pthread_mutex_lock(&lock);
	append(&queued, job);
	start_queued();
	pthread_mutex_unlock(&lock);
	return 0;
}

struct commit_job *committer_take_done(void)
{
	struct commit_job *job;
	uint64_t count;

	if (read(event_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		keeper_say(KEEPER_LOG_ERR, "cannot read the committers' eventfd: %s", strerror(errno));
	pthread_mutex_lock(&lock);
	job = done_jobs;
	if (job)
		done_jobs = job->next;
	pthread_mutex_unlock(&lock);
	if (job)
		job->next = NULL;
	return job;
}

void committer_stop(void)
{
	uint32_t abandoned;

	pthread_mutex_lock(&lock);
	stopping = true;
	abandoned = running_count;
	while (queued) {
		struct commit_job *job = queued;

		queued = job->next;
		free(job);
	}
	while (done_jobs) {
		struct commit_job *job = done_jobs;

		done_jobs = job->next;
		close_pages(&job->pages);
		free(job);
	}
	/* No thread writes it once stopping is set. */
	if (event_fd >= 0)
		close(event_fd);
	event_fd = -1;
	pthread_mutex_unlock(&lock);
	if (abandoned)
		keeper_log("stopping with %u commit(s) under way: their pages go with the process, "
			   "and their segments were never kept",
			   abandoned);
}
