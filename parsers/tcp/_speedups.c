/* Optional C helper for parsers/tcp/_fast.py.
 *
 * ewma(srtt, values): the smoothed RTT after folding int64 samples in order,
 * srtt = srtt * 0.875 + r * 0.125 (the first sample when srtt is None), with the same
 * double operations, in the same order, as the Python loop it replaces: built with
 * -ffp-contract=off so no multiply-add is fused (that would round differently).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *ewma(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "ewma(srtt, values)");
        return NULL;
    }
    int have = args[0] != Py_None;
    double s = 0.0;
    if (have) {
        s = PyFloat_AsDouble(args[0]);
        if (s == -1.0 && PyErr_Occurred()) return NULL;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(args[1], &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    const char *f = v.format ? v.format : "B";
    char code = f[strlen(f) - 1];
    if (v.itemsize != 8 || (code != 'l' && code != 'q') || f[0] == '>' || f[0] == '!') {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_TypeError, "values must be a contiguous int64 array");
        return NULL;
    }
    const long long *r = (const long long *)v.buf;
    Py_ssize_t n = v.len / 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = (double)r[i];
        if (!have) {
            s = x;
            have = 1;
        } else {
            double a = s * 0.875;
            double b = x * 0.125;
            s = a + b;
        }
    }
    PyBuffer_Release(&v);
    if (!have) Py_RETURN_NONE;
    return PyFloat_FromDouble(s);
}

static PyMethodDef methods[] = {
    {"ewma", (PyCFunction)(void (*)(void))ewma, METH_FASTCALL,
     "ewma(srtt, values): smoothed RTT after the int64 samples, in order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
