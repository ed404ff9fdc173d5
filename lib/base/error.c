/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The thread-local error message behind mooncake_segment_last_error(), and
 * the optional log callback.  The library never prints: without a callback
 * every log line is dropped.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "mooncake/segment.h"
#include "base.h"
#include "error.h"

static _Thread_local char last_error[1024];

struct log_sink {
	mooncake_segment_log_fn fn;
	void *userdata;
	int max_priority;
};

/* Written rarely (set_log_fn), read on every log call: a lock keeps fn and
 * userdata consistent with each other. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_sink sink;

MC_EXPORT void mooncake_segment_set_log_fn(mooncake_segment_log_fn fn, int max_priority, void *userdata)
{
	pthread_mutex_lock(&log_lock);
	sink.fn = fn;
	sink.userdata = userdata;
	sink.max_priority = max_priority;
	pthread_mutex_unlock(&log_lock);
}

bool mc_log_enabled(int priority)
{
	bool enabled;

	pthread_mutex_lock(&log_lock);
	enabled = sink.fn && priority <= sink.max_priority;
	pthread_mutex_unlock(&log_lock);
	return enabled;
}

/* While this thread holds the fork registry (fork.c), the user's callback
 * must not run: it may fork() or call into the library, which would wait for
 * that lock for ever.  The last message is kept and delivered afterwards. */
static __thread bool log_deferred;
static __thread bool deferred_pending;
static __thread int deferred_priority;
static __thread char deferred_message[1024];

static void log_message(int priority, const char *message)
{
	struct log_sink copy;

	if (log_deferred) {
		deferred_pending = true;
		deferred_priority = priority;
		snprintf(deferred_message, sizeof(deferred_message), "%s", message);
		return;
	}
	pthread_mutex_lock(&log_lock);
	copy = sink;
	pthread_mutex_unlock(&log_lock);
	if (copy.fn && priority <= copy.max_priority)
		copy.fn(priority, message, copy.userdata);
}

void mc_log_defer(bool defer)
{
	log_deferred = defer;
	if (!defer && deferred_pending) {
		deferred_pending = false;
		log_message(deferred_priority, deferred_message);
	}
}

void mc_log(int priority, const char *fmt, ...)
{
	char message[1024];
	va_list ap;

	if (!mc_log_enabled(priority))
		return;
	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	log_message(priority, message);
}

static int record(int err, int sys_errno, const char *fmt, va_list ap) MC_PRINTF(3, 0);

static int record(int err, int sys_errno, const char *fmt, va_list ap)
{
	int saved_errno = errno;
	int n = vsnprintf(last_error, sizeof(last_error), fmt, ap);

	if (sys_errno && n >= 0 && (size_t)n < sizeof(last_error))
		n += snprintf(last_error + n, sizeof(last_error) - (size_t)n, ": %s", strerror(sys_errno));
	/* Out of descriptors: the cause has a fix the errno text does not name. */
	if ((sys_errno == EMFILE || sys_errno == ENFILE) && n >= 0 && (size_t)n < sizeof(last_error))
		snprintf(last_error + n, sizeof(last_error) - (size_t)n, "%s",
			 sys_errno == EMFILE
				 ? " (this process is out of file descriptors: raise its limit, "
				   "ulimit -n / RLIMIT_NOFILE; systemd: LimitNOFILE=; Docker: --ulimit "
				   "nofile=)"
				 : " (the system is out of file descriptors: fs.file-max)");
	log_message(MOONCAKE_SEGMENT_LOG_DEBUG, last_error);
	errno = saved_errno;
	return -err;
}

int mc_error(int err, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = record(err, 0, fmt, ap);
	va_end(ap);
	return ret;
}

int mc_error_sys(int err, int sys_errno, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = record(err, sys_errno, fmt, ap);
	va_end(ap);
	return ret;
}

int mc_error_name_rank(int err, uint32_t rank)
{
	static const char unnamed[] = "Shared segment: ";
	size_t skip = sizeof(unnamed) - 1, prefix_len, rest;
	char prefix[48];

	if (!err || strncmp(last_error, unnamed, skip) != 0)
		return err;
	prefix_len = (size_t)snprintf(prefix, sizeof(prefix), "Shared segment rank %u: ", rank);
	rest = strlen(last_error) - skip;
	if (prefix_len + rest >= sizeof(last_error))
		rest = sizeof(last_error) - 1 - prefix_len;
	memmove(last_error + prefix_len, last_error + skip, rest);
	memcpy(last_error, prefix, prefix_len);
	last_error[prefix_len + rest] = '\0';
	return err;
}

void mc_clear_error(void)
{
	last_error[0] = '\0';
}

int mc_fold_errno(int sys_errno)
{
	switch (sys_errno) {
	case ENOMEM:
	case ENOSPC:
	case EMFILE:
	case EPERM:
	case EINVAL:
	case ENOTSUP:
	case EFBIG:
		return sys_errno;
	case ENFILE:
		return EMFILE;
	case EACCES:
		return EPERM;
	case EAGAIN:
	case EFAULT: /* MADV_POPULATE_WRITE: the pages could not be backed */
		return ENOMEM;
	case ENOSYS:
		return ENOTSUP;
	default:
		return EIO;
	}
}

MC_EXPORT const char *mooncake_segment_last_error(void)
{
	return last_error;
}
