/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Facts about this host and this process (host.c, hugetlb.c): identity,
 * namespaces, page sizes, THP and HugeTLB support, CPUs.  Host-wide files are
 * read under the host root (procfs.h); what belongs to this process is not.
 */
#ifndef MOONCAKE_SEGMENT_HOST_H
#define MOONCAKE_SEGMENT_HOST_H

#include <stdbool.h>
#include <stdint.h>

#define MC_BOOT_ID_SIZE 16

/* The kernel's boot id as 16 bytes; false when unreadable. */
bool mc_host_boot_id(uint8_t id[MC_BOOT_ID_SIZE]);
/* mc_host_pid_namespace(), mc_host_net_namespace() and
 * mc_host_shmem_thp_allowed(), the CLI's too, are in private.h. */
uint64_t mc_host_base_page_size(void);
/* THP PMD size from sysfs, 2 MiB when unreadable. */
uint64_t mc_host_thp_pmd_size(void);
/* CPUs this process may run on (at least 1). */
unsigned int mc_host_cpus_allowed(void);

/* The default huge page size (Hugepagesize in /proc/meminfo), 0 if none. */
uint64_t mc_hugetlb_default_size(void);
/* Whether the kernel has a pool of @page_size pages (sysfs hugepages-NkB). */
bool mc_hugetlb_size_configured(uint64_t page_size);
/* mc_hugetlb_sizes() and mc_hugetlb_pool(), the CLI's too, are in private.h. */

#endif
