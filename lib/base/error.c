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

static _Thread_local char last_error[2048];

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

static _Thread_local struct mc_cause last_cause;

/* The one place a cause becomes the sentence the user reads.  @rank is
 * named when the cause is about the segment and @named is set. */
static void compose(const struct mc_cause *c, bool named, uint32_t rank)
{
	const char *fix = c->fix ? c->fix : "";
	size_t cap = sizeof(last_error);
	int n;

	switch (c->form) {
	case MC_FORM_SEGMENT:
		n = named ? snprintf(last_error, cap, "Shared segment rank %u: %s", rank, c->reason)
			  : snprintf(last_error, cap, "Shared segment: %s", c->reason);
		break;
	case MC_FORM_NO_VMM:
		n = snprintf(last_error, cap, "This build has no VMM backend for shared segments (%s); %s",
			     c->reason, fix);
		break;
	case MC_FORM_NO_VMM_HERE:
		n = snprintf(
			last_error, cap,
			"This mooncake build has no VMM backend for shared segments on this host: %s; %s",
			c->reason, fix);
		break;
	case MC_FORM_NO_VMM_ANY:
		n = snprintf(
			last_error, cap,
			"This build has no VMM backend for shared segments that this host can use (%s); %s",
			c->reason, fix);
		break;
	case MC_FORM_SENTENCE:
	default:
		n = snprintf(last_error, cap, "%s", c->reason);
		break;
	}
	if (c->sys_errno && n >= 0 && (size_t)n < cap)
		n += snprintf(last_error + n, cap - (size_t)n, ": %s", strerror(c->sys_errno));
	/* Out of descriptors: the cause has a fix the errno text does not name. */
	if ((c->sys_errno == EMFILE || c->sys_errno == ENFILE) && n >= 0 && (size_t)n < cap)
		snprintf(last_error + n, cap - (size_t)n, "%s",
			 c->sys_errno == EMFILE
				 ? " (this process is out of file descriptors: raise its limit, "
				   "ulimit -n / RLIMIT_NOFILE; systemd: LimitNOFILE=; Docker: --ulimit "
				   "nofile=)"
				 : " (the system is out of file descriptors: fs.file-max)");
}

int mc_error_record(const struct mc_cause *cause, const char *fmt, ...)
{
	int saved_errno = errno;
	size_t so_far = strnlen(cause->reason, sizeof(cause->reason) - 1);
	va_list ap;

	last_cause = *cause;
	va_start(ap, fmt);
	vsnprintf(last_cause.reason + so_far, sizeof(last_cause.reason) - so_far, fmt, ap);
	va_end(ap);
	compose(&last_cause, false, 0);
	log_message(MOONCAKE_SEGMENT_LOG_DEBUG, last_error);
	errno = saved_errno;
	return -cause->err;
}

static _Thread_local struct mc_cause continued;

const struct mc_cause *mc_error_continued(int err)
{
	size_t have, add;

	/* The errno text (and its hint) ends the reason as it read so far. */
	compose(&(struct mc_cause){ .sys_errno = last_cause.sys_errno }, false, 0);
	continued = last_cause;
	continued.err = err;
	continued.sys_errno = 0;
	have = strlen(continued.reason);
	add = strnlen(last_error, sizeof(continued.reason) - 1 - have);
	memcpy(continued.reason + have, last_error, add);
	continued.reason[have + add] = '\0';
	return &continued;
}

const struct mc_cause *mc_last_cause(void)
{
	return &last_cause;
}

int mc_error_name_rank(int err, uint32_t rank)
{
	/* Only a cause recorded since the last clear, and only one about the segment. */
	if (err && last_error[0] && last_cause.form == MC_FORM_SEGMENT)
		compose(&last_cause, true, rank);
	return err;
}

void mc_clear_error(void)
{
	last_error[0] = '\0';
	last_cause.reason[0] = '\0';
	last_cause.form = MC_FORM_SENTENCE;
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
