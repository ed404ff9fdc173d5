/* SPDX-License-Identifier: Apache-2.0 */
/* Which accelerator runtime, if any, serves this host (accel.h). */
#include "config.h"

#include "accel.h"

#include <stddef.h>

/* In order of preference; each is compiled in only when configure found its headers. */
static const struct mc_accel_ops *const runtimes[] = {
#if HAVE_CUDA
	&mc_accel_cuda,
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

bool mc_accel_pci_bus_id(int device, char *buf, size_t size)
{
	for (size_t i = 0; runtimes[i]; i++)
		if (runtimes[i]->pci_bus_id(device, buf, size))
			return true;
	return false;
}
