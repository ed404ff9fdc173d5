/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake._segment.SharedSegment: one rank's handle on a struct
 * mooncake_segment, from create() through complete(), finish() and close(),
 * with its accessors and info().  The buffer protocol is in _segment_buffer.c.
 *
 * Threads (segment.h: nothing may run concurrently with a call that changes
 * the segment; the const getters may run together): create, complete, close
 * and info release the GIL.  Every method that touches the C segment first
 * checks, with the GIL held, that no other thread is inside complete()
 * (`busy`), and complete, finish and close also that none is inside info()
 * (`readers`); otherwise it raises RuntimeError naming the call in progress.
 *
 * What the segment knows once complete (backend, accelerator, page size,
 * device address) is cached by complete() and read by facts() for free;
 * info() alone reads the residency from /proc/self/smaps, without the GIL.
 */
#include "_segment.h"

#include <stdio.h>
#include <string.h>

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
SegmentObject *check_usable(SegmentObject *self, const char *call, int exclusive)
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
	if (exclusive && self->readers > 0) {
		PyErr_Format(PyExc_RuntimeError,
			     "%s: another thread is inside info() on this shared segment; wait for it "
			     "to return",
			     call);
		return NULL;
	}
	return self;
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
						NULL };
	const char *name;
	PyObject *size_obj, *world_obj, *rank_obj,
		*owner_obj = NULL, *device_obj = NULL, *numa_obj = NULL, *threads_obj = NULL,
		*huge_size_obj = NULL, *mmap_obj = NULL, *host_register_obj = NULL, *hugetlb_obj = NULL,
		*populate_obj = NULL;
	int use_mmap = 1, host_register = 0, hugetlb = 0, populate = 0;
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *seg = NULL;
	unsigned long long size, u;
	long long s;
	SegmentObject *obj;
	PyObject *result;
	int ret;

	(void)cls;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sOOO|OOOOO$OOOO:create", (char **)keywords, &name,
					 &size_obj, &world_obj, &rank_obj, &owner_obj, &device_obj, &mmap_obj,
					 &host_register_obj, &hugetlb_obj, &numa_obj, &threads_obj,
					 &populate_obj, &huge_size_obj) ||
	    bool_argument(mmap_obj, "mmap", &use_mmap) < 0 ||
	    bool_argument(host_register_obj, "host_register", &host_register) < 0 ||
	    bool_argument(hugetlb_obj, "hugetlb", &hugetlb) < 0 ||
	    bool_argument(populate_obj, "populate_on_import", &populate) < 0)
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
 * (reason and fix), or "" when it can: supported() sets no message, so a
 * one-page, one-rank create is tried, and destroyed if it succeeds.
 */
static PyObject *segment_why_unsupported(PyObject *cls, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "mmap", "host_register", "hugetlb", "device_id", NULL };
	int use_mmap = 1, host_register = 0, hugetlb = 0, device_id = 0, ret;
	struct mooncake_segment_options opt;
	uint8_t blob[MOONCAKE_SEGMENT_BLOB_SIZE];
	struct mooncake_segment *seg = NULL;
	char reason[1024];

	PyObject *mmap_obj = NULL, *host_register_obj = NULL, *hugetlb_obj = NULL;

	(void)cls;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOOi:why_unsupported", (char **)keywords, &mmap_obj,
					 &host_register_obj, &hugetlb_obj, &device_id) ||
	    bool_argument(mmap_obj, "mmap", &use_mmap) < 0 ||
	    bool_argument(host_register_obj, "host_register", &host_register) < 0 ||
	    bool_argument(hugetlb_obj, "hugetlb", &hugetlb) < 0)
		return NULL;
	if (mooncake_segment_supported(use_mmap, host_register, hugetlb))
		return PyUnicode_FromString("");
	mooncake_segment_options_init(&opt);
	opt.mmap = use_mmap;
	opt.host_register = host_register;
	opt.hugetlb = hugetlb;
	opt.device_id = device_id;
	reason[0] = '\0';
	Py_BEGIN_ALLOW_THREADS
	ret = mooncake_segment_create("capability-probe", 1, &opt, &seg, blob);
	if (ret < 0)
		snprintf(reason, sizeof(reason), "%s", mooncake_segment_last_error());
	else
		mooncake_segment_destroy(seg);
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

	if (!check_usable(self, "complete", 1) || join_blobs(blobs, &joined, &len) < 0)
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
	if (!check_usable(self, "finish", 1))
		return NULL;
	ret = mooncake_segment_finish(self->seg);
	if (ret < 0)
		return raise_library_error(ret);
	Py_RETURN_NONE;
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
	if (!check_usable(self, "close", 1))
		return NULL;
	self->seg = NULL; /* closed for every other thread before the GIL goes */
	Py_BEGIN_ALLOW_THREADS
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
	if (!check_usable(self, "ready", 0))
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
	if (!check_usable(self, "base_addr", 0))
		return NULL;
	return PyLong_FromVoidPtr(mooncake_segment_base(self->seg));
}

