/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NUMA placement of the owner's pages (placement.c): the topology under the
 * host root, the policy resolved from the options, applied with libnuma's
 * mbind before the first page, and the placement actually obtained.
 */
#ifndef MOONCAKE_SEGMENT_PLACEMENT_H
#define MOONCAKE_SEGMENT_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>

enum mc_place_mode { MC_PLACE_DEFAULT, MC_PLACE_PREFERRED, MC_PLACE_BIND, MC_PLACE_INTERLEAVE };

struct mc_placement {
	enum mc_place_mode mode;
	int node;	 /* MC_PLACE_BIND, _PREFERRED: the node */
	uint64_t nodes;	 /* the node mask of the policy */
	uint64_t online; /* nodes online on this host */
	bool degraded;	 /* the kernel refused the policy */
	char why[128];
};

/* "0-3,5" -> bit mask (nodes < 64); false on junk. */
bool mc_parse_node_list(const char *text, uint64_t *mask);
/* The nodes online, from sysfs under the host root (procfs.h), as every reader below. */
bool mc_topology_online_nodes(uint64_t *mask);
/* The NUMA node of PCI device @pci_bus_id ("0000:3b:00.0", either case), -1 when unknown. */
int mc_topology_pci_node(const char *pci_bus_id);
/* -EINVAL when @numa_node names a node this host does not have (every rank checks). */
int mc_placement_check(int numa_node);
/* Whether automatic placement would follow the device's host node: numa_node
 * is automatic and more than one node is online.  Only then is it worth
 * asking an accelerator runtime where the device sits. */
bool mc_placement_wants_device_node(int numa_node);
/* The owner's policy from the requested @numa_node (a node, AUTO or
 * INTERLEAVE) and, for AUTO, the device's host node @device_node (-1:
 * unknown); -EINVAL for a node that does not exist.  Loads no runtime. */
int mc_placement_resolve(int numa_node, int device_node, struct mc_placement *p);
/* mbind the mapping before its first page; a refusal degrades (p->degraded). */
void mc_placement_apply(struct mc_placement *p, void *addr, uint64_t len);
/* Set this thread's policy (HugeTLB fallocate follows it); false when nothing was set. */
bool mc_placement_thread_enter(struct mc_placement *p, int *saved_mode, uint64_t *saved_nodes);
void mc_placement_thread_leave(int saved_mode, uint64_t saved_nodes);
/* Where the pages are: the node holding most sampled pages, and the mask of all. */
void mc_placement_query(void *addr, uint64_t len, uint64_t page_size, int *major_node, uint64_t *mask);

#endif
