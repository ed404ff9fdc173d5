/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Other users and isolation, for real (as root, so that the test can become
 * other users and enter namespaces): a rank of another uid cannot map the
 * pages; a rank in another PID namespace, in another user namespace, or
 * facing a non-dumpable owner is served by the owner's socket.  Without that
 * socket (the owner's blob stripped of it: the /proc and pidfd_getfd routes
 * alone) each of them gets the error that names the cause and its fix; a
 * rank whose /proc hides the owner falls back to pidfd_getfd; a rank of
 * another user behind hidepid is told about the uid.  The owner is never
 * disturbed.
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "group.h"
#include "helpers.h"
#include "internals.h"
#include "base/linux-compat.h"
#include "privileged.h"

#define BLOB	 MOONCAKE_SEGMENT_BLOB_SIZE
#define SIZE	 (UINT64_C(4) << 20)
#define STRANGER 54321 /* a uid and gid no account has: a throwaway user */

/* What the peer does before it completes. */
enum peer_setup {
	AS_STRANGER,
	IN_NEW_PID_NAMESPACE,
	WITH_PROC_HIDDEN,
	SAME_UID_AS_OWNER,
	AS_STRANGER_BEHIND_HIDEPID,
	IN_NEW_USER_NAMESPACE,
};

struct scenario {
	enum peer_setup setup;
	bool owner_as_stranger; /* the owner also drops to STRANGER */
	bool owner_dumpable;
	int expect;	    /* complete()'s result on the peer */
	const char *needle; /* in its message */
	const char *wrong;  /* a cause that must not be blamed */
	bool no_socket;	    /* the peer sees the owner's blob without its socket */
};

static int become_stranger(void)
{
	return setresgid(STRANGER, STRANGER, STRANGER) == 0 && setresuid(STRANGER, STRANGER, STRANGER) == 0
		       ? 0
		       : -1;
}

static bool write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	return f && fputs(text, f) >= 0 && fclose(f) == 0;
}

/* As `unshare -U -r` does for the user STRANGER: a new user namespace where
 * this same real user is uid 0. */
static int enter_user_namespace_as_root_of_it(void)
{
	char map[64];

	snprintf(map, sizeof(map), "0 %d 1\n", STRANGER);
	/* setuid made this process non-dumpable, which locks its own /proc files. */
	return prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0 && unshare(CLONE_NEWUSER) == 0 &&
			       write_file("/proc/self/setgroups", "deny") &&
			       write_file("/proc/self/uid_map", map) && write_file("/proc/self/gid_map", map)
		       ? 0
		       : -1;
}

/* The owner's (rank 0's) blob as if it served no socket: only /proc and pidfd_getfd remain. */
static bool strip_socket(uint8_t *blobs)
{
	struct mc_blob b;

	if (mc_blob_decode(blobs, 0, &b) != 0)
		return false;
	memset(b.handle + 24, 0, 8); /* the socket id (doc/wire-format.md) */
	return mc_blob_encode(&b, blobs) == 0;
}

