/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake._segment: the private native module under mooncake.shared_segment.
 *
 * This file: the module itself, its functions (version, room, host_id) and its init.
 * The SharedSegment type is in _segment_object.c, its buffer protocol and
 * views in _segment_buffer.c, errors and argument parsing in
 * _segment_errors.c; _segment.h is what they share.
 */
#include "_segment.h"

static PyObject *module_version(PyObject *module, PyObject *unused)
{
	(void)module;
	(void)unused;
	return PyUnicode_FromString(mooncake_segment_version());
}

/* mooncake_segment_room(): the bytes a segment of this kind can take on this host. */
static PyObject *module_room(PyObject *module, PyObject *args, PyObject *kwargs)
{
	static const char *const keywords[] = { "mmap", "hugetlb", "hugetlb_page_size", NULL };
	struct mooncake_segment_options opt;
	int use_mmap = 1, hugetlb = 0, ret;
	PyObject *mmap_obj = NULL, *hugetlb_obj = NULL, *huge_size_obj = NULL;
	unsigned long long u;
	uint64_t bytes = 0;

	(void)module;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOO:room", (char **)keywords, &mmap_obj,
					 &hugetlb_obj, &huge_size_obj) ||
	    bool_argument(mmap_obj, "mmap", &use_mmap) < 0 ||
	    bool_argument(hugetlb_obj, "hugetlb", &hugetlb) < 0)
		return NULL;
	mooncake_segment_options_init(&opt);
	opt.mmap = use_mmap;
	opt.hugetlb = hugetlb;
	if (huge_size_obj) {
		if (int_argument(huge_size_obj, "hugetlb_page_size", 0, UINT64_MAX, &u, NULL) < 0)
			return NULL;
		opt.hugetlb_page_size = u;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = mooncake_segment_room(&opt, &bytes);
	Py_END_ALLOW_THREADS
	if (ret < 0)
		return raise_library_error(ret);
	return PyLong_FromUnsignedLongLong(bytes);
}

/* mooncake_segment_host_id(): this host as complete() tells hosts apart; None when unknown. */
static PyObject *module_host_id(PyObject *module, PyObject *unused)
{
	uint8_t id[MOONCAKE_SEGMENT_HOST_ID_SIZE];

	(void)module;
	(void)unused;
	if (!mooncake_segment_host_id(id))
		Py_RETURN_NONE;
	return PyBytes_FromStringAndSize((const char *)id, sizeof(id));
}

static PyMethodDef module_methods[] = {
	{ "version", module_version, METH_NOARGS, "version() -> str: the C library's version" },
	{ "room", (PyCFunction)(void (*)(void))module_room, METH_VARARGS | METH_KEYWORDS,
	  "room(mmap=True, hugetlb=False, hugetlb_page_size=0) -> int\n\n"
	  "mooncake_segment_room(): the bytes a segment of this kind can take on this host." },
	{ "host_id", module_host_id, METH_NOARGS,
	  "host_id() -> bytes | None: mooncake_segment_host_id(), this host as complete() tells hosts apart" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef segment_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "mooncake._segment",
	.m_doc = "Private native core of mooncake.shared_segment; use that module instead.",
	.m_size = -1,
	.m_methods = module_methods,
};

/* PyModule_AddObject that keeps the caller's reference (PyModule_AddObjectRef is 3.10+). */
static int add_object(PyObject *module, const char *name, PyObject *value)
{
	Py_INCREF(value);
	if (PyModule_AddObject(module, name, value) < 0) {
		Py_DECREF(value);
		return -1;
	}
	return 0;
}

PyMODINIT_FUNC PyInit__segment(void);

PyMODINIT_FUNC PyInit__segment(void)
{
	PyObject *module, *max_size;

	if (PyType_Ready(&SegmentType) < 0 || PyType_Ready(&SlotWordsType) < 0)
		return NULL;
	module = PyModule_Create(&segment_module);
	if (!module)
		return NULL;
	segment_error = PyErr_NewExceptionWithDoc(
		"mooncake._segment.SegmentError",
		"A library failure; .errno holds the errno, str() \"Code: details\" as upstream.",
		PyExc_RuntimeError, NULL);
	if (!segment_error || add_object(module, "SegmentError", segment_error) < 0 ||
	    add_object(module, "SharedSegment", (PyObject *)&SegmentType) < 0 ||
	    PyModule_AddIntConstant(module, "BLOB_SIZE", MOONCAKE_SEGMENT_BLOB_SIZE) < 0 ||
	    PyModule_AddIntConstant(module, "MAX_SLOTS", MOONCAKE_SEGMENT_MAX_SLOTS) < 0) {
		Py_DECREF(module);
		return NULL;
	}
	max_size = PyLong_FromUnsignedLongLong(MOONCAKE_SEGMENT_MAX_SIZE);
	if (!max_size || add_object(module, "MAX_SIZE", max_size) < 0) {
		Py_XDECREF(max_size);
		Py_DECREF(module);
		return NULL;
	}
	Py_DECREF(max_size);
	return module;
}
