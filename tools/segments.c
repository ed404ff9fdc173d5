/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Find every segment on the host from /proc: a segment is one memfd named
 * "mooncake-segment:LABEL|owner=PID", told apart by the (device, inode) that
 * /proc/PID/maps shows for its mappings and stat() for its descriptors.
 *
 * This file is the whole host: the list of processes, up to 8 threads that
 * share them out (segments-process.c reads each one), the merge of what the
 * threads found, and what the processes' views add up to per segment (owner,
 * mappers, residency).  A process whose maps or descriptors /proc refuses
 * (another user's, unless root) is counted, not guessed at.  Last, each
 * segment's readiness front is read from its control area (the library
 * reads the layout: mc_control_read()), through a descriptor of it or, as
 * root, a mapping (/proc/PID/map_files), and with it the publish slots the
 * segment declares.
 */
#include "config.h"

#include "segments-scan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

bool segments_grow(void **array, unsigned int count, size_t elem)
{
	void *p;

	/* Capacity doubles at powers of two. */
	if (count & (count - 1) || (count && count < 4))
		return true;
	p = realloc(*array, (count ? count * 2 : 4) * elem);
	if (!p)
		return false;
	*array = p;
	return true;
}

bool segments_node_add(struct node_bytes *nb, unsigned int node, uint64_t bytes)
{
	if (node >= 4096)
		return false;
	if (node >= nb->count) {
		uint64_t *p = realloc(nb->bytes, (node + 1) * sizeof(*p));

		if (!p)
			return false;
		memset(p + nb->count, 0, (node + 1 - nb->count) * sizeof(*p));
		nb->bytes = p;
		nb->count = node + 1;
	}
	nb->bytes[node] += bytes;
	return true;
}

