/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Facts about this host and process that the protocol and the backends need:
 * boot id and PID namespace (so that blobs from another host or namespace
 * are recognised), page sizes and THP modes, CPUs allowed.  Host files are
 * read under the host root (procfs.h), so tests can use fixture trees.
 */
#include "config.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "host.h"
#include "private.h"
#include "procfs.h"

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

MC_PRIVATE uint64_t mc_host_pid_namespace(void)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st) != 0)
		return 0;
	return (uint64_t)st.st_ino;
}

MC_PRIVATE uint64_t mc_host_net_namespace(void)
{
	struct stat st;

	if (stat("/proc/self/ns/net", &st) != 0)
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
	uint64_t value;

	if (mc_read_host_number("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", &value) &&
	    mc_is_power_of_two(value))
		return value;
	return UINT64_C(2) << 20;
}

MC_PRIVATE bool mc_host_shmem_thp_allowed(void)
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
