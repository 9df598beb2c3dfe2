/* Optional C fast path for H2Connection.feed_chunk (parsers/h2/_conn.py).
 *
 * feed_chunk(conn, chunk) handles the steady-state case of a gRPC token stream, a
 * chunk that is exactly one unpadded DATA frame carrying one whole gRPC message on a
 * known stream, with nothing buffered, without END_STREAM and without exhausting a
 * flow-control window, by doing what the Python fast path in H2Connection.feed_chunk
 * does, on the same Python objects. Everything else (and any surprise in the objects'
 * types) goes to conn.feed_chunk(chunk), the pure-Python code, so results are identical
 * with or without this module. All checks happen before the first change: a chunk is
 * either handled completely here or not touched.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *grpc_splitter_type; /* parsers.grpc.GrpcSplitter, set by init() */

/* interned attribute names */
static PyObject *s_direction, *s_data, *s_stream_offset, *s_gap_before, *s_ts_ns, *s_frame_no;
static PyObject *s_dirs, *s_plain, *s_base, *s_max_known, *s_max_len, *s_frames;
static PyObject *s_streams, *s_splitter, *s_probing, *s_left, *s_hdr, *s_keep_trailer;
static PyObject *s_flows, *s_known, *s_conn, *s_messages, *s_frame_no_attr;
static PyObject *s_msgs, *s_first_msg_ts, *s_first_msg_off, *s_end_ts, *s_msg_before_end;
static PyObject *s_msg_after_first, *s_last_msg_ts, *s_data_frames, *s_first_data_ts;
static PyObject *s_first_data_off, *s_last_data_ts, *s_data_bytes, *s_last_off;
static PyObject *s_feed_chunk, *s_blocked;
static PyObject *zero; /* the int 0: the connection-level key of FlowState.blocked */

/* st.<name> must be a list of two; returns a new reference or NULL (no error set) */
static PyObject *pair(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (!PyList_CheckExact(v) || PyList_GET_SIZE(v) != 2) {
        Py_DECREF(v);
        return NULL;
    }
    return v;
}

/* truth value of obj.<name>: 1, 0, or -1 when it cannot be read */
static int attr_true(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (r < 0) PyErr_Clear();
    return r;
}

/* obj.<name> as a C long long; 0 on success, -1 when missing or not an int in range */
static int attr_ll(PyObject *obj, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (!PyLong_CheckExact(v)) {
        Py_DECREF(v);
        return -1;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    *out = x;
    return 0;
}

static int set_ll(PyObject *obj, PyObject *name, long long x) {
    PyObject *v = PyLong_FromLongLong(x);
    if (v == NULL) return -1;
    int r = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return r;
}

/* list[i] = value (new reference taken over) */
static int list_set(PyObject *list, Py_ssize_t i, PyObject *value) {
    if (value == NULL) return -1;
    return PyList_SetItem(list, i, value);
}

/* list[i] = list[i] + delta */
static int list_add(PyObject *list, Py_ssize_t i, long long delta) {
    PyObject *d = PyLong_FromLongLong(delta);
    if (d == NULL) return -1;
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(list, i), d);
    Py_DECREF(d);
    return list_set(list, i, sum);
}

static inline unsigned long be32(const unsigned char *p) {
    return ((unsigned long)p[0] << 24) | ((unsigned long)p[1] << 16) | ((unsigned long)p[2] << 8) | p[3];
}