static int by_pid(const void *a, const void *b)
{
	const struct segment_process *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

static int by_label(const void *a, const void *b)
{
	const struct segment *x = a, *y = b;
	int c = strcmp(x->label, y->label);

	return c ? c : (x->ino > y->ino) - (x->ino < y->ino);
}

/* Owner, mappers, residency: what the processes' views add up to. */
static void derive(int procfd, struct segment *s)
{
	long base_page = sysconf(_SC_PAGESIZE);
	unsigned int holders = 0;
	int holder = -1;

	if (s->nprocs > 1)
		qsort(s->procs, s->nprocs, sizeof(*s->procs), by_pid);
	for (unsigned int i = 0; i < s->nprocs; i++) {
		struct segment_process *p = &s->procs[i];

		if (p->maps)
			s->mappers++;
		if (p->holds_descriptor) {
			holders++;
			holder = (int)i;
		}
		if (s->named_owner >= 0 && p->pid_ns_pid == (unsigned long long)s->named_owner &&
		    s->owner < 0)
			s->owner = (int)i;
		/* A page is resident once, however many processes map it:
		 * per node, the mapping that has the most of it there. */
		for (unsigned int n = 0; n < p->nodes.count; n++)
			if (segments_node_add(&s->resident, n, 0) && p->nodes.bytes[n] > s->resident.bytes[n])
				s->resident.bytes[n] = p->nodes.bytes[n];
	}
	if (s->owner < 0 && s->named_owner < 0 && holders == 1)
		s->owner = holder;
	if (s->owner >= 0)
		s->procs[s->owner].owner = true;
	for (unsigned int n = 0; n < s->resident.count; n++)
		s->resident_bytes += s->resident.bytes[n];
	if (!s->page_size)
		s->page_size = (uint64_t)base_page;
	s->hugetlb = s->hugetlb || s->page_size > (uint64_t)base_page;
	if (s->hugetlb) {
		s->huge_page_bytes = s->resident_bytes;
	} else if (s->mappers) {
		/* THP: how much is PMD-mapped in the mapping with the most resident. */
		unsigned int best = 0;

		for (unsigned int i = 1; i < s->nprocs; i++)
			if (s->procs[i].resident_bytes > s->procs[best].resident_bytes)
				best = i;
		segments_read_smaps(procfd, &s->procs[best]);
		s->huge_page_bytes = s->procs[best].pmd_bytes;
	}
	s->private_copies_bytes = (uint64_t)s->mappers * s->size;
	s->kept = !strncmp(s->label, KEPT_LABEL_PREFIX, strlen(KEPT_LABEL_PREFIX));
}

static bool maps_it(const struct segment *s, pid_t pid)
{
	for (unsigned int i = 0; i < s->nprocs; i++)
		if (s->procs[i].pid == pid)
			return s->procs[i].maps;
	return false;
}

/* @c is @s's control area by its name and where it was found: in a process
 * that maps the segment, a rank of its group.  The node keeper holds the
 * areas of a kept segment's last groups without mapping the pages: a group
 * gone says nothing of the segment. */
static bool control_of(const struct segment *s, const struct segment_control *c)
{
	return c->named_owner == s->named_owner && !strcmp(c->label, s->label) && maps_it(s, c->pid);
}

/* @s's front from the first of its control areas that opens and has its
 * size: descriptors first (they need no privilege beyond the process's
 * fd/), then mappings (map_files: CAP_SYS_ADMIN). */
static void read_front(int procfd, const struct segment_scan *scan, struct segment *s)
{
	for (int pass = 0; pass < 2 && !s->has_front; pass++)
		for (unsigned int i = 0; i < scan->ncontrols && !s->has_front; i++) {
			const struct segment_control *c = &scan->controls[i];
			int fd;

			if ((strstr(c->path, "/fd/") != NULL) != (pass == 0) || !control_of(s, c))
				continue;
			fd = openat(procfd, c->path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			s->has_front = mc_control_read(fd, &s->front) == 0 && s->front.alloc_size == s->size;
			if (s->has_front)
				s->slot_count = s->front.slot_count;
			close(fd);
		}
	/* What every rank's wait will say once one of them looks. */
	if (s->has_front && s->front.state == MC_FRONT_VIEW_COMMITTING && s->front.owner_died) {
		s->front.state = MC_FRONT_VIEW_FAILED;
		s->front.error = ESRCH;
		s->front.error_rank = UINT32_MAX;
		snprintf(s->front.message, sizeof(s->front.message),
			 "the owner (pid %u in its namespace) died while committing, %llu of %llu bytes "
			 "committed; no rank has noticed yet",
			 s->front.owner_pid, (unsigned long long)s->front.committed,
			 (unsigned long long)s->front.alloc_size);
	}
}

const char *segment_front_state(const struct segment *s)
{
	if (!s->has_front)
		return NULL;
	return s->front.state == MC_FRONT_VIEW_COMMITTED ? "committed"
	       : s->front.state == MC_FRONT_VIEW_FAILED	 ? "failed"
							 : "committing";
}

double segment_front_percent(const struct segment *s)
{
	double p;

	if (!s->has_front || !s->front.alloc_size)
		return -1;
	if (s->front.state == MC_FRONT_VIEW_COMMITTED)
		return 100;
	p = (double)s->front.committed * 100 / (double)s->front.alloc_size;
	/* Still committing is never 100%, however little is left. */
	return s->front.state == MC_FRONT_VIEW_COMMITTING && p > 99.9 ? 99.9 : p;
}

/* Threads share the processes out in chunks: /proc reads of different
 * processes do not contend, and a busy node has the cores. */
#define MAX_THREADS	     8
#define PROCESSES_PER_THREAD 128
#define CHUNK		     16

struct scan_worker {
	pthread_t thread;
	struct segment_scan part;
	const pid_t *pids;
	atomic_uint *next;
	unsigned int npids;
	int procfd;
};

static void *scan_worker_main(void *arg)
{
	struct scan_worker *w = arg;
	size_t cap = 64 << 10;
	char *buf = malloc(cap);
	unsigned int first;

	while (buf && (first = atomic_fetch_add(w->next, CHUNK)) < w->npids) {
		for (unsigned int i = first; i < first + CHUNK && i < w->npids; i++) {
			w->part.processes++;
			if (!segments_scan_process(&w->part, w->procfd, w->pids[i], &buf, &cap))
				w->part.unreadable++;
		}
	}
	free(buf);
	return NULL;
}

/* Move a worker's segments into @scan, joining the processes of the same segment. */
static bool merge(struct segment_scan *scan, struct segment_scan *part)
{
	scan->processes += part->processes;
	scan->unreadable += part->unreadable;
	for (unsigned int i = 0; i < part->ncontrols; i++) {
		if (!segments_grow((void **)&scan->controls, scan->ncontrols, sizeof(*scan->controls)))
			return false;
		scan->controls[scan->ncontrols++] = part->controls[i];
	}
	for (unsigned int i = 0; i < part->nsegs; i++) {
		struct segment *from = &part->segs[i], *to = NULL;
		struct segment_process *procs;
		unsigned int cap = 4;

		for (unsigned int j = 0; j < scan->nsegs && !to; j++)
			if (scan->segs[j].ino == from->ino && scan->segs[j].dev_major == from->dev_major &&
			    scan->segs[j].dev_minor == from->dev_minor)
				to = &scan->segs[j];
		if (!to) {
			if (!segments_grow((void **)&scan->segs, scan->nsegs, sizeof(*scan->segs)))
				return false;
			scan->segs[scan->nsegs++] = *from;
			from->procs = NULL;
			from->nprocs = 0;
			continue;
		}
		while (cap < to->nprocs + from->nprocs)
			cap *= 2; /* segments_grow()'s capacity rule */
		procs = realloc(to->procs, cap * sizeof(*procs));
		if (!procs)
			return false;
		memcpy(procs + to->nprocs, from->procs, from->nprocs * sizeof(*procs));
		to->procs = procs;
		to->nprocs += from->nprocs;
		free(from->procs);
		from->procs = NULL;
		from->nprocs = 0;
		if (from->size > to->size)
			to->size = from->size;
		if (!to->page_size)
			to->page_size = from->page_size;
		to->hugetlb = to->hugetlb || from->hugetlb;
		if (from->has_file_bytes && (!to->has_file_bytes || from->file_bytes > to->file_bytes))
			to->file_bytes = from->file_bytes;
		to->has_file_bytes = to->has_file_bytes || from->has_file_bytes;
	}
	return true;
}

/* Every numeric entry of @procfd; NULL when out of memory. */
static pid_t *list_pids(int procfd, unsigned int *count)
{
	DIR *dir = fdopendir(dup(procfd));
	struct dirent *de;
	pid_t *pids = NULL;

	*count = 0;
	if (!dir)
		return NULL;
	while ((de = readdir(dir))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);

		if (*end || pid <= 0)
			continue;
		if (!segments_grow((void **)&pids, *count, sizeof(*pids))) {
			closedir(dir);
			free(pids);
			*count = 0;
			return NULL; /* out of memory: no list rather than a short one */
		}
		pids[(*count)++] = (pid_t)pid;
	}
	closedir(dir);
	if (!pids)
		pids = malloc(sizeof(*pids)); /* no process at all is not an error */
	return pids;
}

bool segments_scan(const char *proc, struct segment_scan *scan)
{
	struct scan_worker workers[MAX_THREADS];
	struct timespec t0, t1;
	atomic_uint next = 0;
	unsigned int npids, nthreads;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	bool ok = true;
	pid_t *pids;
	int procfd;

	memset(scan, 0, sizeof(*scan));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	procfd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (procfd < 0)
		return false;
	pids = list_pids(procfd, &npids);
	if (!pids) {
		close(procfd);
		errno = ENOMEM;
		return false;
	}
	nthreads = npids / PROCESSES_PER_THREAD + 1;
	if (nthreads > MAX_THREADS)
		nthreads = MAX_THREADS;
	if (cpus > 0 && nthreads > (unsigned int)cpus)
		nthreads = (unsigned int)cpus;
	for (unsigned int t = 0; t < nthreads; t++) {
		workers[t] =
			(struct scan_worker){ .procfd = procfd, .pids = pids, .npids = npids, .next = &next };
		/* Worker 0 is this thread; a thread that cannot start leaves its share to the others. */
		if (t && pthread_create(&workers[t].thread, NULL, scan_worker_main, &workers[t]) != 0)
			nthreads = t;
	}
	scan_worker_main(&workers[0]);
	for (unsigned int t = 0; t < nthreads; t++) {
		if (t)
			pthread_join(workers[t].thread, NULL);
		ok = ok && merge(scan, &workers[t].part);
		segments_free(&workers[t].part);
	}
	free(pids);
	if (ok)
		for (unsigned int i = 0; i < scan->nsegs; i++) {
			derive(procfd, &scan->segs[i]);
			read_front(procfd, scan, &scan->segs[i]);
			scan->kept += scan->segs[i].kept;
		}
	close(procfd);
	if (!ok) {
		segments_free(scan);
		errno = ENOMEM;
		return false;
	}
	if (scan->nsegs > 1) /* no segments: segs is NULL, which qsort must not get */
		qsort(scan->segs, scan->nsegs, sizeof(*scan->segs), by_label);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	scan->duration_ns =
		(uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
	return true;
}

void segments_free(struct segment_scan *scan)
{
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		struct segment *s = &scan->segs[i];

		for (unsigned int j = 0; j < s->nprocs; j++) {
			free(s->procs[j].nodes.bytes);
			free(s->procs[j].starts);
		}
		free(s->procs);
		free(s->resident.bytes);
	}
	free(scan->segs);
	free(scan->controls);
	memset(scan, 0, sizeof(*scan));
}
