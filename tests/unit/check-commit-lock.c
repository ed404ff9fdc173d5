/* SPDX-License-Identifier: Apache-2.0 */
/* The commit lock of a memory cgroup (commit-lock.c): who waits, and when a waiter goes on without it. */
#include "config.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "internals.h"

static char logged[1024];

static void keep_warning(int priority, const char *message, void *userdata)
{
	(void)userdata;
	if (priority == MOONCAKE_SEGMENT_LOG_WARNING)
		snprintf(logged, sizeof(logged), "%s", message);
}

/* A child that takes the lock of @root, says so on @ready and then does @then. */
static pid_t fork_holder(const char *root, void (*then)(void))
{
	struct mc_commit_lock held = MC_COMMIT_LOCK_NONE;
	int ready[2];
	char byte = 0;
	pid_t child;

	ck_assert_int_eq(pipe(ready), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* Never outlive the test, stopped or not (a timed-out case is killed). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(ready[0]);
		if (!mc_commit_lock_acquire(root, &held))
			_exit(1);
		if (write(ready[1], &byte, 1) != 1)
			_exit(1);
		then();
		_exit(0);
	}
	close(ready[1]);
	ck_assert_int_eq(read(ready[0], &byte, 1), 1);
	close(ready[0]);
	return child;
}

static void stop_self(void)
{
	raise(SIGSTOP);
}

static void hold_a_moment(void)
{
	usleep(300 * 1000);
}

START_TEST(test_a_stopped_holder_does_not_block_other_creates)
{
	struct mc_commit_lock lock = MC_COMMIT_LOCK_NONE;
	char root[256];
	int status;
	uint64_t t0;
	pid_t holder;
	bool had;

	fixture_tree_create(root, sizeof(root)); /* a directory to key the lock by */
	holder = fork_holder(root, stop_self);
	ck_assert_int_eq(waitpid(holder, &status, WUNTRACED), holder);
	ck_assert(WIFSTOPPED(status));
	mooncake_segment_set_log_fn(keep_warning, MOONCAKE_SEGMENT_LOG_WARNING, NULL);
	logged[0] = '\0';
	t0 = mc_now_ns();
	/* Without the check this waits for ever: the case's timeout fails it. */
	ck_assert(!mc_commit_lock_acquire(root, &lock));
	ck_assert_int_eq(lock.fd, -1);
	ck_assert_msg(mc_now_ns() - t0 < UINT64_C(10000000000), "waited %llu ms",
		      (unsigned long long)((mc_now_ns() - t0) / 1000000));
	ck_assert_msg(strstr(logged, "is stopped (resume it with kill -CONT") != NULL, "logged: '%s'",
		      logged);
	mooncake_segment_set_log_fn(NULL, 0, NULL);
	kill(holder, SIGKILL);
	ck_assert_int_eq(waitpid(holder, &status, 0), holder);
	/* The holder's end freed the lock: it is had again. */
	had = mc_commit_lock_acquire(root, &lock);
	mc_commit_lock_release(&lock);
	ck_assert(had);
	fixture_tree_remove(root);
}
END_TEST

static void hold_long(void)
{
	sleep(60); /* killed by the test */
}

/* In a new PID namespace (this child is its pid 1): try the lock of @root
 * and report on @out whether it was had, after how long, and what was logged. */
static void wait_in_new_pid_namespace(const char *root, int out)
{
	struct mc_commit_lock lock = MC_COMMIT_LOCK_NONE;
	char report[1200];
	uint64_t t0;
	bool had;
	int n;

	mooncake_segment_set_log_fn(keep_warning, MOONCAKE_SEGMENT_LOG_WARNING, NULL);
	t0 = mc_now_ns();
	had = mc_commit_lock_acquire(root, &lock);
	mc_commit_lock_release(&lock);
	n = snprintf(report, sizeof(report), "%d %llu %s", had,
		     (unsigned long long)((mc_now_ns() - t0) / 1000000), logged);
	_exit(write(out, report, (size_t)n) == n ? 0 : 1);
}

