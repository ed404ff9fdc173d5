/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake._segment.SharedSegment: one rank's handle on a struct
 * mooncake_segment, from create() through complete(), finish() and close(),
 * with its accessors and info().  The buffer protocol is in _segment_buffer.c.
 *
 * Threads (segment.h: nothing may run concurrently with a call that changes
 * the segment; the const getters, wait_ready and the slot functions may run
 * together): create, complete, close, info, wait_ready and the slot waits
 * (_segment_slots.c) release the GIL.  Every method that
 * touches the C segment first checks, with the GIL held, that no other
 * thread is inside complete() (`busy`), and complete, finish and close also
 * that none is inside info() (`readers`), complete and finish that none is
 * inside wait_ready() or a slot wait (`waiters`); otherwise it raises
 * RuntimeError naming the call in progress.
 *
 * close() does not refuse a waiter, it ends it: every wait (wait_ready(),
 * wait_slot(), read_begin(): wait_in_slices()) waits in slices
 * of WAIT_SLICE_MS and looks at `closing` between them, and close() destroys
 * the segment only once every waiter has left the library (each one counts
 * itself out without the GIL, right after its last call into the library, so
 * a waiter that cannot get the GIL back, at interpreter shutdown, still lets
 * close() go on).  So close() returns within about one slice, and no wait
 * ever runs on a destroyed segment.  Garbage collection cannot free the
 * object under a waiter: the waiting call holds a reference.
 *
 * What the segment knows once complete (backend, accelerator, page size,
 * device address) is cached by complete() and read by facts() for free;
 * info() alone reads the residency from /proc/self/smaps, without the GIL.
 */
#include "_segment.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* wait_ready() asks the library for at most this long at a time, then looks
 * whether close() wants the segment: the bound on close()'s wait.  The
 * library itself looks for a dead owner as often (MC_CONTROL_OWNER_CHECK_MS). */
#define WAIT_SLICE_MS 100

SegmentObject *check_open(SegmentObject *self)
{
	if (!self->seg) {
		PyErr_SetString(PyExc_ValueError, "operation on a closed shared segment");
		return NULL;
	}
	return self;
}

/*
 * The segment, if this call may touch it now: open, no other thread inside
 * complete(), and for a call that changes it (@exclusive) none inside info().
 */
/* How many threads of this process are inside a wait now.  A fork() child
 * inherits the parent's counts but none of its threads: it starts again from
 * 0.  With the GIL held. */
static int live_waiters(SegmentObject *self)
{
	if (self->waiters_pid != getpid()) {
		__atomic_store_n(&self->waiters, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&self->slot_waiters, 0, __ATOMIC_RELAXED);
		self->waiters_pid = getpid();
	}
	return __atomic_load_n(&self->waiters, __ATOMIC_ACQUIRE);
}

/* The wait a thread is inside, for messages: wait_ready unless every waiter waits on a slot. */
static const char *waiting_call(SegmentObject *self)
{
	int all = live_waiters(self);

	return all > 0 && __atomic_load_n(&self->slot_waiters, __ATOMIC_ACQUIRE) >= all ? "a slot wait"
											: "wait_ready()";
}

SegmentObject *check_usable(SegmentObject *self, const char *call, enum segment_use use)
{
	if (!check_open(self))
		return NULL;
	if (self->busy) {
		PyErr_Format(PyExc_RuntimeError,
			     "%s: another thread is inside %s() on this shared segment; a segment "
			     "is not for concurrent use, wait for that call to return",
			     call, self->busy);
		return NULL;
	}
	if (use != SEGMENT_READS && self->readers > 0) {
		PyErr_Format(PyExc_RuntimeError,
			     "%s: another thread is inside info() on this shared segment; wait for it "
			     "to return",
			     call);
		return NULL;
	}
	if (use == SEGMENT_CHANGES && live_waiters(self) > 0) {
		PyErr_Format(PyExc_RuntimeError,
			     "%s: another thread is inside %s on this shared segment; wait for it to return",
			     call, waiting_call(self));
		return NULL;
	}
	return self;
}

/* create()'s keep_* arguments, as given (NULL: not given). */
struct keep_arguments {
	PyObject *name, *identity, *flags, *sharing, *gid, *owner_uid;
};

/* The keep_* arguments into @opt; the strings and bytes stay the
 * arguments' own, alive for the call.  0, or -1 with the exception set. */
