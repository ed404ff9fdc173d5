/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One process's part of the scan (segments.c shares the processes out):
 * its maps (read whole, searched for the name), the descriptors in fd/,
 * then, only for a process that maps a segment, numa_maps (read until its
 * last mapping of a segment, so the kernel does not walk the rest), status
 * and cgroup; smaps only for one process per segment.  What it finds goes
 * into the calling thread's own segment_scan, found by (device, inode).
 * Control areas (the readiness front) are noted where the process holds or
 * maps one; segments.c reads them.
 */
#include "config.h"

#include "segments-scan.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "private.h"

/* A name as /proc shows it: "LABEL|owner=PID (deleted)". */
void segments_parse_name(const char *name, char *label, size_t size, long *owner)
{
	size_t len = strcspn(name, "|");
	const char *tag = name + len;
	static const char deleted[] = " (deleted)";

	*owner = -1;
	if (!strncmp(tag, SEGMENT_OWNER_TAG, strlen(SEGMENT_OWNER_TAG)) &&
	    isdigit((unsigned char)tag[strlen(SEGMENT_OWNER_TAG)]))
		*owner = strtol(tag + strlen(SEGMENT_OWNER_TAG), NULL, 10);
	else if (!*tag && len >= strlen(deleted) && !strcmp(name + len - strlen(deleted), deleted))
		len -= strlen(deleted); /* a name from before the owner tag */
	if (len >= size)
		len = size - 1;
	memcpy(label, name, len);
	label[len] = '\0';
}

static struct segment *find_segment(struct segment_scan *scan, unsigned int maj, unsigned int min,
				    uint64_t ino, const char *name)
{
	struct segment *s;

	for (unsigned int i = 0; i < scan->nsegs; i++) {
		s = &scan->segs[i];
		if (s->ino == ino && s->dev_major == maj && s->dev_minor == min)
			return s;
	}
	if (!segments_grow((void **)&scan->segs, scan->nsegs, sizeof(*scan->segs)))
		return NULL;
	s = &scan->segs[scan->nsegs++];
	memset(s, 0, sizeof(*s));
	s->dev_major = maj;
	s->dev_minor = min;
	s->ino = ino;
	s->owner = -1;
	segments_parse_name(name, s->label, sizeof(s->label), &s->named_owner);
	return s;
}

/* This process's entry in @s (processes are scanned one at a time). */
static struct segment_process *find_process(struct segment *s, pid_t pid)
{
	struct segment_process *p;

	if (s->nprocs && s->procs[s->nprocs - 1].pid == pid)
		return &s->procs[s->nprocs - 1];
	if (!segments_grow((void **)&s->procs, s->nprocs, sizeof(*s->procs)))
		return NULL;
	p = &s->procs[s->nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	return p;
}

/* The whole of a /proc file into *buf; -1 with errno on failure. */
static ssize_t read_all(int dirfd, const char *name, char **buf, size_t *cap)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	ssize_t n;

