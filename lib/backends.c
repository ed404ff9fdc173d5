/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table of backends this build has.  A backend (internal.h's
 * mc_backend_ops) is one file and its lines here; create() and supported()
 * take the one that serves the options' mmap value (of several, the first
 * that can serve the flags on this host, in table order).
 */
#include "config.h"

#include <stddef.h>

#include "internal.h"

extern const struct mc_backend_ops mc_backend_memfd; /* host-memfd.c */
#if HAVE_ASCEND_VMM
extern const struct mc_backend_ops mc_backend_ascend_vmm; /* vmm-ascend.c */
#endif
#if HAVE_CUDA_VMM
extern const struct mc_backend_ops mc_backend_cuda_vmm; /* vmm-cuda.c */
#endif

const struct mc_backend_ops *const mc_backends[] = {
	&mc_backend_memfd,
#if HAVE_ASCEND_VMM
	&mc_backend_ascend_vmm,
#endif
#if HAVE_CUDA_VMM
	&mc_backend_cuda_vmm,
#endif
	NULL,
};

const struct mc_backend_ops *mc_backend_choose(const struct mc_backend_ops *const *table, bool mmap,
					       bool host_register, bool hugetlb)
{
	const struct mc_backend_ops *first = NULL;
	size_t serving = 0;

	for (size_t i = 0; table[i]; i++)
		if (table[i]->mmap == mmap && !serving++)
			first = table[i];
	if (serving <= 1)
		return first; /* the only one: its own ops say what is missing */
	/* Several serve this mmap value: the first that can serve the flags here. */
	for (size_t i = 0; table[i]; i++)
		if (table[i]->mmap == mmap && table[i]->supported(host_register, hugetlb))
			return table[i];
	return first;
}

const struct mc_backend_ops *mc_backend_for(bool mmap, bool host_register, bool hugetlb)
{
	return mc_backend_choose(mc_backends, mmap, host_register, hugetlb);
}