static PyObject *segment_device_addr(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_usable(self, "device_addr", 0))
		return NULL;
	return PyLong_FromUnsignedLongLong(mooncake_segment_device_addr(self->seg));
}

static PyObject *segment_size(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_usable(self, "size", 0))
		return NULL;
	return PyLong_FromUnsignedLongLong(mooncake_segment_size(self->seg));
}

static PyObject *segment_alloc_size(SegmentObject *self, PyObject *unused)
{
	(void)unused;
	if (!check_usable(self, "alloc_size", 0))
		return NULL;
	return PyLong_FromUnsignedLongLong(mooncake_segment_alloc_size(self->seg));
}

static PyObject *segment_info(SegmentObject *self, PyObject *unused)
{
	struct mooncake_segment_info info;
	struct mooncake_segment *seg;
	int ret;

	(void)unused;
	if (!check_usable(self, "info", 0))
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
		"{s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:I,s:s,s:s,s:s,s:i,s:i,s:K,s:O,s:O,s:O,s:O,s:O,s:O}", "size",
		(unsigned long long)info.size, "alloc_size", (unsigned long long)info.alloc_size, "page_size",
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
		(info.flags & MOONCAKE_SEGMENT_INFO_REGISTERED) ? Py_True : Py_False);
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
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:s,s:s,s:O,s:O,s:O}", "size", (unsigned long long)f->size,
			     "alloc_size", (unsigned long long)f->alloc_size, "page_size",
			     (unsigned long long)f->page_size, "device_addr",
			     (unsigned long long)self->facts_device_addr, "backend", f->backend,
			     "accelerator", f->accelerator, "owner",
			     (f->flags & MOONCAKE_SEGMENT_INFO_OWNER) ? Py_True : Py_False, "hugetlb",
			     (f->flags & MOONCAKE_SEGMENT_INFO_HUGETLB) ? Py_True : Py_False, "registered",
			     (f->flags & MOONCAKE_SEGMENT_INFO_REGISTERED) ? Py_True : Py_False);
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
	Py_RETURN_NONE;
}

static PyMethodDef segment_methods[] = {
	{ "create", (PyCFunction)(void (*)(void))segment_create, METH_VARARGS | METH_KEYWORDS | METH_STATIC,
	  "create(name, size, world_size, rank_id, owner_rank=0, device_id=0, mmap=True, host_register=False,\n"
	  "       hugetlb=False, *, numa_node=-1, commit_threads=0, populate_on_import=False,\n"
	  "       hugetlb_page_size=0) -> (SharedSegment, bytes)\n\nPhase one; returns (segment, blob)." },
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
	  "hugetlb, registered, as complete() found them; costs nothing" },
	{ "view", (PyCFunction)(void (*)(void))segment_view, METH_VARARGS | METH_KEYWORDS,
	  "view(offset=0, nbytes=None) -> memoryview over [offset, offset+nbytes)" },
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
