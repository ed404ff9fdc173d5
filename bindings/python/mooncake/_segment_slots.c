/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The publish slots of mooncake._segment.SharedSegment (slot_count at
 * create): thin methods over mooncake_segment_publish() and its kin, and
 * slot_words(), a read-only view of the sequences.
 *
 * The slot functions touch only the shared words, so they run beside each
 * other and beside the getters (segment.h): every method here checks the
 * segment as a getter does (SEGMENT_READS).  The two that can block,
 * wait_slot() and read_begin(), run without the GIL in slices
 * (wait_in_slices(), _segment_object.c) and are counted as waiters, so that
 * close() ends them within a slice instead of destroying the segment under
 * them.  The others are a few atomic instructions and keep the GIL.
 *
 * slot_words() hands out a memoryview over a SlotWords object that holds the
 * segment and counts as one of its exports: close() refuses (BufferError)
 * while a view of the sequences is alive, as for any view of the pages.
 */
#include "_segment.h"

#include <errno.h>
#include <stdio.h>

/* A slot number: an int the library then checks against slot_count (its message names the range). */
static int slot_argument(PyObject *obj, uint32_t *slot)
{
	unsigned long long u;

	if (int_argument(obj, "slot", 0, UINT32_MAX, &u, NULL) < 0)
		return -1;
	*slot = (uint32_t)u;
	return 0;
}

/* The segment for slot call @call with slot @slot_obj, or NULL and an exception. */
static struct mooncake_segment *slot_call(SegmentObject *self, const char *call, PyObject *slot_obj,
					  uint32_t *slot)
{
	if (!check_usable(self, call, SEGMENT_READS) || slot_argument(slot_obj, slot) < 0)
		return NULL;
	return self->seg;
}

/* A sequence, or the library's error. */
static PyObject *sequence_result(int64_t ret)
{
	if (ret < 0)
		return raise_library_error((int)ret);
	return PyLong_FromLongLong(ret);
}

PyObject *segment_publish(SegmentObject *self, PyObject *args)
{
	struct mooncake_segment *seg;
	PyObject *slot_obj;
	uint32_t slot;

	if (!PyArg_ParseTuple(args, "O:publish", &slot_obj) ||
	    !(seg = slot_call(self, "publish", slot_obj, &slot)))
		return NULL;
	return sequence_result(mooncake_segment_publish(seg, slot));
}

PyObject *segment_write_begin(SegmentObject *self, PyObject *args)
{
	struct mooncake_segment *seg;
	PyObject *slot_obj;
	uint32_t slot;

	if (!PyArg_ParseTuple(args, "O:write_begin", &slot_obj) ||
	    !(seg = slot_call(self, "write_begin", slot_obj, &slot)))
		return NULL;
	return sequence_result(mooncake_segment_write_begin(seg, slot));
}

PyObject *segment_write_end(SegmentObject *self, PyObject *args)
{
	struct mooncake_segment *seg;
	PyObject *slot_obj;
	uint32_t slot;

	if (!PyArg_ParseTuple(args, "O:write_end", &slot_obj) ||
	    !(seg = slot_call(self, "write_end", slot_obj, &slot)))
		return NULL;
	return sequence_result(mooncake_segment_write_end(seg, slot));
}

PyObject *segment_read_retry(SegmentObject *self, PyObject *args)
{
	struct mooncake_segment *seg;
	PyObject *slot_obj, *seq_obj;
	unsigned long long seq;
	uint32_t slot;
	int ret;

	if (!PyArg_ParseTuple(args, "OO:read_retry", &slot_obj, &seq_obj) ||
	    !(seg = slot_call(self, "read_retry", slot_obj, &slot)) ||
	    int_argument(seq_obj, "seq", 0, INT64_MAX, &seq, NULL) < 0)
		return NULL;
	ret = mooncake_segment_read_retry(seg, slot, seq);
	if (ret < 0)
		return raise_library_error(ret);
	return PyBool_FromLong(ret);
}

PyObject *segment_try_claim(SegmentObject *self, PyObject *args)
{
	struct mooncake_segment *seg;
	PyObject *slot_obj;
	uint32_t slot;
	int ret;

	if (!PyArg_ParseTuple(args, "O:try_claim", &slot_obj) ||
	    !(seg = slot_call(self, "try_claim", slot_obj, &slot)))
		return NULL;
	ret = mooncake_segment_try_claim(seg, slot);
	if (ret < 0)
		return raise_library_error(ret);
	return PyLong_FromLong(ret);
}

