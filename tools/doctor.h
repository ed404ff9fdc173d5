/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What doctor's files share: each check adds its findings to the table in
 * doctor.c, which prints them in the order they were added.
 */
#ifndef MOONCAKE_SEGMENT_DOCTOR_H
#define MOONCAKE_SEGMENT_DOCTOR_H

enum status { OK, WARN, FAIL };

/* One finding: @check's name, its status, the fix (NULL: none) and what was seen. */
void doctor_add(const char *check, enum status status, const char *fix, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* doctor-host.c: the kernel, memory and the limits a process runs under. */
void check_kernel(void);
void check_memfd(void);
void check_dev_shm(void);
void check_cgroup(void);
void check_memlock(void);
void check_file_size_limit(void);
void check_thp(void);
void check_hugetlb(void);
void check_numa(void);

/* doctor-peer.c: the routes by which a peer reaches the owner's memfd. */
void check_peer_access(void);

/* doctor-accel.c: the CUDA driver, the Ascend runtime, the VMM backends. */
void check_cuda(void);
void check_ascend(void);
void check_vmm(void);

/* doctor-python.c: which mooncake_segment the user's python3 imports. */
void check_python(void);

#endif
