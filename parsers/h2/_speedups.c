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
#include <structmember.h>
#include <string.h>

static PyObject *grpc_splitter_type; /* parsers.grpc.GrpcSplitter, set by init() */

/* interned attribute names of H2Connection (a plain class: read through getattr) */
static PyObject *s_dirs, *s_streams, *s_flows, *s_messages, *s_frame_no_attr, *s_feed_chunk;
static PyObject *zero; /* the int 0: the connection-level key of FlowState.blocked */





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

/* Direct __slots__ access, like the interpreter's LOAD_ATTR_SLOT: offsets of the slot
 * members, read once from the classes' member descriptors by init(); every object is
 * checked to be of exactly that class before its slots are read. */
#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))
enum { C_DIRECTION, C_DATA, C_TS_NS, C_FRAME_NO, C_STREAM_OFFSET, C_GAP_BEFORE, C_CONN_KEY, C_N };
enum { D_PLAIN, D_BASE, D_MAX_KNOWN, D_MAX_LEN, D_FRAMES, D_N };
enum { S_SPLITTER, S_MSGS, S_FIRST_MSG_TS, S_FIRST_MSG_OFF, S_END_TS, S_MSG_BEFORE_END,
       S_MSG_AFTER_FIRST, S_LAST_MSG_TS, S_DATA_FRAMES, S_FIRST_DATA_TS, S_FIRST_DATA_OFF,
       S_LAST_DATA_TS, S_DATA_BYTES, S_LAST_OFF, S_N };
enum { G_PROBING, G_LEFT, G_HDR, G_KEEP_TRAILER, G_N };
enum { F_KNOWN, F_CONN, F_STREAMS, F_BLOCKED, F_N };
static const char *chunk_names[C_N] = {"direction", "data", "ts_ns", "frame_no", "stream_offset", "gap_before", "conn_key"};
static const char *dir_names[D_N] = {"plain", "base", "max_known", "max_len", "frames"};
static const char *stream_names[S_N] = {"splitter", "msgs", "first_msg_ts", "first_msg_off", "end_ts",
    "msg_before_end", "msg_after_first", "last_msg_ts", "data_frames", "first_data_ts",
    "first_data_off", "last_data_ts", "data_bytes", "last_off"};
static const char *splitter_names[G_N] = {"probing", "left", "hdr", "keep_trailer"};
static const char *flow_names[F_N] = {"known", "conn", "streams", "blocked"};
static PyTypeObject *chunk_type, *dir_type, *stream_type, *flow_type;
static Py_ssize_t c_off[C_N], d_off[D_N], s_off[S_N], g_off[G_N], f_off[F_N];