PyObject *segment_release_claim(SegmentObject *self, PyObject *args)
{
	struct mooncake_segment *seg;
	PyObject *slot_obj;
	uint32_t slot;
	int ret;

	if (!PyArg_ParseTuple(args, "O:release_claim", &slot_obj) ||
	    !(seg = slot_call(self, "release_claim", slot_obj, &slot)))
		return NULL;
	ret = mooncake_segment_release_claim(seg, slot);
	if (ret < 0)
		return raise_library_error(ret);
	Py_RETURN_NONE;
}

/* --- the waits ---------------------------------------------------------------- */

struct slot_wait {
	uint32_t slot;
	uint64_t seen;	/* wait_slot: the sequence already seen */
	int read_begin; /* read_begin() instead of wait_slot() */
	uint64_t now;	/* the sequence when the wait timed out */
};

static int64_t slot_wait_call(struct mooncake_segment *seg, void *arg, int slice_ms)
{
	struct slot_wait *w = arg;
	int64_t ret = w->read_begin ? mooncake_segment_read_begin(seg, w->slot, slice_ms)
				    : mooncake_segment_wait_slot(seg, w->slot, w->seen, slice_ms);

	if (ret == -ETIMEDOUT) {
		size_t stride;
		const uint64_t *words = mooncake_segment_slot_words(seg, &stride);

		if (words)
			w->now = __atomic_load_n(&words[w->slot * (stride / sizeof(*words))],
						 __ATOMIC_RELAXED);
	}
	return ret;
}

/* wait_slot() and read_begin(): parse, wait in slices, turn the outcome into a sequence or an exception. */
static PyObject *slot_wait(SegmentObject *self, const char *call, PyObject *slot_obj, PyObject *timeout_obj,
			   struct slot_wait *w)
{
	struct mooncake_segment *seg;
	double timeout;
	int closed = 0;
	int64_t ret;
	char message[256];

	if (!(seg = slot_call(self, call, slot_obj, &w->slot)) || timeout_argument(timeout_obj, &timeout) < 0)
		return NULL;
	(void)seg;
	ret = wait_in_slices(self, call, slot_wait_call, w, timeout, 1, &closed);
	if (closed) {
		PyErr_Format(PyExc_ValueError,
			     "%s: the shared segment was closed while this thread waited for it", call);
		return NULL;
	}
	if (ret == WAIT_RAISED)
		return NULL;
	if (ret != -ETIMEDOUT)
		return sequence_result(ret);
	if (w->read_begin)
		snprintf(
			message, sizeof(message),
			"Shared segment slot %u: the write in progress did not end within %g s (sequence %llu)",
			w->slot, timeout, (unsigned long long)w->now);
	else
		snprintf(message, sizeof(message),
			 "Shared segment slot %u: no publish after sequence %llu within %g s (sequence %llu)",
			 w->slot, (unsigned long long)w->seen, timeout, (unsigned long long)w->now);
	PyErr_SetObject(PyExc_TimeoutError, Py_BuildValue("(is)", ETIMEDOUT, message));
	return NULL;
}

PyObject *segment_wait_slot(SegmentObject *self, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "slot", "seen", "timeout", NULL };
	PyObject *slot_obj, *seen_obj, *timeout_obj = NULL;
	struct slot_wait w = { 0, 0, 0, 0 };
	unsigned long long seen;

	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O:wait_slot", (char **)keywords, &slot_obj,
					 &seen_obj, &timeout_obj) ||
	    int_argument(seen_obj, "seen", 0, INT64_MAX, &seen, NULL) < 0)
		return NULL;
	w.seen = seen;
	return slot_wait(self, "wait_slot", slot_obj, timeout_obj, &w);
}

PyObject *segment_read_begin(SegmentObject *self, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "slot", "timeout", NULL };
	PyObject *slot_obj, *timeout_obj = NULL;
	struct slot_wait w = { 0, 0, 1, 0 };

	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:read_begin", (char **)keywords, &slot_obj,
					 &timeout_obj))
		return NULL;
	return slot_wait(self, "read_begin", slot_obj, timeout_obj, &w);
}

/* --- in accelerator stream order -------------------------------------------- */

/* A stream handle: the runtime's stream as an int (0: the default stream). */
static int stream_argument(PyObject *obj, void **stream)
{
	unsigned long long handle;

	if (int_argument(obj, "stream", 0, UINTPTR_MAX, &handle, NULL) < 0)
		return -1;
	*stream = (void *)(uintptr_t)handle;
	return 0;
}

PyObject *segment_publish_on_stream(SegmentObject *self, PyObject *args)
{
	struct mooncake_segment *seg;
	PyObject *slot_obj, *stream_obj;
	int wake_host = 1;
	uint32_t slot;
	void *stream;

	if (!PyArg_ParseTuple(args, "OO|p:publish_on_stream", &slot_obj, &stream_obj, &wake_host) ||
	    !(seg = slot_call(self, "publish_on_stream", slot_obj, &slot)) ||
	    stream_argument(stream_obj, &stream) < 0)
		return NULL;
	return sequence_result(mooncake_segment_publish_on_stream(
		seg, slot, stream, wake_host ? 0 : MOONCAKE_SEGMENT_STREAM_NO_HOST_WAKE));
}

