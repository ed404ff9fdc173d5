/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake._segment's errors and argument parsing: the C library's negative
 * errno becomes SegmentError("Code: message") with upstream's Status code
 * name in front and .errno kept; integer arguments are range-checked here so
 * that a bad one names itself instead of wrapping around in the C call.
 */
#include "_segment.h"

#include <errno.h>
#include <string.h>

PyObject *segment_error; /* made by PyInit__segment() */

/*
 * Upstream's Status code name for an errno, which leads the message as in
 * upstream's RuntimeError("InvalidArgument: ...") so that callers matching
 * those texts keep working: a declaration or protocol fault is
 * InvalidArgument, a missing capability NotImplemented, and a failure of the
 * system or the runtime (no memory, a gone owner) Memory.  Ours: the publish
 * slots' refusals are Busy (a write in progress) and PermissionDenied (a
 * claim this rank does not hold), not a failure of memory, and so is the
 * keeper's refusal of a connection past its limits (EUSERS); a kept
 * segment's refusals (doc/keeper.md) are InvalidArgument (another
 * declaration), PermissionDenied (another user's) and NotFound (no keeper,
 * or attach only and absent).  A gone owner, one that destroyed the segment
 * while committing it and one that stopped answering are no lack of memory
 * either: OwnerGone (ESRCH), Cancelled (ECANCELED), Timeout (ETIMEDOUT).
 */
static const char *status_code_name(int err)
{
	switch (err) {
	case EINVAL:
	case EPROTO:
	case EALREADY:
	case EXDEV:
	case ERANGE:
	case EDOM:
	case EEXIST: /* a kept segment with another declaration */
		return "InvalidArgument";
	case ENOTSUP:
#if EOPNOTSUPP != ENOTSUP
	case EOPNOTSUPP:
#endif
	case ENOSYS:
		return "NotImplemented";
	case EBUSY:
	case EUSERS: /* the keeper's connection limits */
		return "Busy";
	case EPERM:
	case EACCES: /* another user's kept segment */
		return "PermissionDenied";
	case ENOENT: /* no keeper, or no such kept segment */
		return "NotFound";
	case ESRCH: /* the owner died, or finished before this rank completed */
		return "OwnerGone";
	case ECANCELED: /* the owner destroyed the segment while committing it */
		return "Cancelled";
	case ETIMEDOUT: /* the owner is stopped or stuck (complete()) */
		return "Timeout";
	default:
		return "Memory";
	}
}

/* Raise SegmentError("Code: message") with .errno and .strerror set, from a negative errno. */
PyObject *raise_library_error(int ret)
{
	PyObject *args, *exc, *code, *text;
	int err = -ret;

	args = Py_BuildValue(
		"(N)", PyUnicode_FromFormat("%s: %s", status_code_name(err), mooncake_segment_last_error()));
	if (!args)
		return NULL;
	exc = PyObject_Call(segment_error, args, NULL);
	Py_DECREF(args);
	if (!exc)
		return NULL;
	code = PyLong_FromLong(err);
	text = PyUnicode_FromString(strerror(err));
	if (code && text && PyObject_SetAttrString(exc, "errno", code) == 0 &&
	    PyObject_SetAttrString(exc, "strerror", text) == 0)
		PyErr_SetObject(segment_error, exc);
	Py_XDECREF(code);
	Py_XDECREF(text);
	Py_DECREF(exc);
	return NULL;
}

/* A flag argument: True or False only, or TypeError naming it (a truth test
 * would take "no", "" and 1; the Python API refuses them too).  NULL
 * (not given) leaves *value as it is. */
int bool_argument(PyObject *obj, const char *name, int *value)
{
	if (!obj)
		return 0;
	if (!PyBool_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "%s must be True or False, not %.100s %R", name,
			     Py_TYPE(obj)->tp_name, obj);
		return -1;
	}
	*value = obj == Py_True;
	return 0;
}

/* An integer argument in [min, max], or ValueError/TypeError naming it. */
int int_argument(PyObject *obj, const char *name, long long min, unsigned long long max,
		 unsigned long long *value, long long *signed_value)
{
	int overflow = 0;
	long long v;

	if (!PyLong_Check(obj) || PyBool_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name, Py_TYPE(obj)->tp_name);
		return -1;
	}
	v = PyLong_AsLongLongAndOverflow(obj, &overflow);
	if (overflow == 0 && v == -1 && PyErr_Occurred())
		return -1;
	if (overflow < 0 || (overflow == 0 && v < min)) {
		PyErr_Format(PyExc_ValueError, "%s must be >= %lld, got %R", name, min, obj);
		return -1;
	}
	if (overflow > 0 || (v >= 0 && (unsigned long long)v > max)) {
		/* Above LLONG_MAX: only an unsigned 64-bit bound can still hold it. */
		unsigned long long u = overflow > 0 ? PyLong_AsUnsignedLongLong(obj) : (unsigned long long)v;

		if (PyErr_Occurred() || u > max) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "%s must be <= %llu, got %R", name, max, obj);
			return -1;
		}
		v = (long long)u;
	}
	if (value)
		*value = (unsigned long long)v;
	if (signed_value)
		*signed_value = v;
	return 0;
}