/* The holder on the host, the waiter in a container's new PID namespace:
 * SO_PEERCRED gives the waiter pid 0.  It must go on after the grace period,
 * saying what it saw, instead of waiting for ever. */
START_TEST(test_a_holder_in_an_unseen_pid_namespace_is_passed_after_the_grace)
{
	char root[256], report[1200] = "";
	int pipefd[2], status;
	unsigned long long waited_ms = 0;
	int had = -1, offset = 0;
	struct pollfd p;
	pid_t holder, waiter;
	ssize_t n;

	fixture_tree_create(root, sizeof(root));
	holder = fork_holder(root, hold_long);
	ck_assert_int_eq(pipe(pipefd), 0);
	waiter = fork();
	ck_assert_int_ge(waiter, 0);
	if (waiter == 0) {
		pid_t inner;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(pipefd[0]);
		if (unshare(CLONE_NEWPID) != 0)
			_exit(2);
		inner = fork();
		if (inner == 0)
			wait_in_new_pid_namespace(root, pipefd[1]);
		_exit(inner > 0 && waitpid(inner, &status, 0) == inner && WIFEXITED(status)
			      ? WEXITSTATUS(status)
			      : 3);
	}
	close(pipefd[1]);
	/* Bounded here, so that a waiter that waits for ever fails the case. */
	p = (struct pollfd){ pipefd[0], POLLIN, 0 };
	if (poll(&p, 1, 8000) == 1) {
		n = read(pipefd[0], report, sizeof(report) - 1);
		report[n > 0 ? n : 0] = '\0';
	}
	close(pipefd[0]);
	kill(waiter, SIGKILL);
	waitpid(waiter, &status, 0);
	kill(holder, SIGKILL);
	waitpid(holder, &status, 0);
	fixture_tree_remove(root);
	ck_assert_msg(report[0], "the waiter in another PID namespace still waited after 8 s");
	ck_assert_int_eq(sscanf(report, "%d %llu %n", &had, &waited_ms, &offset), 2);
	ck_assert_int_eq(had, 0);
	ck_assert_msg(waited_ms >= MC_COMMIT_LOCK_GRACE_MS - 100 && waited_ms < 5000, "waited %llu ms",
		      waited_ms);
	ck_assert_msg(strstr(report + offset, "in a PID namespace this process cannot see") &&
			      strstr(report + offset, "pid 0"),
		      "logged: '%s'", report + offset);
}
END_TEST

START_TEST(test_a_running_holder_is_waited_for)
{
	struct mc_commit_lock lock = MC_COMMIT_LOCK_NONE;
	uint64_t t0, waited_ns;
	char root[256];
	int status;
	pid_t holder;
	bool had;

	fixture_tree_create(root, sizeof(root));
	t0 = mc_now_ns();
	holder = fork_holder(root, hold_a_moment);
	/* Got only once the holder let go, by exiting.  Released before any
	 * assertion: a failed one must not leave the lock tracked (CK_FORK=no). */
	had = mc_commit_lock_acquire(root, &lock);
	waited_ns = mc_now_ns() - t0;
	mc_commit_lock_release(&lock);
	ck_assert(had);
	ck_assert_msg(waited_ns >= UINT64_C(250000000), "had the lock after %llu ms",
		      (unsigned long long)(waited_ns / 1000000));
	ck_assert_int_eq(waitpid(holder, &status, 0), holder);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "holder status 0x%x", status);
	fixture_tree_remove(root);
}
END_TEST

Suite *suite_commit_lock(void)
{
	Suite *s = suite_create("commit-lock");
	TCase *tc = tcase_create("holders");

	tcase_add_test(tc, test_a_stopped_holder_does_not_block_other_creates);
	tcase_add_test(tc, test_a_running_holder_is_waited_for);
	/* Entering a new PID namespace needs root. */
	if (geteuid() == 0)
		tcase_add_test(tc, test_a_holder_in_an_unseen_pid_namespace_is_passed_after_the_grace);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}
