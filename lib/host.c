/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Facts about this host and process that the protocol and the backends need:
 * boot id and PID namespace (so that blobs from another host or namespace
 * are recognised), page sizes and THP modes, CPUs allowed.  Host files are
 * read under the host root (procfs.h), so tests can use fixture trees.
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool mc_host_boot_id(uint8_t id[MC_BOOT_ID_SIZE])
{
	char line[64];
	size_t n = 0;

	if (!mc_read_host_line("/proc/sys/kernel/random/boot_id", line, sizeof(line)))
		return false;
	for (const char *p = line; *p && n < 2 * MC_BOOT_ID_SIZE; p++) {
		int v = hex_value(*p);

		if (*p == '-')
			continue;
		if (v < 0)
			return false;
		if (n % 2 == 0)
			id[n / 2] = (uint8_t)(v << 4);
		else
			id[n / 2] |= (uint8_t)v;
		n++;
	}
	return n == 2 * MC_BOOT_ID_SIZE;
}

uint64_t mc_host_pid_namespace(void)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st) != 0)
		return 0;
	return (uint64_t)st.st_ino;
}

uint64_t mc_host_base_page_size(void)
{
	long page = sysconf(_SC_PAGESIZE);

	return page > 0 ? (uint64_t)page : 4096;
}

uint64_t mc_host_thp_pmd_size(void)
{
	char line[32];
	char *end;
	unsigned long long value;

	if (mc_read_host_line("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", line, sizeof(line))) {
		errno = 0;
		value = strtoull(line, &end, 10);
		if (!errno && end != line && mc_is_power_of_two(value))
			return value;
	}
	return UINT64_C(2) << 20;
}

bool mc_host_shmem_thp_allowed(void)
{
	char line[128], mode[32];

	if (!mc_read_host_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled", line, sizeof(line)) ||
	    !mc_selected_mode(line, mode, sizeof(mode)))
		return false;
	return strcmp(mode, "never") != 0 && strcmp(mode, "deny") != 0;
}

unsigned int mc_host_cpus_allowed(void)
{
	cpu_set_t set;
	int n;

	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		n = CPU_COUNT(&set);
		if (n > 0)
			return (unsigned int)n;
	}
	n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned int)n : 1;
}

uint64_t mc_hugetlb_default_size(void)
{
	return mc_meminfo_field("Hugepagesize");
}

static bool read_u64_file(const char *path, uint64_t *value)
{
	char line[32], *end;

	if (!mc_read_host_line(path, line, sizeof(line)))
		return false;
	errno = 0;
	*value = strtoull(line, &end, 10);
	return !errno && end != line;
}

bool mc_hugetlb_size_configured(uint64_t page_size)
{
	char path[96], full[1024];
	struct stat st;

	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB",
		 (unsigned long long)(page_size >> 10));
	return stat(mc_host_path(full, sizeof(full), path), &st) == 0 && S_ISDIR(st.st_mode);
}

bool mc_hugetlb_pool(uint64_t page_size, uint64_t *total, uint64_t *available)
{
	char path[128];
	uint64_t free_pages, reserved;
	unsigned long long kb = (unsigned long long)(page_size >> 10);

	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB/nr_hugepages", kb);
	if (!read_u64_file(path, total))
		return false;
	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB/free_hugepages", kb);
	if (!read_u64_file(path, &free_pages))
		return false;
	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%llukB/resv_hugepages", kb);
	if (!read_u64_file(path, &reserved))
		reserved = 0;
	*available = free_pages > reserved ? free_pages - reserved : 0;
	return true;
}

uint64_t mc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
