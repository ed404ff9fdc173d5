/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernel interfaces newer than some build hosts' headers (the values are the
 * kernel's ABI).  Whether the running kernel has them is found out at run
 * time by trying them, never from these.
 */
#ifndef MOONCAKE_SEGMENT_LINUX_COMPAT_H
#define MOONCAKE_SEGMENT_LINUX_COMPAT_H

#include <sys/mman.h>
#include <sys/syscall.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U /* Linux 4.14 */
#endif
#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* Linux 5.3 */
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438 /* Linux 5.6 */
#endif

#endif
