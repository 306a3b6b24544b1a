/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The smallest C extension over kvadmit that bench/overhead.py measures
 * against ctypes and cffi: submit, cancel and an empty step, each releasing
 * the GIL around the library call as a real binding would. Built by
 * overhead.py itself (python3-dev headers), never installed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <kvadmit/kvadmit.h>

static kva_admission adm[64];
static uint32_t pages[1 << 16];
static kva_copy_job copies[64];
static kva_fallback fallbacks[64];
static kva_ended ended[64];

static PyObject *p_submit(PyObject *self, PyObject *args)
{
	unsigned long long e, id, key;
	unsigned int prompt;
	(void)self;
	if (!PyArg_ParseTuple(args, "KKKI", &e, &id, &key, &prompt))
		return NULL;
	kva_request r = {.id = id, .prefix_key = key, .prompt_tokens = prompt};
	kva_handle h;
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = kva_submit((kva_engine *)(uintptr_t)e, &r, &h);
	Py_END_ALLOW_THREADS if (rc < 0) return PyErr_Format(PyExc_OSError, "%d", rc);
	return Py_BuildValue("(KII)", (unsigned long long)h.id, h.gen, h.slot);
}

static PyObject *p_cancel(PyObject *self, PyObject *args)
{
	unsigned long long e, id;
	unsigned int gen, slot;
	(void)self;
	if (!PyArg_ParseTuple(args, "K(KII)", &e, &id, &gen, &slot))
		return NULL;
	kva_handle h = {.id = id, .gen = gen, .slot = slot};
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = kva_cancel((kva_engine *)(uintptr_t)e, h);
	Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

static PyObject *p_step(PyObject *self, PyObject *args)
{
	unsigned long long e, now;
	(void)self;
	if (!PyArg_ParseTuple(args, "KK", &e, &now))
		return NULL;
	kva_plan p = {.admitted = adm, .admitted_cap = 64, .pages = pages, .pages_cap = 1 << 16,
	              .copies = copies, .copies_cap = 64, .fallbacks = fallbacks,
	              .fallbacks_cap = 64, .ended = ended, .ended_cap = 64};
	int rc;
	Py_BEGIN_ALLOW_THREADS rc = kva_step((kva_engine *)(uintptr_t)e, now, &p);
	Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
	{"submit", p_submit, METH_VARARGS, NULL},
	{"cancel", p_cancel, METH_VARARGS, NULL},
	{"step", p_step, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "kva_probe_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_kva_probe_ext(void) { return PyModule_Create(&mod); }