	if (fd < 0)
		return -1;
	for (;;) {
		if (*cap - len < 4096) {
			char *p = realloc(*buf, *cap * 2);

			if (!p) {
				close(fd);
				errno = ENOMEM;
				return -1;
			}
			*buf = p;
			*cap *= 2;
		}
		n = read(fd, *buf + len, *cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (n < 0)
		return -1;
	(*buf)[len] = '\0';
	return (ssize_t)len;
}

/* "\012" in a maps path is a newline in the name. */
static void unescape_newlines(char *s)
{
	char *out = s;

	for (; *s; s++) {
		if (!strncmp(s, "\\012", 4)) {
			*out++ = '\n';
			s += 3;
		} else {
			*out++ = *s;
		}
	}
	*out = '\0';
}

/* Note a control area that process @pid holds or maps (@path under /proc);
 * one note per area and process, a descriptor preferred (map_files needs
 * CAP_SYS_ADMIN).  False only when out of memory. */
static bool note_control(struct segment_scan *scan, pid_t pid, const char *path, const char *name,
			 unsigned int maj, unsigned int min, uint64_t ino)
{
	struct segment_control *c;

	for (unsigned int i = 0; i < scan->ncontrols; i++) {
		c = &scan->controls[i];
		if (c->pid == pid && c->ino == ino && c->dev_major == maj && c->dev_minor == min) {
			if (strstr(path, "/fd/"))
				snprintf(c->path, sizeof(c->path), "%s", path);
			return true;
		}
	}
	if (!segments_grow((void **)&scan->controls, scan->ncontrols, sizeof(*scan->controls)))
		return false;
	c = &scan->controls[scan->ncontrols++];
	memset(c, 0, sizeof(*c));
	c->pid = pid;
	snprintf(c->path, sizeof(c->path), "%s", path);
	segments_parse_name(name, c->label, sizeof(c->label), &c->named_owner);
	c->dev_major = maj;
	c->dev_minor = min;
	c->ino = ino;
	return true;
}

/* One mapping of a maps file whose path starts with the prefix searched for. */
struct maps_line {
	unsigned long long lo, hi, offset, ino;
	unsigned int maj, min;
	char name[512]; /* the path after the prefix, newlines unescaped */
};

/* Call @visit for every line of @maps whose path starts with @prefix (maps
 * are searched for the prefix, not parsed line by line: most lines are not
 * ours).  False when @visit is (out of memory). */
static bool walk_maps(const char *maps, size_t len, const char *prefix,
		      bool (*visit)(const struct maps_line *m, void *arg), void *arg)
{
	const char *end = maps + len, *hit = maps;
	size_t prefix_len = strlen(prefix);

	while ((hit = memmem(hit, (size_t)(end - hit), prefix, prefix_len))) {
		const char *start = hit, *eol = memchr(hit, '\n', (size_t)(end - hit));
		struct maps_line m;
		char line[1024];
		int path = 0;

		if (!eol)
			eol = end;
		while (start > maps && start[-1] != '\n')
			start--;
		hit = eol;
		if ((size_t)(eol - start) >= sizeof(line))
			continue;
		memcpy(line, start, (size_t)(eol - start));
		line[eol - start] = '\0';
		if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu %n", &m.lo, &m.hi, &m.offset, &m.maj, &m.min,
			   &m.ino, &path) < 6 ||
		    strncmp(line + path, prefix, prefix_len) != 0)
			continue;
		snprintf(m.name, sizeof(m.name), "%s", line + path + prefix_len);
		unescape_newlines(m.name);
		if (!visit(&m, arg))
			return false;
	}
	return true;
}

struct process_maps {
	struct segment_scan *scan;
	pid_t pid;
};

static bool visit_control(const struct maps_line *m, void *arg)
{
	const struct process_maps *pm = arg;
	char path[80];

	snprintf(path, sizeof(path), "%d/map_files/%llx-%llx", (int)pm->pid, m->lo, m->hi);
	return note_control(pm->scan, pm->pid, path, m->name, m->maj, m->min, m->ino);
}

/* Note every mapping of a control area in @maps; false only when out of memory. */
static bool scan_control_maps(struct segment_scan *scan, pid_t pid, const char *maps, size_t len)
{
	struct process_maps pm = { scan, pid };

	return walk_maps(maps, len, SEGMENT_CONTROL_PREFIX, visit_control, &pm);
}

static bool visit_segment(const struct maps_line *m, void *arg)
{
	const struct process_maps *pm = arg;
	struct segment *s = find_segment(pm->scan, m->maj, m->min, m->ino, m->name);
	struct segment_process *p = s ? find_process(s, pm->pid) : NULL;

	if (!p || !segments_grow((void **)&p->starts, p->nstarts, sizeof(*p->starts)))
		return false;
	p->starts[p->nstarts++] = m->lo;
	p->maps = true;
	p->mapped_bytes += m->hi - m->lo;
	if (m->offset + (m->hi - m->lo) > s->size)
		s->size = m->offset + (m->hi - m->lo);
	return true;
}

/* Record every mapping of a segment in @maps; false only when out of memory. */
static bool scan_maps(struct segment_scan *scan, pid_t pid, char *maps, size_t len)
{
	struct process_maps pm = { scan, pid };

	return walk_maps(maps, len, SEGMENT_MEMFD_PREFIX, visit_segment, &pm);
}