static int slot_offsets(PyObject *type, const char **names, int n, Py_ssize_t *out) {
    for (int i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttrString(type, names[i]);
        if (descr == NULL) return -1;
        if (Py_TYPE(descr) != &PyMemberDescr_Type ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%s is not a __slots__ member", names[i]);
            Py_DECREF(descr);
            return -1;
        }
        out[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
    }
    return 0;
}

/* a slot holding an int that fits a long long: 0 on success, -1 otherwise (no error set) */
static inline int slot_ll(PyObject *o, Py_ssize_t off, long long *out) {
    PyObject *v = SLOT(o, off);
    if (v == NULL || !PyLong_CheckExact(v)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    *out = x;
    return 0;
}

/* replace a slot's value (takes over the new reference) */
static inline int slot_put(PyObject *o, Py_ssize_t off, PyObject *v) {
    if (v == NULL) return -1;
    PyObject *old = SLOT(o, off);
    SLOT(o, off) = v;
    Py_XDECREF(old);
    return 0;
}

/* st.<slot> must be a list of two; borrowed reference or NULL */
static inline PyObject *pair_slot(PyObject *st, int i) {
    PyObject *v = SLOT(st, s_off[i]);
    return (v != NULL && PyList_CheckExact(v) && PyList_GET_SIZE(v) == 2) ? v : NULL;
}

/* The connection's attributes the fast case reads, fetched once for a stretch of fast
 * chunks (new references, NULL: not fetched yet) and dropped whenever Python code ran
 * in between (it may rebind them), plus the last stream id as an int object. */
typedef struct {
    PyObject *dirs, *streams, *flows, *msgs, *sid_obj;
    unsigned long sid;
} ctx_t;

static void ctx_clear(ctx_t *c) {
    Py_CLEAR(c->dirs);
    Py_CLEAR(c->streams);
    Py_CLEAR(c->flows);
    Py_CLEAR(c->msgs);
    Py_CLEAR(c->sid_obj);
}

/* conn.<name> into *slot unless already there; 0 ok, -1 missing (no error set) */
static inline int ctx_get(PyObject *conn, PyObject *name, PyObject **slot) {
    if (*slot != NULL) return 0;
    *slot = PyObject_GetAttr(conn, name);
    if (*slot == NULL) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* The fast case on raw chunk fields (direction d, bytes b[0:n] at direction offset
 * `offset`, time as an int object), for a chunk without gap_before. frame_no (an int
 * object) goes to conn._frame_no; NULL leaves that to the caller.
 * 1: handled; 0: not the fast case, nothing changed; -1: error (exception set) */
static int try_fast_raw(PyObject *conn, ctx_t *ctx, long long d, const unsigned char *b,
                        Py_ssize_t n, long long offset, PyObject *ts, PyObject *frame_no) {
    int ret = 0;
    PyObject *dirs, *streams, *flows, *messages, *sid_obj;
    PyObject *lists[S_N];
    long long base, max_len, left, fs_conn = 0, w = 0, dframes;
    int has_w = 0;

    if ((d != 0 && d != 1) || n < 14) return 0;
    long long length = n - 9;
    unsigned long lt = be32(b);
    unsigned int flags = b[4];
    unsigned long sid = be32(b + 5);
    unsigned int gflag = b[9];
    unsigned long glen = be32(b + 10);
    if (lt != ((unsigned long)length << 8) || (flags & 0x08) || (sid & 0x80000000UL)) return 0;
    if (flags & 0x01) return 0; /* END_STREAM: the Python path ends the stream */
    if (gflag >= 0x80 || (long long)glen + 5 != length) return 0;

    if (ctx_get(conn, s_dirs, &ctx->dirs) < 0) goto done;
    dirs = ctx->dirs;
    if (!PyTuple_CheckExact(dirs) || PyTuple_GET_SIZE(dirs) != 2) goto done;
    PyObject *D = PyTuple_GET_ITEM(dirs, d);
    if (Py_TYPE(D) != dir_type || SLOT(D, d_off[D_PLAIN]) != Py_True) goto done;
    if (slot_ll(D, d_off[D_BASE], &base) < 0 || offset != base) goto done;
    PyObject *max_known = SLOT(D, d_off[D_MAX_KNOWN]);
    if (max_known == Py_True) {
        if (slot_ll(D, d_off[D_MAX_LEN], &max_len) < 0 || length > max_len) goto done;
    } else if (max_known != Py_False) {
        goto done;
    }
    if (slot_ll(D, d_off[D_FRAMES], &dframes) < 0) goto done;
    if (ctx_get(conn, s_streams, &ctx->streams) < 0) goto done;
    streams = ctx->streams;
    if (!PyDict_CheckExact(streams)) goto done;
    if (ctx->sid_obj == NULL || ctx->sid != sid) {
        Py_CLEAR(ctx->sid_obj);
        ctx->sid_obj = PyLong_FromUnsignedLong(sid);
        if (ctx->sid_obj == NULL) { ret = -1; goto done; }
        ctx->sid = sid;
    }
    sid_obj = ctx->sid_obj;
    PyObject *st = PyDict_GetItemWithError(streams, sid_obj);
    if (st == NULL) { PyErr_Clear(); goto done; }
    if (Py_TYPE(st) != stream_type) goto done;
    for (int i = 0; i < S_N; i++) {
        if ((lists[i] = pair_slot(st, i)) == NULL) goto done;
    }
    PyObject *sp = PyList_GET_ITEM(lists[S_SPLITTER], d);
    if ((PyObject *)Py_TYPE(sp) != grpc_splitter_type) goto done;
    if (SLOT(sp, g_off[G_PROBING]) != Py_False || SLOT(sp, g_off[G_KEEP_TRAILER]) != Py_False) goto done;
    if (slot_ll(sp, g_off[G_LEFT], &left) < 0 || left != -1) goto done;
    PyObject *hdr = SLOT(sp, g_off[G_HDR]);
    if (hdr == NULL || !PyByteArray_CheckExact(hdr) || PyByteArray_GET_SIZE(hdr) != 0) goto done;
    /* flow control: a new block (window reaching zero) is left to the Python path */
    if (ctx_get(conn, s_flows, &ctx->flows) < 0) goto done;
    flows = ctx->flows;
    if (!PyTuple_CheckExact(flows) || PyTuple_GET_SIZE(flows) != 2) goto done;
    PyObject *fs = PyTuple_GET_ITEM(flows, d);
    if (Py_TYPE(fs) != flow_type) goto done;
    PyObject *known = SLOT(fs, f_off[F_KNOWN]);
    PyObject *fs_streams = NULL;
    if (known == Py_True) {
        PyObject *blocked = SLOT(fs, f_off[F_BLOCKED]);
        fs_streams = SLOT(fs, f_off[F_STREAMS]);
        if (blocked == NULL || !PyDict_CheckExact(blocked)) goto done;
        if (fs_streams == NULL || !PyDict_CheckExact(fs_streams)) goto done;
        if (slot_ll(fs, f_off[F_CONN], &fs_conn) < 0) goto done;
        if (fs_conn - length <= 0 && PyDict_Contains(blocked, zero) != 1) { PyErr_Clear(); goto done; }
        PyObject *w_obj = PyDict_GetItemWithError(fs_streams, sid_obj);
        if (w_obj == NULL && PyErr_Occurred()) { PyErr_Clear(); goto done; }
        if (w_obj != NULL) {
            if (!PyLong_CheckExact(w_obj)) goto done;
            int overflow = 0;
            w = PyLong_AsLongLongAndOverflow(w_obj, &overflow);
            if (overflow || (w == -1 && PyErr_Occurred())) { PyErr_Clear(); goto done; }
            if (w - length <= 0 && PyDict_Contains(blocked, sid_obj) != 1) { PyErr_Clear(); goto done; }
            has_w = 1;
        }
    } else if (known != Py_False) {
        goto done;
    }
    PyObject *idx = PyList_GET_ITEM(lists[S_MSGS], d);
    PyObject *nframes = PyList_GET_ITEM(lists[S_DATA_FRAMES], d);
    if (!PyLong_CheckExact(idx) || !PyLong_CheckExact(nframes)) goto done;
    if (ctx_get(conn, s_messages, &ctx->msgs) < 0) goto done;
    messages = ctx->msgs;
    if (!PyByteArray_CheckExact(messages)) goto done;
    long long row_vals[7];
    int ovf = 0;
    row_vals[3] = PyLong_CheckExact(ts) ? PyLong_AsLongLongAndOverflow(ts, &ovf) : (ovf = 1, 0);
    if (ovf || (row_vals[3] == -1 && PyErr_Occurred())) { PyErr_Clear(); goto done; }
    row_vals[2] = PyLong_AsLongLongAndOverflow(idx, &ovf);
    if (ovf || (row_vals[2] == -1 && PyErr_Occurred())) { PyErr_Clear(); goto done; }

    /* ---- from here on the chunk is ours: apply what the Python fast path does ---- */
    ret = -1;
    long long off_end = base + n;
    if (frame_no != NULL && PyObject_SetAttr(conn, s_frame_no_attr, frame_no) < 0) goto done;
    if (slot_put(D, d_off[D_FRAMES], PyLong_FromLongLong(dframes + 1)) < 0) goto done;
    if (slot_put(D, d_off[D_BASE], PyLong_FromLongLong(off_end)) < 0) goto done;
    Py_INCREF(idx); /* msgs[d] is replaced below */
    int idx_zero = PyLong_AsLongLong(idx) == 0;
    if (idx_zero) {
        Py_INCREF(ts);
        if (list_set(lists[S_FIRST_MSG_TS], d, ts) < 0) goto fail_idx;
        if (list_set(lists[S_FIRST_MSG_OFF], d, PyLong_FromLongLong(off_end)) < 0) goto fail_idx;
    }
    if (PyList_GET_ITEM(lists[S_END_TS], 1 - d) == Py_None) {
        Py_INCREF(Py_True);
        if (list_set(lists[S_MSG_BEFORE_END], d, Py_True) < 0) goto fail_idx;
    }
    int other = PyObject_IsTrue(PyList_GET_ITEM(lists[S_MSGS], 1 - d));
    if (other < 0) goto fail_idx;
    if (other) {
        Py_INCREF(Py_True);
        if (list_set(lists[S_MSG_AFTER_FIRST], d, Py_True) < 0) goto fail_idx;
    }
    /* the message row, packed as H2Connection.msg_buf wants it (MSG_ROW: native int64s) */
    row_vals[0] = (long long)sid;
    row_vals[1] = d;
    row_vals[4] = (long long)glen;
    row_vals[5] = gflag == 1;
    row_vals[6] = off_end;
    Py_DECREF(idx); /* only its value was needed */
    Py_ssize_t blen = PyByteArray_GET_SIZE(messages);
    if (PyByteArray_Resize(messages, blen + (Py_ssize_t)sizeof(row_vals)) < 0) goto done;
    memcpy(PyByteArray_AS_STRING(messages) + blen, row_vals, sizeof(row_vals));
    if (list_add(lists[S_MSGS], d, 1) < 0) goto done;
    Py_INCREF(ts);
    if (list_set(lists[S_LAST_MSG_TS], d, ts) < 0) goto done;
    if (PyLong_AsLongLong(nframes) == 0) {
        Py_INCREF(ts);
        if (list_set(lists[S_FIRST_DATA_TS], d, ts) < 0) goto done;
        if (list_set(lists[S_FIRST_DATA_OFF], d, PyLong_FromLongLong(off_end)) < 0) goto done;
    }
    if (list_add(lists[S_DATA_FRAMES], d, 1) < 0) goto done;
    Py_INCREF(ts);
    if (list_set(lists[S_LAST_DATA_TS], d, ts) < 0) goto done;
    if (list_add(lists[S_DATA_BYTES], d, length) < 0) goto done;
    if (list_set(lists[S_LAST_OFF], d, PyLong_FromLongLong(off_end)) < 0) goto done;
    if (known == Py_True) {
        if (slot_put(fs, f_off[F_CONN], PyLong_FromLongLong(fs_conn - length)) < 0) goto done;
        if (has_w) {
            PyObject *nw = PyLong_FromLongLong(w - length);
            if (nw == NULL) goto done;
            int r = PyDict_SetItem(fs_streams, sid_obj, nw);
            Py_DECREF(nw);
            if (r < 0) goto done;
        }
    }
    ret = 1;
    goto done;

fail_idx:
    Py_DECREF(idx);
done:
    return ret;
}

/* 1: handled; 0: not the fast case, nothing changed; -1: error (exception set) */
static int try_fast(PyObject *conn, PyObject *chunk) {
    long long d, offset, gap;
    if (Py_TYPE(chunk) != chunk_type) return 0;
    if (slot_ll(chunk, c_off[C_DIRECTION], &d) < 0 || (d != 0 && d != 1)) return 0;
    PyObject *data = SLOT(chunk, c_off[C_DATA]);
    if (data == NULL || !PyBytes_CheckExact(data)) return 0;
    if (slot_ll(chunk, c_off[C_GAP_BEFORE], &gap) < 0 || gap != 0) return 0;
    if (slot_ll(chunk, c_off[C_STREAM_OFFSET], &offset) < 0) return 0;
    PyObject *ts = SLOT(chunk, c_off[C_TS_NS]);
    PyObject *frame_no = SLOT(chunk, c_off[C_FRAME_NO]);
    if (ts == NULL || frame_no == NULL) return 0;
    ctx_t ctx = {NULL, NULL, NULL, NULL, NULL, 0};
    int r = try_fast_raw(conn, &ctx, d, (const unsigned char *)PyBytes_AS_STRING(data),
                         PyBytes_GET_SIZE(data), offset, ts, frame_no);
    ctx_clear(&ctx);
    return r;
}

/* A streak: consecutive fast rows of one stream and direction within a run. After
 * try_fast_raw handled a row, the values every later fast row of the same stream and
 * direction changes (offsets, counters, last times, flow-control windows) are kept in C
 * and written back to the Python objects once, when the streak ends (another stream or
 * direction, a row the fast case does not take, the end of the run): no Python code runs
 * in between, so nothing can observe the intermediate values. What the fast case checks
 * and does not change (D.plain, the splitter's state, the stream's presence, flow-control
 * knowledge and blocks) stays valid for the whole streak. */
typedef struct {
    int active, dirty;
    long long d;
    unsigned long sid;
    PyObject *D, *st, *fs; /* borrowed: held by conn.dirs / conn.streams / conn.flows */
    PyObject *lists[S_N];
    long long base, dframes, idx, data_frames, data_bytes, last_ts, last_off;
    int max_known;
    long long max_len;
    int known, has_w, blocked_conn, blocked_sid;
    long long fs_conn, w;
} streak_t;

static inline int list_ll(PyObject *list, Py_ssize_t i, long long *out) {
    PyObject *v = PyList_GET_ITEM(list, i);
    if (!PyLong_CheckExact(v)) return -1;
    int ovf = 0;
    *out = PyLong_AsLongLongAndOverflow(v, &ovf);
    if (ovf || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Start a streak after try_fast_raw handled a row of (d, sid); inactive when any value
 * is not what the fast case expects (the rows then go through try_fast_raw one by one). */
static void streak_start(streak_t *k, ctx_t *ctx, long long d, unsigned long sid) {
    k->active = 0;
    k->dirty = 0;
    PyObject *dirs = ctx->dirs, *streams = ctx->streams, *flows = ctx->flows;
    if (dirs == NULL || streams == NULL || flows == NULL || ctx->sid_obj == NULL) return;
    PyObject *D = PyTuple_GET_ITEM(dirs, d);
    PyObject *st = PyDict_GetItemWithError(streams, ctx->sid_obj);
    if (st == NULL) { PyErr_Clear(); return; }
    PyObject *fs = PyTuple_GET_ITEM(flows, d);
    for (int i = 0; i < S_N; i++) {
        if ((k->lists[i] = pair_slot(st, i)) == NULL) return;
    }
    if (slot_ll(D, d_off[D_BASE], &k->base) < 0 || slot_ll(D, d_off[D_FRAMES], &k->dframes) < 0) return;
    PyObject *max_known = SLOT(D, d_off[D_MAX_KNOWN]);
    k->max_known = max_known == Py_True;
    if (k->max_known && slot_ll(D, d_off[D_MAX_LEN], &k->max_len) < 0) return;
    if (list_ll(k->lists[S_MSGS], d, &k->idx) < 0 || list_ll(k->lists[S_DATA_FRAMES], d, &k->data_frames) < 0 ||
        list_ll(k->lists[S_DATA_BYTES], d, &k->data_bytes) < 0 || list_ll(k->lists[S_LAST_OFF], d, &k->last_off) < 0 ||
        list_ll(k->lists[S_LAST_MSG_TS], d, &k->last_ts) < 0)
        return;
    PyObject *known = SLOT(fs, f_off[F_KNOWN]);
    k->known = known == Py_True;
    k->has_w = 0;
    if (k->known) {
        PyObject *blocked = SLOT(fs, f_off[F_BLOCKED]);
        PyObject *fs_streams = SLOT(fs, f_off[F_STREAMS]);
        if (slot_ll(fs, f_off[F_CONN], &k->fs_conn) < 0) return;
        int bc = PyDict_Contains(blocked, zero), bs = PyDict_Contains(blocked, ctx->sid_obj);
        if (bc < 0 || bs < 0) { PyErr_Clear(); return; }
        k->blocked_conn = bc;
        k->blocked_sid = bs;
        PyObject *w_obj = PyDict_GetItemWithError(fs_streams, ctx->sid_obj);
        if (w_obj == NULL && PyErr_Occurred()) { PyErr_Clear(); return; }
        if (w_obj != NULL) {
            int ovf = 0;
            k->w = PyLong_AsLongLongAndOverflow(w_obj, &ovf);
            if (ovf || (k->w == -1 && PyErr_Occurred())) { PyErr_Clear(); return; }
            k->has_w = 1;
        }
    }
    k->D = D;
    k->st = st;
    k->fs = fs;
    k->d = d;
    k->sid = sid;
    k->active = 1;
}

/* One more row of the streak: 1 applied (locals and the packed message), 0 not the fast
 * case for this streak (nothing changed), -1 error. */
static int streak_row(streak_t *k, ctx_t *ctx, long long d, const unsigned char *b, Py_ssize_t n,
                      long long offset, long long ts) {
    if (d != k->d || n < 14) return 0;
    long long length = n - 9;
    unsigned long lt = be32(b);
    unsigned int flags = b[4];
    unsigned long sid = be32(b + 5);
    unsigned int gflag = b[9];
    unsigned long glen = be32(b + 10);
    if (sid != k->sid || lt != ((unsigned long)length << 8) || (flags & 0x09)) return 0;
    if (gflag >= 0x80 || (long long)glen + 5 != length) return 0;
    if (offset != k->base || (k->max_known && length > k->max_len)) return 0;
    if (k->known) {
        if (k->fs_conn - length <= 0 && !k->blocked_conn) return 0;
        if (k->has_w && k->w - length <= 0 && !k->blocked_sid) return 0;
    }
    long long off_end = k->base + n;
    long long row_vals[7] = {(long long)sid, d, k->idx, ts, (long long)glen, gflag == 1, off_end};
    PyObject *messages = ctx->msgs;
    Py_ssize_t blen = PyByteArray_GET_SIZE(messages);
    if (PyByteArray_Resize(messages, blen + (Py_ssize_t)sizeof(row_vals)) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(messages) + blen, row_vals, sizeof(row_vals));
    k->idx += 1;
    k->dframes += 1;
    k->base = off_end;
    k->data_frames += 1;
    k->data_bytes += length;
    k->last_ts = ts;
    k->last_off = off_end;
    if (k->known) {
        k->fs_conn -= length;
        if (k->has_w) k->w -= length;
    }
    k->dirty = 1;
    return 1;
}

/* Write the streak's values back to the Python objects; ends the streak. */
static int streak_flush(streak_t *k, ctx_t *ctx) {
    int was = k->active && k->dirty;
    k->active = 0;
    k->dirty = 0;
    if (!was) return 0;
    long long d = k->d;
    if (slot_put(k->D, d_off[D_FRAMES], PyLong_FromLongLong(k->dframes)) < 0) return -1;
    if (slot_put(k->D, d_off[D_BASE], PyLong_FromLongLong(k->base)) < 0) return -1;
    if (list_set(k->lists[S_MSGS], d, PyLong_FromLongLong(k->idx)) < 0) return -1;
    if (list_set(k->lists[S_DATA_FRAMES], d, PyLong_FromLongLong(k->data_frames)) < 0) return -1;
    if (list_set(k->lists[S_DATA_BYTES], d, PyLong_FromLongLong(k->data_bytes)) < 0) return -1;
    if (list_set(k->lists[S_LAST_OFF], d, PyLong_FromLongLong(k->last_off)) < 0) return -1;
    PyObject *ts = PyLong_FromLongLong(k->last_ts);
    if (ts == NULL) return -1;
    Py_INCREF(ts);
    if (list_set(k->lists[S_LAST_MSG_TS], d, ts) < 0) { Py_DECREF(ts); return -1; }
    if (list_set(k->lists[S_LAST_DATA_TS], d, ts) < 0) return -1;
    if (k->known) {
        if (slot_put(k->fs, f_off[F_CONN], PyLong_FromLongLong(k->fs_conn)) < 0) return -1;
        if (k->has_w) {
            PyObject *nw = PyLong_FromLongLong(k->w);
            if (nw == NULL) return -1;
            PyObject *fs_streams = SLOT(k->fs, f_off[F_STREAMS]);
            int r = PyDict_SetItem(fs_streams, ctx->sid_obj, nw);
            Py_DECREF(nw);
            if (r < 0) return -1;
        }
    }
    return 0;
}

/* feed_run(conn, conn_key, rows, buf, first): conn.feed_chunk for every row of a
 * ChunkRun from row `first` on (rows: C-contiguous int64 (n, 6) direction, ts_ns,
 * frame_no, stream_offset, start, end; buf: the bytes they index), in order. Rows in the
 * fast case are handled here without a PayloadChunk; any other row becomes the same
 * PayloadChunk for conn.feed_chunk, exactly as chunk by chunk. */
static PyObject *feed_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "feed_run(conn, conn_key, rows, buf, first)");
        return NULL;
    }
    if (grpc_splitter_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "parsers.h2._speedups.init() was not called");
        return NULL;
    }
    PyObject *conn = args[0], *key = args[1];
    Py_ssize_t first = PyLong_AsSsize_t(args[4]);
    if (first == -1 && PyErr_Occurred()) return NULL;
    Py_buffer rv, bv;
    if (PyObject_GetBuffer(args[2], &rv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (rv.ndim != 2 || rv.shape[1] != 6 || rv.itemsize != 8 || rv.format == NULL ||
        strchr("lq", rv.format[strlen(rv.format) - 1]) == NULL || rv.format[0] == '>' || rv.format[0] == '!') {
        PyBuffer_Release(&rv);
        PyErr_SetString(PyExc_TypeError, "rows must be a C-contiguous int64 (n, 6) array");
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &bv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&rv);
        return NULL;
    }
    const long long *r = (const long long *)rv.buf;
    const unsigned char *buf = (const unsigned char *)bv.buf;
    Py_ssize_t n = rv.shape[0];
    PyObject *ret = NULL;
    ctx_t ctx = {NULL, NULL, NULL, NULL, NULL, 0};
    streak_t streak;
    streak.active = streak.dirty = 0;
    /* conn._frame_no of the last row handled in C, set once at the end (no Python code
     * reads it between fast rows; a fallback row sets its own) */
    long long last_fno = 0;
    int fno_pending = 0;
    for (Py_ssize_t i = first < 0 ? 0 : first; i < n; i++) {
        const long long *row = r + 6 * i;
        long long a = row[4], z = row[5];
        if (a < 0 || z < a || z > bv.len || (row[0] != 0 && row[0] != 1)) {
            PyErr_SetString(PyExc_ValueError, "feed_run: bad row");
            goto out;
        }
        if (streak.active) {
            int r = streak_row(&streak, &ctx, row[0], buf + a, (Py_ssize_t)(z - a), row[3], row[1]);
            if (r < 0) goto out;
            if (r == 1) {
                last_fno = row[2];
                fno_pending = 1;
                continue;
            }
            if (streak_flush(&streak, &ctx) < 0) goto out;
        }
        PyObject *ts = PyLong_FromLongLong(row[1]);
        if (ts == NULL) goto out;
        int fast = try_fast_raw(conn, &ctx, row[0], buf + a, (Py_ssize_t)(z - a), row[3], ts, NULL);
        PyObject *fno = NULL;
        if (fast == 1) {
            last_fno = row[2];
            fno_pending = 1;
            streak_start(&streak, &ctx, row[0], be32(buf + a + 5));
        } else if (fast == 0) {
            fno_pending = 0;
            ctx_clear(&ctx); /* Python code runs: it may rebind what ctx holds */
            fno = PyLong_FromLongLong(row[2]);
            if (fno == NULL) {
                Py_DECREF(ts);
                goto out;
            }
            PyObject *chunk = PyObject_CallFunction((PyObject *)chunk_type, "OLy#OOLi", key, row[0],
                                                    (const char *)(buf + a), (Py_ssize_t)(z - a), ts, fno,
                                                    row[3], 0);
            if (chunk == NULL) {
                fast = -1;
            } else {
                PyObject *res = PyObject_CallMethodOneArg(conn, s_feed_chunk, chunk);
                Py_DECREF(chunk);
                if (res == NULL) fast = -1;
                Py_XDECREF(res);
            }
        }
        Py_DECREF(ts);
        Py_XDECREF(fno);
        if (fast < 0) goto out;
    }
    if (streak_flush(&streak, &ctx) < 0) goto out;
    if (fno_pending) {
        PyObject *fno = PyLong_FromLongLong(last_fno);
        if (fno == NULL || PyObject_SetAttr(conn, s_frame_no_attr, fno) < 0) {
            Py_XDECREF(fno);
            goto out;
        }
        Py_DECREF(fno);
    }
    ret = Py_None;
    Py_INCREF(ret);
out:
    ctx_clear(&ctx);
    PyBuffer_Release(&rv);
    PyBuffer_Release(&bv);
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

static PyObject *init(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    /* init(GrpcSplitter, _Dir, Stream, FlowState, PayloadChunk) */
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "init(GrpcSplitter, _Dir, Stream, FlowState, PayloadChunk)");
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "init() takes classes");
            return NULL;
        }
    }
    if (slot_offsets(args[0], splitter_names, G_N, g_off) < 0 ||
        slot_offsets(args[1], dir_names, D_N, d_off) < 0 ||
        slot_offsets(args[2], stream_names, S_N, s_off) < 0 ||
        slot_offsets(args[3], flow_names, F_N, f_off) < 0 ||
        slot_offsets(args[4], chunk_names, C_N, c_off) < 0)
        return NULL;
    for (int i = 0; i < 5; i++) Py_INCREF(args[i]);
    Py_XSETREF(grpc_splitter_type, args[0]);
    Py_XSETREF(dir_type, (PyTypeObject *)args[1]);
    Py_XSETREF(stream_type, (PyTypeObject *)args[2]);
    Py_XSETREF(flow_type, (PyTypeObject *)args[3]);
    Py_XSETREF(chunk_type, (PyTypeObject *)args[4]);
    Py_RETURN_NONE;
}