/* The peer's complete(), in the process state the scenario asks for; exit status 0 when as expected. */
static int peer_complete(const struct scenario *sc, struct mooncake_segment *seg, const uint8_t *owner_blobs)
{
	uint8_t blobs[2 * BLOB];
	int ret;

	memcpy(blobs, owner_blobs, sizeof(blobs));
	if (sc->no_socket && !strip_socket(blobs))
		return 17;

	switch (sc->setup) {
	case AS_STRANGER:
	case SAME_UID_AS_OWNER:
		if (become_stranger() != 0)
			return 10;
		break;
	case IN_NEW_PID_NAMESPACE: /* entered before create: see isolation_rank */
		break;
	case AS_STRANGER_BEHIND_HIDEPID:
		/* A /proc of this mount namespace that hides other users' processes. */
		if (unshare(CLONE_NEWNS) != 0 ||
		    mount("none", "/proc", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
		    mount("proc", "/proc", "proc", 0, "hidepid=2") != 0)
			return 15;
		if (become_stranger() != 0)
			return 10;
		break;
	case IN_NEW_USER_NAMESPACE:
		if (become_stranger() != 0)
			return 10;
		if (enter_user_namespace_as_root_of_it() != 0)
			return 16;
		break;
	case WITH_PROC_HIDDEN:
		/* This rank's own /proc, empty: the owner cannot be found there.  The
		 * mount must not propagate to the host: /proc is made private (a
		 * chroot's / is no mount point, so not / itself). */
		if (unshare(CLONE_NEWNS) != 0 ||
		    mount("none", "/proc", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
		    mount("none", "/proc", "tmpfs", 0, NULL) != 0)
			return 14;
		break;
	}
	ret = mooncake_segment_complete(seg, blobs, 2 * BLOB);
	if (ret != sc->expect || (sc->needle && !strstr(mooncake_segment_last_error(), sc->needle)) ||
	    (sc->wrong && strstr(mooncake_segment_last_error(), sc->wrong))) {
		fprintf(stderr, "peer: complete returned %d (%s), expected %d with '%s' and without '%s'\n",
			ret, mooncake_segment_last_error(), sc->expect, sc->needle ? sc->needle : "",
			sc->wrong ? sc->wrong : "");
		_exit(20);
	}
	if (ret == 0 && ((volatile uint8_t *)mooncake_segment_base(seg))[5] != 55)
		_exit(21);
	_exit(0);
}

static int isolation_rank(struct group_rank *self, void *arg)
{
	const struct scenario *sc = arg;
	struct mooncake_segment_options opt = test_options(2, self->rank, 0);
	struct mooncake_segment *seg = NULL;
	uint8_t blob[BLOB], blobs[2 * BLOB], *base;

	/* A new PID namespace takes effect for children: the peer runs in one, from
	 * create on (a forked child cannot complete its parent's segment). */
	if (self->rank == 1 && sc->setup == IN_NEW_PID_NAMESPACE) {
		pid_t child;
		int status;

		if (unshare(CLONE_NEWPID) != 0)
			return 11;
		child = fork();
		if (child < 0)
			return 12;
		if (child > 0)
			return waitpid(child, &status, 0) == child && WIFEXITED(status) ? WEXITSTATUS(status)
											: 13;
	}
	if (self->rank == 0 && sc->owner_as_stranger) {
		RANK_CHECK(become_stranger() == 0);
		/* setuid made the owner non-dumpable; put it back unless the scenario wants it off. */
		RANK_CHECK(prctl(PR_SET_DUMPABLE, sc->owner_dumpable ? 1 : 0, 0, 0, 0) == 0);
	}
	RANK_CHECK(mooncake_segment_create("isolation", SIZE, &opt, &seg, blob) == 0);
	/* The owner writes before anyone can map: the peer checks it after complete. */
	if (self->rank == 0)
		((uint8_t *)mooncake_segment_base(seg))[5] = 55;
	RANK_CHECK(group_allgather(self, blob, BLOB, blobs) == 0);
	if (self->rank == 1) {
		int status = peer_complete(sc, seg, blobs);

		mooncake_segment_destroy(seg);
		return status;
	}
	/* The owner is unaffected by whatever the peer tried. */
	RANK_CHECK(mooncake_segment_complete(seg, blobs, sizeof(blobs)) == 0);
	base = mooncake_segment_base(seg);
	/* Returns when the peer is done: it never joins, so its exit ends the round. */
	(void)group_barrier(self);
	RANK_CHECK(base[5] == 55);
	mooncake_segment_destroy(seg);
	return 0;
}

static void run_scenario(const struct scenario *sc)
{
	int codes[2];

	ck_assert_int_eq(group_run(2, isolation_rank, (void *)sc, 20000, codes), 0);
	ck_assert_msg(codes[0] == 0, "owner exited with %d", codes[0]);
	ck_assert_msg(codes[1] == 0, "peer exited with %d", codes[1]);
}

/* Refused by the owner's socket (SO_PEERCRED) and by the kernel (/proc, pidfd_getfd) alike. */
START_TEST(test_another_user_cannot_map_the_pages)
{
	const struct scenario by_socket = {
		AS_STRANGER, false, true, -EACCES, "the owner runs as uid 0 and this rank as uid 54321",
		NULL,	     false
	};
	const struct scenario by_kernel = { AS_STRANGER,
					    false,
					    true,
					    -EACCES,
					    "the owner runs as uid 0 and this rank as uid 54321",
					    "MOONCAKE_SEGMENT_PEER_UIDS",
					    true };

	run_scenario(&by_socket);
	run_scenario(&by_kernel);
}
END_TEST

START_TEST(test_another_pid_namespace_is_served_by_the_owners_socket)
{
	const struct scenario sc = { IN_NEW_PID_NAMESPACE, false, true, 0, NULL, NULL, false };

	run_scenario(&sc);
}
END_TEST

START_TEST(test_another_pid_namespace_without_the_socket_is_named_as_the_cause)
{
	const struct scenario sc = { IN_NEW_PID_NAMESPACE,    false, true, -EACCES,
				     "another PID namespace", NULL,  true };

	run_scenario(&sc);
}
END_TEST

START_TEST(test_proc_that_hides_the_owner_falls_back_to_pidfd_getfd)
{
	const struct scenario works = { WITH_PROC_HIDDEN, false, true, 0, NULL, NULL, true };
	const struct scenario fails = {
		WITH_PROC_HIDDEN, false, true, -EACCES, "does not show the live owner", NULL, true
	};

	/* Without pidfd_getfd (kernels before 5.6) the error names the cause instead. */
	run_scenario(pidfd_getfd_available() ? &works : &fails);
}
END_TEST

/* hidepid hides the owner because it is another user's: the uid is the cause to name. */
START_TEST(test_another_user_behind_hidepid_is_told_about_the_uid)
{
	const struct scenario sc = { AS_STRANGER_BEHIND_HIDEPID,
				     false,
				     true,
				     -EACCES,
				     "the owner runs as uid 0 and this rank as uid 54321",
				     "hidepid",
				     true };

	run_scenario(&sc);
}
END_TEST

/* The same real user, uid 0 in its own user namespace: the socket sees the
 * same uid; without it, the namespace is the cause. */
START_TEST(test_another_user_namespace_is_served_by_the_owners_socket)
{
	const struct scenario sc = { IN_NEW_USER_NAMESPACE, true, true, 0, NULL, NULL, false };

	run_scenario(&sc);
}
END_TEST

START_TEST(test_another_user_namespace_is_named_as_the_cause)
{
	const struct scenario named = { IN_NEW_USER_NAMESPACE,	  true,	      true, -EACCES,
					"another user namespace", "dumpable", true };
	const struct scenario not_uids = { IN_NEW_USER_NAMESPACE,    true,	    true, -EACCES,
					   "another user namespace", "runs as uid", true };

	run_scenario(&named);
	run_scenario(&not_uids);
}
END_TEST

/* The owner offers its pages on its socket, dumpable or not. */
START_TEST(test_non_dumpable_owner_is_served_by_its_socket)
{
	const struct scenario sc = { SAME_UID_AS_OWNER, true, false, 0, NULL, NULL, false };

	run_scenario(&sc);
}
END_TEST

START_TEST(test_non_dumpable_owner_without_the_socket_is_refused_with_the_fix)
{
	const struct scenario sc = { SAME_UID_AS_OWNER, true, false, -EACCES, "dumpable", NULL, true };

	run_scenario(&sc);
}
END_TEST

START_TEST(test_same_user_with_a_dumpable_owner_works)
{
	const struct scenario with_socket = { SAME_UID_AS_OWNER, true, true, 0, NULL, NULL, false };
	const struct scenario through_proc = { SAME_UID_AS_OWNER, true, true, 0, NULL, NULL, true };

	run_scenario(&with_socket);
	run_scenario(&through_proc);
}
END_TEST

/* Whether a child of this process can enter a new user namespace as STRANGER. */
static bool user_namespaces_available(void)
{
	pid_t child = fork();
	int status;

	if (child == 0)
		_exit(become_stranger() == 0 && enter_user_namespace_as_root_of_it() == 0 ? 0 : 1);
	return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0;
}

int main(void)
{
	Suite *s = suite_create("isolation");
	TCase *tc = tcase_create("users-and-namespaces");
	char scope[16];

	if (geteuid() != 0)
		skip_all("needs root to become another user and to enter namespaces");
	if (mc_read_line("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope)) &&
	    strtol(scope, NULL, 10) >= 2)
		skip_all("kernel.yama.ptrace_scope >= 2 forbids even same-user access");
	tcase_add_test(tc, test_another_user_cannot_map_the_pages);
	tcase_add_test(tc, test_another_pid_namespace_is_served_by_the_owners_socket);
	tcase_add_test(tc, test_another_pid_namespace_without_the_socket_is_named_as_the_cause);
	tcase_add_test(tc, test_proc_that_hides_the_owner_falls_back_to_pidfd_getfd);
	tcase_add_test(tc, test_another_user_behind_hidepid_is_told_about_the_uid);
	if (user_namespaces_available()) {
		tcase_add_test(tc, test_another_user_namespace_is_served_by_the_owners_socket);
		tcase_add_test(tc, test_another_user_namespace_is_named_as_the_cause);
	} else {
		printf("# skipping the user namespace tests: this kernel refuses user namespaces "
		       "(user.max_user_namespaces, a sysctl or an LSM)\n");
	}
	tcase_add_test(tc, test_non_dumpable_owner_is_served_by_its_socket);
	tcase_add_test(tc, test_non_dumpable_owner_without_the_socket_is_refused_with_the_fix);
	tcase_add_test(tc, test_same_user_with_a_dumpable_owner_works);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
