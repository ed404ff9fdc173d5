/* SPDX-License-Identifier: Apache-2.0 */
/*
 * No environment trust in privileged programs, for real: a program linked
 * with the library is installed set-user-ID root in a scratch directory and
 * run by another user with every variable the library reads pointing at
 * that user's own files (a planted runtime library, a fake host root).  It
 * must ignore them all: the planted library's constructor never runs as
 * root.  The same program without the set-user-ID bit obeys them, which
 * shows that the variables are the ones the library reads.  Needs root
 * (to install the program and to become another user); changes nothing of
 * the host.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "privileged.h"

#define STRANGER 54321 /* a uid and gid no account has */
/* Whether this build loads an accelerator runtime (the planted library's way in). */
#define LOADS_RUNTIMES (HAVE_CUDA || HAVE_ASCEND)

static char dir[64];

static void copy_file(const char *from, const char *to, mode_t mode)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out;
	ssize_t n;

	ck_assert_msg(in >= 0, "%s: %s", from, strerror(errno));
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	ck_assert_int_eq(n, 0);
	close(in);
	ck_assert_int_eq(fchown(out, 0, 0), 0);
	/* chmod after chown: chown clears the set-user-ID bit. */
	ck_assert_int_eq(fchmod(out, mode), 0);
	ck_assert_int_eq(close(out), 0);
}

static void path_in_dir(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", dir, name);
}

/* Run the probe as STRANGER with every variable aimed at the stranger's
 * files; its output into @out. */
static void run_probe_as_stranger(char *out, size_t size)
{
	char probe[128], planted[128], marker[128], root[128];
	int pipefd[2], status;
	ssize_t n, got = 0;
	pid_t child;

	path_in_dir(probe, sizeof(probe), "probe");
	path_in_dir(planted, sizeof(planted), "planted.so");
	path_in_dir(marker, sizeof(marker), "stranger/marker");
	path_in_dir(root, sizeof(root), "stranger/root");
	ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		char *const argv[] = { probe, NULL };
		char *env[] = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
		char e[7][192];

		snprintf(e[0], sizeof(e[0]), "MOONCAKE_SEGMENT_CUDA_LIBRARY=%s", planted);
		snprintf(e[1], sizeof(e[1]), "MOONCAKE_SEGMENT_ASCEND_LIBRARY=%s", planted);
		snprintf(e[2], sizeof(e[2]), "MOONCAKE_SEGMENT_HOST_ROOT=%s", root);
		snprintf(e[3], sizeof(e[3]), "MOONCAKE_SEGMENT_PEER_UIDS=any");
		snprintf(e[4], sizeof(e[4]), "MOONCAKE_SEGMENT_PEER_TIMEOUT_MS=1");
		snprintf(e[5], sizeof(e[5]), "PLANTED_MARKER=%s", marker);
		snprintf(e[6], sizeof(e[6]), "PATH=/usr/bin:/bin");
		for (int i = 0; i < 7; i++)
			env[i] = e[i];
		dup2(pipefd[1], STDOUT_FILENO);
		if (setgroups(0, NULL) != 0 || setresgid(STRANGER, STRANGER, STRANGER) != 0 ||
		    setresuid(STRANGER, STRANGER, STRANGER) != 0)
			_exit(125);
		execve(probe, argv, env);
		_exit(126);
	}
	close(pipefd[1]);
	while ((n = read(pipefd[0], out + got, size - 1 - (size_t)got)) > 0)
		got += n;
	out[got] = '\0';
	close(pipefd[0]);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "probe: status %d, output:\n%s", status,
		      out);
}

static bool marker_exists(void)
{
	char marker[128];

	path_in_dir(marker, sizeof(marker), "stranger/marker");
	return access(marker, F_OK) == 0;
}

static void setup(void)
{
	const char *builddir = getenv("MOONCAKE_SEGMENT_BUILDDIR");
	char from[1024], to[128];

	ck_assert_msg(builddir, "MOONCAKE_SEGMENT_BUILDDIR is not set (run through make check)");
	snprintf(dir, sizeof(dir), "/tmp/mooncake-segment-setuid.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	snprintf(from, sizeof(from), "%s/tests/unit/env-probe", builddir);
	path_in_dir(to, sizeof(to), "probe");
	copy_file(from, to, 04755);
	snprintf(from, sizeof(from), "%s/tests/fakes/.libs/libplanted.so", builddir);
	path_in_dir(to, sizeof(to), "planted.so");
	copy_file(from, to, 0644);
	/* The stranger's own directory, where its fake host root and the marker go. */
	path_in_dir(to, sizeof(to), "stranger");
	ck_assert_int_eq(mkdir(to, 0755), 0);
	ck_assert_int_eq(chown(to, STRANGER, STRANGER), 0);
	path_in_dir(to, sizeof(to), "stranger/root");
	ck_assert_int_eq(mkdir(to, 0755), 0);
}

static void teardown(void)
{
	if (dir[0])
		fixture_tree_remove(dir);
	dir[0] = '\0';
}

START_TEST(test_a_setuid_program_ignores_every_variable)
{
	char out[4096];

	run_probe_as_stranger(out, sizeof(out));
	ck_assert_msg(strstr(out, "euid=0 uid=54321"), "not set-user-ID root:\n%s", out);
	ck_assert_msg(!marker_exists(), "the planted library ran in the set-user-ID program:\n%s", out);
	ck_assert_msg(strstr(out, "MOONCAKE_SEGMENT_HOST_ROOT=(unset)") &&
			      strstr(out, "MOONCAKE_SEGMENT_PEER_UIDS=(unset)") &&
			      strstr(out, "MOONCAKE_SEGMENT_PEER_TIMEOUT_MS=(unset)") &&
			      strstr(out, "MOONCAKE_SEGMENT_CUDA_LIBRARY=(unset)") &&
			      strstr(out, "MOONCAKE_SEGMENT_ASCEND_LIBRARY=(unset)") &&
			      strstr(out, "host root=''"),
		      "%s", out);
}
END_TEST

START_TEST(test_the_same_program_without_the_bit_obeys_them)
{
	char out[4096], probe[128];

	path_in_dir(probe, sizeof(probe), "probe");
	ck_assert_int_eq(chmod(probe, 0755), 0);
	run_probe_as_stranger(out, sizeof(out));
	ck_assert_msg(strstr(out, "euid=54321 "), "%s", out);
	/* Only a build with an accelerator runtime loads one. */
	ck_assert_msg(marker_exists() == LOADS_RUNTIMES, "the runtime variables were not read at all:\n%s",
		      out);
	ck_assert_msg(strstr(out, "MOONCAKE_SEGMENT_PEER_TIMEOUT_MS=1") && strstr(out, "/stranger/root'"),
		      "%s", out);
}
END_TEST

int main(void)
{
	struct statvfs tmp;
	Suite *s;
	TCase *tc;

	if (geteuid() != 0)
		skip_all("needs root to install a set-user-ID program and to become another user");
	if (statvfs("/tmp", &tmp) == 0 && (tmp.f_flag & ST_NOSUID))
		skip_all("/tmp is mounted nosuid: a set-user-ID program cannot run there");
	if (!LOADS_RUNTIMES)
		printf("# this build loads no accelerator runtime: the planted-library checks are left out\n");
	s = suite_create("setuid");
	tc = tcase_create("environment");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_a_setuid_program_ignores_every_variable);
	tcase_add_test(tc, test_the_same_program_without_the_bit_obeys_them);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
