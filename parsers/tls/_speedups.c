/* Optional C reader of the usual packet of a TLS 1.3 connection being decrypted: whole
 * application data records and nothing else, each opened with the AEAD call alone.
 *
 * open_whole(decrypt, invalid_tag, iv, seq, buf, a, z, direction, ts_ns, frame_no, offset,
 *            at, rows, out, plain_ends, tcp_ends)
 *
 * does what open_whole_records (parsers/tls/_decrypt.py) does, without a Python call a
 * record around the AEAD's: buf[a:z] (one packet's bytes, at direction offset `offset`)
 * is cut into records as _whole_records (parsers/tls/_records.py) cuts them; unless every
 * one is a plausible application data record and they fill it exactly, it returns None with
 * nothing changed. Else the leading records are opened in order, record i at sequence
 * number seq + i: decrypt(nonce, ciphertext, header) with nonce = iv XOR the sequence number
 * (RFC 8446 section 5.3; `decrypt` is the cryptography AEAD's bound method) until one does not
 * open as plain application data (its tag fails, `invalid_tag` raised; or its inner content
 * type, the last byte, is not 23: padding or another type). Each opened record's plaintext
 * but the empty ones is appended to `out` and its ChunkRun row (the RunColumn layout of
 * parsers/records.h: direction, ts_ns, frame_no, plaintext offset `at`, its place in out) to
 * `rows`, both bytearrays (a RunBuilder's); its plaintext end offset to plain_ends and its
 * direction end offset to tcp_ends. Returns (records cut, records opened, the next sequence
 * number, the next plaintext offset). Another exception from decrypt propagates, nothing
 * appended. tests/test_tls.py runs the connection's tests through this and the Python
 * function and compares them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records.h"

enum { APPLICATION_DATA = 23, HEADER = 5, IV_LEN = 12, MAX_RECORD = (1 << 14) + 2048 };

static int as_i64(PyObject *o, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* append n bytes to a bytearray (grown as bytearrays grow: amortised) */
static int append(PyObject *ba, const void *src, Py_ssize_t n) {
    Py_ssize_t size = PyByteArray_GET_SIZE(ba);
    if (PyByteArray_Resize(ba, size + n) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(ba) + size, src, (size_t)n);
    return 0;
}

static int append_long(PyObject *list, int64_t v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL)
        return -1;
    int r = PyList_Append(list, o);
    Py_DECREF(o);
    return r;
}

/* the plaintext and inner content type of the record `rec` (header and ciphertext,
 * `len` bytes) at sequence number `seq`, when it opens as plain application data; else
 * NULL, with an exception set only when decrypt raised one other than `invalid_tag` */
static PyObject *open_one(PyObject *decrypt, PyObject *invalid_tag, const unsigned char *iv, uint64_t seq,
                          const unsigned char *rec, Py_ssize_t len) {
    unsigned char nonce[IV_LEN];
    memcpy(nonce, iv, IV_LEN);
    for (int k = 0; k < 8; k++)
        nonce[IV_LEN - 1 - k] ^= (unsigned char)(seq >> (8 * k));
    PyObject *call[3];
    call[0] = PyBytes_FromStringAndSize((const char *)nonce, IV_LEN);
    call[1] = PyBytes_FromStringAndSize((const char *)rec + HEADER, len - HEADER);
    call[2] = PyBytes_FromStringAndSize((const char *)rec, HEADER); /* the additional data: the header as sent */
    PyObject *inner = NULL;
    if (call[0] && call[1] && call[2])
        inner = PyObject_Vectorcall(decrypt, call, 3, NULL);
    Py_XDECREF(call[0]);
    Py_XDECREF(call[1]);
    Py_XDECREF(call[2]);
    if (inner == NULL) {
        if (PyErr_ExceptionMatches(invalid_tag))
            PyErr_Clear();
        return NULL;
    }
    if (!PyBytes_Check(inner) || PyBytes_GET_SIZE(inner) == 0 ||
        (unsigned char)PyBytes_AS_STRING(inner)[PyBytes_GET_SIZE(inner) - 1] != APPLICATION_DATA) {
        Py_DECREF(inner);
        return NULL;
    }
    return inner;
}

