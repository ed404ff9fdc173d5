/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the native module mooncake._segment share: the
 * SharedSegment object and its type (_segment_object.c), its buffer protocol
 * (_segment_buffer.c), its publish slots (_segment_slots.c), the module's exception and the helpers that raise
 * library errors and parse integer arguments (_segment_errors.c).  Private to
 * bindings/python/mooncake/: nothing here is part of any installed header.
 * It includes Python.h first, as CPython requires, so a file of the module
 * includes this header before any other.
 */
#ifndef MOONCAKE_PY_SEGMENT_H
#define MOONCAKE_PY_SEGMENT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <sys/types.h>

#include <mooncake/segment.h>

extern PyObject *segment_error; /* mooncake._segment.SegmentError(RuntimeError) */

typedef struct {
	PyObject_HEAD struct mooncake_segment *seg; /* NULL once closed */
	Py_ssize_t exports;			    /* live buffer exports */
	const char *busy;			    /* the changing call running without the GIL, or NULL */
	int readers;				    /* info() calls running without the GIL */
	int waiters;	   /* waits in the library (wait_ready, slot waits): atomic, left without the GIL */
	int slot_waiters;  /* of those, slot waits (wait_slot(), read_begin()): atomic, for messages */
	pid_t waiters_pid; /* the process that counted them (a fork() child's threads are gone) */
	int closing;	   /* atomic: close() waits for the waiters to leave */
	int has_facts;	   /* facts holds what complete() found */
	struct mooncake_segment_info facts; /* its residency fields are not used */
	uint64_t facts_device_addr;
	uint32_t slot_count; /* publish slots declared at create */
} SegmentObject;

extern PyTypeObject SegmentType;
extern PyBufferProcs segment_as_buffer;

/* _segment_errors.c: library errors, integer and flag arguments. */
PyObject *raise_library_error(int ret);
int int_argument(PyObject *obj, const char *name, long long min, unsigned long long max,
		 unsigned long long *value, long long *signed_value);
int bool_argument(PyObject *obj, const char *name, int *value);

/* _segment_object.c: may this call touch the segment now?  (NULL and an exception if not.) */
enum segment_use {
	SEGMENT_READS,	 /* a getter: may run beside info() and wait_ready() */
	SEGMENT_CHANGES, /* complete(), finish(): alone */
	SEGMENT_CLOSES,	 /* close(): alone, but for the wait_ready() calls it ends */
};
SegmentObject *check_open(SegmentObject *self);
SegmentObject *check_usable(SegmentObject *self, const char *call, enum segment_use use);

/*
 * _segment_object.c: run @call without the GIL in slices until it returns
 * anything but -ETIMEDOUT, @timeout seconds pass (< 0: no limit) or close()
 * wants the segment (then *@closed is 1).  The wait is counted (a slot wait
 * when @slot_wait) so that close() destroys the segment only once it left;
 * @call must not touch the segment after it returns.  In the main thread it
 * takes the GIL back between slices to run the signal handlers (Ctrl-C):
 * when one raises, or the segment became unusable for @name while it ran,
 * it returns WAIT_RAISED with the exception set.  A slice that succeeded is
 * never followed by that check: its result is returned.  Otherwise returns
 * @call's last result.
 */
#define WAIT_RAISED INT64_MIN
typedef int64_t (*sliced_call)(struct mooncake_segment *seg, void *arg, int slice_ms);
int64_t wait_in_slices(SegmentObject *self, const char *name, sliced_call call, void *arg, double timeout,
		       int slot_wait, int *closed);
int timeout_argument(PyObject *obj, double *seconds);

/* _segment_slots.c: the publish slots' methods and their sequences as words. */
PyObject *segment_publish(SegmentObject *self, PyObject *args);
PyObject *segment_wait_slot(SegmentObject *self, PyObject *args, PyObject *kwargs);
PyObject *segment_write_begin(SegmentObject *self, PyObject *args);
PyObject *segment_write_end(SegmentObject *self, PyObject *args);
PyObject *segment_read_begin(SegmentObject *self, PyObject *args, PyObject *kwargs);
PyObject *segment_read_retry(SegmentObject *self, PyObject *args);
PyObject *segment_try_claim(SegmentObject *self, PyObject *args);
PyObject *segment_release_claim(SegmentObject *self, PyObject *args);
PyObject *segment_slot_words(SegmentObject *self, PyObject *unused);
PyObject *segment_publish_on_stream(SegmentObject *self, PyObject *args);
PyObject *segment_wait_slot_on_stream(SegmentObject *self, PyObject *args);
PyObject *segment_slot_device_words(SegmentObject *self, PyObject *unused);
extern PyTypeObject SlotWordsType;

/* _segment_buffer.c: SharedSegment.view(), a memoryview that holds an export. */
PyObject *segment_view(SegmentObject *self, PyObject *args, PyObject *kwargs);

#endif /* MOONCAKE_PY_SEGMENT_H */