/* sent_runs(chunks, bucket_ns): payload bytes and chunks per
 * (conn_key * 2 + direction, ts_ns // bucket_ns), as {(key, bucket): (bytes, chunks)},
 * for the pipeline's flow_rates counting (consecutive chunks of one key and bucket are
 * summed before the dict is touched); None when a chunk is not a plain PayloadChunk
 * (the caller counts in Python). */
static PyObject *sent_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "sent_runs(list of PayloadChunk, bucket_ns)");
        return NULL;
    }
    if (chunk_type == NULL) Py_RETURN_NONE;
    long long bucket_ns = PyLong_AsLongLong(args[1]);
    if (bucket_ns <= 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bucket_ns must be > 0");
        return NULL;
    }
    PyObject *chunks = args[0];
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    long long cur_key = 0, cur_bucket = 0, nbytes = 0, count = 0;
    Py_ssize_t n = PyList_GET_SIZE(chunks);
    for (Py_ssize_t i = 0; i <= n; i++) {
        long long key = 0, bucket = 0, len = 0;
        if (i < n) {
            PyObject *c = PyList_GET_ITEM(chunks, i);
            long long conn_key, d, ts;
            if (Py_TYPE(c) != chunk_type || slot_ll(c, c_off[C_CONN_KEY], &conn_key) < 0 ||
                slot_ll(c, c_off[C_DIRECTION], &d) < 0 || slot_ll(c, c_off[C_TS_NS], &ts) < 0)
                goto python;
            PyObject *data = SLOT(c, c_off[C_DATA]);
            if (data == NULL || !PyBytes_CheckExact(data)) goto python;
            key = conn_key * 2 + d;
            bucket = ts / bucket_ns;
            if (ts % bucket_ns < 0) bucket -= 1; /* floor division, as in Python */
            len = PyBytes_GET_SIZE(data);
            if (count && key == cur_key && bucket == cur_bucket) {
                nbytes += len;
                count += 1;
                continue;
            }
        }
        if (count) {
            /* out[(key, bucket)] += (bytes, chunks) */
            PyObject *k = Py_BuildValue("(LL)", cur_key, cur_bucket);
            if (k == NULL) goto error;
            PyObject *got = PyDict_GetItemWithError(out, k);
            long long b0 = 0, c0 = 0;
            if (got == NULL && PyErr_Occurred()) { Py_DECREF(k); goto error; }
            if (got != NULL) {
                b0 = PyLong_AsLongLong(PyTuple_GET_ITEM(got, 0));
                c0 = PyLong_AsLongLong(PyTuple_GET_ITEM(got, 1));
            }
            PyObject *v = Py_BuildValue("(LL)", b0 + nbytes, c0 + count);
            if (v == NULL) { Py_DECREF(k); goto error; }
            int r = PyDict_SetItem(out, k, v);
            Py_DECREF(k);
            Py_DECREF(v);
            if (r < 0) goto error;
        }
        cur_key = key;
        cur_bucket = bucket;
        nbytes = len;
        count = 1;
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
python:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"sent_runs", (PyCFunction)(void (*)(void))sent_runs, METH_FASTCALL,
     "sent_runs(chunks, bucket_ns): {(key, bucket): (bytes, chunks)} over the chunks."},
    {"feed_run", (PyCFunction)(void (*)(void))feed_run, METH_FASTCALL,
     "feed_run(conn, conn_key, rows, buf, first): feed_chunk over the rows of a ChunkRun."},
    {"feed_chunk", (PyCFunction)(void (*)(void))feed_chunk, METH_FASTCALL,
     "feed_chunk(conn, chunk): H2Connection.feed_chunk with the whole-message DATA case in C."},
    {"init", (PyCFunction)(void (*)(void))init, METH_FASTCALL,
     "init(GrpcSplitter, _Dir, Stream, FlowState, PayloadChunk): the classes whose slots it reads."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

#define INTERN(var, text) if (((var) = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__speedups(void) {
    INTERN(s_dirs, "dirs"); INTERN(s_streams, "streams"); INTERN(s_flows, "flows");
    INTERN(s_messages, "msg_buf"); INTERN(s_frame_no_attr, "_frame_no"); INTERN(s_feed_chunk, "feed_chunk");
    if ((zero = PyLong_FromLong(0)) == NULL) return NULL;
    return PyModule_Create(&module);
}