static PyObject *open_whole(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 16) {
        PyErr_SetString(PyExc_TypeError, "open_whole takes 16 arguments");
        return NULL;
    }
    PyObject *decrypt = args[0], *invalid_tag = args[1], *iv = args[2];
    PyObject *rows = args[12], *out = args[13], *plain_ends = args[14], *tcp_ends = args[15];
    int64_t seq, a, z, direction, ts, frame_no, offset, at;
    if (as_i64(args[3], &seq) || as_i64(args[5], &a) || as_i64(args[6], &z) || as_i64(args[7], &direction) ||
        as_i64(args[8], &ts) || as_i64(args[9], &frame_no) || as_i64(args[10], &offset) || as_i64(args[11], &at))
        return NULL;
    if (!PyBytes_Check(iv) || PyBytes_GET_SIZE(iv) != IV_LEN || !PyByteArray_Check(rows) || !PyByteArray_Check(out) ||
        !PyList_Check(plain_ends) || !PyList_Check(tcp_ends)) {
        PyErr_SetString(PyExc_TypeError, "open_whole: iv must be 12 bytes, rows and out bytearrays, the ends lists");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[4], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    PyObject **texts = NULL;
    Py_ssize_t *ends = NULL;
    Py_ssize_t nrec = 0, opened = 0;
    if (a < 0 || z < a || z > view.len) {
        PyErr_SetString(PyExc_ValueError, "open_whole: [a, z) is not within the buffer");
        goto done;
    }
    const unsigned char *data = (const unsigned char *)view.buf + a;
    Py_ssize_t n = (Py_ssize_t)(z - a);
    /* the cut: every record a plausible application data record, the last ending at n */
    Py_ssize_t pos = 0;
    while (pos < n) {
        if (pos + HEADER > n)
            break;
        const unsigned char *h = data + pos;
        unsigned length = ((unsigned)h[3] << 8) | h[4];
        if (h[0] != APPLICATION_DATA || h[1] != 3 || h[2] > 4 || length > MAX_RECORD)
            break;
        pos += HEADER + (Py_ssize_t)length;
        nrec++;
    }
    if (pos != n || nrec == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    ends = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)nrec);
    texts = PyMem_Calloc((size_t)nrec, sizeof(PyObject *));
    if (ends == NULL || texts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* open the leading records that are plain application data */
    const unsigned char *ivb = (const unsigned char *)PyBytes_AS_STRING(iv);
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i < nrec; i++) {
        Py_ssize_t end = start + HEADER + (Py_ssize_t)(((unsigned)data[start + 3] << 8) | data[start + 4]);
        ends[i] = end;
        if (opened == i) { /* (none after the first that does not open) */
            PyObject *inner = open_one(decrypt, invalid_tag, ivb, (uint64_t)(seq + i), data + start, end - start);
            if (inner == NULL && PyErr_Occurred())
                goto done;
            if (inner != NULL) {
                texts[i] = inner;
                opened++;
            }
        }
        start = end;
    }
    /* hand the plaintext on: nothing was appended before every call had returned */
    for (Py_ssize_t i = 0; i < opened; i++) {
        Py_ssize_t len = PyBytes_GET_SIZE(texts[i]) - 1; /* less the inner content type */
        if (len == 0)
            continue;
        int64_t row[RUN_NCOLS];
        Py_ssize_t placed = PyByteArray_GET_SIZE(out);
        row[RUN_DIRECTION] = direction;
        row[RUN_TS_NS] = ts;
        row[RUN_FRAME_NO] = frame_no;
        row[RUN_STREAM_OFFSET] = at;
        row[RUN_START] = placed;
        row[RUN_END] = placed + len;
        if (append(out, PyBytes_AS_STRING(texts[i]), len) < 0 || append(rows, row, sizeof row) < 0)
            goto done;
        at += len;
        if (append_long(plain_ends, at) < 0 || append_long(tcp_ends, offset + ends[i]) < 0)
            goto done;
    }
    result = Py_BuildValue("(nnLL)", nrec, opened, (long long)(seq + opened), (long long)at);
done:
    if (texts != NULL) {
        for (Py_ssize_t i = 0; i < nrec; i++)
            Py_XDECREF(texts[i]);
        PyMem_Free(texts);
    }
    PyMem_Free(ends);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"open_whole", (PyCFunction)(void (*)(void))open_whole, METH_FASTCALL,
     "open_whole(decrypt, invalid_tag, iv, seq, buf, a, z, direction, ts_ns, frame_no, offset, at, rows, out, "
     "plain_ends, tcp_ends): (records, opened, next seq, next plaintext offset) when buf[a:z] is whole application "
     "data records, its leading plain ones opened and their plaintext appended; else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
