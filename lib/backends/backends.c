/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table of backends this build has.  A backend (backend.h's
 * mc_backend_ops) is one file and its lines here; create() and supported()
 * take the one that serves the options' mmap value (of several, the first
 * that can serve the flags on this host, in table order).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "base/error.h"
#include "mooncake/segment.h"
#include "backend.h"

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

/* A backend's refusal as its cause gives it, without the lead and the advice
 * every VMM refusal shares: e.g. "libcuda.so.1: cannot open shared object file". */
static const char *refusal_reason(void)
{
	const struct mc_cause *cause = mc_last_cause();

	return cause->form == MC_FORM_SENTENCE || cause->form == MC_FORM_SEGMENT
		       ? mooncake_segment_last_error()
		       : cause->reason;
}

int mc_backend_granularity(const struct mc_backend_ops *chosen, const struct mooncake_segment_options *opt,
			   uint64_t *page_size)
{
	char reasons[768], message[sizeof(mc_last_cause()->reason)], chosen_reason[sizeof(message)];
	size_t used = 0, serving = 0;
	int err = chosen->granularity(opt, page_size);

	for (size_t i = 0; mc_backends[i]; i++)
		serving += mc_backends[i]->mmap == opt->mmap;
	if (err != -ENOTSUP || serving <= 1)
		return err;
	/* None of several can serve: each one's reason, not only the first's
	 * (@chosen's as it gave it: a second call need not fail the same way). */
	snprintf(chosen_reason, sizeof(chosen_reason), "%s", refusal_reason());
	reasons[0] = '\0';
	for (size_t i = 0; mc_backends[i] && used < sizeof(reasons); i++) {
		uint64_t ignored;

		if (mc_backends[i]->mmap != opt->mmap)
			continue;
		if (mc_backends[i] == chosen)
			snprintf(message, sizeof(message), "%s", chosen_reason);
		else if (mc_backends[i]->granularity(opt, &ignored) != -ENOTSUP)
			snprintf(message, sizeof(message), "could serve, but was not chosen");
		else
			snprintf(message, sizeof(message), "%s", refusal_reason());
		used += (size_t)snprintf(reasons + used, sizeof(reasons) - used, "%s%s: %s", used ? "; " : "",
					 mc_backends[i]->name, message);
	}
	return mc_error_no_vmm(MC_FORM_NO_VMM_ANY, "use mmap=true", "%s", reasons);
}