static int keep_options(const struct keep_arguments *keep, struct mooncake_segment_options *opt)
{
	unsigned long long u;
	char *bytes;
	Py_ssize_t len;

	if (keep->name && keep->name != Py_None) {
		if (!PyUnicode_Check(keep->name)) {
			PyErr_SetString(PyExc_TypeError, "keep_name must be a str or None");
			return -1;
		}
		opt->keep_name = PyUnicode_AsUTF8AndSize(keep->name, &len);
		if (!opt->keep_name)
			return -1;
		/* A NUL inside would cut the name short, to another segment's. */
		if (strlen(opt->keep_name) != (size_t)len) {
			PyErr_SetString(PyExc_ValueError, "keep_name must not contain a NUL character");
			return -1;
		}
	}
	if (keep->identity && keep->identity != Py_None) {
		if (!PyBytes_Check(keep->identity)) {
			PyErr_SetString(PyExc_TypeError, "keep_identity must be bytes or None");
			return -1;
		}
		if (PyBytes_AsStringAndSize(keep->identity, &bytes, &len) < 0)
			return -1;
		if (len > MOONCAKE_SEGMENT_KEEP_IDENTITY_MAX) {
			PyErr_Format(PyExc_ValueError, "keep_identity must be at most %d bytes, got %zd",
				     MOONCAKE_SEGMENT_KEEP_IDENTITY_MAX, len);
			return -1;
		}
		opt->keep_identity = bytes;
		opt->keep_identity_bytes = (uint32_t)len;
	}
	if (keep->flags) {
		if (int_argument(keep->flags, "keep_flags", 0, UINT32_MAX, &u, NULL) < 0)
			return -1;
		opt->keep_flags = (uint32_t)u;
	}
	if (keep->sharing) {
		if (int_argument(keep->sharing, "keep_sharing", 0, MOONCAKE_SEGMENT_KEEP_SHARE_ANY, &u,
				 NULL) < 0)
			return -1;
		opt->keep_sharing = (uint32_t)u;
	}
	if (keep->gid) {
		if (int_argument(keep->gid, "keep_gid", 0, UINT32_MAX - 1, &u, NULL) < 0)
			return -1;
		opt->keep_gid = (uint32_t)u;
	}
	if (keep->owner_uid && keep->owner_uid != Py_None) {
		if (int_argument(keep->owner_uid, "keep_owner_uid", 0, UINT32_MAX - 1, &u, NULL) < 0)
			return -1;
		opt->keep_owner_uid = (uint32_t)u;
		opt->keep_flags |= MOONCAKE_SEGMENT_KEEP_OWNER; /* given: that uid's segment */
	}
	return 0;
}

static PyObject *segment_create(PyObject *cls, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "name",
						"size",
						"world_size",
						"rank_id",
						"owner_rank",
						"device_id",
						"mmap",
						"host_register",
						"hugetlb",
						"numa_node",
						"commit_threads",
						"populate_on_import",
						"hugetlb_page_size",
						"background_commit",
						"register_offset",
						"register_length",
						"register_pause_us",
						"slot_count",
						"keep_name",
						"keep_identity",
						"keep_flags",
						"keep_sharing",
						"keep_gid",
						"keep_owner_uid",
						"alignment",
						NULL };
	const char *name;
	PyObject *size_obj, *world_obj, *rank_obj,
		*owner_obj = NULL, *device_obj = NULL, *numa_obj = NULL, *threads_obj = NULL,
		*huge_size_obj = NULL, *mmap_obj = NULL, *host_register_obj = NULL, *hugetlb_obj = NULL,
		*populate_obj = NULL, *background_obj = NULL, *register_offset_obj = NULL,
		*register_length_obj = NULL, *register_pause_obj = NULL, *slot_count_obj = NULL,
		*alignment_obj = NULL;
	struct keep_arguments keep = { 0 };
	int use_mmap = 1, host_register = 0, hugetlb = 0, populate = 0, background = 0;
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *seg = NULL;
	unsigned long long size, u;
	long long s;
	SegmentObject *obj;
	PyObject *result;
	int ret;

	(void)cls;
	if (!PyArg_ParseTupleAndKeywords(
		    args, kwargs, "sOOO|OOOOO$OOOOOOOOOOOOOOOO:create", (char **)keywords, &name, &size_obj,
		    &world_obj, &rank_obj, &owner_obj, &device_obj, &mmap_obj, &host_register_obj,
		    &hugetlb_obj, &numa_obj, &threads_obj, &populate_obj, &huge_size_obj, &background_obj,
		    &register_offset_obj, &register_length_obj, &register_pause_obj, &slot_count_obj,
		    &keep.name, &keep.identity, &keep.flags, &keep.sharing, &keep.gid, &keep.owner_uid,
		    &alignment_obj) ||
	    bool_argument(mmap_obj, "mmap", &use_mmap) < 0 ||
	    bool_argument(host_register_obj, "host_register", &host_register) < 0 ||
	    bool_argument(hugetlb_obj, "hugetlb", &hugetlb) < 0 ||
	    bool_argument(populate_obj, "populate_on_import", &populate) < 0 ||
	    bool_argument(background_obj, "background_commit", &background) < 0)
		return NULL;
	mooncake_segment_options_init(&opt);
	if (int_argument(size_obj, "size", 0, UINT64_MAX, &size, NULL) < 0)
		return NULL;
	if (int_argument(world_obj, "world_size", 0, UINT32_MAX, &u, NULL) < 0)
		return NULL;
	opt.world_size = (uint32_t)u;
	if (int_argument(rank_obj, "rank_id", 0, UINT32_MAX, &u, NULL) < 0)
		return NULL;
	opt.rank_id = (uint32_t)u;
	if (owner_obj) {
		if (int_argument(owner_obj, "owner_rank", 0, UINT32_MAX, &u, NULL) < 0)
			return NULL;
		opt.owner_rank = (uint32_t)u;
	}
	opt.device_id = 0; /* upstream's native default */
	if (device_obj) {
		if (int_argument(device_obj, "device_id", -1, INT32_MAX, NULL, &s) < 0)
			return NULL;
		opt.device_id = (int32_t)s;
	}
	if (numa_obj) {
		if (int_argument(numa_obj, "numa_node", MOONCAKE_SEGMENT_NUMA_INTERLEAVE, INT32_MAX, NULL,
				 &s) < 0)
			return NULL;
		opt.numa_node = (int32_t)s;
	}
	if (threads_obj) {
		if (int_argument(threads_obj, "commit_threads", 0, 4096, &u, NULL) < 0)
			return NULL;
		opt.commit_threads = (uint32_t)u;
	}
	if (huge_size_obj) {
		if (int_argument(huge_size_obj, "hugetlb_page_size", 0, UINT64_MAX, &u, NULL) < 0)
			return NULL;
		opt.hugetlb_page_size = u;
	}
	/* The range's bounds against the size are the library's to check (and name). */
	if (register_offset_obj) {
		if (int_argument(register_offset_obj, "register_offset", 0, UINT64_MAX, &u, NULL) < 0)
			return NULL;
		opt.register_offset = u;
	}
	if (register_length_obj) {
		if (int_argument(register_length_obj, "register_length", 0, UINT64_MAX, &u, NULL) < 0)
			return NULL;
		opt.register_length = u;
	}
	if (register_pause_obj) {
		if (int_argument(register_pause_obj, "register_pause_us", 0, UINT32_MAX, &u, NULL) < 0)
			return NULL;
		opt.register_pause_us = (uint32_t)u;
	}
	if (slot_count_obj) {
		if (int_argument(slot_count_obj, "slot_count", 0, MOONCAKE_SEGMENT_MAX_SLOTS, &u, NULL) < 0)
			return NULL;
		opt.slot_count = (uint32_t)u;
	}
	/* Its values are the library's to check (and name). */
	if (alignment_obj) {
		if (int_argument(alignment_obj, "alignment", 0, UINT64_MAX, &u, NULL) < 0)
			return NULL;
		opt.alignment = u;
	}
	if (keep_options(&keep, &opt) < 0)
		return NULL;
	opt.background_commit = background;
	opt.mmap = use_mmap;
	opt.host_register = host_register;
	opt.hugetlb = hugetlb;
	opt.populate_on_import = populate;

	Py_BEGIN_ALLOW_THREADS
	ret = mooncake_segment_create(name, size, &opt, &seg, blob);
	Py_END_ALLOW_THREADS
	if (ret < 0)
		return raise_library_error(ret);
	obj = PyObject_New(SegmentObject, &SegmentType);
	if (!obj) {
		mooncake_segment_destroy(seg);
		return NULL;
	}
	obj->seg = seg;
	obj->exports = 0;
	obj->busy = NULL;
	obj->readers = 0;
	obj->waiters = 0;
	obj->slot_waiters = 0;
	obj->slot_count = opt.slot_count;
	obj->waiters_pid = getpid();
	obj->closing = 0;
	obj->has_facts = 0;
	memset(&obj->facts, 0, sizeof(obj->facts));
	obj->facts_device_addr = 0;
	result = Py_BuildValue("(Ny#)", (PyObject *)obj, (const char *)blob, (Py_ssize_t)sizeof(blob));
	return result;
}