/* 1: handled; 0: not the fast case, nothing changed; -1: error (exception set) */
static int try_fast(PyObject *conn, PyObject *chunk) {
    int ret = 0;
    PyObject *data = NULL, *dirs = NULL, *D = NULL, *streams = NULL, *st = NULL;
    PyObject *splitter = NULL, *sp = NULL, *flows = NULL, *fs = NULL, *fs_streams = NULL;
    PyObject *msgs = NULL, *end_ts = NULL, *frames = NULL, *ts = NULL, *frame_no = NULL;
    PyObject *sid_obj = NULL, *w_obj = NULL, *messages = NULL, *blocked = NULL;
    PyObject *first_msg_ts = NULL, *first_msg_off = NULL, *msg_before_end = NULL;
    PyObject *msg_after_first = NULL, *last_msg_ts = NULL, *first_data_ts = NULL;
    PyObject *first_data_off = NULL, *last_data_ts = NULL, *data_bytes = NULL, *last_off = NULL;
    long long d, offset, base, max_len, left, fs_conn = 0, w = 0;
    int known = 0, has_w = 0;

    if (attr_ll(chunk, s_direction, &d) < 0 || (d != 0 && d != 1)) goto done;
    data = PyObject_GetAttr(chunk, s_data);
    if (data == NULL) { PyErr_Clear(); goto done; }
    if (!PyBytes_CheckExact(data)) goto done;
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(data);
    dirs = PyObject_GetAttr(conn, s_dirs);
    if (dirs == NULL) { PyErr_Clear(); goto done; }
    if (!PyTuple_CheckExact(dirs) || PyTuple_GET_SIZE(dirs) != 2) goto done;
    D = PyTuple_GET_ITEM(dirs, d);
    Py_INCREF(D);
    if (attr_true(D, s_plain) != 1) goto done;
    if (attr_ll(chunk, s_stream_offset, &offset) < 0 || attr_ll(D, s_base, &base) < 0) goto done;
    if (offset != base) goto done;
    if (attr_true(chunk, s_gap_before) != 0) goto done;
    if (n < 14) goto done;
    long long length = n - 9;
    unsigned long lt = be32(b);
    unsigned int flags = b[4];
    unsigned long sid = be32(b + 5);
    unsigned int gflag = b[9];
    unsigned long glen = be32(b + 10);
    if (lt != ((unsigned long)length << 8) || (flags & 0x08) || (sid & 0x80000000UL)) goto done;
    if (flags & 0x01) goto done; /* END_STREAM: the Python path ends the stream */
    int max_known = attr_true(D, s_max_known);
    if (max_known < 0) goto done;
    if (max_known) {
        if (attr_ll(D, s_max_len, &max_len) < 0 || length > max_len) goto done;
    }
    streams = PyObject_GetAttr(conn, s_streams);
    if (streams == NULL) { PyErr_Clear(); goto done; }
    if (!PyDict_CheckExact(streams)) goto done;
    sid_obj = PyLong_FromUnsignedLong(sid);
    if (sid_obj == NULL) { ret = -1; goto done; }
    st = PyDict_GetItemWithError(streams, sid_obj);
    if (st == NULL) { PyErr_Clear(); goto done; }
    Py_INCREF(st);
    splitter = pair(st, s_splitter);
    if (splitter == NULL) goto done;
    sp = PyList_GET_ITEM(splitter, d);
    Py_INCREF(sp);
    if ((PyObject *)Py_TYPE(sp) != grpc_splitter_type) goto done;
    if (attr_true(sp, s_probing) != 0) goto done;
    if (attr_ll(sp, s_left, &left) < 0 || left != -1) goto done;
    if (attr_true(sp, s_hdr) != 0) goto done;
    if (attr_true(sp, s_keep_trailer) != 0) goto done;
    if (gflag >= 0x80 || (long long)glen + 5 != length) goto done;
    /* flow control: a window reaching zero is left to the Python path */
    flows = PyObject_GetAttr(conn, s_flows);
    if (flows == NULL) { PyErr_Clear(); goto done; }
    if (!PyTuple_CheckExact(flows) || PyTuple_GET_SIZE(flows) != 2) goto done;
    fs = PyTuple_GET_ITEM(flows, d);
    Py_INCREF(fs);
    known = attr_true(fs, s_known);
    if (known < 0) goto done;
    if (known) {
        /* (FlowState.consume marks a block only when not already marked) */
        blocked = PyObject_GetAttr(fs, s_blocked);
        if (blocked == NULL) { PyErr_Clear(); goto done; }
        if (!PyDict_CheckExact(blocked)) goto done;
        if (attr_ll(fs, s_conn, &fs_conn) < 0) goto done;
        if (fs_conn - length <= 0) {
            int r = PyDict_Contains(blocked, zero);
            if (r != 1) { PyErr_Clear(); goto done; }
        }
        fs_streams = PyObject_GetAttr(fs, s_streams);
        if (fs_streams == NULL) { PyErr_Clear(); goto done; }
        if (!PyDict_CheckExact(fs_streams)) goto done;
        w_obj = PyDict_GetItemWithError(fs_streams, sid_obj);
        if (w_obj == NULL && PyErr_Occurred()) { PyErr_Clear(); goto done; }
        if (w_obj != NULL) {
            if (!PyLong_CheckExact(w_obj)) goto done;
            int overflow = 0;
            w = PyLong_AsLongLongAndOverflow(w_obj, &overflow);
            if (overflow || (w == -1 && PyErr_Occurred())) { PyErr_Clear(); goto done; }
            if (w - length <= 0) {
                int r = PyDict_Contains(blocked, sid_obj);
                if (r != 1) { PyErr_Clear(); goto done; }
            }
            has_w = 1;
        }
    }
    /* the stream's per-direction lists */
    msgs = pair(st, s_msgs);
    end_ts = pair(st, s_end_ts);
    frames = pair(st, s_data_frames);
    first_msg_ts = pair(st, s_first_msg_ts);
    first_msg_off = pair(st, s_first_msg_off);
    msg_before_end = pair(st, s_msg_before_end);
    msg_after_first = pair(st, s_msg_after_first);
    last_msg_ts = pair(st, s_last_msg_ts);
    first_data_ts = pair(st, s_first_data_ts);
    first_data_off = pair(st, s_first_data_off);
    last_data_ts = pair(st, s_last_data_ts);
    data_bytes = pair(st, s_data_bytes);
    last_off = pair(st, s_last_off);
    if (!msgs || !end_ts || !frames || !first_msg_ts || !first_msg_off || !msg_before_end ||
        !msg_after_first || !last_msg_ts || !first_data_ts || !first_data_off || !last_data_ts ||
        !data_bytes || !last_off)
        goto done;
    if (!PyLong_CheckExact(PyList_GET_ITEM(msgs, d)) || !PyLong_CheckExact(PyList_GET_ITEM(frames, d)))
        goto done;
    messages = PyObject_GetAttr(conn, s_messages);
    if (messages == NULL) { PyErr_Clear(); goto done; }
    if (!PyList_CheckExact(messages)) goto done;
    ts = PyObject_GetAttr(chunk, s_ts_ns);
    if (ts == NULL) { PyErr_Clear(); goto done; }
    frame_no = PyObject_GetAttr(chunk, s_frame_no);
    if (frame_no == NULL) { PyErr_Clear(); goto done; }

    /* ---- from here on the chunk is ours: apply what the Python fast path does ---- */
    ret = -1;
    long long off_end = base + n;
    if (PyObject_SetAttr(conn, s_frame_no_attr, frame_no) < 0) goto done;
    long long dframes;
    if (attr_ll(D, s_frames, &dframes) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_Dir.frames is not an int");
        goto done;
    }
    if (set_ll(D, s_frames, dframes + 1) < 0 || set_ll(D, s_base, off_end) < 0) goto done;
    PyObject *idx = PyList_GET_ITEM(msgs, d);
    Py_INCREF(idx);
    int idx_zero = PyLong_AsLongLong(idx) == 0;
    if (idx_zero) {
        Py_INCREF(ts);
        if (list_set(first_msg_ts, d, ts) < 0 || list_set(first_msg_off, d, PyLong_FromLongLong(off_end)) < 0) {
            Py_DECREF(idx);
            goto done;
        }
    }
    if (PyList_GET_ITEM(end_ts, 1 - d) == Py_None) {
        Py_INCREF(Py_True);
        if (list_set(msg_before_end, d, Py_True) < 0) { Py_DECREF(idx); goto done; }
    }
    int other = PyObject_IsTrue(PyList_GET_ITEM(msgs, 1 - d));
    if (other < 0) { Py_DECREF(idx); goto done; }
    if (other) {
        Py_INCREF(Py_True);
        if (list_set(msg_after_first, d, Py_True) < 0) { Py_DECREF(idx); goto done; }
    }
    PyObject *row = Py_BuildValue("(kLOOkOL)", sid, d, idx, ts, glen, gflag == 1 ? Py_True : Py_False, off_end);
    Py_DECREF(idx);
    if (row == NULL) goto done;
    int app = PyList_Append(messages, row);
    Py_DECREF(row);
    if (app < 0) goto done;
    if (list_add(msgs, d, 1) < 0) goto done;
    Py_INCREF(ts);
    if (list_set(last_msg_ts, d, ts) < 0) goto done;
    int had_frames = PyObject_IsTrue(PyList_GET_ITEM(frames, d));
    if (had_frames < 0) goto done;
    if (!had_frames) {
        Py_INCREF(ts);
        if (list_set(first_data_ts, d, ts) < 0 || list_set(first_data_off, d, PyLong_FromLongLong(off_end)) < 0)
            goto done;
    }
    if (list_add(frames, d, 1) < 0) goto done;
    Py_INCREF(ts);
    if (list_set(last_data_ts, d, ts) < 0) goto done;
    if (list_add(data_bytes, d, length) < 0) goto done;
    if (list_set(last_off, d, PyLong_FromLongLong(off_end)) < 0) goto done;
    if (known) {
        if (set_ll(fs, s_conn, fs_conn - length) < 0) goto done;
        if (has_w) {
            PyObject *nw = PyLong_FromLongLong(w - length);
            if (nw == NULL) goto done;
            int r = PyDict_SetItem(fs_streams, sid_obj, nw);
            Py_DECREF(nw);
            if (r < 0) goto done;
        }
    }
    ret = 1;

done:
    Py_XDECREF(data); Py_XDECREF(dirs); Py_XDECREF(D); Py_XDECREF(streams); Py_XDECREF(st);
    Py_XDECREF(splitter); Py_XDECREF(sp); Py_XDECREF(flows); Py_XDECREF(fs); Py_XDECREF(fs_streams);
    Py_XDECREF(msgs); Py_XDECREF(end_ts); Py_XDECREF(frames); Py_XDECREF(ts); Py_XDECREF(frame_no);
    Py_XDECREF(sid_obj); Py_XDECREF(messages); Py_XDECREF(blocked); Py_XDECREF(first_msg_ts); Py_XDECREF(first_msg_off);
    Py_XDECREF(msg_before_end); Py_XDECREF(msg_after_first); Py_XDECREF(last_msg_ts);
    Py_XDECREF(first_data_ts); Py_XDECREF(first_data_off); Py_XDECREF(last_data_ts);
    Py_XDECREF(data_bytes); Py_XDECREF(last_off);
    return ret;
}

