/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel's account of one of this process's mappings, from
 * /proc/self/smaps: resident, proportional, THP-mapped and HugeTLB bytes.
 * get_info() reports residency and huge pages from it; the CLI's demo and
 * the tests read PSS from it too (private.h), so that every figure comes
 * from one reader.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "private.h"

/* Add @line's "NAME: N kB" to @total when it is the field @name. */
static bool add_field(const char *line, const char *name, uint64_t *total)
{
	size_t len = strlen(name);
	unsigned long long kb;

	if (strncmp(line, name, len) != 0 || line[len] != ':' || sscanf(line + len + 1, "%llu kB", &kb) != 1)
		return false;
	*total += (uint64_t)kb << 10;
	return true;
}

MC_PRIVATE bool mc_mapping_usage(const void *base, uint64_t len, struct mc_mapping_usage *usage)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	uintptr_t start = (uintptr_t)base, end = start + len, lo, hi;
	char line[256];
	bool inside = false, found = false;

	memset(usage, 0, sizeof(*usage));
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			/* A range split by madvise (THP then base pages) is several VMAs: count each. */
			inside = lo >= start && hi <= end;
			found = found || (inside && lo == start);
			continue;
		}
		if (inside)
			(void)(add_field(line, "Rss", &usage->rss) || add_field(line, "Pss", &usage->pss) ||
			       add_field(line, "ShmemPmdMapped", &usage->pmd_mapped) ||
			       add_field(line, "FilePmdMapped", &usage->pmd_mapped) ||
			       add_field(line, "Shared_Hugetlb", &usage->hugetlb) ||
			       add_field(line, "Private_Hugetlb", &usage->hugetlb));
	}
	fclose(f);
	return found;
}
