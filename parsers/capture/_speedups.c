/* Optional C versions of the record-chain walks of parsers/capture/_container.py.
 *
 * walk_pcap / walk_epb do exactly what _walk_pcap_py / _walk_epb_py do (find where each
 * complete record starts, stop at the first incomplete or foreign one) and return the
 * offsets as the bytes of an int64 array plus the position where the walk stopped. The
 * chain is sequential, so this one loop is what a Python walk spends its time on: one
 * interpreted iteration per packet. Without this module the Python code runs and gives
 * the same offsets.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t rd32(const unsigned char *p, int big) {
    if (big) return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
    return ((uint32_t)p[3] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[1] << 8) | p[0];
}

/* Collect offsets into a growable int64 buffer; returns (bytes, stop) or NULL. */
typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} offsets_t;

static int push(offsets_t *o, int64_t x) {
    if (o->n == o->cap) {
        Py_ssize_t cap = o->cap ? o->cap * 2 : 4096;
        int64_t *v = PyMem_Realloc(o->v, (size_t)cap * sizeof(int64_t));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = x;
    return 0;
}

static PyObject *result(offsets_t *o, Py_ssize_t pos) {
    PyObject *b = PyBytes_FromStringAndSize((const char *)o->v, o->n * (Py_ssize_t)sizeof(int64_t));
    PyMem_Free(o->v);
    if (b == NULL) return NULL;
    return Py_BuildValue("(Nn)", b, pos);
}

/* walk_pcap(data, pos, end, hdrlen, big_endian) -> (int64 offsets as bytes, stop) */
static PyObject *walk_pcap(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, hdrlen;
    int big;
    if (!PyArg_ParseTuple(args, "y*nnnp", &view, &pos, &end, &hdrlen, &big)) return NULL;
    if (end > view.len) end = view.len;
    if (pos < 0 || hdrlen < 16) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad position or header length");
        return NULL;
    }
    const unsigned char *d = view.buf;
    offsets_t o = {NULL, 0, 0};
    Py_ssize_t last = end - hdrlen;
    while (pos <= last) {
        Py_ssize_t nxt = pos + hdrlen + (Py_ssize_t)rd32(d + pos + 8, big);
        if (nxt > end) break;
        if (push(&o, pos) < 0) {
            PyMem_Free(o.v);
            PyBuffer_Release(&view);
            return NULL;
        }
        pos = nxt;
    }
    PyBuffer_Release(&view);
    return result(&o, pos);
}

/* walk_epb(data, pos, end, big_endian) -> (int64 offsets as bytes, stop) */
static PyObject *walk_epb(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    int big;
    if (!PyArg_ParseTuple(args, "y*nnp", &view, &pos, &end, &big)) return NULL;
    if (end > view.len) end = view.len;
    if (pos < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad position");
        return NULL;
    }
    const unsigned char *d = view.buf;
    offsets_t o = {NULL, 0, 0};
    Py_ssize_t last = end - 8;
    while (pos <= last) {
        uint32_t btype = rd32(d + pos, big), blen = rd32(d + pos + 4, big);
        if (btype != 6 || blen < 32 || (blen & 3)) break; /* EPB only */
        Py_ssize_t nxt = pos + (Py_ssize_t)blen;
        if (nxt > end) break;
        if (push(&o, pos) < 0) {
            PyMem_Free(o.v);
            PyBuffer_Release(&view);
            return NULL;
        }
        pos = nxt;
    }
    PyBuffer_Release(&view);
    return result(&o, pos);
}

/* gather(buf, pos, width) -> bytearray of len(pos) * width: the `width` bytes at each
 * position (int64), each position clipped to [0, len(buf) - width], like _gather.take_rows
 * (which calls this for buffers at least `width` long). */
static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer bv, pv;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*y*n", &bv, &pv, &width)) return NULL;
    if (width <= 0 || bv.len < width || pv.len % 8) {
        PyBuffer_Release(&bv);
        PyBuffer_Release(&pv);
        PyErr_SetString(PyExc_ValueError, "gather: bad width, buffer or positions");
        return NULL;
    }
    Py_ssize_t n = pv.len / 8, hi = bv.len - width;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * width);
    if (out != NULL) {
        char *dst = PyByteArray_AS_STRING(out);
        const char *src = (const char *)bv.buf;
        const int64_t *pos = (const int64_t *)pv.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t p = pos[i];
            if (p < 0) p = 0;
            if (p > hi) p = hi;
            memcpy(dst + i * width, src + p, (size_t)width);
        }
    }
    PyBuffer_Release(&bv);
    PyBuffer_Release(&pv);
    return out;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS,
     "gather(buf, pos, width): bytearray of the width bytes at each (clipped) int64 position."},
    {"walk_pcap", walk_pcap, METH_VARARGS,
     "walk_pcap(data, pos, end, hdrlen, big_endian): (int64 record offsets as bytes, stop)."},
    {"walk_epb", walk_epb, METH_VARARGS,
     "walk_epb(data, pos, end, big_endian): (int64 EPB offsets as bytes, stop)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