static PyObject *segment_supported(PyObject *cls, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "mmap", "host_register", "hugetlb", NULL };
	int use_mmap = 1, host_register = 0, hugetlb = 0;
	PyObject *mmap_obj = NULL, *host_register_obj = NULL, *hugetlb_obj = NULL;

	(void)cls;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOO:supported", (char **)keywords, &mmap_obj,
					 &host_register_obj, &hugetlb_obj) ||
	    bool_argument(mmap_obj, "mmap", &use_mmap) < 0 ||
	    bool_argument(host_register_obj, "host_register", &host_register) < 0 ||
	    bool_argument(hugetlb_obj, "hugetlb", &hugetlb) < 0)
		return NULL;
	return PyBool_FromLong(mooncake_segment_supported(use_mmap, host_register, hugetlb));
}

/*
 * Why a segment of this kind cannot be made here, in the C library's words
 * (reason and fix), or "" when it can (mooncake_segment_unsupported_reason).
 */
static PyObject *segment_why_unsupported(PyObject *cls, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "mmap", "host_register", "hugetlb", "device_id", NULL };
	int use_mmap = 1, host_register = 0, hugetlb = 0, device_id = 0;
	char reason[1024];

	PyObject *mmap_obj = NULL, *host_register_obj = NULL, *hugetlb_obj = NULL;

	(void)cls;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOOi:why_unsupported", (char **)keywords, &mmap_obj,
					 &host_register_obj, &hugetlb_obj, &device_id) ||
	    bool_argument(mmap_obj, "mmap", &use_mmap) < 0 ||
	    bool_argument(host_register_obj, "host_register", &host_register) < 0 ||
	    bool_argument(hugetlb_obj, "hugetlb", &hugetlb) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	mooncake_segment_unsupported_reason(use_mmap, host_register, hugetlb, device_id, reason,
					    sizeof(reason));
	Py_END_ALLOW_THREADS
	return PyUnicode_FromString(reason);
}

/* Join the blobs (a sequence of bytes-like objects, one per rank) back to back. */
static int join_blobs(PyObject *blobs, uint8_t **joined, size_t *len)
{
	PyObject *seq = PySequence_Fast(blobs, "complete() takes a list of bytes, one blob per rank");
	Py_ssize_t n;

	if (!seq)
		return -1;
	n = PySequence_Fast_GET_SIZE(seq);
	*joined = PyMem_Malloc(n ? (size_t)n * MOONCAKE_SEGMENT_BLOB_SIZE : 1);
	if (!*joined) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		Py_buffer view;

		if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &view, PyBUF_SIMPLE) < 0) {
			PyErr_Format(PyExc_TypeError, "blob of rank %zd is not bytes-like", i);
			goto fail;
		}
		if (view.len != MOONCAKE_SEGMENT_BLOB_SIZE) {
			PyErr_Format(
				segment_error,
				"InvalidArgument: Shared segment blob has an unexpected length: the blob "
				"of rank %zd has %zd bytes, expected %d; pass the blobs exactly as "
				"create() returned them",
				i, view.len, MOONCAKE_SEGMENT_BLOB_SIZE);
			PyBuffer_Release(&view);
			goto fail;
		}
		memcpy(*joined + (size_t)i * MOONCAKE_SEGMENT_BLOB_SIZE, view.buf,
		       MOONCAKE_SEGMENT_BLOB_SIZE);
		PyBuffer_Release(&view);
	}
	*len = (size_t)n * MOONCAKE_SEGMENT_BLOB_SIZE;
	Py_DECREF(seq);
	return 0;
