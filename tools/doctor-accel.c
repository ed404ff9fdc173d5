/* SPDX-License-Identifier: Apache-2.0 */
/*
 * doctor's checks of the accelerators: the CUDA driver and the Ascend
 * runtime as the library loads them (each GPU with its PCI bus id and host
 * NUMA node), and which VMM backend, if any, serves mmap=false on device 0,
 * as create() itself answers.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/segment.h>

#include "cli.h"
#include "doctor.h"

/* The runtime of this build named @name, as the library loads it; false when
 * this build has none of that name. */
static bool find_runtime(const char *name, struct mc_runtime_report *report)
{
	for (size_t i = 0; mc_accel_report(i, report); i++)
		if (!strcmp(report->name, name))
			return true;
	return false;
}

void check_cuda(void)
{
	struct mc_runtime_report cuda;
	char devices[512] = "";
	size_t used = 0;

	if (!find_runtime("cuda", &cuda)) {
		doctor_add("CUDA driver", OK, NULL,
			   "not in this build (host_register=True on CUDA unavailable)");
		return;
	}
	if (!cuda.loaded) {
		doctor_add("CUDA driver", OK, NULL,
			   "not loaded: %s (no NVIDIA driver: host_register=True on CUDA unavailable)",
			   cuda.why);
		return;
	}
	if (!cuda.available) {
		doctor_add(
			"CUDA driver", WARN,
			"install the NVIDIA driver matching the kernel module (nvidia-smi must work); no GPU visible: "
			"CUDA_VISIBLE_DEVICES, the container's --gpus",
			"loads but is not usable: %s", cuda.why);
		return;
	}
	/* Each GPU's host NUMA node: where automatic placement puts a segment for it. */
	for (int i = 0; i < cuda.devices && used < sizeof(devices); i++) {
		char node[16] = "?";

		if (cuda.device[i].numa_node >= 0)
			snprintf(node, sizeof(node), "%d", cuda.device[i].numa_node);
		used += (size_t)snprintf(devices + used, sizeof(devices) - used, "%s%d: %s node %s",
					 i ? ", " : "", i, cuda.device[i].pci_bus_id, node);
	}
	doctor_add("CUDA driver", OK, NULL, "%d device(s): %s", cuda.devices, devices);
}

void check_ascend(void)
{
	const char *home = secure_getenv("ASCEND_HOME_PATH");
	struct mc_runtime_report acl;
	bool built = find_runtime("ascend", &acl);

	doctor_add("Ascend runtime", OK, NULL, "%s%s%s%s",
		   !built	   ? "not in this build"
		   : acl.available ? "libascendcl.so loads, with a device"
		   : acl.loaded	   ? "libascendcl.so loads: "
				   : "libascendcl.so not loaded: ",
		   built && !acl.available ? acl.why : "", home ? "; ASCEND_HOME_PATH=" : "",
		   home ? home : "");
}

/*
 * mmap=false: which VMM backend (CUDA host VMM, Ascend VMM) serves device 0
 * here, as create() itself answers: the library's reason why none can, else
 * a one-rank segment of one byte, created, completed, described and destroyed.
 * Optional: a host without one is fine (mmap=true serves everyone).
 */
void check_vmm(void)
{
	struct mooncake_segment_options opt;
	struct mooncake_segment *seg = NULL;
	struct mooncake_segment_info info;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	char reason[1024];
	bool described;

	if (mooncake_segment_unsupported_reason(false, false, false, 0, reason, sizeof(reason)) < 0) {
		doctor_add("mmap=false", OK, NULL, "unavailable on device 0: %s", reason);
		return;
	}
	/* Supported: a one-rank segment says which backend, and how it commits. */
	mooncake_segment_options_init(&opt);
	opt.mmap = false;
	opt.device_id = 0;
	if (mooncake_segment_create("doctor-probe", 1, &opt, &seg, blob) < 0) {
		doctor_add("mmap=false", OK, NULL, "unavailable on device 0: %s",
			   mooncake_segment_last_error());
		return;
	}
	described = mooncake_segment_complete(seg, blob, sizeof(blob)) == 0 &&
		    mooncake_segment_get_info(seg, &info, sizeof(info)) == 0;
	mooncake_segment_destroy(seg);
	if (!described) {
		doctor_add("mmap=false", WARN,
			   "report this: a one-rank segment was created but not completed",
			   "created but not usable: %s", mooncake_segment_last_error());
		return;
	}
	doctor_add("mmap=false", OK, NULL, "%s on device 0 (%s, %llu KiB granules)", info.backend,
		   info.commit_method, (unsigned long long)(info.page_size >> 10));
}
