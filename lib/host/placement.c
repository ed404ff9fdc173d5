/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NUMA placement of the owner's pages, with libnuma.
 *
 * The policy is set on the mapping before any page exists: for shmem, mbind
 * on a shared mapping sets the file's shared policy, which fallocate and the
 * page faults then follow; hugetlbfs's fallocate follows the calling
 * thread's policy instead, so for HugeTLB the thread's policy is set around
 * the commit too.  A refused mbind (EPERM under the default container seccomp
 * profile without CAP_SYS_NICE, ENOSYS without NUMA) degrades to the default
 * placement with a warning; it never fails a create.  What the pages actually
 * got is read back with move_pages in query mode.
 *
 * Topology comes from sysfs under the host root (procfs.h), which tests point
 * at fixture trees.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mooncake/segment.h"
#include "placement.h"
#include "procfs.h"

#define MAX_NODES 64

bool mc_parse_node_list(const char *text, uint64_t *mask)
{
	const char *p = text;

	*mask = 0;
	while (*p && *p != '\n') {
		char *end;
		unsigned long lo = strtoul(p, &end, 10), hi = lo;

		if (end == p)
			return false;
		if (*end == '-') {
			p = end + 1;
			hi = strtoul(p, &end, 10);
			if (end == p || hi < lo)
				return false;
		}
		if (hi >= MAX_NODES)
			return false;
		for (unsigned long n = lo; n <= hi; n++)
			*mask |= UINT64_C(1) << n;
		p = end;
		if (*p == ',')
			p++;
		else if (*p && *p != '\n')
			return false;
	}
	return true;
}

bool mc_topology_online_nodes(uint64_t *mask)
{
	char line[256];

	if (!mc_read_host_line("/sys/devices/system/node/online", line, sizeof(line)))
		return false;
	return mc_parse_node_list(line, mask);
}

int mc_topology_pci_node(const char *pci_bus_id)
{
	char path[512], line[32], *end;
	long node;
	int n = snprintf(path, sizeof(path), "/sys/bus/pci/devices/");

	/* The CUDA driver spells the hex digits in capitals ("0000:3B:00.0"), sysfs in small letters. */
	if (n < 0 || (size_t)n >= sizeof(path))
		return -1;
	for (const char *c = pci_bus_id; *c && (size_t)n < sizeof(path) - 1; c++)
		path[n++] = (char)tolower((unsigned char)*c);
	path[n] = '\0';
	snprintf(path + n, sizeof(path) - (size_t)n, "/numa_node");
	if (!mc_read_host_line(path, line, sizeof(line)))
		return -1;
	node = strtol(line, &end, 10);
	return end != line && node >= 0 && node < MAX_NODES ? (int)node : -1;
}

static int node_count(uint64_t mask)
{
	int n = 0;

	for (; mask; mask &= mask - 1)
		n++;
	return n;
}

/* An explicit node must exist here; -EINVAL naming the fix otherwise. */
static int check_node(int numa_node, uint64_t online)
{
	if (numa_node >= 0 && (numa_node >= MAX_NODES || !(online & (UINT64_C(1) << numa_node))))
		return mc_error(EINVAL,
				"Shared segment numa_node %d does not exist on this host (online nodes: %d "
				"of them); use -1 for automatic placement",
				numa_node, node_count(online));
	return 0;
}

static uint64_t online_nodes(void)
{
	uint64_t online = 0;

	if (!mc_topology_online_nodes(&online))
		online = 1; /* no NUMA in sysfs: one node, 0 */
	return online;
}

int mc_placement_check(int numa_node)
{
	return numa_node >= 0 ? check_node(numa_node, online_nodes()) : 0;
}

bool mc_placement_wants_device_node(int numa_node)
{
	return numa_node == MOONCAKE_SEGMENT_NUMA_AUTO && node_count(online_nodes()) > 1;
}