/* Mark the segments whose descriptor this process holds; false when fd/ is refused. */
static bool scan_descriptors(struct segment_scan *scan, int piddir, pid_t pid)
{
	int fd = openat(piddir, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	char link[512];
	ssize_t n;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return errno != EACCES && errno != EPERM;
	}
	while ((de = readdir(dir))) {
		struct segment *s;
		struct segment_process *p;
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		n = readlinkat(dirfd(dir), de->d_name, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (!strncmp(link, SEGMENT_CONTROL_PREFIX, strlen(SEGMENT_CONTROL_PREFIX)) &&
		    fstatat(dirfd(dir), de->d_name, &st, 0) == 0) {
			char path[80];

			snprintf(path, sizeof(path), "%d/fd/%.24s", (int)pid, de->d_name); /* a number */
			if (!note_control(scan, pid, path, link + strlen(SEGMENT_CONTROL_PREFIX),
					  major(st.st_dev), minor(st.st_dev), st.st_ino))
				break;
			continue;
		}
		if (strncmp(link, SEGMENT_MEMFD_PREFIX, strlen(SEGMENT_MEMFD_PREFIX)) != 0 ||
		    fstatat(dirfd(dir), de->d_name, &st, 0) != 0)
			continue;
		s = find_segment(scan, major(st.st_dev), minor(st.st_dev), st.st_ino,
				 link + strlen(SEGMENT_MEMFD_PREFIX));
		p = s ? find_process(s, pid) : NULL;
		if (!p)
			break;
		p->holds_descriptor = true;
		if ((uint64_t)st.st_size > s->size)
			s->size = (uint64_t)st.st_size;
		/* What the file holds, mapped or not: a kept segment's pages live
		 * in the keeper's descriptor alone. */
		s->has_file_bytes = true;
		s->file_bytes = (uint64_t)st.st_blocks * 512;
	}
	closedir(dir);
	return true;
}

static bool is_start(const struct segment_process *p, unsigned long long start)
{
	for (unsigned int i = 0; i < p->nstarts; i++)
		if (p->starts[i] == start)
			return true;
	return false;
}

/* The process's entry in the segment that @start belongs to, or NULL. */
static struct segment_process *owner_of_start(struct segment_scan *scan, pid_t pid, unsigned long long start,
					      struct segment **seg)
{
	for (unsigned int i = 0; i < scan->nsegs; i++) {
		struct segment *s = &scan->segs[i];
		struct segment_process *p = s->nprocs ? &s->procs[s->nprocs - 1] : NULL;

		if (p && p->pid == pid && is_start(p, start)) {
			*seg = s;
			return p;
		}
	}
	return NULL;
}

static FILE *open_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;

	if (!f && fd >= 0)
		close(fd);
	return f;
}

/* segments_read_smaps()'s process, the segment mappings it has still to
 * meet and the huge-page bytes met so far. */
struct smaps_read {
	struct segment_process *p;
	uint64_t pmd_bytes;
	unsigned int left;
};

static bool add_segment_mapping(const struct mc_smaps_mapping *m, void *arg)
{
	struct smaps_read *r = arg;

	if (!is_start(r->p, m->start))
		return true;
	r->p->smaps_rss += m->rss + m->shared_hugetlb; /* HugeTLB pages are not in Rss */
	r->pmd_bytes += m->shmem_pmd_mapped + m->file_pmd_mapped + m->shared_hugetlb + m->private_hugetlb;
	return --r->left > 0; /* past its last segment mapping: spare the kernel the rest */
}

/* What numa_maps lacks: THP (PMD-mapped) bytes, and Rss on a kernel without NUMA.
 * Only for one process per segment: smaps walks the page tables like numa_maps. */
void segments_read_smaps(int procfd, struct segment_process *p)
{
	char path[64];
	struct smaps_read r = { .p = p, .left = p->nstarts };

	snprintf(path, sizeof(path), "%d/smaps", (int)p->pid);
	if (mc_smaps_walk(procfd, path, add_segment_mapping, &r) == 0)
		p->pmd_bytes = r.pmd_bytes;
}

/* Resident bytes per NUMA node of the segment mappings, and their page size, from numa_maps. */
static bool read_numa_maps(struct segment_scan *scan, int piddir, pid_t pid, unsigned int wanted)
{
	FILE *f = open_at(piddir, "numa_maps");
	char line[4096], *save, *tok;
	struct segment_process *p;
	struct segment *s;
	unsigned long long page_kb, pages[64];
	unsigned int nodes[64], n;

	if (!f)
		return false;
	while (wanted && fgets(line, sizeof(line), f)) {
		p = owner_of_start(scan, pid, strtoull(line, NULL, 16), &s);
		if (!p)
			continue;
		wanted--;
		page_kb = 0;
		n = 0;
		for (tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			if (tok[0] == 'N' && isdigit((unsigned char)tok[1]) && n < 64 &&
			    sscanf(tok, "N%u=%llu", &nodes[n], &pages[n]) == 2)
				n++;
			else if (!strcmp(tok, "huge"))
				s->hugetlb = true;
			else
				sscanf(tok, "kernelpagesize_kB=%llu", &page_kb);
		}
		if (page_kb && !s->page_size)
			s->page_size = page_kb << 10;
		for (unsigned int i = 0; i < n; i++) {
			segments_node_add(&p->nodes, nodes[i], pages[i] * (page_kb << 10));
			p->resident_bytes += pages[i] * (page_kb << 10);
		}
	}
	fclose(f);
	return true;
}

