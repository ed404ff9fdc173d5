/* SPDX-License-Identifier: Apache-2.0 */
/* Interposed system call wrappers that fail on demand (see fault.h). */
#include "config.h" /* _GNU_SOURCE, for RTLD_NEXT */

#include "fault.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

struct fault_rule {
	int armed;
	int countdown; /* calls still to let through */
	int count;     /* failures left, -1 unlimited */
	int err;
	int filter;
	int hits;
};

static struct fault_rule rules[FAULT_CALLS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void fault_inject(enum fault_call call, int nth, int count, int err, int filter)
{
	pthread_mutex_lock(&lock);
	rules[call] = (struct fault_rule){ 1, nth - 1, count, err, filter, 0 };
	pthread_mutex_unlock(&lock);
}

void fault_clear(void)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < FAULT_CALLS; i++)
		rules[i] = (struct fault_rule){ 0, 0, 0, 0, -1, 0 };
	pthread_mutex_unlock(&lock);
}

int fault_hits(enum fault_call call)
{
	int hits;

	pthread_mutex_lock(&lock);
	hits = rules[call].hits;
	pthread_mutex_unlock(&lock);
	return hits;
}

/* 0: let the call through; otherwise the errno to fail it with. */
static int should_fail(enum fault_call call, int arg)
{
	struct fault_rule *r = &rules[call];
	int err = 0;

	pthread_mutex_lock(&lock);
	if (r->armed && (r->filter < 0 || r->filter == arg)) {
		if (r->countdown > 0) {
			r->countdown--;
		} else if (r->count != 0) {
			if (r->count > 0)
				r->count--;
			r->hits++;
			err = r->err;
		}
	}
	pthread_mutex_unlock(&lock);
	return err;
}

/* The libc function this one interposes on (@name is a name, not an expression). */
/* NOLINTNEXTLINE(bugprone-macro-parentheses) */
#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int memfd_create(const char *name, unsigned int flags)
{
	int err = should_fail(FAULT_MEMFD_CREATE, -1);

	if (err) {
		errno = err;
		return -1;
	}
	return REAL(memfd_create)(name, flags);
}

int ftruncate(int fd, off_t length)
{
	int err = should_fail(FAULT_FTRUNCATE, -1);

	if (err) {
		errno = err;
		return -1;
	}
	return REAL(ftruncate)(fd, length);
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;
	int err = should_fail(FAULT_FCNTL, cmd);

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	if (err) {
		errno = err;
		return -1;
	}
	return REAL(fcntl)(fd, cmd, arg);
}

/* NOLINTNEXTLINE(readability-inconsistent-declaration-parameter-name): glibc's names are reserved ones */
void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset)
{
	int err = should_fail(FAULT_MMAP, -1);

	if (err) {
		errno = err;
		return MAP_FAILED;
	}
	return REAL(mmap)(addr, length, prot, flags, fd, offset);
}

int fallocate(int fd, int mode, off_t offset, off_t len)
{
	int err = should_fail(FAULT_FALLOCATE, -1);

	if (err) {
		errno = err;
		return -1;
	}
	return REAL(fallocate)(fd, mode, offset, len);
}

/* NOLINTNEXTLINE(readability-inconsistent-declaration-parameter-name): glibc's names are reserved ones */
int madvise(void *addr, size_t length, int advice)
{
	int err = should_fail(FAULT_MADVISE, advice);

	if (err) {
		errno = err;
		return -1;
	}
	return REAL(madvise)(addr, length, advice);
}

long mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask, unsigned long maxnode,
	   unsigned int flags);

/* libnuma's wrapper, which the library calls. */
long mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask, unsigned long maxnode,
	   unsigned int flags)
{
	int err = should_fail(FAULT_MBIND, -1);

	if (err) {
		errno = err;
		return -1;
	}
	return REAL(mbind)(addr, len, mode, nodemask, maxnode, flags);
}

/* NOLINTNEXTLINE(readability-inconsistent-declaration-parameter-name): glibc's names are reserved ones */
int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode = 0;
	int err = should_fail(FAULT_OPEN, -1);

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	if (err) {
		errno = err;
		return -1;
	}
	return REAL(open)(path, flags, mode);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int err = should_fail(FAULT_CONNECT, -1);

	if (err) {
		errno = err;
		return -1;
	}
	return REAL(connect)(fd, addr, len);
}