fail:
	PyMem_Free(*joined);
	Py_DECREF(seq);
	return -1;
}

static PyObject *segment_complete(SegmentObject *self, PyObject *blobs)
{
	struct mooncake_segment_info facts;
	struct mooncake_segment *seg;
	uint64_t device_addr = 0;
	uint8_t *joined;
	size_t len;
	int ret;

	if (!check_usable(self, "complete", SEGMENT_CHANGES) || join_blobs(blobs, &joined, &len) < 0)
		return NULL;
	seg = self->seg;
	self->busy = "complete";
	Py_BEGIN_ALLOW_THREADS
	ret = mooncake_segment_complete(seg, joined, len);
	/* Learn once, here, what later calls would otherwise ask get_info() for. */
	if (ret == 0 && mooncake_segment_get_info(seg, &facts, sizeof(facts)) == 0)
		device_addr = mooncake_segment_device_addr(seg);
	else
		facts.size = 0;
	Py_END_ALLOW_THREADS
	self->busy = NULL;
	PyMem_Free(joined);
	if (ret < 0)
		return raise_library_error(ret);
	if (facts.size) {
		self->facts = facts;
		self->facts_device_addr = device_addr;
		self->has_facts = 1;
	}
	Py_RETURN_NONE;
}

static PyObject *segment_finish(SegmentObject *self, PyObject *unused)
{
	int ret;

	(void)unused;
	if (!check_usable(self, "finish", SEGMENT_CHANGES))
		return NULL;
	ret = mooncake_segment_finish(self->seg);
	if (ret < 0)
		return raise_library_error(ret);
	Py_RETURN_NONE;
}