static void read_text(int dirfd, const char *name, char *buf, size_t size)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
}

/* The command and the pid in its own namespace (status), the cgroup (v2, else the memory controller's). */
static void describe_process(int piddir, struct segment_process *p, pid_t pid)
{
	char buf[4096], *line, *save, *path = NULL;

	p->pid_ns_pid = (unsigned long long)pid;
	read_text(piddir, "status", buf, sizeof(buf));
	if (!strncmp(buf, "Name:\t", 6)) {
		line = buf + 6;
		line[strcspn(line, "\n")] = '\0';
		if (strlen(line) >= sizeof(p->command))
			line[sizeof(p->command) - 1] = '\0';
		memcpy(p->command, line, strlen(line) + 1);
		line[strlen(line)] = '\n';
	}
	line = strstr(buf, "\nNSpid:");
	if (line) {
		char *eol = strchr(line + 1, '\n'), *last;

		if (eol)
			*eol = '\0';
		last = strrchr(line, '\t');
		if (last)
			p->pid_ns_pid = strtoull(last + 1, NULL, 10);
	}

	read_text(piddir, "cgroup", buf, sizeof(buf));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':'), *second = colon ? strchr(colon + 1, ':') : NULL;

		if (!second)
			continue;
		if (!strncmp(line, "0::", 3)) {
			path = second + 1;
			break;
		}
		if (!path || strstr(colon, "memory"))
			path = second + 1;
	}
	if (!path)
		path = buf + strlen(buf); /* "" */
	if (strlen(path) >= sizeof(p->cgroup))
		path[sizeof(p->cgroup) - 1] = '\0';
	memcpy(p->cgroup, path, strlen(path) + 1);
}

/* One process: false when /proc refused what it needed. */
bool segments_scan_process(struct segment_scan *scan, int procfd, pid_t pid, char **buf, size_t *cap)
{
	char name[32];
	int piddir;
	ssize_t len;
	unsigned int wanted = 0;
	bool readable = true;
	const struct segment_process *described = NULL;

	snprintf(name, sizeof(name), "%d", (int)pid);
	piddir = openat(procfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (piddir < 0)
		return true; /* gone */
	len = read_all(piddir, "maps", buf, cap);
	if (len < 0) {
		readable = errno != EACCES && errno != EPERM;
		goto out;
	}
	if (len == 0)
		goto out; /* a kernel thread or a zombie: no memory */
	scan_maps(scan, pid, *buf, (size_t)len);
	scan_control_maps(scan, pid, *buf, (size_t)len);
	readable = scan_descriptors(scan, piddir, pid);

	for (unsigned int i = 0; i < scan->nsegs; i++) {
		struct segment *s = &scan->segs[i];
		struct segment_process *p = s->nprocs ? &s->procs[s->nprocs - 1] : NULL;

		if (!p || p->pid != pid)
			continue;
		wanted += p->nstarts;
		if (described) {
			memcpy(p->command, described->command, sizeof(p->command));
			memcpy(p->cgroup, described->cgroup, sizeof(p->cgroup));
			p->pid_ns_pid = described->pid_ns_pid;
		} else {
			describe_process(piddir, p, pid);
			described = p;
		}
	}
	if (wanted && !read_numa_maps(scan, piddir, pid, wanted)) {
		/* A kernel without NUMA: smaps, and everything on node 0. */
		for (unsigned int i = 0; i < scan->nsegs; i++) {
			struct segment *s = &scan->segs[i];
			struct segment_process *p = s->nprocs ? &s->procs[s->nprocs - 1] : NULL;

			if (p && p->pid == pid && p->maps) {
				segments_read_smaps(procfd, p);
				p->resident_bytes = p->smaps_rss;
				segments_node_add(&p->nodes, 0, p->resident_bytes);
			}
		}
	}
out:
	close(piddir);
	return readable;
}
