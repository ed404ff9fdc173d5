/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_segment_supported(): what this build and this host can do, asked
 * of the backend that would serve the flags (each probes at run time: a
 * kernel feature is tried, not assumed from headers) and, for host
 * registration, of the accelerator runtimes.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "accel/accel.h"
#include "backends/backend.h"
#include "base/base.h"
#include "base/error.h"
#include "mooncake/segment.h"
#include "segment.h"

MC_EXPORT bool mooncake_segment_supported(bool mmap, bool host_register, bool hugetlb)
{
	const struct mc_backend_ops *backend = mc_backend_for(mmap, host_register, hugetlb);

	if (!backend || !backend->supported(host_register, hugetlb))
		return false;
	return !host_register || mc_accel_for_host_register() != NULL;
}

MC_EXPORT int mooncake_segment_unsupported_reason(bool mmap, bool host_register, bool hugetlb, int device_id,
						  char *reason, size_t len)
{
	struct mooncake_segment_options opt;
	uint64_t page_size;
	int err;

	mc_clear_error();
	if (mooncake_segment_supported(mmap, host_register, hugetlb))
		err = 0;
	else {
		mooncake_segment_options_init(&opt);
		opt.mmap = mmap;
		opt.host_register = host_register;
		opt.hugetlb = hugetlb;
		opt.device_id = device_id;
		/* create()'s own checks, in its order, up to allocating. */
		err = mc_segment_check_flags(&opt);
		if (!err)
			err = mc_segment_page_size(&opt, &page_size);
		if (!err)
			err = mc_error(
				ENOTSUP,
				"Shared segment mmap=%s host_register=%s hugetlb=%s is not supported on "
				"this host",
				mmap ? "true" : "false", host_register ? "true" : "false",
				hugetlb ? "true" : "false");
	}
	if (len)
		snprintf(reason, len, "%s", mooncake_segment_last_error());
	return err;
}