static int64_t monotonic_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* A timeout argument: None (no limit: -1) or a finite number of seconds >= 0. */
int timeout_argument(PyObject *obj, double *seconds)
{
	if (!obj || obj == Py_None) {
		*seconds = -1;
		return 0;
	}
	if (PyBool_Check(obj) || !(PyFloat_Check(obj) || PyLong_Check(obj))) {
		PyErr_Format(PyExc_TypeError, "timeout must be None or a number of seconds, not %.100s",
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	*seconds = PyFloat_AsDouble(obj);
	if (*seconds == -1 && PyErr_Occurred())
		return -1;
	if (!(*seconds >= 0) || isinf(*seconds)) {
		PyErr_Format(PyExc_ValueError,
			     "timeout must be None (no limit) or a finite number of seconds >= 0, got %R",
			     obj);
		return -1;
	}
	return 0;
}

/* Count this thread in as a waiter, or out.  With the GIL held, or (out)
 * right after the last call into the library. */
static void count_waiter(SegmentObject *self, int slot_wait, int delta)
{
	__atomic_add_fetch(&self->waiters, delta, __ATOMIC_ACQ_REL);
	if (slot_wait)
		__atomic_add_fetch(&self->slot_waiters, delta, __ATOMIC_ACQ_REL);
}

/*
 * Between two slices of the main thread's wait, with the GIL held: run the
 * signal handlers (Ctrl-C's KeyboardInterrupt, or whatever a handler
 * raises).  The thread is counted out while they run, so that a handler may
 * close() this segment (then *@closed is 1); another thread may too, or
 * start complete() (the segment is then unusable for @name: raised).
 * 0: wait on; -1: stop, with the exception set, or else *@closed set.
 */
static int run_signal_handlers(SegmentObject *self, const struct mooncake_segment *seg, const char *name,
			       int slot_wait, int *closed)
{
	int raised;

	count_waiter(self, slot_wait, -1);
	raised = PyErr_CheckSignals();
	if (raised < 0)
		return -1;
	if (self->seg != seg) {
		*closed = 1; /* closed while the handlers ran: never touch @seg again */
		return -1;
	}
	if (!check_usable(self, name, SEGMENT_READS))
		return -1;
	live_waiters(self);
	count_waiter(self, slot_wait, 1);
	return 0;
}

/* Whether this thread is Python's main thread, the one that runs signal
 * handlers: threading.main_thread(), which follows a fork too.  Not
 * _PyOS_IsMainThread(), internal API from CPython 3.13 on.  With the GIL
 * held; 0 if the question itself fails (the wait then runs no handlers). */
static int is_main_thread(void)
{
	PyObject *threading = PyImport_ImportModule("threading");
	PyObject *main_thread = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
	PyObject *ident = main_thread ? PyObject_GetAttrString(main_thread, "ident") : NULL;
	int is_main = ident && PyLong_AsUnsignedLong(ident) == PyThread_get_thread_ident();

	Py_XDECREF(ident);
	Py_XDECREF(main_thread);
	Py_XDECREF(threading);
	if (PyErr_Occurred())
		PyErr_Clear(); /* no threading module at shutdown: no handlers either */
	return is_main;
}

int64_t wait_in_slices(SegmentObject *self, const char *name, sliced_call call, void *arg, double timeout,
		       int slot_wait, int *closed)
{
	struct mooncake_segment *seg = self->seg;
	int64_t deadline = 0, ret;
	/* Signal handlers run in the main thread only: it alone takes the GIL
	 * back between slices (a daemon thread that cannot take it back at
	 * interpreter shutdown so never leaves itself counted in). */
	int handles_signals = is_main_thread();
	PyThreadState *state;

	/* Beyond about 146 years: as good as no limit, and no overflow. */
	if (timeout >= 0)
		deadline = monotonic_ns() + (timeout < 4.6e9 ? (int64_t)(timeout * 1e9) : INT64_MAX / 2);
	*closed = 0;
	live_waiters(self);
	count_waiter(self, slot_wait, 1);
	state = PyEval_SaveThread();
	for (;;) {
		int slice = WAIT_SLICE_MS;

		if (timeout >= 0) {
			int64_t left = deadline - monotonic_ns();

			if (left <= 0)
				slice = 0; /* one last look */
			else if (left < WAIT_SLICE_MS * INT64_C(1000000))
				slice = (int)((left + 999999) / 1000000);
		}
		ret = call(seg, arg, slice);
		if (ret != -ETIMEDOUT)
			break; /* done (or failed): its result, whatever signal comes now */
		if (__atomic_load_n(&self->closing, __ATOMIC_ACQUIRE)) {
			*closed = 1;
			break;
		}
		if (timeout >= 0 && slice == 0)
			break;
		if (handles_signals) {
			PyEval_RestoreThread(state);
			if (run_signal_handlers(self, seg, name, slot_wait, closed) < 0)
				return *closed ? -ETIMEDOUT : WAIT_RAISED; /* counted out already */
			state = PyEval_SaveThread();
		}
	}
	/* The last use of @seg: from here on close() may destroy it. */
	count_waiter(self, slot_wait, -1);
	PyEval_RestoreThread(state);
	return ret;
}

struct ready_wait {
	uint64_t offset, length;
	uint64_t ready; /* the front when the wait timed out */
};

static int64_t ready_wait_call(struct mooncake_segment *seg, void *arg, int slice_ms)
{
	struct ready_wait *w = arg;
	int ret = mooncake_segment_wait_ready(seg, w->offset, w->length, slice_ms);

	if (ret == -ETIMEDOUT)
		w->ready = mooncake_segment_ready_bytes(seg);
	return ret;
}

/*
 * mooncake_segment_wait_ready() without the GIL, in slices of WAIT_SLICE_MS
 * so that close() can end it (see the top of this file).  True once the range
 * is ready; TimeoutError (errno ETIMEDOUT) when @timeout passes first;
 * ValueError when close() ended the wait; SegmentError with the library's
 * message when the commit, the owner or this rank's registration failed.
 */
static PyObject *segment_wait_ready(SegmentObject *self, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "offset", "length", "timeout", NULL };
	PyObject *offset_obj = NULL, *length_obj = NULL, *timeout_obj = NULL;
	unsigned long long offset = 0, length, size;
	struct ready_wait w;
	double timeout;
	int64_t ret;
	int closed;

	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOO:wait_ready", (char **)keywords, &offset_obj,
					 &length_obj, &timeout_obj))
		return NULL;
	if (!check_usable(self, "wait_ready", SEGMENT_READS))
		return NULL;
	size = mooncake_segment_size(self->seg);
	if (offset_obj && int_argument(offset_obj, "offset", 0, size, &offset, NULL) < 0)
		return NULL;
	length = size - offset;
	if (length_obj && length_obj != Py_None &&
	    int_argument(length_obj, "length", 0, size - offset, &length, NULL) < 0)
		return NULL;
	if (timeout_argument(timeout_obj, &timeout) < 0)
		return NULL;
	if (length == 0)
		Py_RETURN_TRUE; /* an empty range is ready (the library reads 0 as "to the end") */
	w.offset = offset;
	w.length = length;
	w.ready = 0;
	ret = wait_in_slices(self, "wait_ready", ready_wait_call, &w, timeout, 0, &closed);
	if (closed) {
		PyErr_SetString(PyExc_ValueError,
				"wait_ready: the shared segment was closed while this thread waited for it");
		return NULL;
	}
	if (ret == WAIT_RAISED)
		return NULL;
	if (ret == -ETIMEDOUT) {
		char message[256];

		snprintf(message, sizeof(message),
			 "Shared segment bytes [%llu, %llu) not ready within %g s: %llu of %llu bytes are "
			 "ready",
			 offset, offset + length, timeout, (unsigned long long)w.ready, size);
		PyErr_SetObject(PyExc_TimeoutError, Py_BuildValue("(is)", ETIMEDOUT, message));
		return NULL;
	}
	if (ret < 0)
		return raise_library_error((int)ret);
	Py_RETURN_TRUE;
}

static PyObject *segment_ready_bytes(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_usable(self, "ready_bytes", SEGMENT_READS))
		return NULL;
	return PyLong_FromUnsignedLongLong(mooncake_segment_ready_bytes(self->seg));
}

