/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The HugeTLB pools of this host: the default huge page size, which sizes
 * have a pool, and how many pages a pool has free (free minus reserved), for
 * the memfd backend's page size and its error that names the fix, for
 * mooncake_segment_room() and for the CLI's doctor (private.h).  Read under
 * the host root (procfs.h), so tests can use fixture trees.
 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "host.h"
#include "private.h"
#include "procfs.h"

uint64_t mc_hugetlb_default_size(void)
{
	return mc_meminfo_field("Hugepagesize");
}

bool mc_hugetlb_size_configured(uint64_t page_size)
{
	char path[96], full[1024];
	struct stat st;

	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB",
		 (unsigned long long)(page_size >> 10));
	return stat(mc_host_path(full, sizeof(full), path), &st) == 0 && S_ISDIR(st.st_mode);
}

static int compare_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

MC_PRIVATE size_t mc_hugetlb_sizes(uint64_t *sizes, size_t max)
{
	char dir[1024];
	DIR *d = opendir(mc_host_path(dir, sizeof(dir), "/sys/kernel/mm/hugepages"));
	struct dirent *e;
	unsigned long long kb;
	char unit[3];
	size_t n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (sscanf(e->d_name, "hugepages-%llu%2s", &kb, unit) == 2 && !strcmp(unit, "kB") && kb) {
			if (n < max)
				sizes[n] = (uint64_t)kb << 10;
			n++;
		}
	closedir(d);
	qsort(sizes, n < max ? n : max, sizeof(*sizes), compare_u64);
	return n;
}

MC_PRIVATE bool mc_hugetlb_pool(uint64_t page_size, uint64_t *total, uint64_t *available)
{
	char path[128];
	uint64_t free_pages, reserved;
	unsigned long long kb = (unsigned long long)(page_size >> 10);

	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB/nr_hugepages", kb);
	if (!mc_read_host_number(path, total))
		return false;
	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB/free_hugepages", kb);
	if (!mc_read_host_number(path, &free_pages))
		return false;
	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB/resv_hugepages", kb);
	if (!mc_read_host_number(path, &reserved))
		reserved = 0;
	*available = free_pages > reserved ? free_pages - reserved : 0;
	return true;
}
