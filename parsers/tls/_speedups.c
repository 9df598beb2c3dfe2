/* Optional C reader of the usual packets of a TLS 1.3 connection being decrypted: whole
 * application data records and nothing else, each opened with the AEAD call alone.
 *
 * open_run(rows, first, buf, client_dir, decrypts, ivs, seqs, bases, ats, invalid_tag,
 *          out_rows, out, plain_ends, tcp_ends)
 *
 * does what open_run_rows (parsers/tls/_onepass.py) does, without a Python call a packet or
 * a record around the AEAD's. `rows` are a ChunkRun's (int64 rows in the layout
 * parsers/records.h declares; a row's bytes are buf[START:END]); the pairs are by role (0 the
 * client, whose TCP direction is client_dir; 1 the server): `decrypts` the AEAD's bound
 * decrypt (cryptography's), or None while this role's packets are not read in one pass; the
 * 12-byte IVs, the next record sequence numbers, the direction offsets the next record
 * starts at, the next plaintext offsets, and the lists of plaintext and direction end
 * offsets. From row `first` on, each packet of a role being read, starting at its next
 * record, is cut into records as _whole_records (parsers/tls/_records.py) cuts; while every
 * record is a plausible application data record and they fill it exactly, its leading
 * records are opened in order (nonce: the IV XOR the sequence number, RFC 8446 section 5.3;
 * the header as additional data) until one does not open as plain application data (its tag
 * fails, `invalid_tag` raised; or its inner content type, its last byte, is not 23: padding
 * or another type). Each opened record's plaintext but the empty ones is appended to `out`
 * and its ChunkRun row (ts_ns and frame_no the packet's, the plaintext offset, its place in
 * out) to `out_rows` (a RunBuilder's bytearrays), its ends to the lists. It stops at the
 * first row it does not read (another role, another offset, anything but whole application
 * data records: nothing of that row taken), or after a row some record of which did not
 * open. Returns (stop, records, opened, seqs, bases, ats, cut, opened by role): `records`
 * and `opened` are that last row's (its other records are the caller's), else -1; the pairs
 * are the roles' values now, and the records cut and opened. Another exception from decrypt
 * propagates: the rows before it were read, and their plaintext appended. tests/test_tls.py
 * runs the connection's tests through this and the Python function and compares them.
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

/* the number of records when data[0:n] is whole plausible application data records and
 * nothing else (as _whole_records cuts, then every record of type 23); else 0 */
static Py_ssize_t cut_records(const unsigned char *data, Py_ssize_t n) {
    Py_ssize_t pos = 0, nrec = 0;
    while (pos < n) {
        if (pos + HEADER > n)
            return 0;
        const unsigned char *h = data + pos;
        unsigned length = ((unsigned)h[3] << 8) | h[4];
        if (h[0] != APPLICATION_DATA || h[1] != 3 || h[2] > 4 || length > MAX_RECORD)
            return 0;
        pos += HEADER + (Py_ssize_t)length;
        nrec++;
    }
    return pos == n ? nrec : 0;
}

/* one role's part in a run: what open_run reads and advances */
typedef struct {
    PyObject *decrypt; /* NULL: the one pass does not read this role's packets now */
    const unsigned char *iv;
    int64_t seq, base, at, cut, opened;
    PyObject *plain_ends, *tcp_ends;
} role_t;

/* open the nrec records at data (a packet cut by cut_records), the leading ones that open
 * as plain application data, and append their plaintext: the number opened, or -1 (an
 * exception: nothing appended) */
static Py_ssize_t open_packet(role_t *r, PyObject *invalid_tag, const unsigned char *data, Py_ssize_t nrec,
                              const int64_t *row, PyObject *rows, PyObject *out) {
    Py_ssize_t opened = 0, ret = -1, start = 0;
    PyObject **texts = PyMem_Calloc((size_t)nrec, sizeof(PyObject *));
    Py_ssize_t *ends = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)nrec);
    if (texts == NULL || ends == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nrec && opened == i; i++) { /* (none after the first that does not open) */
        Py_ssize_t end = start + HEADER + (Py_ssize_t)(((unsigned)data[start + 3] << 8) | data[start + 4]);
        ends[i] = end;
        PyObject *inner = open_one(r->decrypt, invalid_tag, r->iv, (uint64_t)(r->seq + i), data + start, end - start);
        if (inner == NULL && PyErr_Occurred())
            goto done;
        if (inner != NULL) {
            texts[i] = inner;
            opened++;
        }
        start = end;
    }
    /* hand the plaintext on: nothing was appended before every call had returned */
    int64_t at = r->at;
    for (Py_ssize_t i = 0; i < opened; i++) {
        Py_ssize_t len = PyBytes_GET_SIZE(texts[i]) - 1; /* less the inner content type */
        if (len == 0)
            continue;
        int64_t plain[RUN_NCOLS];
        Py_ssize_t placed = PyByteArray_GET_SIZE(out);
        plain[RUN_DIRECTION] = row[RUN_DIRECTION];
        plain[RUN_TS_NS] = row[RUN_TS_NS];
        plain[RUN_FRAME_NO] = row[RUN_FRAME_NO];
        plain[RUN_STREAM_OFFSET] = at;
        plain[RUN_START] = placed;
        plain[RUN_END] = placed + len;
        if (append(out, PyBytes_AS_STRING(texts[i]), len) < 0 || append(rows, plain, sizeof plain) < 0)
            goto done;
        at += len;
        if (append_long(r->plain_ends, at) < 0 || append_long(r->tcp_ends, row[RUN_STREAM_OFFSET] + ends[i]) < 0)
            goto done;
    }
    r->at = at;
    r->seq += opened;
    ret = opened;
