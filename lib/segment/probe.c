/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_segment_supported(): what this build and this host can do, asked
 * of the backend that would serve the flags (each probes at run time: a
 * kernel feature is tried, not assumed from headers) and, for host
 * registration, of the accelerator runtimes.
 */
#include "config.h"

#include "accel/accel.h"
#include "backends/backend.h"
#include "base/base.h"
#include "mooncake/segment.h"

MC_EXPORT bool mooncake_segment_supported(bool mmap, bool host_register, bool hugetlb)
{
	const struct mc_backend_ops *backend = mc_backend_for(mmap, host_register, hugetlb);

	if (!backend || !backend->supported(host_register, hugetlb))
		return false;
	return !host_register || mc_accel_for_host_register() != NULL;
}
