/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fault injection for the system calls the library makes.  fault.c is linked
 * into a test program, so its definitions interpose on libc's for the whole
 * process (the shared library included) and fail a chosen call with a chosen
 * errno; every other call goes to libc.
 */
#ifndef MOONCAKE_SEGMENT_FAULT_H
#define MOONCAKE_SEGMENT_FAULT_H

enum fault_call {
	FAULT_MEMFD_CREATE,
	FAULT_FTRUNCATE,
	FAULT_FCNTL,
	FAULT_MMAP,
	FAULT_FALLOCATE,
	FAULT_MADVISE,
	FAULT_OPEN,
	FAULT_MBIND,
	FAULT_CONNECT,
	FAULT_CALLS
};

/* Fail calls @nth (1: the next one), @nth+1, ... @nth+@count-1 of @call with
 * @err; @count -1 fails every call from @nth on.  For FAULT_MADVISE, only
 * calls with advice @filter count when @filter >= 0 (else pass -1). */
void fault_inject(enum fault_call call, int nth, int count, int err, int filter);
void fault_clear(void);
/* How many calls of @call failed because of an injection. */
int fault_hits(enum fault_call call);

#endif