static PyObject *segment_close(SegmentObject *self, PyObject *unused)
{
	struct mooncake_segment *seg = self->seg;

	(void)unused;
	if (!seg)
		Py_RETURN_NONE;
	if (self->exports > 0)
		return PyErr_Format(
			PyExc_BufferError,
			"cannot close a shared segment while %zd exported buffer(s) "
			"(memoryviews, arrays or tensors over its pages) are alive; drop them first",
			self->exports);
	if (!check_usable(self, "close", SEGMENT_CLOSES))
		return NULL;
	self->seg = NULL; /* closed for every other thread before the GIL goes */
	if (live_waiters(self) > 0)
		__atomic_store_n(&self->closing, 1, __ATOMIC_RELEASE);
	Py_BEGIN_ALLOW_THREADS
	/* Each waiter leaves within a slice once it sees `closing`. */
	while (__atomic_load_n(&self->waiters, __ATOMIC_ACQUIRE) > 0) {
		const struct timespec pause = { 0, 1000000 }; /* 1 ms */

		nanosleep(&pause, NULL);
	}
	mooncake_segment_destroy(seg);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *segment_enter(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_open(self))
		return NULL;
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *segment_exit(SegmentObject *self, PyObject *args)
{
	PyObject *ret, *exc_type = Py_None, *exc_value = Py_None, *traceback = Py_None;

	if (!PyArg_UnpackTuple(args, "__exit__", 0, 3, &exc_type, &exc_value, &traceback))
		return NULL;
	ret = segment_close(self, NULL);
	if (!ret) {
		/* Leaving on an exception with views still alive: the caller's error is the one to see. */
		if (exc_type != Py_None && PyErr_ExceptionMatches(PyExc_BufferError)) {
			PyErr_Clear();
			Py_RETURN_FALSE;
		}
		return NULL;
	}
	Py_DECREF(ret);
	Py_RETURN_FALSE;
}

static PyObject *segment_ready(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!self->seg)
		Py_RETURN_FALSE;
	if (!check_usable(self, "ready", SEGMENT_READS))
		return NULL;
	return PyBool_FromLong(mooncake_segment_ready(self->seg));
}

static PyObject *segment_closed(SegmentObject *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(self->seg == NULL);
}

static PyObject *segment_base_addr(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_usable(self, "base_addr", SEGMENT_READS))
		return NULL;
	return PyLong_FromVoidPtr(mooncake_segment_base(self->seg));
}

static PyObject *segment_device_addr(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_usable(self, "device_addr", SEGMENT_READS))
		return NULL;
	return PyLong_FromUnsignedLongLong(mooncake_segment_device_addr(self->seg));
}

static PyObject *segment_size(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_usable(self, "size", SEGMENT_READS))
		return NULL;
	return PyLong_FromUnsignedLongLong(mooncake_segment_size(self->seg));
}

static PyObject *segment_alloc_size(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_usable(self, "alloc_size", SEGMENT_READS))
		return NULL;
	return PyLong_FromUnsignedLongLong(mooncake_segment_alloc_size(self->seg));
}

static PyObject *segment_info(SegmentObject *self, PyObject *unused)
{
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	int ret;

	(void)unused;
	if (!check_usable(self, "info", SEGMENT_READS))
		return NULL;
	/* It walks /proc/self/smaps: time proportional to the segment, so without the GIL. */
	seg = self->seg;
	self->readers++;
	Py_BEGIN_ALLOW_THREADS
	ret = mooncake_segment_get_info(seg, &info, sizeof(info));
	Py_END_ALLOW_THREADS
	self->readers--;
	if (ret < 0)
		return raise_library_error(ret);
	return Py_BuildValue(
		"{s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:I,s:s,s:s,s:s,s:i,s:i,s:K,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:K}",
		"size", (unsigned long long)info.size, "alloc_size", (unsigned long long)info.alloc_size,
		"alignment", (unsigned long long)info.alignment, "page_size",
		(unsigned long long)info.page_size, "resident_bytes", (unsigned long long)info.resident_bytes,
		"huge_bytes", (unsigned long long)info.huge_bytes, "commit_seconds",
		(double)info.commit_ns / 1e9, "register_seconds", (double)info.register_ns / 1e9,
		"commit_threads", info.commit_threads, "backend", info.backend, "commit_method",
		info.commit_method, "accelerator", info.accelerator, "numa_node_requested",
		info.numa_node_requested, "numa_node", info.numa_node, "numa_node_mask",
		(unsigned long long)info.numa_node_mask, "owner",
		(info.flags & MOONCAKE_SEGMENT_INFO_OWNER) ? Py_True : Py_False, "thp_advised",
		(info.flags & MOONCAKE_SEGMENT_INFO_THP_ADVISED) ? Py_True : Py_False, "thp_fallback",
		(info.flags & MOONCAKE_SEGMENT_INFO_THP_FALLBACK) ? Py_True : Py_False, "hugetlb",
		(info.flags & MOONCAKE_SEGMENT_INFO_HUGETLB) ? Py_True : Py_False, "numa_degraded",
		(info.flags & MOONCAKE_SEGMENT_INFO_NUMA_DEGRADED) ? Py_True : Py_False, "registered",
		(info.flags & MOONCAKE_SEGMENT_INFO_REGISTERED) ? Py_True : Py_False, "kept",
		(info.flags & MOONCAKE_SEGMENT_INFO_KEPT) ? Py_True : Py_False, "warm",
		(info.flags & MOONCAKE_SEGMENT_INFO_WARM) ? Py_True : Py_False, "keep_generation",
		(unsigned long long)info.keep_generation);
}

