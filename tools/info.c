/* SPDX-License-Identifier: Apache-2.0 */
/* mooncake-segment info: the version, what this build has and what this host supports. */
#include "config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mooncake/segment.h>

#include "cli.h"

int cmd_info(int argc, char **argv)
{
	static const struct option options[] = { { "json", no_argument, NULL, 'j' },
						 { "help", no_argument, NULL, 'h' },
						 { NULL, 0, NULL, 0 } };
	bool json = false, mmap_ok, hugetlb_ok, register_ok, vmm_ok;
	char shmem[128] = "unknown", pmd[32] = "unknown", boot[64] = "unknown";
	uint64_t pmd_bytes;
	int c;

	while ((c = getopt_long(argc, argv, "jh", options, NULL)) != -1) {
		if (c == 'j') {
			json = true;
		} else {
			fprintf(c == 'h' ? stdout : stderr, "Usage: %s info [--json]\n", PROGRAM);
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "%s info: unexpected argument '%s'; usage: %s info [--json]\n", PROGRAM,
			argv[optind], PROGRAM);
		return 2;
	}
	mmap_ok = mooncake_segment_supported(true, false, false);
	hugetlb_ok = mooncake_segment_supported(true, false, true);
	register_ok = mooncake_segment_supported(true, true, false);
	vmm_ok = mooncake_segment_supported(false, false, false);
	mc_read_host_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled", shmem, sizeof(shmem));
	mc_read_host_line("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", pmd, sizeof(pmd));
	mc_read_host_line("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));

	if (json) {
		printf("{\"version\": \"%s\", \"build\": {\"cuda\": %s, \"ascend\": %s, \"ascend_vmm\": %s}, "
		       "\"supported\": {\"mmap\": %s, \"hugetlb\": %s, \"host_register\": %s, \"vmm\": %s}, "
		       "\"page_size\": %ld, \"thp_pmd_size\": ",
		       mooncake_segment_version(), HAVE_CUDA ? "true" : "false",
		       HAVE_ASCEND ? "true" : "false", HAVE_ASCEND_VMM ? "true" : "false",
		       mmap_ok ? "true" : "false", hugetlb_ok ? "true" : "false",
		       register_ok ? "true" : "false", vmm_ok ? "true" : "false", sysconf(_SC_PAGESIZE));
		/* A number, as page_size is; null when the kernel does not say. */
		if (parse_uint(pmd, 1, UINT64_MAX, &pmd_bytes))
			printf("%llu", (unsigned long long)pmd_bytes);
		else
			printf("null");
		printf(", \"shmem_enabled\": ");
		json_string(stdout, shmem);
		printf(", \"hugetlb_default_size\": %llu, \"boot_id\": ",
		       (unsigned long long)mc_meminfo_field("Hugepagesize"));
		json_string(stdout, boot);
		printf("}\n");
		return 0;
	}
	printf("%s %s\n\n", PROGRAM, mooncake_segment_version());
	printf("this build:\n");
	printf("  CUDA headers             %s\n",
	       HAVE_CUDA ? "found at build time" : "not found at build time");
	printf("  Ascend headers           %s\n",
	       HAVE_ASCEND ? "found at build time" : "not found at build time");
	printf("  Ascend VMM (mmap=false)  %s\n", HAVE_ASCEND_VMM ? "built" : "not built");
	printf("this host supports:\n");
	printf("  mmap (memfd)             %s\n", mmap_ok ? "yes" : "no");
	printf("  hugetlb                  %s\n", hugetlb_ok ? "yes" : "no");
	printf("  host_register            %s\n",
	       register_ok ? "yes" : "no (no accelerator runtime with a device)");
	printf("  VMM (mmap=false)         %s\n",
	       vmm_ok ? "yes" : "no (no mmap=false backend can serve this host: doctor says why)");
	printf("pages:\n");
	printf("  base page                %ld bytes\n", sysconf(_SC_PAGESIZE));
	printf("  THP PMD size             %s bytes, shmem_enabled: %s\n", pmd, shmem);
	printf("  HugeTLB default size     %llu kB\n",
	       (unsigned long long)(mc_meminfo_field("Hugepagesize") >> 10));
	printf("host:\n");
	printf("  boot id                  %s\n", boot);
	return 0;
}
