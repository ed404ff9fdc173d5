/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel's account of a process's mappings, from its smaps file: one
 * walker (mc_smaps_walk) that hands each mapping, with its range, its file
 * and the byte fields, to a callback.  The library sums this process's own
 * mappings with it (mc_mapping_usage: get_info()'s residency and huge pages,
 * the demo's and the tests' PSS); the CLI's `list` reads other processes'
 * smaps under its --proc root with it (private.h), so that every figure
 * comes from one parser.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "private.h"

/* *@bytes from @line's "NAME: N kB" when it is the field @name. */
static bool read_field(const char *line, const char *name, uint64_t *bytes)
{
	size_t len = strlen(name);
	unsigned long long kb;

	if (strncmp(line, name, len) != 0 || line[len] != ':' || sscanf(line + len + 1, "%llu", &kb) != 1)
		return false;
	*bytes = (uint64_t)kb << 10;
	return true;
}

/* @line as a mapping's first line ("LO-HI PERMS OFFSET MAJ:MIN INO NAME")
 * into a fresh *@m; false when it is not one (a field line, or a header the
 * file was cut in). */
static bool read_header(char *line, struct mc_smaps_mapping *m)
{
	unsigned long long lo, hi, off, ino;
	unsigned int maj, min;
	int name = -1;
	size_t len;

	if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu %n", &lo, &hi, &off, &maj, &min, &ino, &name) < 6 ||
	    name < 0)
		return false;
	len = strlen(line + name);
	while (len && (line[name + len - 1] == '\n' || line[name + len - 1] == ' '))
		line[name + --len] = '\0';
	*m = (struct mc_smaps_mapping){ .start = lo,
					.end = hi,
					.offset = off,
					.ino = ino,
					.name = line + name,
					.dev_major = maj,
					.dev_minor = min };
	return true;
}

/* Add a field line to the mapping it belongs to. */
static void read_fields(const char *line, struct mc_smaps_mapping *m)
{
	(void)(read_field(line, "Rss", &m->rss) || read_field(line, "Pss", &m->pss) ||
	       read_field(line, "ShmemPmdMapped", &m->shmem_pmd_mapped) ||
	       read_field(line, "FilePmdMapped", &m->file_pmd_mapped) ||
	       read_field(line, "Shared_Hugetlb", &m->shared_hugetlb) ||
	       read_field(line, "Private_Hugetlb", &m->private_hugetlb));
}

MC_PRIVATE int mc_smaps_walk(int dirfd, const char *path, mc_smaps_visit visit, void *arg)
{
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
	struct mc_smaps_mapping m = { 0 }, next;
	/* The current mapping's header stays in its own buffer (m.name points
	 * into it) while its field lines are read into the other. */
	char *line = NULL, *header = NULL, *swap;
	size_t line_cap = 0, header_cap = 0, swap_cap;
	bool open = false, more = true;
	int err;

	if (!f) {
		err = errno;
		if (fd >= 0)
			close(fd);
		return -err;
	}
	while (more && getline(&line, &line_cap, f) >= 0) {
		if (!read_header(line, &next)) {
			if (open)
				read_fields(line, &m);
			continue;
		}
		if (open)
			more = visit(&m, arg);
		swap = header, header = line, line = swap;
		swap_cap = header_cap, header_cap = line_cap, line_cap = swap_cap;
		m = next;
		open = true;
	}
	/* The last mapping ends with the file, whatever its last line was. */
	if (open && more)
		visit(&m, arg);
	free(line);
	free(header);
	fclose(f);
	return 0;
}

/* mc_mapping_usage()'s range and sums. */
struct usage_walk {
	uint64_t start;
	uint64_t end;
	struct mc_mapping_usage *usage;
	bool found;
};

static bool add_usage(const struct mc_smaps_mapping *m, void *arg)
{
	struct usage_walk *w = arg;

	/* A range split by madvise (THP then base pages) is several VMAs: count each. */
	if (m->start < w->start || m->end > w->end)
		return true;
	w->found = w->found || m->start == w->start;
	w->usage->rss += m->rss;
	w->usage->pss += m->pss;
	w->usage->pmd_mapped += m->shmem_pmd_mapped + m->file_pmd_mapped;
	w->usage->hugetlb += m->shared_hugetlb + m->private_hugetlb;
	return true;
}

MC_PRIVATE bool mc_mapping_usage(const void *base, uint64_t len, struct mc_mapping_usage *usage)
{
	struct usage_walk w = { .start = (uintptr_t)base, .end = (uintptr_t)base + len, .usage = usage };

	memset(usage, 0, sizeof(*usage));
	/* This process's own mappings: never under the host root (procfs.h). */
	return mc_smaps_walk(AT_FDCWD, "/proc/self/smaps", add_usage, &w) == 0 && w.found;
}