/* What complete() learned: no system call, no walk of the page tables. */
static PyObject *segment_facts(SegmentObject *self, PyObject *unused)
{
	const struct mooncake_segment_info *f = &self->facts;

	(void)unused;
	if (!check_open(self))
		return NULL;
	if (!self->has_facts) {
		PyErr_SetString(PyExc_ValueError,
				"facts(): the segment is not complete yet: call complete() first");
		return NULL;
	}
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:s,s:s,s:O,s:O,s:O,s:O,s:O,s:K}", "size",
			     (unsigned long long)f->size, "alloc_size", (unsigned long long)f->alloc_size,
			     "alignment", (unsigned long long)f->alignment, "page_size",
			     (unsigned long long)f->page_size, "device_addr",
			     (unsigned long long)self->facts_device_addr, "backend", f->backend,
			     "accelerator", f->accelerator, "owner",
			     (f->flags & MOONCAKE_SEGMENT_INFO_OWNER) ? Py_True : Py_False, "hugetlb",
			     (f->flags & MOONCAKE_SEGMENT_INFO_HUGETLB) ? Py_True : Py_False, "registered",
			     (f->flags & MOONCAKE_SEGMENT_INFO_REGISTERED) ? Py_True : Py_False, "kept",
			     (f->flags & MOONCAKE_SEGMENT_INFO_KEPT) ? Py_True : Py_False, "warm",
			     (f->flags & MOONCAKE_SEGMENT_INFO_WARM) ? Py_True : Py_False, "keep_generation",
			     (unsigned long long)f->keep_generation);
}