done:
    if (texts != NULL) {
        for (Py_ssize_t i = 0; i < nrec; i++)
            Py_XDECREF(texts[i]);
        PyMem_Free(texts);
    }
    PyMem_Free(ends);
    return ret;
}

static int pair(PyObject *o, const char *what) {
    if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2)
        return 0;
    PyErr_Format(PyExc_TypeError, "open_run: %s must be a pair", what);
    return -1;
}

static PyObject *open_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "open_run takes 14 arguments");
        return NULL;
    }
    Py_ssize_t first = PyLong_AsSsize_t(args[1]);
    int64_t client_dir;
    if ((first == -1 && PyErr_Occurred()) || as_i64(args[3], &client_dir))
        return NULL;
    PyObject *decrypts = args[4], *ivs = args[5], *seqs = args[6], *bases = args[7], *ats = args[8];
    PyObject *invalid_tag = args[9], *out_rows = args[10], *out = args[11], *plain_ends = args[12], *tcp_ends = args[13];
    if (pair(decrypts, "decrypts") || pair(ivs, "ivs") || pair(seqs, "seqs") || pair(bases, "bases") ||
        pair(ats, "ats") || pair(plain_ends, "plain_ends") || pair(tcp_ends, "tcp_ends"))
        return NULL;
    if (!PyByteArray_Check(out_rows) || !PyByteArray_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "open_run: the run's rows and bytes must be bytearrays");
        return NULL;
    }
    role_t roles[2];
    for (int k = 0; k < 2; k++) {
        role_t *r = &roles[k];
        memset(r, 0, sizeof *r);
        PyObject *decrypt = PyTuple_GET_ITEM(decrypts, k), *iv = PyTuple_GET_ITEM(ivs, k);
        r->plain_ends = PyTuple_GET_ITEM(plain_ends, k);
        r->tcp_ends = PyTuple_GET_ITEM(tcp_ends, k);
        if (as_i64(PyTuple_GET_ITEM(seqs, k), &r->seq) || as_i64(PyTuple_GET_ITEM(bases, k), &r->base) ||
            as_i64(PyTuple_GET_ITEM(ats, k), &r->at))
            return NULL;
        if (decrypt == Py_None)
            continue;
        if (!PyBytes_Check(iv) || PyBytes_GET_SIZE(iv) != IV_LEN || !PyList_Check(r->plain_ends) ||
            !PyList_Check(r->tcp_ends)) {
            PyErr_SetString(PyExc_TypeError, "open_run: an iv must be 12 bytes, the ends lists");
            return NULL;
        }
        r->decrypt = decrypt;
        r->iv = (const unsigned char *)PyBytes_AS_STRING(iv);
    }
    Py_buffer rv, bv;
    if (PyObject_GetBuffer(args[0], &rv, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &bv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&rv);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t nrows = rv.len / (Py_ssize_t)(RUN_NCOLS * sizeof(int64_t));
    if (rv.len % (Py_ssize_t)(RUN_NCOLS * sizeof(int64_t)) != 0 || first < 0 || first > nrows) {
        PyErr_SetString(PyExc_ValueError, "open_run: rows are not a ChunkRun's, or first is out of range");
        goto done;
    }
    const int64_t *rows = (const int64_t *)rv.buf;
    const unsigned char *buf = (const unsigned char *)bv.buf;
    Py_ssize_t i = first, left_records = -1, left_opened = -1;
    for (; i < nrows; i++) {
        const int64_t *row = rows + i * RUN_NCOLS;
        role_t *r = &roles[row[RUN_DIRECTION] == client_dir ? 0 : 1];
        int64_t a = row[RUN_START], z = row[RUN_END];
        if (r->decrypt == NULL || row[RUN_STREAM_OFFSET] != r->base)
            break;
        if (a < 0 || z < a || z > bv.len) {
            PyErr_SetString(PyExc_ValueError, "open_run: a row's bytes are not within the buffer");
            goto done;
        }
        Py_ssize_t nrec = cut_records(buf + a, (Py_ssize_t)(z - a));
        if (nrec == 0)
            break;
        Py_ssize_t opened = open_packet(r, invalid_tag, buf + a, nrec, row, out_rows, out);
        if (opened < 0)
            goto done;
        r->base = row[RUN_STREAM_OFFSET] + (z - a);
        r->cut += nrec;
        r->opened += opened;
        if (opened < nrec) { /* the rest of this packet's records: the caller reads them */
            left_records = nrec;
            left_opened = opened;
            break;
        }
    }
    result = Py_BuildValue("(nnn(LL)(LL)(LL)(LL)(LL))", i, left_records, left_opened, (long long)roles[0].seq,
                           (long long)roles[1].seq, (long long)roles[0].base, (long long)roles[1].base,
                           (long long)roles[0].at, (long long)roles[1].at, (long long)roles[0].cut,
                           (long long)roles[1].cut, (long long)roles[0].opened, (long long)roles[1].opened);
done:
    PyBuffer_Release(&rv);
    PyBuffer_Release(&bv);
    return result;
}

static PyMethodDef methods[] = {
    {"open_run", (PyCFunction)(void (*)(void))open_run, METH_FASTCALL,
     "open_run(rows, first, buf, client_dir, decrypts, ivs, seqs, bases, ats, invalid_tag, out_rows, out, plain_ends, "
     "tcp_ends): (stop, records left, opened, seqs, bases, ats, cut, opened by role) after opening the packets of whole "
     "application data records from row first on (see the module's comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