int mc_placement_resolve(int numa_node, int device_node, struct mc_placement *p)
{
	uint64_t online = online_nodes();
	int err = check_node(numa_node, online);

	memset(p, 0, sizeof(*p));
	p->mode = MC_PLACE_DEFAULT;
	p->node = -1;
	p->online = online;
	if (err)
		return err;
	if (numa_node >= 0) {
		p->mode = MC_PLACE_BIND;
		p->node = numa_node;
		p->nodes = UINT64_C(1) << numa_node;
	} else if (numa_node == MOONCAKE_SEGMENT_NUMA_INTERLEAVE) {
		p->mode = node_count(online) > 1 ? MC_PLACE_INTERLEAVE : MC_PLACE_DEFAULT;
		p->nodes = online;
	} else if (device_node >= 0 && device_node < MAX_NODES && node_count(online) > 1 &&
		   (online & (UINT64_C(1) << device_node))) {
		/* Automatic: prefer the accelerator's host node; otherwise the process's own policy. */
		p->mode = MC_PLACE_PREFERRED;
		p->node = device_node;
		p->nodes = UINT64_C(1) << device_node;
	}
	return 0;
}

/* EPERM (seccomp without CAP_SYS_NICE) and ENOSYS (no NUMA) degrade; the rest too, but say so. */
static void degrade(struct mc_placement *p, const char *call, int err)
{
	p->degraded = true;
	snprintf(p->why, sizeof(p->why), "%s: %s", call, strerror(err));
	mc_log(MOONCAKE_SEGMENT_LOG_WARNING,
	       "Shared segment NUMA placement not applied (%s); default placement%s", p->why,
	       err == EPERM ? ". In a container, add CAP_SYS_NICE (docker --cap-add SYS_NICE) or allow "
			      "mbind in the seccomp profile"
			    : "");
}

static int policy_mode(const struct mc_placement *p)
{
	switch (p->mode) {
	case MC_PLACE_INTERLEAVE:
		return MPOL_INTERLEAVE;
	case MC_PLACE_PREFERRED:
		return MPOL_PREFERRED;
	default:
		return MPOL_BIND;
	}
}

void mc_placement_apply(struct mc_placement *p, void *addr, uint64_t len)
{
	unsigned long mask = (unsigned long)p->nodes;

	if (p->mode == MC_PLACE_DEFAULT)
		return;
	if (mbind(addr, len, policy_mode(p), &mask, MAX_NODES + 1, 0) != 0)
		degrade(p, "mbind", errno);
}

bool mc_placement_thread_enter(struct mc_placement *p, int *saved_mode, uint64_t *saved_nodes)
{
	unsigned long mask = (unsigned long)p->nodes, old = 0;

	if (p->mode == MC_PLACE_DEFAULT || p->degraded)
		return false;
	if (get_mempolicy(saved_mode, &old, MAX_NODES + 1, NULL, 0) != 0)
		return false;
	*saved_nodes = old;
	if (set_mempolicy(policy_mode(p), &mask, MAX_NODES + 1) != 0) {
		degrade(p, "set_mempolicy", errno);
		return false;
	}
	return true;
}

void mc_placement_thread_leave(int saved_mode, uint64_t saved_nodes)
{
	unsigned long mask = (unsigned long)saved_nodes;

	if (saved_mode == MPOL_DEFAULT)
		set_mempolicy(MPOL_DEFAULT, NULL, 0);
	else
		set_mempolicy(saved_mode, &mask, MAX_NODES + 1);
}

#define QUERY_SAMPLES 4096

void mc_placement_query(void *addr, uint64_t len, uint64_t page_size, int *major_node, uint64_t *mask)
{
	void *pages[QUERY_SAMPLES];
	int status[QUERY_SAMPLES], counts[MAX_NODES] = { 0 };
	uint64_t npages = len / page_size, stride = npages > QUERY_SAMPLES ? npages / QUERY_SAMPLES : 1;
	unsigned long n = 0;
	int best = -1;

	*major_node = -1;
	*mask = 0;
	for (uint64_t i = 0; i < npages && n < QUERY_SAMPLES; i += stride)
		pages[n++] = (char *)addr + i * page_size;
	if (!n || move_pages(0, n, pages, NULL, status, 0) != 0)
		return;
	for (unsigned long i = 0; i < n; i++) {
		if (status[i] < 0 || status[i] >= MAX_NODES)
			continue; /* not present (-ENOENT) or unknown */
		counts[status[i]]++;
		*mask |= UINT64_C(1) << status[i];
	}
	for (int node = 0; node < MAX_NODES; node++)
		if (counts[node] && (best < 0 || counts[node] > counts[best]))
			best = node;
	*major_node = best;
}