static void segment_dealloc(SegmentObject *self)
{
	/* Every export holds a reference, so none is alive here. */
	if (self->seg)
		mooncake_segment_destroy(self->seg);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *segment_repr(SegmentObject *self)
{
	if (!self->seg)
		return PyUnicode_FromString("<mooncake._segment.SharedSegment closed>");
	if (self->busy)
		return PyUnicode_FromFormat("<mooncake._segment.SharedSegment inside %s()>", self->busy);
	return PyUnicode_FromFormat("<mooncake._segment.SharedSegment size=%llu ready=%s exports=%zd>",
				    (unsigned long long)mooncake_segment_size(self->seg),
				    mooncake_segment_ready(self->seg) ? "True" : "False", self->exports);
}

static PyObject *segment_exports(SegmentObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromSsize_t(self->exports);
}

static PyObject *segment_busy(SegmentObject *self, void *closure)
{
	(void)closure;
	if (self->busy)
		return PyUnicode_FromString(self->busy);
	if (self->readers > 0)
		return PyUnicode_FromString("info");
	if (live_waiters(self) > 0)
		return PyUnicode_FromString(__atomic_load_n(&self->slot_waiters, __ATOMIC_ACQUIRE) >=
							    live_waiters(self)
						    ? "wait_slot"
						    : "wait_ready");
	Py_RETURN_NONE;
}

static PyMethodDef segment_methods[] = {
	{ "create", (PyCFunction)(void (*)(void))segment_create, METH_VARARGS | METH_KEYWORDS | METH_STATIC,
	  "create(name, size, world_size, rank_id, owner_rank=0, device_id=0, mmap=True, host_register=False,\n"
	  "       hugetlb=False, *, numa_node=-1, commit_threads=0, populate_on_import=False,\n"
	  "       hugetlb_page_size=0, background_commit=False, register_offset=0, register_length=0,\n"
	  "       register_pause_us=0, slot_count=0, keep_name=None, keep_identity=None, keep_flags=0,\n"
	  "       keep_sharing=0, keep_gid=0, keep_owner_uid=None, alignment=0) -> (SharedSegment, bytes)\n\n"
	  "Phase one; returns (segment, blob).  background_commit: the owner returns after the first\n"
	  "chunk and commits the rest behind the readiness front (see wait_ready()).  keep_name: the\n"
	  "owner takes the pages from the node keeper (mooncake-segmentd) under that name.  alignment:\n"
	  "every rank's base is a multiple of it (0: the page size in use)." },
	{ "supported", (PyCFunction)(void (*)(void))segment_supported,
	  METH_VARARGS | METH_KEYWORDS | METH_STATIC,
	  "supported(mmap=True, host_register=False, hugetlb=False) -> bool" },
	{ "why_unsupported", (PyCFunction)(void (*)(void))segment_why_unsupported,
	  METH_VARARGS | METH_KEYWORDS | METH_STATIC,
	  "why_unsupported(mmap=True, host_register=False, hugetlb=False, device_id=0) -> str\n\n"
	  "The C library's reason and fix when supported() is False, else ''." },
	{ "complete", (PyCFunction)segment_complete, METH_O,
	  "complete(blobs)\n\nPhase two; blobs are indexed by rank." },
	{ "finish", (PyCFunction)segment_finish, METH_NOARGS,
	  "finish()\n\nAfter every rank completed: the owner drops the descriptor importers needed." },
	{ "close", (PyCFunction)segment_close, METH_NOARGS,
	  "close()\n\nRelease this rank's mapping now; BufferError while views are alive." },
	{ "ready", (PyCFunction)segment_ready, METH_NOARGS, "ready() -> bool: complete() succeeded" },
	{ "wait_ready", (PyCFunction)(void (*)(void))segment_wait_ready, METH_VARARGS | METH_KEYWORDS,
	  "wait_ready(offset=0, length=None, timeout=None) -> True\n\n"
	  "Wait, without the GIL, until [offset, offset+length) is committed (and registered on this\n"
	  "rank); length None: to the end; timeout in seconds, None: no limit.  TimeoutError when it\n"
	  "passes, SegmentError when the commit, the owner or the registration failed, ValueError\n"
	  "when close() ended the wait." },
	{ "ready_bytes", (PyCFunction)segment_ready_bytes, METH_NOARGS,
	  "ready_bytes() -> int: bytes from offset 0 ready now (the size once all are)" },
	{ "base_addr", (PyCFunction)segment_base_addr, METH_NOARGS,
	  "base_addr() -> int: this rank's host address" },
	{ "device_addr", (PyCFunction)segment_device_addr, METH_NOARGS,
	  "device_addr() -> int: accelerator address, 0 when not registered" },
	{ "size", (PyCFunction)segment_size, METH_NOARGS, "size() -> int: the requested size" },
	{ "alloc_size", (PyCFunction)segment_alloc_size, METH_NOARGS,
	  "alloc_size() -> int: the mapped size" },
	{ "info", (PyCFunction)segment_info, METH_NOARGS,
	  "info() -> dict: what the segment actually got, residency included (reads /proc/self/smaps)" },
	{ "facts", (PyCFunction)segment_facts, METH_NOARGS,
	  "facts() -> dict: size, alloc_size, page_size, device_addr, backend, accelerator, owner,\n"
	  "hugetlb, registered, kept, warm, keep_generation, as complete() found them; costs nothing" },
	{ "view", (PyCFunction)(void (*)(void))segment_view, METH_VARARGS | METH_KEYWORDS,
	  "view(offset=0, nbytes=None) -> memoryview over [offset, offset+nbytes)" },
	{ "publish", (PyCFunction)segment_publish, METH_VARARGS,
	  "publish(slot) -> int\n\nPublish a slot: its sequence grows by 2 and its waiters wake; the new sequence." },
	{ "wait_slot", (PyCFunction)(void (*)(void))segment_wait_slot, METH_VARARGS | METH_KEYWORDS,
	  "wait_slot(slot, seen, timeout=None) -> int\n\n"
	  "Wait, without the GIL, until the slot's sequence is even and not seen; returns it.\n"
	  "TimeoutError when timeout (seconds; None: no limit) passes, ValueError when close() ended it." },
	{ "write_begin", (PyCFunction)segment_write_begin, METH_VARARGS,
	  "write_begin(slot) -> int: the seqlock writer makes the sequence odd (SegmentError EBUSY while\n"
	  "another write runs)" },
	{ "write_end", (PyCFunction)segment_write_end, METH_VARARGS,
	  "write_end(slot) -> int: the sequence even again, waiters woken" },
	{ "read_begin", (PyCFunction)(void (*)(void))segment_read_begin, METH_VARARGS | METH_KEYWORDS,
	  "read_begin(slot, timeout=None) -> int\n\n"
	  "Wait, without the GIL, until no write is in progress; the (even) sequence to pass to read_retry()." },
	{ "read_retry", (PyCFunction)segment_read_retry, METH_VARARGS,
	  "read_retry(slot, seq) -> bool: True when the block may have changed since seq (copy again)" },
	{ "try_claim", (PyCFunction)segment_try_claim, METH_VARARGS,
	  "try_claim(slot) -> int: 1 held by this rank now, 2 taken over from a gone rank, 0 a live rank\n"
	  "holds it" },
	{ "release_claim", (PyCFunction)segment_release_claim, METH_VARARGS,
	  "release_claim(slot): let go of this rank's claim (SegmentError EPERM when it holds none)" },
	{ "slot_words", (PyCFunction)segment_slot_words, METH_NOARGS,
	  "slot_words() -> (memoryview, stride)\n\n"
	  "The slots' sequences, read-only int64 items: slot i's is item i * stride.  It holds an export." },
	{ "publish_on_stream", (PyCFunction)segment_publish_on_stream, METH_VARARGS,
	  "publish_on_stream(slot, stream, wake_host=True) -> int\n\n"
	  "Queue on the stream (a handle, 0: the default stream): once its work before is done, the\n"
	  "sequence becomes the returned value, then (wake_host) the CPU waiters wake.  host_register only." },
	{ "wait_slot_on_stream", (PyCFunction)segment_wait_slot_on_stream, METH_VARARGS,
	  "wait_slot_on_stream(slot, seen, stream) -> int\n\n"
	  "Queue on the stream a wait, on the device, until the sequence passes seen; returns the value\n"
	  "waited for (the next even one past seen).  host_register only." },
	{ "slot_device_words", (PyCFunction)segment_slot_device_words, METH_NOARGS,
	  "slot_device_words() -> (device address, stride)\n\n"
	  "Slot i's sequence is the int64 at the address + i * stride * 8 on this rank's device." },
	{ "__enter__", (PyCFunction)segment_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)segment_exit, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef segment_getset[] = {
	{ "closed", (getter)segment_closed, NULL, "True once close() ran", NULL },
	{ "exports", (getter)segment_exports, NULL, "live buffer exports", NULL },
	{ "busy", (getter)segment_busy, NULL, "the call another thread is inside without the GIL, or None",
	  NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject SegmentType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._segment.SharedSegment",
	.tp_basicsize = sizeof(SegmentObject),
	.tp_dealloc = (destructor)segment_dealloc,
	.tp_repr = (reprfunc)segment_repr,
	.tp_as_buffer = &segment_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "One rank's handle on a shared segment; made by SharedSegment.create().",
	.tp_methods = segment_methods,
	.tp_getset = segment_getset,
};
