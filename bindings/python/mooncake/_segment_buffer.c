/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The buffer protocol of mooncake._segment.SharedSegment and its views.
 *
 * SharedSegment wraps one struct mooncake_segment.  It implements the buffer
 * protocol over the whole mapping and counts its exports, so that close()
 * refuses (BufferError) while any memoryview, array or tensor over the pages
 * is alive, and the pages are unmapped only when the object is closed or
 * collected with no export left: no use-after-unmap is possible from Python.
 */
#include "_segment.h"

/* A memoryview of [offset, offset+nbytes): a slice of a view of the whole, so it holds an export. */
PyObject *segment_view(SegmentObject *self, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "offset", "nbytes", NULL };
	PyObject *offset_obj = NULL, *nbytes_obj = NULL, *whole, *start, *stop, *slice, *view;
	unsigned long long offset = 0, nbytes, size;

	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:view", (char **)keywords, &offset_obj,
					 &nbytes_obj))
		return NULL;
	if (!check_usable(self, "view", SEGMENT_READS))
		return NULL;
	size = mooncake_segment_size(self->seg);
	if (offset_obj && int_argument(offset_obj, "offset", 0, size, &offset, NULL) < 0)
		return NULL;
	nbytes = size - offset;
	if (nbytes_obj && int_argument(nbytes_obj, "nbytes", 0, size - offset, &nbytes, NULL) < 0)
		return NULL;
	whole = PyMemoryView_FromObject((PyObject *)self);
	if (!whole)
		return NULL;
	start = PyLong_FromUnsignedLongLong(offset);
	stop = PyLong_FromUnsignedLongLong(offset + nbytes);
	slice = start && stop ? PySlice_New(start, stop, NULL) : NULL;
	Py_XDECREF(start);
	Py_XDECREF(stop);
	if (!slice) {
		Py_DECREF(whole);
		return NULL;
	}
	view = PyObject_GetItem(whole, slice);
	Py_DECREF(slice);
	Py_DECREF(whole);
	return view;
}

static int segment_getbuffer(SegmentObject *self, Py_buffer *view, int flags)
{
	if (!self->seg) {
		PyErr_SetString(PyExc_BufferError, "the shared segment is closed");
		view->obj = NULL;
		return -1;
	}
	if (self->busy) {
		PyErr_Format(PyExc_BufferError, "another thread is inside %s() on this shared segment",
			     self->busy);
		view->obj = NULL;
		return -1;
	}
	if (!mooncake_segment_ready(self->seg)) {
		/* A peer's window is PROT_NONE until complete(): exporting it would fault. */
		PyErr_SetString(PyExc_BufferError,
				"the shared segment is not complete yet: call complete() first");
		view->obj = NULL;
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)self, mooncake_segment_base(self->seg),
			      (Py_ssize_t)mooncake_segment_size(self->seg), 0, flags) < 0)
		return -1;
	self->exports++;
	return 0;
}

static void segment_releasebuffer(SegmentObject *self, Py_buffer *view)
{
	(void)view;
	self->exports--;
}

PyBufferProcs segment_as_buffer = {
	(getbufferproc)segment_getbuffer,
	(releasebufferproc)segment_releasebuffer,
};
