/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table of backends this build has.  A backend (internal.h's
 * mc_backend_ops) is one file and its lines here; create() picks the one that
 * serves the options' mmap value, supported() asks it what it can do.
 */
#include "config.h"

#include <stddef.h>

#include "internal.h"

extern const struct mc_backend_ops mc_backend_memfd; /* host-memfd.c */
#if HAVE_ASCEND_VMM
extern const struct mc_backend_ops mc_backend_ascend_vmm; /* vmm-ascend.c */
#endif

const struct mc_backend_ops *const mc_backends[] = {
	&mc_backend_memfd,
#if HAVE_ASCEND_VMM
	&mc_backend_ascend_vmm,
#endif
	NULL,
};

const struct mc_backend_ops *mc_backend_for(bool mmap)
{
	for (size_t i = 0; mc_backends[i]; i++)
		if (mc_backends[i]->mmap == mmap)
			return mc_backends[i];
	return NULL;
}
