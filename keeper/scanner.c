/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mapper scanner (keeper.h): who maps a kept segment is one pass over
 * every process's /proc/PID/maps, matching the memfds' device and inode.
 * That pass costs what the node's processes make it cost: a user with many
 * processes of 60k mappings each makes it half a second and more.  So it
 * never runs on the poll loop's thread: the loop hands a snapshot of the
 * keys (device, inode, generation) to a thread of its own, goes on serving
 * everyone, and takes the counts back when the thread wakes it through an
 * eventfd.  One scan at a time: what asks meanwhile waits for the next one,
 * and every request waiting is answered by that one (store.c).
 *
 * The thread touches only its job; the loop never reads a job until it is
 * done.  At the stop a running scan is abandoned: the thread frees its job
 * when it ends, or the process's exit ends it.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "keeper.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct scan_job *done_job; /* at most one: one scan runs at a time */
static bool stopping;
static int event_fd = -1;
static bool told_unreadable; /* the scanner thread's own: one scan at a time */

int scanner_start(void)
{
	event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (event_fd < 0) {
		int err = -errno;

		keeper_log("cannot make the mapper scanner's eventfd: %s", strerror(-err));
		return err;
	}
	return 0;
}

int scanner_fd(void)
{
	return event_fd;
}

static int key_order(const void *a, const void *b)
{
	const struct scan_key *x = a, *y = b;

	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	if (x->major != y->major)
		return x->major < y->major ? -1 : 1;
	return x->minor < y->minor ? -1 : x->minor > y->minor;
}

static void count_line(const char *line, pid_t pid, struct scan_job *job)
{
	struct scan_key probe = { 0 }, *hit;
	unsigned long long ino;
	unsigned int major, minor;

	if (!strstr(line, "/memfd:"))
		return;
	if (sscanf(line, "%*s %*s %*s %x:%x %llu", &major, &minor, &ino) != 3)
		return;
	probe.major = major;
	probe.minor = minor;
	probe.ino = ino;
	hit = bsearch(&probe, job->keys, job->count, sizeof(*job->keys), key_order);
	if (hit && hit->last_pid != pid) {
		hit->last_pid = pid;
		hit->mappers++;
	}
}

/* One pass over every process's maps, counting each process once per key
 * however many mappings it has. */
static void count_mappers(struct scan_job *job)
{
	char *line = NULL, path[sizeof(((struct dirent *)0)->d_name) + 16];
	size_t line_room = 0;
	struct dirent *entry;
	pid_t self = getpid();
	DIR *proc = opendir("/proc");

	if (!proc) {
		job->blind = true;
		return;
	}
	qsort(job->keys, job->count, sizeof(*job->keys), key_order);
	while ((entry = readdir(proc))) {
		pid_t pid;
		FILE *maps;

		if (!isdigit((unsigned char)entry->d_name[0]))
			continue;
		pid = (pid_t)atoi(entry->d_name);
		if (pid == self)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/maps", entry->d_name);
		maps = fopen(path, "re");
		if (!maps) {
			/* Gone meanwhile is no mapper; refused is one we cannot see. */
			if (errno != ENOENT && errno != ESRCH && !job->unreadable++ && !told_unreadable) {
				keeper_log(
					"cannot read /proc/%d/maps (%s): a segment that no process the keeper "
					"can see maps reports its mappers as unknown (run the keeper as root in "
					"its clients' PID namespace)",
					(int)pid, strerror(errno));
				told_unreadable = true;
			}
			continue;
		}
		while (getline(&line, &line_room, maps) > 0)
			count_line(line, pid, job);
		if (ferror(maps))
			job->unreadable++;
		fclose(maps);
	}
	closedir(proc);
	free(line);
}

static void *scan_thread(void *arg)
{
	struct scan_job *job = arg;
	const uint64_t one = 1;

	count_mappers(job);
	pthread_mutex_lock(&lock);
	if (stopping) {
		/* The loop is gone: nobody takes this job back. */
		free(job->keys);
		free(job);
	} else {
		done_job = job;
		if (write(event_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			keeper_say(KEEPER_LOG_ERR, "cannot wake the loop after a mapper scan: %s",
				   strerror(errno));
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

int scanner_submit(struct scan_job *job)
{
	pthread_attr_t attr;
	pthread_t thread;
	int err;

	if (event_fd < 0)
		return -ENOMEM;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&thread, &attr, scan_thread, job);
	pthread_attr_destroy(&attr);
	return -err;
}

struct scan_job *scanner_take_done(void)
{
	struct scan_job *job;
	uint64_t count;

	if (read(event_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		keeper_say(KEEPER_LOG_ERR, "cannot read the mapper scanner's eventfd: %s", strerror(errno));
	pthread_mutex_lock(&lock);
	job = done_job;
	done_job = NULL;
	pthread_mutex_unlock(&lock);
	return job;
}

void scanner_stop(void)
{
	pthread_mutex_lock(&lock);
	stopping = true;
	if (done_job) {
		free(done_job->keys);
		free(done_job);
		done_job = NULL;
	}
	/* No thread writes it once stopping is set. */
	if (event_fd >= 0)
		close(event_fd);
	event_fd = -1;
	pthread_mutex_unlock(&lock);
}
