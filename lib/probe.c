/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_segment_supported(): what this build and this host can do, probed
 * at run time (a kernel feature is tried, not assumed from headers).
 */
#include "config.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#include "linux-compat.h"

static bool kernel_has_hugetlb_memfd(void)
{
	int saved_errno = errno;
	int fd;

	if (!mc_hugetlb_default_size())
		return false;
	fd = memfd_create("mooncake-segment-probe", MFD_CLOEXEC | MFD_HUGETLB);
	if (fd >= 0)
		close(fd);
	errno = saved_errno;
	return fd >= 0;
}

MC_EXPORT bool mooncake_segment_supported(bool mmap, bool host_register, bool hugetlb)
{
	if (!mmap) {
#if HAVE_ASCEND_VMM
		return !host_register && !hugetlb && mc_ascend_vmm_available();
#else
		return false; /* no VMM backend in this build */
#endif
	}
	if (host_register)
		return mc_accel_for_host_register() != NULL;
	if (hugetlb)
		return kernel_has_hugetlb_memfd();
	return true;
}