PyObject *segment_wait_slot_on_stream(SegmentObject *self, PyObject *args)
{
	struct mooncake_segment *seg;
	PyObject *slot_obj, *seen_obj, *stream_obj;
	unsigned long long seen;
	uint32_t slot;
	void *stream;

	if (!PyArg_ParseTuple(args, "OOO:wait_slot_on_stream", &slot_obj, &seen_obj, &stream_obj) ||
	    !(seg = slot_call(self, "wait_slot_on_stream", slot_obj, &slot)) ||
	    int_argument(seen_obj, "seen", 0, INT64_MAX, &seen, NULL) < 0 ||
	    stream_argument(stream_obj, &stream) < 0)
		return NULL;
	return sequence_result(mooncake_segment_wait_slot_on_stream(seg, slot, seen, stream));
}

PyObject *segment_slot_device_words(SegmentObject *self, PyObject *unused)
{
	uint64_t device_addr;
	size_t stride;
	int ret;

	(void)unused;
	if (!check_usable(self, "slot_device_words", SEGMENT_READS))
		return NULL;
	ret = mooncake_segment_slot_device_words(self->seg, &device_addr, &stride);
	if (ret < 0)
		return raise_library_error(ret);
	return Py_BuildValue("(Kn)", (unsigned long long)device_addr,
			     (Py_ssize_t)(stride / sizeof(uint64_t)));
}

/* --- the sequences as words --------------------------------------------------- */

/* Exports the slot words of one segment, holding it (and one of its exports) while viewed. */
typedef struct {
	PyObject_HEAD SegmentObject *owner;
	const uint64_t *words;
	Py_ssize_t count; /* int64 items: slot_count * stride / 8 */
	Py_ssize_t shape[1];
} SlotWordsObject;

static char int64_format[] = "q";

static int slot_words_getbuffer(SlotWordsObject *self, Py_buffer *view, int flags)
{
	if (!self->owner->seg) {
		PyErr_SetString(PyExc_BufferError, "the shared segment is closed");
		view->obj = NULL;
		return -1;
	}
	if (flags & PyBUF_WRITABLE) {
		PyErr_SetString(
			PyExc_BufferError,
			"the slot sequences are read-only: publish and write_begin/write_end change them");
		view->obj = NULL;
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->words,
			      self->count * (Py_ssize_t)sizeof(int64_t), 1, flags) < 0)
		return -1;
	if (flags & PyBUF_FORMAT)
		view->format = int64_format;
	view->itemsize = sizeof(int64_t);
	if (flags & PyBUF_ND) {
		self->shape[0] = self->count;
		view->ndim = 1;
		view->shape = self->shape;
	}
	self->owner->exports++;
	return 0;
}

static void slot_words_releasebuffer(SlotWordsObject *self, Py_buffer *view)
{
	(void)view;
	self->owner->exports--;
}

static PyBufferProcs slot_words_as_buffer = {
	(getbufferproc)slot_words_getbuffer,
	(releasebufferproc)slot_words_releasebuffer,
};

static void slot_words_dealloc(SlotWordsObject *self)
{
	Py_XDECREF(self->owner);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject SlotWordsType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._segment.SlotWords",
	.tp_basicsize = sizeof(SlotWordsObject),
	.tp_dealloc = (destructor)slot_words_dealloc,
	.tp_as_buffer = &slot_words_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "The sequences of a segment's publish slots, exported read-only; made by slot_words().",
};

/* (memoryview of int64 words, stride in words): slot i's sequence is item i * stride. */
PyObject *segment_slot_words(SegmentObject *self, PyObject *unused)
{
	SlotWordsObject *exporter;
	const uint64_t *words;
	PyObject *view;
	size_t stride;

	(void)unused;
	if (!check_usable(self, "slot_words", SEGMENT_READS))
		return NULL;
	words = mooncake_segment_slot_words(self->seg, &stride);
	if (!words)
		return raise_library_error(-EINVAL);
	exporter = PyObject_New(SlotWordsObject, &SlotWordsType);
	if (!exporter)
		return NULL;
	Py_INCREF(self);
	exporter->owner = self;
	exporter->words = words;
	exporter->count = (Py_ssize_t)(self->slot_count * (stride / sizeof(*words)));
	view = PyMemoryView_FromObject((PyObject *)exporter);
	Py_DECREF(exporter);
	if (!view)
		return NULL;
	return Py_BuildValue("(Nn)", view, (Py_ssize_t)(stride / sizeof(*words)));
}