static PyObject *feed_chunk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "feed_chunk(conn, chunk)");
        return NULL;
    }
    if (grpc_splitter_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "parsers.h2._speedups.init() was not called");
        return NULL;
    }
    int r = try_fast(args[0], args[1]);
    if (r < 0) return NULL;
    if (r == 1) Py_RETURN_NONE;
    return PyObject_CallMethodOneArg(args[0], s_feed_chunk, args[1]);
}

static PyObject *init(PyObject *self, PyObject *splitter_type) {
    if (!PyType_Check(splitter_type)) {
        PyErr_SetString(PyExc_TypeError, "init(GrpcSplitter)");
        return NULL;
    }
    Py_INCREF(splitter_type);
    Py_XSETREF(grpc_splitter_type, splitter_type);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"feed_chunk", (PyCFunction)(void (*)(void))feed_chunk, METH_FASTCALL,
     "feed_chunk(conn, chunk): H2Connection.feed_chunk with the whole-message DATA case in C."},
    {"init", init, METH_O, "init(GrpcSplitter): the splitter class the fast path accepts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

#define INTERN(var, text) if (((var) = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__speedups(void) {
    INTERN(s_direction, "direction"); INTERN(s_data, "data"); INTERN(s_stream_offset, "stream_offset");
    INTERN(s_gap_before, "gap_before"); INTERN(s_ts_ns, "ts_ns"); INTERN(s_frame_no, "frame_no");
    INTERN(s_dirs, "dirs"); INTERN(s_plain, "plain"); INTERN(s_base, "base");
    INTERN(s_max_known, "max_known"); INTERN(s_max_len, "max_len"); INTERN(s_frames, "frames");
    INTERN(s_streams, "streams"); INTERN(s_splitter, "splitter"); INTERN(s_probing, "probing");
    INTERN(s_left, "left"); INTERN(s_hdr, "hdr"); INTERN(s_keep_trailer, "keep_trailer");
    INTERN(s_flows, "flows"); INTERN(s_known, "known"); INTERN(s_conn, "conn");
    INTERN(s_messages, "messages"); INTERN(s_frame_no_attr, "_frame_no");
    INTERN(s_msgs, "msgs"); INTERN(s_first_msg_ts, "first_msg_ts"); INTERN(s_first_msg_off, "first_msg_off");
    INTERN(s_end_ts, "end_ts"); INTERN(s_msg_before_end, "msg_before_end");
    INTERN(s_msg_after_first, "msg_after_first"); INTERN(s_last_msg_ts, "last_msg_ts");
    INTERN(s_data_frames, "data_frames"); INTERN(s_first_data_ts, "first_data_ts");
    INTERN(s_first_data_off, "first_data_off"); INTERN(s_last_data_ts, "last_data_ts");
    INTERN(s_data_bytes, "data_bytes"); INTERN(s_last_off, "last_off");
    INTERN(s_feed_chunk, "feed_chunk"); INTERN(s_blocked, "blocked");
    if ((zero = PyLong_FromLong(0)) == NULL) return NULL;
    return PyModule_Create(&module);
}
