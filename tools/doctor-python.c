/* SPDX-License-Identifier: Apache-2.0 */
/*
 * doctor's check of the Python binding: the user's python3 (or
 * MOONCAKE_SEGMENT_PYTHON) asked, in a child with a timeout, which
 * mooncake_segment it imports and whether that works.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "doctor.h"

/*
 * Which mooncake.shared_segment the user's python3 imports: Mooncake's own
 * wheel installs a regular `mooncake` package that hides ours.  The
 * interpreter answers for itself (python3 -m mooncake_segment --doctor prints
 * "status<TAB>seen<TAB>fix"), so the answer honours its venv and PYTHONPATH.
 * No python3, or none with our package, is no failure: C users need neither.
 */
void check_python(void)
{
	const char *python = secure_getenv("MOONCAKE_SEGMENT_PYTHON");
	char out[1024] = "", *seen, *fix, *last;
	size_t used = 0;
	int fds[2], status = 0;
	struct pollfd wait = { .events = POLLIN };
	pid_t child;

	if (!python || !*python)
		python = "python3";
	if (pipe2(fds, O_CLOEXEC) != 0) {
		doctor_add("python", WARN, NULL, "cannot run %s: %s", python, strerror(errno));
		return;
	}
	child = fork();
	if (child < 0) {
		doctor_add("python", WARN, NULL, "cannot run %s: %s", python, strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return;
	}
	if (child == 0) {
		int null = open("/dev/null", O_RDONLY);

		if (null < 0 || dup2(null, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0)
			_exit(126);
		execlp(python, python, "-m", "mooncake_segment", "--doctor", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	wait.fd = fds[0];
	while (used < sizeof(out) - 1 && poll(&wait, 1, 30000) == 1) {
		ssize_t n = read(fds[0], out + used, sizeof(out) - 1 - used);

		if (n <= 0)
			break;
		used += (size_t)n;
	}
	out[used] = '\0';
	close(fds[0]);
	kill(child, SIGKILL); /* a no-op unless it hung past the timeout or wrote too much */
	waitpid(child, &status, 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !used) {
		doctor_add("python", OK, NULL, "%s not found: only the Python binding needs it", python);
		return;
	}
	seen = strchr(out, '\t');
	fix = seen ? strchr(seen + 1, '\t') : NULL;
	if (fix && (!strncmp(out, "ok\t", 3) || !strncmp(out, "warn\t", 5))) {
		*seen++ = *fix++ = '\0';
		fix[strcspn(fix, "\n")] = '\0';
		doctor_add("python", out[0] == 'o' ? OK : WARN, fix, "%s", seen);
		return;
	}
	while (used && isspace((unsigned char)out[used - 1]))
		out[--used] = '\0';
	last = strrchr(out, '\n') ? strrchr(out, '\n') + 1 : out;
	/* Not installed for this python3 is fine (C users); installed but broken is not. */
	doctor_add(
		"python", strstr(last, "No module named mooncake_segment") ? OK : WARN,
		"apt install python3-mooncake-segment / dnf install python3-mooncake-segment (a venv needs "
		"--system-site-packages), or pip install the source tarball against the system library",
		"%s cannot import mooncake_segment: %s", python, *last ? last : "no output");
}
