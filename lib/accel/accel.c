/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which accelerator runtime, if any, serves this host (accel.h): the table of
 * runtimes this build has, asked in order of preference, for host
 * registration, for where a device sits and, for the CLI's doctor, for a
 * report of each (private.h).  Each is loaded on first use
 * (runtime-loader.c), never before a caller needs it.
 */
#include "config.h"

#include "base/error.h"
#include "host/placement.h"
#include "mooncake/segment.h"
#include "accel.h"
#include "private.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In order of preference; each is compiled in only when configure found its headers. */
static const struct mc_accel_ops *const runtimes[] = {
#if HAVE_CUDA
	&mc_accel_cuda,
#endif
#if HAVE_ASCEND
	&mc_accel_ascend,
#endif
	NULL,
};

const struct mc_accel_ops *mc_accel_for_host_register(void)
{
	for (size_t i = 0; runtimes[i]; i++)
		if (runtimes[i]->available())
			return runtimes[i];
	return NULL;
}

int mc_accel_require_host_register(void)
{
	if (mc_accel_for_host_register())
		return 0;
	return mc_error(ENOTSUP,
			"Shared segment host_register=true needs an accelerator runtime with a device, and "
			"none was found (%s); use host_register=false",
			HAVE_CUDA || HAVE_ASCEND
				? "CUDA: libcuda.so.1 or MOONCAKE_SEGMENT_CUDA_LIBRARY; Ascend: "
				  "libascendcl.so or MOONCAKE_SEGMENT_ASCEND_LIBRARY"
				: "this build has neither CUDA nor Ascend support");
}

int mc_accel_device_node(int device)
{
	char bus[32];

	for (size_t i = 0; runtimes[i]; i++)
		if (runtimes[i]->pci_bus_id(device, bus, sizeof(bus)))
			return mc_topology_pci_node(bus);
	return -1;
}

MC_PRIVATE bool mc_accel_report(size_t index, struct mc_runtime_report *report)
{
	const struct mc_accel_ops *runtime;

	for (size_t i = 0; i <= index; i++)
		if (!runtimes[i])
			return false;
	runtime = runtimes[index];
	memset(report, 0, sizeof(*report));
	report->name = runtime->name;
	report->available = runtime->available();
	report->why = runtime->why_unavailable(&report->loaded);
	for (int d = 0; d < MC_RUNTIME_REPORT_DEVICES; d++) {
		char *bus = report->device[d].pci_bus_id;

		if (!runtime->pci_bus_id(d, bus, sizeof(report->device[d].pci_bus_id)))
			break;
		report->device[d].numa_node = mc_topology_pci_node(bus);
		report->devices++;
	}
	return true;
}
