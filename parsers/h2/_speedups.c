/* Optional C fast path for H2Connection.feed_chunk / feed_run (parsers/h2/_conn.py).
 *
 * feed_chunk(conn, chunk) handles the steady-state case of a gRPC token stream, a
 * chunk that is exactly one unpadded DATA frame carrying one whole gRPC message on a
 * known stream, with nothing buffered and without exhausting a flow-control window, by
 * doing what H2Connection.feed and _whole_data do in that case, on the same Python
 * objects. feed_run(...) does the same over the rows of a ChunkRun, and also walks rows
 * made of several such frames and of whole HEADERS frames whose header block the
 * direction's HPACK decoder already holds decoded (what H2Connection._block does with
 * them in the common cases: open a request stream, response headers, trailers, END_STREAM
 * and the stream's end). Both also take the DATA frames of an LLM's event stream that carry
 * whole simple events (try_sse_frame): the frame's bookkeeping and the events' message rows
 * here, the events' meaning by the Python code the pure path calls for them. Everything else
 * (and any surprise in the objects' types) goes to the pure-Python code, so results are
 * identical with or without this module. All checks for a frame happen before the first
 * change: a frame is either handled completely here or not touched.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#include "../records.h" /* MSG_* and RUN_*: the row layouts of parsers/records.py */
#include "../llm/_sse_event.h" /* sse_event_at: the simple event the event-stream case takes */

static PyObject *grpc_splitter_type; /* parsers.grpc.GrpcSplitter, set by init() */
static PyObject *event_splitter_type; /* parsers.llm.taps.EventSplitter, set by init() */
/* what the event-stream case calls and compares (try_sse_frame) */
static PyObject *s_tmp, *s_takes_whole_events, *s_feed_whole_events, *s_messages_of, *v_sse;

/* interned attribute names of H2Connection (a plain class: read through getattr) */
static PyObject *s_dirs, *s_streams, *s_flows, *s_messages, *s_frame_no_attr, *s_feed_chunk;
static PyObject *s_orient_final, *s_flipped, *s_closed, *s_done, *s_first_opened, *s_last_opened,
    *s_lossy, *s_max_conc;
/* header names and values _block looks at */
static PyObject *h_method, *h_status, *h_content_type, *h_grpc_status, *v_grpc, *v_app_grpc,
    *v_grpc_web_text, *v_grpc_web;
/* what Stream.to_record reads and writes */
static PyObject *h_path, *h_authority, *h_host, *h_scheme, *h_user_agent, *h_grpc_message, *h_grpc_encoding,
    *k_bidi, *k_client_stream, *k_server_stream, *k_unary, *v_h2, *s_to_record;
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

/* ts // bucket_ns as Python floors it (bucket_ns > 0): the flow_rates bucket of a time */
static inline long long floor_bucket(long long ts, long long bucket_ns) {
    long long bucket = ts / bucket_ns;
    return ts % bucket_ns < 0 ? bucket - 1 : bucket;
}

static inline unsigned long be32(const unsigned char *p) {
    return ((unsigned long)p[0] << 24) | ((unsigned long)p[1] << 16) | ((unsigned long)p[2] << 8) | p[3];
}

/* Direct __slots__ access, like the interpreter's LOAD_ATTR_SLOT: offsets of the slot
 * members, read once from the classes' member descriptors by init(); every object is
 * checked to be of exactly that class before its slots are read. */
#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))
/* The fields read and written (enums C_ D_ S_ X_ G_ F_ H_ B_ R_, their names, and the
 * Stream / GrpcSplitter templates): declared in parsers/h2/_layout.py, generated. */
#include "_layout.h"
static PyTypeObject *record_type; /* NULL when RequestRecord is not what record_names says */
static Py_ssize_t r_off[R_N];
static PyTypeObject *chunk_type, *dir_type, *stream_type, *flow_type, *decoder_type, *block_type;
static Py_ssize_t c_off[C_N], d_off[D_N], s_off[S_N], x_off[X_N], g_off[G_N], f_off[F_N], h_off[H_N], b_off[B_N];

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

/* an int object that fits a long long: 0 on success, -1 otherwise (no error set) */
static inline int slot_ll_obj(PyObject *v, long long *out) {
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

/* the same for the value of a slot */
static inline int slot_ll(PyObject *o, Py_ssize_t off, long long *out) {
    return slot_ll_obj(SLOT(o, off), out);
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
    /* for HEADERS and END_STREAM: conn.orient_final, flipped, closed, done,
     * first_opened, last_opened, lossy, max_conc (conn_ok: fetched and checked) */
    int conn_ok;
    PyObject *orient_final, *flipped, *closed, *done, *first_opened, *last_opened, *lossy, *max_conc;
} ctx_t;

#define CTX_INIT {NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL}

static void ctx_clear(ctx_t *c) {
    Py_CLEAR(c->dirs);
    Py_CLEAR(c->streams);
    Py_CLEAR(c->flows);
    Py_CLEAR(c->msgs);
    Py_CLEAR(c->sid_obj);
    c->conn_ok = 0;
    Py_CLEAR(c->orient_final);
    Py_CLEAR(c->flipped);
    Py_CLEAR(c->closed);
    Py_CLEAR(c->done);
    Py_CLEAR(c->first_opened);
    Py_CLEAR(c->last_opened);
    Py_CLEAR(c->lossy);
    Py_CLEAR(c->max_conc);
}

/* one packed message row (MSG_ROW: seven native int64s) onto conn.msg_buf. The buffer
 * doubles when full: PyByteArray_Resize alone grows it by an eighth, so a batch's rows
 * were copied over some eight times by realloc. 0 ok, -1 error */
static int msg_append(PyObject *buf, const long long vals[MSG_NCOLS]) {
    const Py_ssize_t row = (Py_ssize_t)(MSG_NCOLS * sizeof(long long));
    Py_ssize_t blen = PyByteArray_GET_SIZE(buf), need = blen + row;
    if (need >= ((PyByteArrayObject *)buf)->ob_alloc && PyByteArray_Resize(buf, 2 * need) < 0) return -1;
    /* within the allocation now: only the size changes */
    if (PyByteArray_Resize(buf, need) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(buf) + blen, vals, (size_t)row);
    return 0;
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

/* The connection attributes HEADERS and END_STREAM need, into ctx (once per stretch of
 * C work): 0 usable (orientation final; every attribute of the expected type), -1 not
 * (no error set). */
static int ctx_conn(PyObject *conn, ctx_t *ctx) {
    if (ctx->conn_ok) return 0;
    if (ctx_get(conn, s_orient_final, &ctx->orient_final) < 0 || ctx_get(conn, s_flipped, &ctx->flipped) < 0 ||
        ctx_get(conn, s_closed, &ctx->closed) < 0 || ctx_get(conn, s_done, &ctx->done) < 0 ||
        ctx_get(conn, s_first_opened, &ctx->first_opened) < 0 ||
        ctx_get(conn, s_last_opened, &ctx->last_opened) < 0 || ctx_get(conn, s_lossy, &ctx->lossy) < 0 ||
        ctx_get(conn, s_max_conc, &ctx->max_conc) < 0)
        return -1;
    /* not final yet: records may be held and settled by the Python code */
    if (ctx->orient_final != Py_True) return -1;
    if (ctx->flipped != Py_True && ctx->flipped != Py_False) return -1;
    if (ctx->lossy != Py_True && ctx->lossy != Py_False) return -1;
    if (!PyDict_CheckExact(ctx->closed) || !PyList_CheckExact(ctx->done)) return -1;
    PyObject *lists[3] = {ctx->first_opened, ctx->last_opened, ctx->max_conc};
    for (int i = 0; i < 3; i++) {
        if (!PyList_CheckExact(lists[i]) || PyList_GET_SIZE(lists[i]) != 2) return -1;
    }
    for (int i = 0; i < 2; i++) {
        if (!PyLong_CheckExact(PyList_GET_ITEM(ctx->first_opened, i)) ||
            !PyLong_CheckExact(PyList_GET_ITEM(ctx->last_opened, i)))
            return -1;
    }
    ctx->conn_ok = 1;
    return 0;
}

/* del d[key] when present: 0 ok, -1 error */
static int dict_discard(PyObject *d, PyObject *key) {
    if (PyDict_DelItem(d, key) == 0) return 0;
    if (!PyErr_ExceptionMatches(PyExc_KeyError)) return -1;
    PyErr_Clear();
    return 0;
}

/* FlowState.close_stream(sid) (its dicts were checked by the caller's ctx checks) */
static int flow_close(PyObject *fs, PyObject *sid_obj) {
    if (dict_discard(SLOT(fs, f_off[F_STREAMS]), sid_obj) < 0) return -1;
    return dict_discard(SLOT(fs, f_off[F_BLOCKED]), sid_obj);
}

/* both FlowStates of ctx->flows are usable by flow_close / flow_open */
static int flows_ok(ctx_t *ctx) {
    PyObject *flows = ctx->flows;
    if (flows == NULL || !PyTuple_CheckExact(flows) || PyTuple_GET_SIZE(flows) != 2) return 0;
    for (int i = 0; i < 2; i++) {
        PyObject *fs = PyTuple_GET_ITEM(flows, i);
        if (Py_TYPE(fs) != flow_type) return 0;
        PyObject *a = SLOT(fs, f_off[F_STREAMS]), *b = SLOT(fs, f_off[F_BLOCKED]);
        if (a == NULL || b == NULL || !PyDict_CheckExact(a) || !PyDict_CheckExact(b)) return 0;
        if (SLOT(fs, f_off[F_INITIAL]) == NULL) return 0;
    }
    return 1;
}

/* H2Connection._finalize(st) (the stream is conn.streams[sid]) */
static int do_finalize(ctx_t *ctx, PyObject *st, PyObject *sid_obj) {
    int ret = -1;
    Py_INCREF(st); /* conn.streams held it */
    int had = PyDict_Contains(ctx->streams, sid_obj);
    if (had < 0) goto out;
    if (!had) { ret = 0; goto out; }
    if (PyDict_DelItem(ctx->streams, sid_obj) < 0) goto out;
    PyObject *closed = ctx->closed;
    if (PyDict_SetItem(closed, sid_obj, Py_True) < 0) goto out;
    if (PyDict_GET_SIZE(closed) > 4096) { /* _CLOSED_KEEP: forget the oldest */
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        if (PyDict_Next(closed, &pos, &k, &v)) {
            Py_INCREF(k);
            int r = PyDict_DelItem(closed, k);
            Py_DECREF(k);
            if (r < 0) goto out;
        }
    }
    if (flow_close(PyTuple_GET_ITEM(ctx->flows, 0), sid_obj) < 0 ||
        flow_close(PyTuple_GET_ITEM(ctx->flows, 1), sid_obj) < 0)
        goto out;
    if (PyList_Append(ctx->done, st) < 0) goto out;
    ret = 0;
out:
    Py_DECREF(st);
    return ret;
}

/* H2Connection._end_stream(st, d, ts, end_off), checked by end_stream_ok (lists: st's
 * pair slots). st may be gone afterwards. */
static int do_end_stream(ctx_t *ctx, PyObject *st, PyObject **lists, long long d, PyObject *ts,
                         long long end_off, PyObject *sid_obj) {
    if (PyList_GET_ITEM(lists[S_END_TS], d) == Py_None) {
        Py_INCREF(ts);
        if (list_set(lists[S_END_TS], d, ts) < 0) return -1;
        if (list_set(lists[S_END_OFF], d, PyLong_FromLongLong(end_off)) < 0) return -1;
    }
    if (flow_close(PyTuple_GET_ITEM(ctx->flows, d), sid_obj) < 0) return -1;
    int done = SLOT(st, x_off[X_RST_TS]) != Py_None ||
               (PyList_GET_ITEM(lists[S_END_TS], 0) != Py_None && PyList_GET_ITEM(lists[S_END_TS], 1) != Py_None);
    /* a mid-connection stream whose request we never saw: the response end ends it */
    long long client_dir = ctx->flipped == Py_True;
    if (!done && SLOT(st, x_off[X_MID]) == Py_True && PyList_GET_ITEM(lists[S_HDR_TS], 1 - d) == Py_None &&
        d != client_dir)
        done = 1;
    return done ? do_finalize(ctx, st, sid_obj) : 0;
}

/* What every HEADERS frame handled in C ends with (as H2Connection._parse and _block do):
 * the stream's last offset in d, the direction's frame count and position, and the stream's
 * end when END_STREAM is set. 1 done; -1 error (exception set). */
static int headers_frame_done(ctx_t *ctx, PyObject *st, PyObject **lists, PyObject *D, long long d,
                              long long dframes, long long end_off, int end, PyObject *ts, PyObject *sid_obj) {
    if (list_set(lists[S_LAST_OFF], d, PyLong_FromLongLong(end_off)) < 0) return -1;
    if (slot_put(D, d_off[D_FRAMES], PyLong_FromLongLong(dframes + 1)) < 0) return -1;
    if (slot_put(D, d_off[D_BASE], PyLong_FromLongLong(end_off)) < 0) return -1;
    if (end && do_end_stream(ctx, st, lists, d, ts, end_off, sid_obj) < 0) return -1;
    return 1;
}

/* whether do_end_stream can run for st (ctx->conn_ok and ctx->streams, flows fetched) */
static int end_stream_ok(ctx_t *ctx, PyObject *st) {
    PyObject *mid = SLOT(st, x_off[X_MID]);
    return ctx->conn_ok && flows_ok(ctx) && SLOT(st, x_off[X_RST_TS]) != NULL &&
           (mid == Py_True || mid == Py_False);
}

/* What _messages sets on a stream (lists: its pair slots) before the rows of messages in
 * direction d: the first one's time and end offset when they are its first (`first`), and
 * whether they came before the other side ended, and after it sent any (`other`, whether
 * msgs[1 - d] is true). 0 ok, -1 error. */
static int messages_begin(PyObject **lists, long long d, int first, PyObject *ts, long long end_off, int other) {
    if (first) {
        Py_INCREF(ts);
        if (list_set(lists[S_FIRST_MSG_TS], d, ts) < 0) return -1;
        if (list_set(lists[S_FIRST_MSG_OFF], d, PyLong_FromLongLong(end_off)) < 0) return -1;
    }
    if (PyList_GET_ITEM(lists[S_END_TS], 1 - d) == Py_None) {
        Py_INCREF(Py_True);
        if (list_set(lists[S_MSG_BEFORE_END], d, Py_True) < 0) return -1;
    }
    if (other) {
        Py_INCREF(Py_True);
        if (list_set(lists[S_MSG_AFTER_FIRST], d, Py_True) < 0) return -1;
    }
    return 0;
}

/* d[key] = v as an int object. 0 ok, -1 error. */
static int dict_put_ll(PyObject *d, PyObject *key, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL) return -1;
    int r = PyDict_SetItem(d, key, o);
    Py_DECREF(o);
    return r;
}

/* list[i] as a long long: 0 ok, -1 not an int that fits (no error set) */
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

/* A direction's flow-control windows, as flow_check read them for DATA on one stream. */
typedef struct {
    PyObject *fs, *fs_streams; /* borrowed: conn.flows holds them */
    int known, has_w;          /* FlowState.known; whether the stream has a window */
    long long conn, w;         /* the connection's window; the stream's */
} flow_t;

/* Can C consume `length` bytes of DATA on stream sid_obj in direction d, as
 * FlowState.consume does? 1 yes (*f read), 0 no: the FlowState is not what C expects, or a
 * window reaches zero where no block is open, which opens one (unless the stream ends
 * there, `end`): Python's. */
static int flow_check(PyObject *conn, ctx_t *ctx, long long d, PyObject *sid_obj, long long length, int end,
                      flow_t *f) {
    if (ctx_get(conn, s_flows, &ctx->flows) < 0) return 0;
    PyObject *flows = ctx->flows;
    if (!PyTuple_CheckExact(flows) || PyTuple_GET_SIZE(flows) != 2) return 0;
    f->fs = PyTuple_GET_ITEM(flows, d);
    if (Py_TYPE(f->fs) != flow_type) return 0;
    PyObject *known = SLOT(f->fs, f_off[F_KNOWN]);
    if (known != Py_True && known != Py_False) return 0;
    f->known = known == Py_True;
    f->has_w = 0;
    if (!f->known) return 1;
    PyObject *blocked = SLOT(f->fs, f_off[F_BLOCKED]);
    f->fs_streams = SLOT(f->fs, f_off[F_STREAMS]);
    if (blocked == NULL || !PyDict_CheckExact(blocked)) return 0;
    if (f->fs_streams == NULL || !PyDict_CheckExact(f->fs_streams)) return 0;
    if (slot_ll(f->fs, f_off[F_CONN], &f->conn) < 0) return 0;
    if (!end && f->conn - length <= 0 && PyDict_Contains(blocked, zero) != 1) { PyErr_Clear(); return 0; }
    /* DATA on a window seen exhausted (a block of the connection or the stream): the window
     * was larger than the capture saw given, FlowState.consume drops the block: Python's */
    if (length > 0 && PyDict_GET_SIZE(blocked) > 0 &&
        (PyDict_Contains(blocked, zero) != 0 || PyDict_Contains(blocked, sid_obj) != 0)) { PyErr_Clear(); return 0; }
    PyObject *w_obj = PyDict_GetItemWithError(f->fs_streams, sid_obj);
    if (w_obj == NULL) { /* no window of the stream's (or an error: Python's) */
        if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
        return 1;
    }
    if (slot_ll_obj(w_obj, &f->w) < 0) return 0;
    if (!end && f->w - length <= 0 && PyDict_Contains(blocked, sid_obj) != 1) { PyErr_Clear(); return 0; }
    f->has_w = 1;
    return 1;
}

/* FlowState.consume's writes for `length` bytes of DATA that flow_check let through: the
 * connection's window and the stream's, when known. 0 ok, -1 error. */
static int flow_consume(const flow_t *f, PyObject *sid_obj, long long length) {
    if (!f->known) return 0;
    if (slot_put(f->fs, f_off[F_CONN], PyLong_FromLongLong(f->conn - length)) < 0) return -1;
    return f->has_w ? dict_put_ll(f->fs_streams, sid_obj, f->w - length) : 0;
}

/* What _whole_data counts of a whole DATA frame of `length` payload bytes (none padding)
 * on a stream (lists: its pair slots) in direction d: its first data frame's time and end
 * offset (`first`), frames, last time, bytes and last offset. 0 ok, -1 error. */
static int data_figures(PyObject **lists, long long d, int first, PyObject *ts, long long off_end, long long length) {
    if (first) {
        Py_INCREF(ts);
        if (list_set(lists[S_FIRST_DATA_TS], d, ts) < 0) return -1;
        if (list_set(lists[S_FIRST_DATA_OFF], d, PyLong_FromLongLong(off_end)) < 0) return -1;
    }
    if (list_add(lists[S_DATA_FRAMES], d, 1) < 0) return -1;
    Py_INCREF(ts);
    if (list_set(lists[S_LAST_DATA_TS], d, ts) < 0) return -1;
    if (list_add(lists[S_DATA_BYTES], d, length) < 0) return -1;
    return list_set(lists[S_LAST_OFF], d, PyLong_FromLongLong(off_end));
}

/* The fast case on raw chunk fields (direction d, bytes b[0:n] at direction offset
 * `offset`, time as an int object), for a chunk without gap_before. frame_no (an int
 * object) goes to conn._frame_no; NULL leaves that to the caller.
 * 1: handled; 0: not the fast case, nothing changed; -1: error (exception set) */
static int try_fast_raw(PyObject *conn, ctx_t *ctx, long long d, const unsigned char *b,
                        Py_ssize_t n, long long offset, PyObject *ts, PyObject *frame_no) {
    int ret = 0;
    PyObject *dirs, *streams, *messages, *sid_obj;
    PyObject *lists[S_N];
    long long base, max_len, left, dframes;

    if ((d != 0 && d != 1) || n < 14) return 0;
    long long length = n - 9;
    unsigned long lt = be32(b);
    unsigned int flags = b[4];
    unsigned long sid = be32(b + 5);
    unsigned int gflag = b[9];
    unsigned long glen = be32(b + 10);
    if (lt != ((unsigned long)length << 8) || (flags & 0x08) || (sid & 0x80000000UL)) return 0;
    int end = flags & 0x01; /* END_STREAM: the stream's direction ends (do_end_stream) */
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
    flow_t flow;
    if (!flow_check(conn, ctx, d, sid_obj, length, end, &flow)) goto done;
    if (end && (ctx_conn(conn, ctx) < 0 || !end_stream_ok(ctx, st))) goto done;
    PyObject *idx = PyList_GET_ITEM(lists[S_MSGS], d);
    PyObject *nframes = PyList_GET_ITEM(lists[S_DATA_FRAMES], d);
    if (!PyLong_CheckExact(idx) || !PyLong_CheckExact(nframes)) goto done;
    if (ctx_get(conn, s_messages, &ctx->msgs) < 0) goto done;
    messages = ctx->msgs;
    if (!PyByteArray_CheckExact(messages)) goto done;
    long long row_vals[MSG_NCOLS];
    int ovf = 0;
    row_vals[MSG_TS_NS] = PyLong_CheckExact(ts) ? PyLong_AsLongLongAndOverflow(ts, &ovf) : (ovf = 1, 0);
    if (ovf || (row_vals[MSG_TS_NS] == -1 && PyErr_Occurred())) { PyErr_Clear(); goto done; }
    row_vals[MSG_INDEX] = PyLong_AsLongLongAndOverflow(idx, &ovf);
    if (ovf || (row_vals[MSG_INDEX] == -1 && PyErr_Occurred())) { PyErr_Clear(); goto done; }

    /* ---- from here on the chunk is ours: apply what the Python fast path does ---- */
    ret = -1;
    long long off_end = base + n;
    if (frame_no != NULL && PyObject_SetAttr(conn, s_frame_no_attr, frame_no) < 0) goto done;
    if (slot_put(D, d_off[D_FRAMES], PyLong_FromLongLong(dframes + 1)) < 0) goto done;
    if (slot_put(D, d_off[D_BASE], PyLong_FromLongLong(off_end)) < 0) goto done;
    Py_INCREF(idx); /* msgs[d] is replaced below */
    int idx_zero = PyLong_AsLongLong(idx) == 0;
    int other = PyObject_IsTrue(PyList_GET_ITEM(lists[S_MSGS], 1 - d));
    if (other < 0 || messages_begin(lists, d, idx_zero, ts, off_end, other) < 0) goto fail_idx;
    /* the message row, packed as H2Connection.msg_buf wants it (MSG_ROW: native int64s) */
    row_vals[MSG_STREAM_ID] = (long long)sid;
    row_vals[MSG_DIRECTION] = d;
    row_vals[MSG_SIZE] = (long long)glen;
    row_vals[MSG_FLAGS] = gflag == 1;
    row_vals[MSG_END_OFFSET] = off_end;
    Py_DECREF(idx); /* only its value was needed */
    if (msg_append(messages, row_vals) < 0) goto done;
    if (list_add(lists[S_MSGS], d, 1) < 0) goto done;
    Py_INCREF(ts);
    if (list_set(lists[S_LAST_MSG_TS], d, ts) < 0) goto done;
    if (data_figures(lists, d, PyLong_AsLongLong(nframes) == 0, ts, off_end, length) < 0) goto done;
    if (flow_consume(&flow, sid_obj, length) < 0) goto done;
    if (end && do_end_stream(ctx, st, lists, d, ts, off_end, sid_obj) < 0) goto done;
    ret = 1;
    goto done;

fail_idx:
    Py_DECREF(idx);
done:
    return ret;
}

/* Whether [p, end) is whole simple events and nothing else (1) or not (0); with `make`,
 * each appended to `events` (`off`: the direction offset of p) as SseFramer's line loop (or
 * its one-event case) reports it: 1, or -1 on an error. */
static int sse_events(const unsigned char *p, const unsigned char *end, PyObject *ts, long long off, int make,
                      PyObject *events) {
    const unsigned char *start = p, *next, *v, *vend;
    if (p >= end) return 0;
    for (; p < end; p = next) {
        if ((next = sse_event_at(p, end, &v, &vend)) == NULL) return 0;
        if (make && sse_event_append(events, ts, v, vend, next - p, off + (long long)(next - start)) < 0) return -1;
    }
    return 1;
}

/* FrameHandlers._messages of a stream's event rows `tmp` ((ts, size, flags, end offset)
 * each, as EventSplitter gives them) once the orientation is final: the stream's message
 * figures and a packed row each onto conn.msg_buf, tmp emptied. 1 done; 0 not this case
 * (orientation not final, a row not of four ints), nothing changed; -1 error. (Python
 * code ran just before: the connection's attributes are read afresh, not from ctx.) */
#define SSE_KEPT_FLAGS (~0xFELL) /* parsers/h2/_state.py _KEPT_FLAGS */
static int sse_messages(PyObject *conn, PyObject **lists, long long d, long long sid, PyObject *tmp) {
    Py_ssize_t rows = PyList_GET_SIZE(tmp);
    long long idx;
    PyObject *final = PyObject_GetAttr(conn, s_orient_final), *msgs = NULL;
    int usable = final == Py_True;
    Py_XDECREF(final);
    if (!usable) { PyErr_Clear(); return 0; }
    if ((msgs = PyObject_GetAttr(conn, s_messages)) == NULL) { PyErr_Clear(); return 0; }
    long long *vals = NULL;
    int ret = 0;
    if (!PyByteArray_CheckExact(msgs) || list_ll(lists[S_MSGS], d, &idx) < 0) goto done;
    if ((vals = PyMem_Malloc((size_t)rows * 4 * sizeof(long long))) == NULL) {
        PyErr_NoMemory();
        ret = -1;
        goto done;
    }
    for (Py_ssize_t i = 0; i < rows; i++) {
        PyObject *row = PyList_GET_ITEM(tmp, i);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 4) goto done;
        for (int k = 0; k < 4; k++) {
            if (slot_ll_obj(PyTuple_GET_ITEM(row, k), &vals[i * 4 + k]) < 0) goto done;
        }
    }
    /* ---- from here on the rows are ours ---- */
    ret = -1;
    PyObject *first = PyList_GET_ITEM(tmp, 0), *last = PyList_GET_ITEM(tmp, rows - 1);
    int other = PyObject_IsTrue(PyList_GET_ITEM(lists[S_MSGS], 1 - d));
    if (other < 0 || messages_begin(lists, d, idx == 0, PyTuple_GET_ITEM(first, 0), vals[3], other) < 0) goto done;
    long long row_vals[MSG_NCOLS];
    row_vals[MSG_STREAM_ID] = sid;
    row_vals[MSG_DIRECTION] = d;
    for (Py_ssize_t i = 0; i < rows; i++) {
        row_vals[MSG_INDEX] = idx + i;
        row_vals[MSG_TS_NS] = vals[i * 4];
        row_vals[MSG_SIZE] = vals[i * 4 + 1];
        row_vals[MSG_FLAGS] = vals[i * 4 + 2] & SSE_KEPT_FLAGS;
        row_vals[MSG_END_OFFSET] = vals[i * 4 + 3];
        if (msg_append(msgs, row_vals) < 0) goto done;
    }
    PyObject *last_ts = PyTuple_GET_ITEM(last, 0);
    Py_INCREF(last_ts);
    if (list_set(lists[S_LAST_MSG_TS], d, last_ts) < 0) goto done;
    if (list_set(lists[S_MSGS], d, PyLong_FromLongLong(idx + rows)) < 0) goto done;
    if (PyList_SetSlice(tmp, 0, rows, NULL) < 0) goto done;
    ret = 1;
done:
    PyMem_Free(vals);
    Py_DECREF(msgs);
    return ret;
}

/* Server-sent events over HTTP/2: the DATA frame b[0:n] (direction d, at direction offset
 * `offset`) when it carries whole simple events (sse_events: one, or several a server wrote
 * at once), unpadded and without END_STREAM, on a known stream whose body an EventSplitter
 * reads as an event stream ("sse" mode), its framer between events: what
 * H2Connection._parse and _whole_data do with it. The events' meaning stays with the Python
 * code those call (EventSplitter.feed_whole_events), given the events read here; their
 * message rows are packed here once the orientation is final (sse_messages), else by
 * FrameHandlers._messages.
 * Python code runs: the caller has written every streak back, and clears ctx afterwards.
 * All checks come before the first change. 1 handled; 0 not the case, nothing changed;
 * -1 error (exception set). */
static int try_sse_frame(PyObject *conn, ctx_t *ctx, long long d, const unsigned char *b, Py_ssize_t n,
                         long long offset, PyObject *ts, long long frame_no) {
    long long base, max_len, dframes, nframes;
    if (event_splitter_type == NULL || (d != 0 && d != 1) || n < 9 + 7) return 0;
    long long length = n - 9;
    unsigned long sid = be32(b + 5);
    if (be32(b) != ((unsigned long)length << 8) || (b[4] & 0x09) || (sid & 0x80000000UL)) return 0;
    /* the payload: whole simple events and nothing else */
    const unsigned char *p = b + 9, *e = b + n;
    if (!sse_events(p, e, NULL, 0, 0, NULL)) return 0;

    if (ctx_get(conn, s_dirs, &ctx->dirs) < 0) return 0;
    PyObject *dirs = ctx->dirs;
    if (!PyTuple_CheckExact(dirs) || PyTuple_GET_SIZE(dirs) != 2) return 0;
    PyObject *D = PyTuple_GET_ITEM(dirs, d);
    if (Py_TYPE(D) != dir_type || SLOT(D, d_off[D_PLAIN]) != Py_True) return 0;
    if (slot_ll(D, d_off[D_BASE], &base) < 0 || offset != base) return 0;
    PyObject *max_known = SLOT(D, d_off[D_MAX_KNOWN]);
    if (max_known == Py_True) {
        if (slot_ll(D, d_off[D_MAX_LEN], &max_len) < 0 || length > max_len) return 0;
    } else if (max_known != Py_False) {
        return 0;
    }
    if (slot_ll(D, d_off[D_FRAMES], &dframes) < 0) return 0;
    if (ctx_get(conn, s_streams, &ctx->streams) < 0 || !PyDict_CheckExact(ctx->streams)) return 0;
    PyObject *sid_obj = PyLong_FromUnsignedLong(sid);
    if (sid_obj == NULL) return -1;
    int ret = 0;
    PyObject *st = PyDict_GetItemWithError(ctx->streams, sid_obj), *lists[S_N];
    if (st == NULL) { PyErr_Clear(); goto done; }
    if (Py_TYPE(st) != stream_type) goto done;
    for (int i = 0; i < S_N; i++) {
        if ((lists[i] = pair_slot(st, i)) == NULL) goto done;
    }
    PyObject *sp = PyList_GET_ITEM(lists[S_SPLITTER], d), *mode = PyList_GET_ITEM(lists[S_MODE], d);
    /* (an EventSplitter never probes: its class says so, and __slots__ keeps it) */
    if ((PyObject *)Py_TYPE(sp) != event_splitter_type) goto done;
    if (!PyUnicode_CheckExact(mode) || PyUnicode_Compare(mode, v_sse) != 0) { PyErr_Clear(); goto done; }
    if (list_ll(lists[S_DATA_FRAMES], d, &nframes) < 0) goto done;
    flow_t flow;
    if (!flow_check(conn, ctx, d, sid_obj, length, 0, &flow)) goto done;
    PyObject *takes = PyObject_CallMethodNoArgs(sp, s_takes_whole_events);
    if (takes == NULL) { ret = -1; goto done; }
    Py_DECREF(takes);
    if (takes != Py_True) goto done;

    /* ---- from here on the frame is ours ---- */
    ret = -1;
    Py_INCREF(st); /* held while Python code runs */
    long long off_end = base + n;
    PyObject *events = NULL, *tmp = NULL, *res, *fno = PyLong_FromLongLong(frame_no);
    /* H2Connection.feed sets it first: the Python code below may file an issue */
    if (fno == NULL || PyObject_SetAttr(conn, s_frame_no_attr, fno) < 0) { Py_XDECREF(fno); goto out; }
    Py_DECREF(fno);
    if (slot_put(D, d_off[D_FRAMES], PyLong_FromLongLong(dframes + 1)) < 0) goto out;
    if ((events = PyList_New(0)) == NULL || sse_events(p, e, ts, base + 9, 1, events) < 0) goto out;
    if ((tmp = PyObject_GetAttr(conn, s_tmp)) == NULL) goto out;
    if (!PyList_CheckExact(tmp)) {
        PyErr_SetString(PyExc_TypeError, "H2Connection._tmp is not a list");
        goto out;
    }
    res = PyObject_CallMethodObjArgs(sp, s_feed_whole_events, events, tmp, NULL);
    if (res == NULL) goto out;
    Py_DECREF(res);
    if (PyList_GET_SIZE(tmp)) {
        int packed = sse_messages(conn, lists, d, (long long)sid, tmp);
        if (packed < 0) goto out;
        if (!packed) { /* what sse_messages leaves: FrameHandlers._messages, the same rows */
            PyObject *d_obj = PyLong_FromLongLong(d);
            res = d_obj == NULL ? NULL : PyObject_CallMethodObjArgs(conn, s_messages_of, st, d_obj, tmp, NULL);
            Py_XDECREF(d_obj);
            if (res == NULL) goto out;
            Py_DECREF(res);
        }
    }
    if (data_figures(lists, d, nframes == 0, ts, off_end, length) < 0) goto out;
    if (flow_consume(&flow, sid_obj, length) < 0) goto out;
    if (slot_put(D, d_off[D_BASE], PyLong_FromLongLong(off_end)) < 0) goto out;
    ret = 1;
out:
    Py_XDECREF(events);
    Py_XDECREF(tmp);
    Py_DECREF(st);
done:
    Py_DECREF(sid_obj);
    return ret;
}

/* Stream(sid) and GrpcSplitter(keep_trailer=web) built here without running their
 * Python __init__: every slot, in __slots__ order, with the value __init__ gives it.
 * init() checks that the classes' __slots__ are exactly these names; otherwise (the
 * classes changed) the classes are called. */
#define STREAM_TMPL_N ((int)(sizeof(stream_tmpl) / sizeof(stream_tmpl[0])))
#define SPLITTER_TMPL_N ((int)(sizeof(splitter_tmpl) / sizeof(splitter_tmpl[0])))
static Py_ssize_t stream_tmpl_off[STREAM_TMPL_N], splitter_tmpl_off[SPLITTER_TMPL_N];
static int stream_tmpl_ok, splitter_tmpl_ok;
static PyObject *v_http;

/* [a, a] */
static PyObject *pair_of(PyObject *a) {
    PyObject *l = PyList_New(2);
    if (l == NULL) return NULL;
    Py_INCREF(a);
    Py_INCREF(a);
    PyList_SET_ITEM(l, 0, a);
    PyList_SET_ITEM(l, 1, a);
    return l;
}

static PyObject *tmpl_value(int kind, PyObject *sid_obj, int web) {
    switch (kind) {
    case V_SID: Py_INCREF(sid_obj); return sid_obj;
    case V_NONE: Py_RETURN_NONE;
    case V_FALSE: Py_RETURN_FALSE;
    case V_TRUE: Py_RETURN_TRUE;
    case V_MINUS1: return PyLong_FromLong(-1);
    case V_ZERO: Py_INCREF(zero); return zero;
    case V_PAIR_NONE: return pair_of(Py_None);
    case V_PAIR_ZERO: return pair_of(zero);
    case V_PAIR_FALSE: return pair_of(Py_False);
    case V_PAIR_HTTP: return pair_of(v_http);
    case V_BYTEARRAY: return PyByteArray_FromStringAndSize(NULL, 0);
    case V_LIST: return PyList_New(0);
    case V_WEB: return PyBool_FromLong(web);
    }
    PyErr_SetString(PyExc_SystemError, "bad template");
    return NULL;
}

static PyObject *tmpl_new(PyTypeObject *type, const tmpl_t *tmpl, const Py_ssize_t *off, int n, PyObject *sid_obj,
                          int web) {
    PyObject *o = type->tp_alloc(type, 0);
    if (o == NULL) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *v = tmpl_value(tmpl[i].kind, sid_obj, web);
        if (v == NULL) {
            Py_DECREF(o);
            return NULL;
        }
        SLOT(o, off[i]) = v;
    }
    return o;
}

/* Stream(sid) */
static PyObject *new_stream(PyObject *sid_obj) {
    if (!stream_tmpl_ok) return PyObject_CallOneArg((PyObject *)stream_type, sid_obj);
    return tmpl_new(stream_type, stream_tmpl, stream_tmpl_off, STREAM_TMPL_N, sid_obj, 0);
}

/* GrpcSplitter(keep_trailer=web) */
static PyObject *new_splitter(int web) {
    if (!splitter_tmpl_ok)
        return PyObject_CallFunctionObjArgs(grpc_splitter_type, Py_False, web ? Py_True : Py_False, NULL);
    return tmpl_new((PyTypeObject *)grpc_splitter_type, splitter_tmpl, splitter_tmpl_off, SPLITTER_TMPL_N, NULL, web);
}

/* init(): whether `type`'s __slots__ are exactly the template's names (offsets into off);
 * 1 yes, 0 no, -1 error */
static int tmpl_check(PyObject *type, const tmpl_t *tmpl, int n, Py_ssize_t *off) {
    PyObject *names = PyObject_GetAttrString(type, "__slots__");
    if (names == NULL) return -1;
    int same = PyTuple_Check(names) && PyTuple_GET_SIZE(names) == n &&
               ((PyTypeObject *)type)->tp_dictoffset == 0 && ((PyTypeObject *)type)->tp_base == &PyBaseObject_Type;
    for (int i = 0; same && i < n; i++) {
        PyObject *f = PyTuple_GET_ITEM(names, i);
        same = PyUnicode_Check(f) && PyUnicode_CompareWithASCIIString(f, tmpl[i].name) == 0;
    }
    Py_DECREF(names);
    if (!same) return 0;
    const char *list[64];
    for (int i = 0; i < n; i++) list[i] = tmpl[i].name;
    return slot_offsets(type, list, n, off) < 0 ? -1 : 1;
}

/* stream(sid), splitter(web): what the C fast path builds for Stream(sid) and
 * GrpcSplitter(keep_trailer=web) (for the tests) */
static PyObject *py_stream(PyObject *self, PyObject *arg) {
    if (stream_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "parsers.h2._speedups.init() was not called");
        return NULL;
    }
    return new_stream(arg);
}

static PyObject *py_splitter(PyObject *self, PyObject *arg) {
    if (grpc_splitter_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "parsers.h2._speedups.init() was not called");
        return NULL;
    }
    int web = PyObject_IsTrue(arg);
    return web < 0 ? NULL : new_splitter(web);
}

/* gRPC content-type: application/grpc* but not grpc-web-text (_streams._is_grpc); sets
 * *web for grpc-web. 1 yes, 0 no, -1 error */
static int is_grpc_ct(PyObject *ct, int *web) {
    Py_ssize_t m = PyUnicode_Tailmatch(ct, v_app_grpc, 0, PY_SSIZE_T_MAX, -1);
    if (m <= 0) return (int)m;
    int text = PyUnicode_Contains(ct, v_grpc_web_text);
    if (text != 0) return text < 0 ? -1 : 0;
    *web = PyUnicode_Contains(ct, v_grpc_web);
    return *web < 0 ? -1 : 1;
}

/* a mode slot value equal to "grpc" */
static inline int is_grpc_mode(PyObject *v) {
    return PyUnicode_CheckExact(v) && PyUnicode_Compare(v, v_grpc) == 0;
}

/* FlowState.open_stream(sid) */
static int flow_open(PyObject *fs, PyObject *sid_obj) {
    PyObject *streams = SLOT(fs, f_off[F_STREAMS]);
    int has = PyDict_Contains(streams, sid_obj);
    if (has < 0) return -1;
    return has ? 0 : PyDict_SetItem(streams, sid_obj, SLOT(fs, f_off[F_INITIAL]));
}

/* h[key] as a str, or NULL when absent; -1 error, -2 not a str */
static int header(PyObject *h, PyObject *key, PyObject **out) {
    *out = PyDict_GetItemWithError(h, key);
    if (*out == NULL) return PyErr_Occurred() ? -1 : 0;
    return PyUnicode_CheckExact(*out) ? 0 : -2;
}

/* conn.dirs[d] when a frame of `length` bytes can begin there in C: at a frame boundary
 * with nothing pending (D.plain, no header block open), at direction offset `offset`,
 * within the largest frame size the peer allows; its offset and frame count into *base
 * and *dframes. NULL otherwise (no error set). */
static PyObject *frame_dir(PyObject *conn, ctx_t *ctx, long long d, long long offset, long long length,
                           long long *base, long long *dframes) {
    long long max_len;
    if (ctx_get(conn, s_dirs, &ctx->dirs) < 0) return NULL;
    PyObject *dirs = ctx->dirs;
    if (!PyTuple_CheckExact(dirs) || PyTuple_GET_SIZE(dirs) != 2) return NULL;
    PyObject *D = PyTuple_GET_ITEM(dirs, d);
    if (Py_TYPE(D) != dir_type || SLOT(D, d_off[D_PLAIN]) != Py_True || SLOT(D, d_off[D_BLOCK]) != Py_None)
        return NULL;
    if (slot_ll(D, d_off[D_BASE], base) < 0 || *base != offset) return NULL;
    if (slot_ll(D, d_off[D_FRAMES], dframes) < 0) return NULL;
    PyObject *max_known = SLOT(D, d_off[D_MAX_KNOWN]);
    if (max_known == Py_True) {
        if (slot_ll(D, d_off[D_MAX_LEN], &max_len) < 0 || length > max_len) return NULL;
    } else if (max_known != Py_False) {
        return NULL;
    }
    return D;
}

/* _block on a header block with unknown indexes: conn._unknown_block(ts, sid, d, blk)
 * (its headers_unknown event; Python code that reads none of what a streak holds). */
static int unknown_block(PyObject *conn, PyObject *ts, PyObject *sid_obj, long long d, PyObject *blk) {
    static PyObject *name;
    if (name == NULL && (name = PyUnicode_InternFromString("_unknown_block")) == NULL) return -1;
    PyObject *dd = PyLong_FromLongLong(d);
    if (dd == NULL) return -1;
    Py_INCREF(blk); /* (borrowed from the decoder's cache) */
    PyObject *args[] = {conn, ts, sid_obj, dd, blk};
    PyObject *r = PyObject_VectorcallMethod(name, args, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(blk);
    Py_DECREF(dd);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* ... and on the stream: its headers are not all known; with `probe` (its first headers,
 * without a content-type: set_content_type had nothing to do)
 * Stream.probe_hidden_bodies(), which touches only the stream. */
static int hidden_headers(PyObject *st, int probe) {
    static PyObject *name;
    if (slot_put(st, x_off[X_HEADERS_KNOWN], (Py_INCREF(Py_False), Py_False)) < 0) return -1;
    if (!probe) return 0;
    if (name == NULL && (name = PyUnicode_InternFromString("probe_hidden_bodies")) == NULL) return -1;
    PyObject *r = PyObject_CallMethodNoArgs(st, name);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* A whole HEADERS frame b[0:n] of direction d (D: its _Dir, plain, at `base`), with
 * END_HEADERS and without padding or priority, and its decoded header block `blk`
 * (without an HPACK error; unknown indexes are reported): what H2Connection._parse +
 * _block_decoded (+ _end_stream, _finalize) do with it when it opens a request stream or
 * brings a stream's response headers or trailers, the orientation being final and in
 * agreement. 1 handled; 0 not this case, nothing changed; -1 error */
static int headers_apply(PyObject *conn, ctx_t *ctx, long long d, const unsigned char *b, Py_ssize_t n,
                         PyObject *ts, PyObject *D, long long base, long long dframes, PyObject *blk) {
    PyObject *lists[S_N];
    unsigned int flags = b[4];
    int end = flags & 0x01;
    unsigned long sid = be32(b + 5);
    if (Py_TYPE(blk) != block_type) return 0;
    long long unknown; /* header fields behind indexes this side never saw (a connection seen from its middle) */
    if (slot_ll(blk, b_off[B_UNKNOWN], &unknown) < 0 || unknown < 0 || SLOT(blk, b_off[B_ERROR]) != Py_None) return 0;
    PyObject *h = SLOT(blk, b_off[B_AS_DICT_MEMO]);
    if (h == NULL || !PyDict_CheckExact(h)) return 0;

    if (ctx_conn(conn, ctx) < 0) return 0;
    PyObject *method, *status, *ct, *path;
    int r;
    if ((r = header(h, h_method, &method)) < 0 || (r = header(h, h_status, &status)) < 0 ||
        (r = header(h, h_content_type, &ct)) < 0 || (r = header(h, h_path, &path)) < 0)
        return r == -1 ? -1 : 0;
    int grpc_status = PyDict_Contains(h, h_grpc_status);
    if (grpc_status < 0) return -1;
    long long client_dir = ctx->flipped == Py_True;
    /* _orient: the side that sent :method is the client, :status the server */
    long long client = method != NULL ? d : (status != NULL ? 1 - d : -1);
    if (client >= 0 && client != client_dir) return 0;
    if (status != NULL && PyUnicode_GET_LENGTH(status) > 0 && PyUnicode_READ_CHAR(status, 0) == '1') return 0; /* 1xx */
    int web = 0, grpc = 0;
    if (ct != NULL && (grpc = is_grpc_ct(ct, &web)) < 0) return -1;
    if (ctx_get(conn, s_streams, &ctx->streams) < 0 || !PyDict_CheckExact(ctx->streams)) return 0;
    if (ctx_get(conn, s_flows, &ctx->flows) < 0 || !flows_ok(ctx)) return 0;
    if (ctx->sid_obj == NULL || ctx->sid != sid) {
        Py_CLEAR(ctx->sid_obj);
        ctx->sid_obj = PyLong_FromUnsignedLong(sid);
        if (ctx->sid_obj == NULL) return -1;
        ctx->sid = sid;
    }
    PyObject *sid_obj = ctx->sid_obj;
    long long end_off = base + n;
    PyObject *st = PyDict_GetItemWithError(ctx->streams, sid_obj);
    if (st == NULL && PyErr_Occurred()) return -1;
    int is_resp, first;

    if (st == NULL) {
        /* a new request stream (a stream opened otherwise is left to Python) */
        if (method == NULL || status != NULL) return 0;
        int closed = PyDict_Contains(ctx->closed, sid_obj);
        if (closed != 0) return closed < 0 ? -1 : 0;
        /* _may_open */
        long long last;
        if (slot_ll_obj(PyList_GET_ITEM(ctx->last_opened, sid & 1), &last) < 0) return 0;
        if (last) {
            long long jump = (long long)sid - last;
            if (!(jump > 0 && jump <= (ctx->lossy == Py_True ? 2 * 1000000 : 2 * 64))) return 0;
        }
        if (PyList_GET_ITEM(ctx->max_conc, 1 - d) != Py_None) return 0; /* _check_concurrency */
        is_resp = d != client_dir;
        if (ct != NULL && !grpc && is_resp) return 0; /* maybe text/event-stream */
        /* a KServe ModelInfer request: Stream.set_content_type keeps its body's start */
        if (grpc && path != NULL &&
            (PyUnicode_CompareWithASCIIString(path, "/inference.GRPCInferenceService/ModelInfer") == 0 ||
             PyUnicode_CompareWithASCIIString(path, "/inference.GRPCInferenceService/ModelStreamInfer") == 0))
            return 0;
        /* ---- from here on the frame is ours ---- */
        if (unknown && unknown_block(conn, ts, sid_obj, d, blk) < 0) return -1;
        st = new_stream(sid_obj);
        if (st == NULL) return -1;
        int ok = Py_TYPE(st) == stream_type && SLOT(st, x_off[X_MID]) == Py_False;
        for (int i = 0; ok && i < S_N; i++) ok = (lists[i] = pair_slot(st, i)) != NULL;
        if (!ok) {
            Py_DECREF(st);
            PyErr_SetString(PyExc_RuntimeError, "Stream() is not what _speedups expects");
            return -1;
        }
        int ret = -1;
        long long first_opened;
        if (slot_put(st, x_off[X_OPENER], PyLong_FromLongLong(d)) < 0) goto new_out;
        if (slot_ll_obj(PyList_GET_ITEM(ctx->first_opened, sid & 1), &first_opened) < 0) {
            PyErr_SetString(PyExc_RuntimeError, "first_opened changed type");
            goto new_out;
        }
        if (!first_opened) {
            Py_INCREF(sid_obj);
            if (list_set(ctx->first_opened, sid & 1, sid_obj) < 0) goto new_out;
        }
        Py_INCREF(sid_obj);
        if (list_set(ctx->last_opened, sid & 1, sid_obj) < 0) goto new_out;
        if (PyDict_SetItem(ctx->streams, sid_obj, st) < 0) goto new_out;
        if (flow_open(PyTuple_GET_ITEM(ctx->flows, 0), sid_obj) < 0 ||
            flow_open(PyTuple_GET_ITEM(ctx->flows, 1), sid_obj) < 0)
            goto new_out;
        Py_INCREF(h);
        if (list_set(lists[S_HDR], d, h) < 0) goto new_out;
        Py_INCREF(ts);
        if (list_set(lists[S_HDR_TS], d, ts) < 0) goto new_out;
        if (grpc) { /* Stream.set_content_type on a fresh stream */
            for (int k = 0; k < 2; k++) {
                Py_INCREF(v_grpc);
                if (list_set(lists[S_MODE], k, v_grpc) < 0) goto new_out;
                if (list_set(lists[S_SPLITTER], k, new_splitter(web)) < 0) goto new_out;
            }
        }
        if (unknown && hidden_headers(st, ct == NULL) < 0) goto new_out;
        if (end && grpc_status && is_resp && slot_put(st, x_off[X_TRAILERS_ONLY], (Py_INCREF(Py_True), Py_True)) < 0)
            goto new_out;
        ret = headers_frame_done(ctx, st, lists, D, d, dframes, end_off, end, ts, sid_obj);
    new_out:
        Py_DECREF(st);
        return ret;
    }

    /* response headers or trailers of a known stream */
    if (Py_TYPE(st) != stream_type) return 0;
    for (int i = 0; i < S_N; i++) {
        if ((lists[i] = pair_slot(st, i)) == NULL) return 0;
    }
    if (end && !end_stream_ok(ctx, st)) return 0;
    PyObject *nframes = PyList_GET_ITEM(lists[S_DATA_FRAMES], d);
    if (!PyLong_CheckExact(nframes)) return 0;
    first = PyList_GET_ITEM(lists[S_HDR], d) == Py_None &&
            (status != NULL || method != NULL || PyLong_AsLongLong(nframes) == 0);
    int trailers_only = 0;
    if (first) {
        is_resp = status != NULL || d != client_dir;
        /* Stream.set_content_type must have nothing to do */
        if (ct != NULL) {
            if (grpc) {
                if (!is_grpc_mode(PyList_GET_ITEM(lists[S_MODE], 0)) || !is_grpc_mode(PyList_GET_ITEM(lists[S_MODE], 1)))
                    return 0;
            } else if (is_resp) {
                return 0; /* maybe text/event-stream */
            }
        }
        trailers_only = end && grpc_status && is_resp;
    } else if (PyList_GET_ITEM(lists[S_TRAILERS], d) != Py_None) {
        return 0; /* more trailers: merged by Python */
    }
    /* ---- from here on the frame is ours ---- */
    Py_INCREF(st); /* do_end_stream may drop conn.streams' reference */
    int ret = -1;
    if (unknown && (unknown_block(conn, ts, sid_obj, d, blk) < 0 || hidden_headers(st, first && ct == NULL) < 0))
        goto old_out;
    Py_INCREF(h);
    if (list_set(lists[first ? S_HDR : S_TRAILERS], d, h) < 0) goto old_out;
    if (first) {
        Py_INCREF(ts);
        if (list_set(lists[S_HDR_TS], d, ts) < 0) goto old_out;
        if (trailers_only && slot_put(st, x_off[X_TRAILERS_ONLY], (Py_INCREF(Py_True), Py_True)) < 0) goto old_out;
    }
    ret = headers_frame_done(ctx, st, lists, D, d, dframes, end_off, end, ts, sid_obj);
old_out:
    Py_DECREF(st);
    return ret;
}

/* try_headers: headers_apply on the frame's decoded block. A block the direction's
 * decoder holds in its cache (decoded before, changing nothing) is read from there; one
 * not decoded yet is decoded here (TolerantDecoder.decode: the HPACK state moves on, as
 * _parse would move it), then applied in C, or, when that is not the fast case, handed
 * back decoded (*decoded, return 2) for _headers_decoded to apply in Python: once
 * decoded, a block cannot go to the pure-Python _parse again. The frame's conditions are
 * those of _parse's whole-HEADERS branch (END_HEADERS, no padding or priority, the
 * direction plain). 1 handled; 0 not this case, nothing changed; 2 decoded, to apply; -1
 * error. */
static int try_headers(PyObject *conn, ctx_t *ctx, long long d, const unsigned char *b, Py_ssize_t n,
                       long long offset, PyObject *ts, PyObject **decoded) {
    static PyObject *s_decode, *s_as_dict;
    if (s_decode == NULL && (s_decode = PyUnicode_InternFromString("decode")) == NULL) return -1;
    if (s_as_dict == NULL && (s_as_dict = PyUnicode_InternFromString("as_dict")) == NULL) return -1;
    if ((d != 0 && d != 1) || n < 9) return 0;
    long long length = n - 9;
    if ((long long)(((unsigned long)b[0] << 16) | ((unsigned long)b[1] << 8) | b[2]) != length || b[3] != 1) return 0;
    unsigned int flags = b[4];
    if ((flags & ~0x2Du) || (flags & 0x2C) != 0x04) return 0; /* END_HEADERS [END_STREAM] only */
    unsigned long sid = be32(b + 5);
    if (sid == 0 || (sid & 0x80000000UL)) return 0;

    long long base, dframes;
    PyObject *D = frame_dir(conn, ctx, d, offset, length, &base, &dframes);
    if (D == NULL) return 0;
    PyObject *dec = SLOT(D, d_off[D_HPACK]);
    long long gen, cache_gen;
    if (dec == NULL || Py_TYPE(dec) != decoder_type) return 0;
    if (slot_ll(dec, h_off[H_GEN], &gen) < 0 || slot_ll(dec, h_off[H_CACHE_GEN], &cache_gen) < 0) return 0;
    PyObject *cache = SLOT(dec, h_off[H_CACHE]);
    if (cache == NULL || !PyDict_CheckExact(cache)) return 0;
    PyObject *key = PyBytes_FromStringAndSize((const char *)b + 9, (Py_ssize_t)length);
    if (key == NULL) return -1;
    PyObject *blk = gen == cache_gen ? PyDict_GetItemWithError(cache, key) : NULL; /* borrowed: the cache keeps it */
    if (blk != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return blk == NULL ? -1 : headers_apply(conn, ctx, d, b, n, ts, D, base, dframes, blk);
    }
    if (decoded == NULL) {
        Py_DECREF(key);
        return 0;
    }
    /* ---- from here on the frame is ours (in C, or decoded for _headers_decoded) ---- */
    blk = PyObject_CallMethodOneArg(dec, s_decode, key);
    Py_DECREF(key);
    if (blk == NULL) return -1;
    int r = 0;
    if (Py_TYPE(blk) == block_type) { /* _block reads as_dict() of every block (it is kept on it) */
        PyObject *h = PyObject_CallMethodNoArgs(blk, s_as_dict);
        r = h == NULL ? -1 : headers_apply(conn, ctx, d, b, n, ts, D, base, dframes, blk);
        Py_XDECREF(h);
    }
    if (r == 0) {
        *decoded = blk;
        return 2;
    }
    Py_DECREF(blk);
    return r;
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
    ctx_t ctx = CTX_INIT;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    int r = try_fast_raw(conn, &ctx, d, b, n, offset, ts, frame_no);
    long long fno;
    /* an event-stream frame (a TLS record's plaintext, say): try_sse_frame makes its own
     * checks (feed_run checks the "data:" first, to flush its streaks only then) */
    if (r == 0 && slot_ll(chunk, c_off[C_FRAME_NO], &fno) == 0) r = try_sse_frame(conn, &ctx, d, b, n, offset, ts, fno);
    ctx_clear(&ctx);
    return r;
}

/* Streaks: fast DATA frames of a run kept in C. After try_fast_raw handled a DATA frame of
 * (direction d, stream sid), the values each later fast frame of that stream and direction
 * changes are kept in C and written back to the Python objects once, when the streak
 * ends: per stream (message index, counters, last times and offset, its flow-control
 * window; a streak_t), and per direction what all its frames share (the direction's
 * offset and frame count, the connection's flow-control window; a lane_t). Concurrent
 * requests interleave their streams' frames, and one write often carries frames of
 * several streams: a streak per (d, sid), up to STREAKS at once, so each stream's frames
 * stay in C however they alternate.
 * Everything is written back before any other code reads the objects: the lanes before
 * try_fast_raw or try_headers, a stream's streaks before those run on the same stream
 * (they read and end it), all of it before Python code runs and at the end of the run.
 * No Python code runs while a streak is active, so nothing can observe the values in
 * between; what the fast case checks and does not change (D.plain, the splitter's state,
 * the stream's presence, flow-control knowledge and blocks) stays valid meanwhile: only
 * Python code or a frame of that stream (which ends its streak first) changes them. */
#define STREAKS 16

typedef struct { /* a direction's shared values while its streaks run */
    int active, dirty;
    PyObject *D, *fs; /* borrowed: held by conn.dirs / conn.flows */
    long long base, dframes;
    int max_known;
    long long max_len;
    int known, blocked_conn;
    long long fs_conn;
} lane_t;

typedef struct { /* one stream's values in one direction */
    int active, dirty;
    long long d;
    unsigned long sid;
    PyObject *sid_obj, *st; /* owned */
    PyObject *fs;           /* borrowed: the direction's FlowState (conn.flows holds it) */
    PyObject *lists[S_N];   /* borrowed: st's pair lists */
    long long idx, data_frames, data_bytes, last_ts, last_off;
    int known, has_w, blocked_sid;
    long long w;
    unsigned long long used; /* when its last frame came (the least recent one makes room) */
} streak_t;

typedef struct {
    lane_t lane[2];
    streak_t k[STREAKS];
    unsigned long long clock;
} streaks_t;

/* Load direction d's shared values from the objects: 1 loaded, 0 not the fast case. */
static int lane_load(lane_t *L, ctx_t *ctx, PyObject *conn, long long d) {
    L->active = L->dirty = 0;
    if (ctx_get(conn, s_dirs, &ctx->dirs) < 0 || ctx_get(conn, s_flows, &ctx->flows) < 0) return 0;
    PyObject *dirs = ctx->dirs, *flows = ctx->flows;
    if (!PyTuple_CheckExact(dirs) || PyTuple_GET_SIZE(dirs) != 2) return 0;
    if (!PyTuple_CheckExact(flows) || PyTuple_GET_SIZE(flows) != 2) return 0;
    PyObject *D = PyTuple_GET_ITEM(dirs, d), *fs = PyTuple_GET_ITEM(flows, d);
    if (Py_TYPE(D) != dir_type || SLOT(D, d_off[D_PLAIN]) != Py_True || Py_TYPE(fs) != flow_type) return 0;
    if (slot_ll(D, d_off[D_BASE], &L->base) < 0 || slot_ll(D, d_off[D_FRAMES], &L->dframes) < 0) return 0;
    PyObject *max_known = SLOT(D, d_off[D_MAX_KNOWN]);
    if (max_known != Py_True && max_known != Py_False) return 0;
    L->max_known = max_known == Py_True;
    if (L->max_known && slot_ll(D, d_off[D_MAX_LEN], &L->max_len) < 0) return 0;
    PyObject *known = SLOT(fs, f_off[F_KNOWN]);
    if (known != Py_True && known != Py_False) return 0;
    L->known = known == Py_True;
    if (L->known) {
        PyObject *blocked = SLOT(fs, f_off[F_BLOCKED]), *fs_streams = SLOT(fs, f_off[F_STREAMS]);
        if (blocked == NULL || !PyDict_CheckExact(blocked) || fs_streams == NULL || !PyDict_CheckExact(fs_streams))
            return 0;
        if (slot_ll(fs, f_off[F_CONN], &L->fs_conn) < 0) return 0;
        int bc = PyDict_Contains(blocked, zero);
        if (bc < 0) { PyErr_Clear(); return 0; }
        L->blocked_conn = bc;
    }
    L->D = D;
    L->fs = fs;
    L->active = 1;
    return 1;
}

/* Write direction d's shared values back; the lane ends. 0 ok, -1 error. */
static int lane_flush(lane_t *L) {
    int was = L->active && L->dirty;
    L->active = L->dirty = 0;
    if (!was) return 0;
    if (slot_put(L->D, d_off[D_FRAMES], PyLong_FromLongLong(L->dframes)) < 0) return -1;
    if (slot_put(L->D, d_off[D_BASE], PyLong_FromLongLong(L->base)) < 0) return -1;
    if (L->known && slot_put(L->fs, f_off[F_CONN], PyLong_FromLongLong(L->fs_conn)) < 0) return -1;
    return 0;
}

static void streak_drop(streak_t *k) {
    k->active = k->dirty = 0;
    Py_CLEAR(k->sid_obj);
    Py_CLEAR(k->st);
}

/* Write a stream's values back; the streak ends. 0 ok, -1 error. */
static int streak_flush(streak_t *k) {
    int was = k->active && k->dirty;
    int ret = 0;
    if (was) {
        long long d = k->d;
        PyObject *ts = NULL;
        ret = -1;
        if (list_set(k->lists[S_MSGS], d, PyLong_FromLongLong(k->idx)) < 0) goto out;
        if (list_set(k->lists[S_DATA_FRAMES], d, PyLong_FromLongLong(k->data_frames)) < 0) goto out;
        if (list_set(k->lists[S_DATA_BYTES], d, PyLong_FromLongLong(k->data_bytes)) < 0) goto out;
        if (list_set(k->lists[S_LAST_OFF], d, PyLong_FromLongLong(k->last_off)) < 0) goto out;
        if ((ts = PyLong_FromLongLong(k->last_ts)) == NULL) goto out;
        Py_INCREF(ts);
        if (list_set(k->lists[S_LAST_MSG_TS], d, ts) < 0) { Py_DECREF(ts); goto out; }
        if (list_set(k->lists[S_LAST_DATA_TS], d, ts) < 0) goto out;
        if (k->known && k->has_w && dict_put_ll(SLOT(k->fs, f_off[F_STREAMS]), k->sid_obj, k->w) < 0) goto out;
        ret = 0;
    }
out:
    streak_drop(k);
    return ret;
}

/* Write everything back: every streak, then both lanes. 0 ok, -1 error. */
static int streaks_flush_all(streaks_t *S) {
    int ret = 0;
    for (int i = 0; i < STREAKS; i++) {
        streak_t *k = &S->k[i];
        if (streak_flush(k) < 0) ret = -1;
    }
    if (lane_flush(&S->lane[0]) < 0) ret = -1;
    if (lane_flush(&S->lane[1]) < 0) ret = -1;
    return ret;
}

/* Before try_fast_raw / try_headers on stream sid: the lanes and that stream's streaks
 * written back (those read them; a frame of the stream may end it). */
static int streaks_flush_for(streaks_t *S, unsigned long sid) {
    for (int i = 0; i < STREAKS; i++) {
        streak_t *k = &S->k[i];
        if (k->active && k->sid == sid && streak_flush(k) < 0) return -1;
    }
    if (lane_flush(&S->lane[0]) < 0 || lane_flush(&S->lane[1]) < 0) return -1;
    return 0;
}

static streak_t *streak_find(streaks_t *S, long long d, unsigned long sid) {
    for (int i = 0; i < STREAKS; i++) {
        streak_t *k = &S->k[i];
        if (k->active && k->sid == sid && k->d == d) return k;
    }
    return NULL;
}

/* Start a streak after try_fast_raw handled a DATA frame of (d, sid) that did not end
 * the stream; none when a value is not what the fast case expects (the frames then go
 * through try_fast_raw one by one). 0 ok (started or not), -1 error. */
static int streak_start(streaks_t *S, ctx_t *ctx, PyObject *conn, long long d, unsigned long sid) {
    lane_t *L = &S->lane[d];
    if (!L->active && !lane_load(L, ctx, conn, d)) return 0;
    if (ctx_get(conn, s_streams, &ctx->streams) < 0 || !PyDict_CheckExact(ctx->streams)) return 0;
    streak_t *k = NULL;
    for (int i = 0; i < STREAKS; i++) { /* a free slot, else the least recently used */
        streak_t *c = &S->k[i];
        if (!c->active) { k = c; break; }
        if (k == NULL || c->used < k->used) k = c;
    }
    if (k->active && streak_flush(k) < 0) return -1;
    PyObject *sid_obj = PyLong_FromUnsignedLong(sid);
    if (sid_obj == NULL) return -1;
    PyObject *st = PyDict_GetItemWithError(ctx->streams, sid_obj);
    if (st == NULL || Py_TYPE(st) != stream_type) {
        PyErr_Clear();
        Py_DECREF(sid_obj);
        return 0;
    }
    for (int i = 0; i < S_N; i++) {
        if ((k->lists[i] = pair_slot(st, i)) == NULL) { Py_DECREF(sid_obj); return 0; }
    }
    if (list_ll(k->lists[S_MSGS], d, &k->idx) < 0 || list_ll(k->lists[S_DATA_FRAMES], d, &k->data_frames) < 0 ||
        list_ll(k->lists[S_DATA_BYTES], d, &k->data_bytes) < 0 || list_ll(k->lists[S_LAST_OFF], d, &k->last_off) < 0 ||
        list_ll(k->lists[S_LAST_MSG_TS], d, &k->last_ts) < 0) {
        Py_DECREF(sid_obj);
        return 0;
    }
    k->known = L->known;
    k->has_w = 0;
    k->blocked_sid = 0;
    if (k->known) {
        int bs = PyDict_Contains(SLOT(L->fs, f_off[F_BLOCKED]), sid_obj);
        if (bs < 0) { PyErr_Clear(); Py_DECREF(sid_obj); return 0; }
        k->blocked_sid = bs;
        PyObject *w_obj = PyDict_GetItemWithError(SLOT(L->fs, f_off[F_STREAMS]), sid_obj);
        if (w_obj == NULL && PyErr_Occurred()) { PyErr_Clear(); Py_DECREF(sid_obj); return 0; }
        if (w_obj != NULL) {
            if (slot_ll_obj(w_obj, &k->w) < 0) { Py_DECREF(sid_obj); return 0; }
            k->has_w = 1;
        }
    }
    Py_INCREF(st);
    k->st = st;
    k->fs = L->fs;
    k->sid_obj = sid_obj;
    k->d = d;
    k->sid = sid;
    k->used = ++S->clock;
    k->dirty = 0;
    k->active = 1;
    return 0;
}

/* One more DATA frame (b[0:n], at direction offset `offset`) for streak k of lane L: 1
 * applied (locals and the packed message), 0 not the fast case (nothing changed), -1 error. */
static int streak_row(lane_t *L, streak_t *k, ctx_t *ctx, const unsigned char *b, Py_ssize_t n,
                      long long offset, long long ts) {
    if (n < 14 || k->known != L->known) return 0;
    long long length = n - 9;
    unsigned long lt = be32(b);
    unsigned int flags = b[4];
    unsigned long sid = be32(b + 5);
    unsigned int gflag = b[9];
    unsigned long glen = be32(b + 10);
    if (sid != k->sid || lt != ((unsigned long)length << 8) || (flags & 0x09)) return 0;
    if (gflag >= 0x80 || (long long)glen + 5 != length) return 0;
    if (offset != L->base || (L->max_known && length > L->max_len)) return 0;
    if (L->known) {
        if (L->fs_conn - length <= 0 && !L->blocked_conn) return 0;
        if (k->has_w && k->w - length <= 0 && !k->blocked_sid) return 0;
    }
    long long off_end = L->base + n;
    long long row_vals[MSG_NCOLS];
    row_vals[MSG_STREAM_ID] = (long long)sid;
    row_vals[MSG_DIRECTION] = k->d;
    row_vals[MSG_INDEX] = k->idx;
    row_vals[MSG_TS_NS] = ts;
    row_vals[MSG_SIZE] = (long long)glen;
    row_vals[MSG_FLAGS] = gflag == 1;
    row_vals[MSG_END_OFFSET] = off_end;
    if (msg_append(ctx->msgs, row_vals) < 0) return -1;
    k->idx += 1;
    k->data_frames += 1;
    k->data_bytes += length;
    k->last_ts = ts;
    k->last_off = off_end;
    L->dframes += 1;
    L->base = off_end;
    if (L->known) {
        L->fs_conn -= length;
        if (k->has_w) k->w -= length;
    }
    k->dirty = L->dirty = 1;
    return 1;
}

/* A run's payloads lie scattered over the capture batch's buffer (other connections'
 * packets in between), so reading a row's frame header is mostly a cache miss: ask for
 * the payload of a row a few rows ahead while this one is handled. */
#define PREFETCH_ROWS 8
static inline void prefetch_payload(const unsigned char *buf, Py_ssize_t len, const long long *row) {
#if defined(__GNUC__) || defined(__clang__)
    if (row[RUN_START] >= 0 && row[RUN_START] < len) __builtin_prefetch(buf + row[RUN_START]);
#else
    (void)buf; (void)len; (void)row;
#endif
}

/* The DATA frame b[0:n] of direction d through its streak, when it has one: 1 applied,
 * 0 not (nothing changed), -1 error. */
static int streak_frame(streaks_t *S, ctx_t *ctx, PyObject *conn, long long d, const unsigned char *b,
                        Py_ssize_t n, long long offset, long long ts) {
    if (n < 14) return 0;
    streak_t *k = streak_find(S, d, be32(b + 5));
    if (k == NULL) return 0;
    lane_t *L = &S->lane[d];
    if (!L->active && !lane_load(L, ctx, conn, d)) return 0;
    if (ctx->msgs == NULL) {
        if (ctx_get(conn, s_messages, &ctx->msgs) < 0) return 0;
        if (!PyByteArray_CheckExact(ctx->msgs)) { Py_CLEAR(ctx->msgs); return 0; }
    }
    int r = streak_row(L, k, ctx, b, n, offset, ts);
    if (r == 1) k->used = ++S->clock;
    return r;
}

/* conn.dirs[d] while a DATA frame begun in an earlier row still has data bytes to come
 * (D.plain False: in sync, nothing buffered or marked, no header block open), at
 * direction offset `offset`; its offset and those bytes into *base and *left. NULL
 * otherwise (no error set). */
static PyObject *split_dir(PyObject *conn, ctx_t *ctx, long long d, long long offset, long long *base,
                           long long *left) {
    if (ctx_get(conn, s_dirs, &ctx->dirs) < 0) return NULL;
    PyObject *dirs = ctx->dirs;
    if (!PyTuple_CheckExact(dirs) || PyTuple_GET_SIZE(dirs) != 2) return NULL;
    PyObject *D = PyTuple_GET_ITEM(dirs, d);
    if (Py_TYPE(D) != dir_type || SLOT(D, d_off[D_PLAIN]) != Py_False || SLOT(D, d_off[D_SYNCED]) != Py_True ||
        SLOT(D, d_off[D_BLOCK]) != Py_None)
        return NULL;
    if (slot_ll(D, d_off[D_DATA_LEFT], left) < 0 || *left <= 0) return NULL;
    if (slot_ll(D, d_off[D_BASE], base) < 0 || *base != offset) return NULL;
    PyObject *buf = SLOT(D, d_off[D_BUF]), *marks = SLOT(D, d_off[D_MARKS]);
    if (buf == NULL || !PyByteArray_CheckExact(buf) || PyByteArray_GET_SIZE(buf) != 0) return NULL;
    if (marks == NULL || !PyList_CheckExact(marks) || PyList_GET_SIZE(marks) != 0) return NULL;
    return D;
}

/* sp is a GrpcSplitter reading plainly: alive, not probing, keeping no trailer. */
static int splitter_plain(PyObject *sp) {
    return (PyObject *)Py_TYPE(sp) == grpc_splitter_type && SLOT(sp, g_off[G_DEAD]) == Py_False &&
           SLOT(sp, g_off[G_PROBING]) == Py_False && SLOT(sp, g_off[G_KEEP_TRAILER]) == Py_False;
}

/* A row wholly inside the payload of a DATA frame begun in an earlier row (a frame split
 * across segments: a large message) and inside one gRPC message of it, as
 * H2Connection.feed and _parse stream such bytes: the direction's and the splitter's
 * counts of what is left go down, its offset moves on, nothing else changes (the
 * message, the frame's end and its flow control come with the row that completes them,
 * in Python). 1 done, 0 not that case (nothing changed), -1 error. */
static int try_data_middle(PyObject *conn, ctx_t *ctx, long long d, Py_ssize_t n, long long offset) {
    long long base, left, sp_left = 0, flag;
    if (n <= 0) return 0;
    PyObject *D = split_dir(conn, ctx, d, offset, &base, &left);
    if (D == NULL || left <= n) return 0;
    PyObject *st = SLOT(D, d_off[D_DATA_STREAM]), *sp = NULL;
    if (st == NULL) return 0;
    if (st != Py_None) {
        if (Py_TYPE(st) != stream_type) return 0;
        PyObject *pair = pair_slot(st, S_SPLITTER);
        if (pair == NULL) return 0;
        sp = PyList_GET_ITEM(pair, d);
        if (sp == Py_None) {
            sp = NULL;
        } else {
            if ((PyObject *)Py_TYPE(sp) != grpc_splitter_type) return 0;
            PyObject *dead = SLOT(sp, g_off[G_DEAD]);
            if (dead == Py_True) {
                sp = NULL; /* a splitter that gave up takes no more bytes */
            } else {
                if (dead != Py_False || SLOT(sp, g_off[G_PROBING]) != Py_False) return 0;
                if (slot_ll(sp, g_off[G_LEFT], &sp_left) < 0 || sp_left <= n) return 0;
                if (slot_ll(sp, g_off[G_FLAG], &flag) < 0) return 0;
                PyObject *keep = SLOT(sp, g_off[G_KEEP_TRAILER]);
                /* a kept trailer's bytes are collected: Python */
                if (keep != Py_False && (keep != Py_True || (flag & 0x80))) return 0;
            }
        }
    }
    if (sp != NULL && slot_put(sp, g_off[G_LEFT], PyLong_FromLongLong(sp_left - n)) < 0) return -1;
    if (slot_put(D, d_off[D_DATA_LEFT], PyLong_FromLongLong(left - n)) < 0) return -1;
    if (slot_put(D, d_off[D_BASE], PyLong_FromLongLong(base + n)) < 0) return -1;
    return 1;
}

/* A row whose first bytes end a DATA frame begun in an earlier row (the last segment of
 * a large message), when they end its gRPC message too, as H2Connection.feed, _parse,
 * GrpcSplitter.feed, _messages and _data_end do: the message's row, the stream's message
 * and DATA counters, the flow-control windows (no block opening: Python), the direction
 * back at a frame boundary (D.plain: the frames after it in the row go on in C), the
 * stream's end on END_STREAM. Not for a padded frame, a probing splitter or a kept
 * (grpc-web) trailer. Never
 * while direction d's lane runs (that needs D.plain: no frame in progress).
 * 1 done (*taken: the frame's bytes), 0 not that case (nothing changed), -1 error. */
static int try_data_end(PyObject *conn, ctx_t *ctx, const streaks_t *S, long long d, Py_ssize_t n, long long offset,
                        long long t, Py_ssize_t *taken) {
    PyObject *lists[S_N];
    long long base, left, pad_left, sp_left, flag, size, sid, dflags, dlen, dpayload, idx, nframes, nbytes;
    if (n <= 0) return 0;
    PyObject *D = split_dir(conn, ctx, d, offset, &base, &left);
    if (D == NULL || left > n) return 0;
    if (slot_ll(D, d_off[D_PAD_LEFT], &pad_left) < 0 || pad_left != 0) return 0;
    if (slot_ll(D, d_off[D_DATA_SID], &sid) < 0 || slot_ll(D, d_off[D_DATA_FLAGS], &dflags) < 0 ||
        slot_ll(D, d_off[D_DATA_LEN], &dlen) < 0 || slot_ll(D, d_off[D_DATA_PAYLOAD], &dpayload) < 0)
        return 0;
    if (dflags & 0x08) return 0; /* PADDED */
    int end = dflags & 0x01;     /* END_STREAM: the stream's direction ends (do_end_stream) */
    /* the frame began in Python code, which ended every streak; one of the stream's
     * other direction begun since holds its values in C: Python */
    for (int i = 0; i < STREAKS; i++) {
        if (S->k[i].active && (long long)S->k[i].sid == sid) return 0;
    }
    PyObject *st = SLOT(D, d_off[D_DATA_STREAM]);
    if (st == NULL || Py_TYPE(st) != stream_type) return 0;
    for (int i = 0; i < S_N; i++) {
        if ((lists[i] = pair_slot(st, i)) == NULL) return 0;
    }
    /* the splitter: inside one message that ends with the frame */
    PyObject *sp = PyList_GET_ITEM(lists[S_SPLITTER], d);
    if (!splitter_plain(sp) || slot_ll(sp, g_off[G_LEFT], &sp_left) < 0 || sp_left != left) return 0;
    if (slot_ll(sp, g_off[G_FLAG], &flag) < 0 || (flag != 0 && flag != 1)) return 0;
    if (slot_ll(sp, g_off[G_SIZE], &size) < 0) return 0;
    PyObject *trailer = SLOT(sp, g_off[G_TRAILER]);
    if (trailer == NULL || !PyByteArray_CheckExact(trailer) || PyByteArray_GET_SIZE(trailer) != 0) return 0;
    /* _messages settles the orientation while it is not final: Python */
    if (ctx_conn(conn, ctx) < 0) return 0;
    if (ctx_get(conn, s_messages, &ctx->msgs) < 0 || !PyByteArray_CheckExact(ctx->msgs)) return 0;
    PyObject *idx_obj = PyList_GET_ITEM(lists[S_MSGS], d);
    if (slot_ll_obj(idx_obj, &idx) < 0) return 0;
    if (list_ll(lists[S_DATA_FRAMES], d, &nframes) < 0 || list_ll(lists[S_DATA_BYTES], d, &nbytes) < 0) return 0;
    int other = PyObject_IsTrue(PyList_GET_ITEM(lists[S_MSGS], 1 - d));
    if (other < 0) return -1;
    /* flow control, as FlowState.consume; a window reaching zero opens a block (unless
     * the stream ends): Python */
    PyObject *sid_obj = PyLong_FromLongLong(sid);
    if (sid_obj == NULL) return -1;
    flow_t flow;
    if (!flow_check(conn, ctx, d, sid_obj, dpayload, end, &flow) ||
        (end && (ctx_get(conn, s_streams, &ctx->streams) < 0 || !PyDict_CheckExact(ctx->streams) ||
                 !end_stream_ok(ctx, st)))) {
        Py_DECREF(sid_obj);
        return 0;
    }

    /* ---- from here on the row's first bytes are ours ---- */
    int ret = -1;
    long long end_off = base + left;
    Py_INCREF(st); /* D.data_stream lets go of it below, and the stream may end */
    PyObject *ts = PyLong_FromLongLong(t);
    if (ts == NULL) goto out;
    if (slot_put(sp, g_off[G_LEFT], PyLong_FromLong(-1)) < 0) goto out;
    if (messages_begin(lists, d, idx == 0, ts, end_off, other) < 0) goto out; /* _messages */
    long long row_vals[MSG_NCOLS];
    row_vals[MSG_STREAM_ID] = sid;
    row_vals[MSG_DIRECTION] = d;
    row_vals[MSG_INDEX] = idx;
    row_vals[MSG_TS_NS] = t;
    row_vals[MSG_SIZE] = size;
    row_vals[MSG_FLAGS] = flag;
    row_vals[MSG_END_OFFSET] = end_off;
    if (msg_append(ctx->msgs, row_vals) < 0) goto out;
    Py_INCREF(ts);
    if (list_set(lists[S_LAST_MSG_TS], d, ts) < 0) goto out;
    if (list_set(lists[S_MSGS], d, PyLong_FromLongLong(idx + 1)) < 0) goto out;
    /* _data_end */
    Py_INCREF(Py_None);
    if (slot_put(D, d_off[D_DATA_STREAM], Py_None) < 0) goto out;
    if (flow_consume(&flow, sid_obj, dpayload) < 0) goto out;
    if (dlen > 0) {
        if (nframes == 0) {
            Py_INCREF(ts);
            if (list_set(lists[S_FIRST_DATA_TS], d, ts) < 0) goto out;
            if (list_set(lists[S_FIRST_DATA_OFF], d, PyLong_FromLongLong(end_off)) < 0) goto out;
        }
        if (list_set(lists[S_DATA_FRAMES], d, PyLong_FromLongLong(nframes + 1)) < 0) goto out;
        Py_INCREF(ts);
        if (list_set(lists[S_LAST_DATA_TS], d, ts) < 0) goto out;
        if (list_set(lists[S_DATA_BYTES], d, PyLong_FromLongLong(nbytes + dlen)) < 0) goto out;
    }
    if (list_set(lists[S_LAST_OFF], d, PyLong_FromLongLong(end_off)) < 0) goto out;
    /* the direction at a frame boundary again (H2Connection.feed's D.plain) */
    if (slot_put(D, d_off[D_DATA_LEFT], PyLong_FromLong(0)) < 0) goto out;
    if (slot_put(D, d_off[D_BASE], PyLong_FromLongLong(end_off)) < 0) goto out;
    Py_INCREF(Py_True);
    if (slot_put(D, d_off[D_PLAIN], Py_True) < 0) goto out;
    if (end && do_end_stream(ctx, st, lists, d, ts, end_off, sid_obj) < 0) goto out;
    *taken = (Py_ssize_t)left;
    ret = 1;
out:
    Py_DECREF(st);
    Py_XDECREF(ts);
    Py_XDECREF(sid_obj);
    return ret;
}

/* A DATA frame that begins in row bytes b[0:n] and goes on in later rows (a large
 * message split across segments), when its stream is known and the bytes here start a
 * gRPC message that they do not finish, as _parse and GrpcSplitter.feed begin such a
 * frame: the direction now inside the frame (what is left of it, its stream, flags and
 * lengths), the splitter inside the message. Not for a padded frame, an unknown stream,
 * a probing splitter or a kept (grpc-web) trailer. The lanes and the stream's streaks
 * must have been written back. 1 done, 0 not that case (nothing changed), -1 error. */
static int try_data_start(PyObject *conn, ctx_t *ctx, long long d, const unsigned char *b, Py_ssize_t n,
                          long long offset) {
    long long base, dframes, sp_left, length, avail, size;
    if (n < 9 + 5 || b[3] != 0 || (b[4] & 0x08)) return 0; /* a DATA frame header and a message prefix; not PADDED */
    length = (long long)(((unsigned long)b[0] << 16) | ((unsigned long)b[1] << 8) | b[2]);
    avail = n - 9;
    if (length <= avail) return 0; /* the frame ends here */
    unsigned long sid = be32(b + 5);
    if (sid == 0 || (sid & 0x80000000UL)) return 0;
    unsigned int flag = b[9];
    size = (long long)be32(b + 10);
    if ((flag != 0 && flag != 1) || size + 5 <= avail) return 0; /* the message ends here: Python */
    PyObject *D = frame_dir(conn, ctx, d, offset, length, &base, &dframes);
    if (D == NULL) return 0;
    if (ctx_get(conn, s_streams, &ctx->streams) < 0 || !PyDict_CheckExact(ctx->streams)) return 0;
    PyObject *sid_obj = PyLong_FromUnsignedLong(sid);
    if (sid_obj == NULL) return -1;
    PyObject *st = PyDict_GetItemWithError(ctx->streams, sid_obj);
    Py_DECREF(sid_obj);
    if (st == NULL) { PyErr_Clear(); return 0; }
    if (Py_TYPE(st) != stream_type) return 0;
    PyObject *pair = pair_slot(st, S_SPLITTER), *mode = pair_slot(st, S_MODE);
    if (pair == NULL || mode == NULL) return 0;
    PyObject *m = PyList_GET_ITEM(mode, d);
    if (!PyUnicode_CheckExact(m) || PyUnicode_CompareWithASCIIString(m, "grpc") != 0) return 0;
    PyObject *sp = PyList_GET_ITEM(pair, d);
    if (!splitter_plain(sp) || slot_ll(sp, g_off[G_LEFT], &sp_left) < 0 || sp_left != -1) return 0;
    PyObject *hdr = SLOT(sp, g_off[G_HDR]);
    if (hdr == NULL || !PyByteArray_CheckExact(hdr) || PyByteArray_GET_SIZE(hdr) != 0) return 0;

    /* ---- from here on the frame's start is ours ---- */
    if (slot_put(sp, g_off[G_FLAG], PyLong_FromLong((long)flag)) < 0) return -1;
    if (slot_put(sp, g_off[G_SIZE], PyLong_FromLongLong(size)) < 0) return -1;
    if (slot_put(sp, g_off[G_LEFT], PyLong_FromLongLong(size - (avail - 5))) < 0) return -1;
    if (slot_put(D, d_off[D_FRAMES], PyLong_FromLongLong(dframes + 1)) < 0) return -1;
    if (slot_put(D, d_off[D_DATA_SID], PyLong_FromUnsignedLong(sid)) < 0) return -1;
    if (slot_put(D, d_off[D_DATA_FLAGS], PyLong_FromLong((long)b[4])) < 0) return -1;
    if (slot_put(D, d_off[D_DATA_LEN], PyLong_FromLongLong(length)) < 0) return -1;
    if (slot_put(D, d_off[D_DATA_PAYLOAD], PyLong_FromLongLong(length)) < 0) return -1;
    Py_INCREF(st);
    if (slot_put(D, d_off[D_DATA_STREAM], st) < 0) return -1;
    if (slot_put(D, d_off[D_DATA_LEFT], PyLong_FromLongLong(length - avail)) < 0) return -1;
    if (slot_put(D, d_off[D_PAD_LEFT], PyLong_FromLong(0)) < 0) return -1;
    if (slot_put(D, d_off[D_BASE], PyLong_FromLongLong(base + n)) < 0) return -1;
    Py_INCREF(Py_False);
    if (slot_put(D, d_off[D_PLAIN], Py_False) < 0) return -1;
    return 1;
}

/* A HEADERS frame try_headers decoded but did not apply (2): conn._headers_decoded(d,
 * flags, sid, blk, ts, end offset, frame no), once everything held in C is written back
 * (Python code runs). 1 done, -1 error. */
static int headers_in_python(PyObject *conn, ctx_t *ctx, streaks_t *S, long long d, const unsigned char *f,
                             Py_ssize_t flen, long long offset, PyObject *ts, long long fr, PyObject *blk) {
    static PyObject *name;
    if (name == NULL && (name = PyUnicode_InternFromString("_headers_decoded")) == NULL) return -1;
    if (streaks_flush_all(S) < 0) return -1;
    ctx_clear(ctx);
    PyObject *dd = PyLong_FromLongLong(d), *fl = PyLong_FromLong(f[4]), *sid = PyLong_FromUnsignedLong(be32(f + 5));
    PyObject *end_off = PyLong_FromLongLong(offset + flen), *fno = PyLong_FromLongLong(fr);
    PyObject *r = NULL;
    if (dd && fl && sid && end_off && fno) {
        PyObject *args[] = {conn, dd, fl, sid, blk, ts, end_off, fno};
        r = PyObject_VectorcallMethod(name, args, 8 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_XDECREF(dd);
    Py_XDECREF(fl);
    Py_XDECREF(sid);
    Py_XDECREF(end_off);
    Py_XDECREF(fno);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 1;
}

/* A ChunkRun's rows as a buffer: C-contiguous int64 (n, RUN_NCOLS). 0, or -1 with the
 * error set (and nothing held). */
static int run_rows_buffer(PyObject *rows, Py_buffer *rv) {
    if (PyObject_GetBuffer(rows, rv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (rv->ndim != 2 || rv->shape[1] != RUN_NCOLS || rv->itemsize != 8 || rv->format == NULL ||
        strchr("lq", rv->format[strlen(rv->format) - 1]) == NULL || rv->format[0] == '>' || rv->format[0] == '!') {
        PyBuffer_Release(rv);
        PyErr_SetString(PyExc_TypeError, "rows must be a C-contiguous int64 (n, RUN_NCOLS) array");
        return -1;
    }
    return 0;
}

/* feed_run(conn, conn_key, rows, buf, first): conn.feed_chunk for every row of a
 * ChunkRun from row `first` on (rows: C-contiguous int64 (n, RUN_NCOLS) direction, ts_ns,
 * frame_no, stream_offset, start, end; buf: the bytes they index), in order. Rows made of
 * whole frames of the fast cases are handled here without a PayloadChunk; the rest of a
 * row from the first frame it does not take becomes the same PayloadChunk (or conn.feed
 * call) as chunk by chunk. */
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
    if (run_rows_buffer(args[2], &rv) < 0) return NULL;
    if (PyObject_GetBuffer(args[3], &bv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&rv);
        return NULL;
    }
    const long long *r = (const long long *)rv.buf;
    const unsigned char *buf = (const unsigned char *)bv.buf;
    Py_ssize_t n = rv.shape[0];
    PyObject *ret = NULL;
    ctx_t ctx = CTX_INIT;
    streaks_t S;
    memset(&S, 0, sizeof S);
    /* conn._frame_no of the last row handled in C, set once at the end (no Python code
     * reads it between fast rows; a fallback row sets its own) */
    long long last_fno = 0;
    int fno_pending = 0;
    for (Py_ssize_t i = first < 0 ? 0 : first; i < n; i++) {
        const long long *row = r + RUN_NCOLS * i;
        if (i + PREFETCH_ROWS < n) prefetch_payload(buf, bv.len, r + RUN_NCOLS * (i + PREFETCH_ROWS));
        long long a = row[RUN_START], z = row[RUN_END];
        const long long d = row[RUN_DIRECTION], t = row[RUN_TS_NS], fr = row[RUN_FRAME_NO], so = row[RUN_STREAM_OFFSET];
        if (a < 0 || z < a || z > bv.len || (d != 0 && d != 1)) {
            PyErr_SetString(PyExc_ValueError, "feed_run: bad row");
            goto out;
        }
        PyObject *ts = NULL; /* the time as an int object, made when a frame needs it */
        /* the row's whole frames, one by one, as long as C takes them */
        const unsigned char *b = buf + a;
        Py_ssize_t len = (Py_ssize_t)(z - a), pos = 0, flen = 0;
        int fast = len > 0;
        if (fast && !S.lane[d].active) {
            /* a row in the middle of a split DATA frame: no frame header in it (never
             * while the direction's lane runs: that needs D.plain, no frame in progress) */
            int m = try_data_middle(conn, &ctx, d, len, so);
            if (m < 0) goto out;
            if (m == 1) {
                last_fno = fr;
                fno_pending = 1;
                continue;
            }
            /* or its first bytes end such a frame: the frames after them as usual */
            Py_ssize_t taken = 0;
            m = try_data_end(conn, &ctx, &S, d, len, so, t, &taken);
            if (m < 0) goto out;
            if (m == 1) pos = taken;
        }
        while (fast == 1 && pos < len) {
            Py_ssize_t left = len - pos;
            if (left < 9) { fast = 0; break; }
            flen = 9 + (Py_ssize_t)(((unsigned long)b[pos] << 16) | ((unsigned long)b[pos + 1] << 8) | b[pos + 2]);
            if (flen > left) { /* a frame going on in the next rows */
                fast = 0;
                if (b[pos + 3] == 0 && left >= 14) {
                    if (streaks_flush_for(&S, be32(b + pos + 5) & 0x7fffffffUL) < 0) { fast = -1; break; }
                    fast = try_data_start(conn, &ctx, d, b + pos, left, so + pos);
                    if (fast == 1) pos = len;
                }
                break;
            }
            const unsigned char *f = b + pos;
            if (f[3] == 0) {
                int k = streak_frame(&S, &ctx, conn, d, f, flen, so + pos, t);
                if (k < 0) { fast = -1; break; }
                if (k == 1) { pos += flen; continue; }
            }
            if (streaks_flush_for(&S, be32(f + 5) & 0x7fffffffUL) < 0) { fast = -1; break; }
            if (ts == NULL && (ts = PyLong_FromLongLong(t)) == NULL) { fast = -1; break; }
            int sse = 0; /* an event-stream frame: Python code ran, no streak starts */
            if (f[3] == 0) {
                fast = try_fast_raw(conn, &ctx, d, f, flen, so + pos, ts, NULL);
                if (fast == 0 && event_splitter_type != NULL && flen >= 16 && memcmp(f + 9, "data:", 5) == 0) {
                    if (streaks_flush_all(&S) < 0) { fast = -1; break; }
                    fast = try_sse_frame(conn, &ctx, d, f, flen, so + pos, ts, fr);
                    sse = fast == 1;
                    if (sse) ctx_clear(&ctx); /* Python code ran: it may rebind what ctx holds */
                }
            } else if (f[3] == 1) {
                PyObject *decoded = NULL; /* a block decoded here but applied by Python */
                fast = try_headers(conn, &ctx, d, f, flen, so + pos, ts, &decoded);
                if (fast == 2) {
                    fast = headers_in_python(conn, &ctx, &S, d, f, flen, so + pos, ts, fr, decoded);
                    Py_DECREF(decoded);
                }
            } else
                fast = 0;
            if (fast == 1) {
                pos += flen;
                /* a DATA frame that does not end the stream: later ones may continue it */
                if (f[3] == 0 && !sse && !(f[4] & 0x01) && streak_start(&S, &ctx, conn, d, be32(f + 5)) < 0)
                    fast = -1;
            }
        }
        PyObject *fno = NULL;
        if (fast == 1) {
            last_fno = fr;
            fno_pending = 1;
        } else if (fast == 0) {
            fno_pending = 0;
            /* Python code runs: everything written back, and it may rebind what ctx holds */
            if (streaks_flush_all(&S) < 0) fast = -1;
            ctx_clear(&ctx);
            if (fast == 0 && ts == NULL && (ts = PyLong_FromLongLong(t)) == NULL) fast = -1;
            if (fast == 0 && (fno = PyLong_FromLongLong(fr)) == NULL) fast = -1;
            if (fast == 0) {
                PyObject *res;
                if (pos == 0) {
                    PyObject *chunk = PyObject_CallFunction((PyObject *)chunk_type, "OLy#OOLi", key, d,
                                                            (const char *)b, len, ts, fno, so, 0);
                    res = chunk == NULL ? NULL : PyObject_CallMethodOneArg(conn, s_feed_chunk, chunk);
                    Py_XDECREF(chunk);
                } else {
                    /* the frames before were handled: the rest as the chunk that follows them
                     * (at a frame boundary, with nothing buffered, that is the same) */
                    res = PyObject_CallMethod(conn, "feed", "Ly#OOLi", d, (const char *)(b + pos), len - pos, ts,
                                              fno, so + pos, 0);
                }
                if (res == NULL) fast = -1;
                Py_XDECREF(res);
            }
        }
        Py_XDECREF(ts);
        Py_XDECREF(fno);
        if (fast < 0) goto out;
    }
    if (streaks_flush_all(&S) < 0) goto out;
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
    if (ret == NULL) { /* an error: the streaks' references go (what they held is moot) */
        for (int i = 0; i < STREAKS; i++) streak_drop(&S.k[i]);
    }
    ctx_clear(&ctx);
    PyBuffer_Release(&rv);
    PyBuffer_Release(&bv);
    return ret;
}

/* h.get(key) for Stream.to_record (h: a dict or NULL for a block not seen): borrowed str
 * or NULL; -1 when a value is not a str (the record is left to Python) or on an error */
static int rec_get(PyObject *h, PyObject *key, PyObject **out) {
    *out = NULL;
    if (h == NULL) return 0;
    *out = PyDict_GetItemWithError(h, key);
    if (*out == NULL) return PyErr_Occurred() ? -1 : 0;
    return PyUnicode_CheckExact(*out) ? 0 : -1;
}

/* `a or b` on header values (either may be NULL = absent): borrowed or NULL */
static inline PyObject *or2(PyObject *a, PyObject *b) {
    return (a != NULL && PyUnicode_GET_LENGTH(a) > 0) ? a : b;
}

/* a non-empty str of ASCII digits only */
static int ascii_digits(PyObject *v) {
    if (!PyUnicode_IS_ASCII(v)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    const char *p = (const char *)PyUnicode_1BYTE_DATA(v);
    if (n == 0) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
    }
    return 1;
}

/* Stream.to_record(conn_key, client) for the common gRPC stream (both directions in grpc
 * mode, not reset, no grpc-web trailers, plain header values): a new RequestRecord, or
 * NULL without an error set when the stream is left to Python (or NULL with an error). */
static PyObject *record_of(PyObject *st, PyObject *conn_key, long long c) {
    PyObject *lists[S_N];
    long long s = 1 - c;
    if (record_type == NULL || Py_TYPE(st) != stream_type) return NULL;
    for (int i = 0; i < S_N; i++) {
        if ((lists[i] = pair_slot(st, i)) == NULL) return NULL;
    }
    for (int i = 0; i < X_N; i++) {
        if (SLOT(st, x_off[i]) == NULL) return NULL;
    }
    if (SLOT(st, x_off[X_RST_TS]) != Py_None || SLOT(st, x_off[X_WEB_TRAILERS]) != Py_None) return NULL;
    if (!is_grpc_mode(PyList_GET_ITEM(lists[S_MODE], 0)) || !is_grpc_mode(PyList_GET_ITEM(lists[S_MODE], 1)))
        return NULL;
    /* a splitter other than GrpcSplitter itself (ModelNameTap: the request names its model) */
    if ((PyObject *)Py_TYPE(PyList_GET_ITEM(lists[S_SPLITTER], c)) != grpc_splitter_type) return NULL;
    PyObject *req = PyList_GET_ITEM(lists[S_HDR], c), *resp = PyList_GET_ITEM(lists[S_HDR], s);
    PyObject *trl = PyList_GET_ITEM(lists[S_TRAILERS], s);
    if (req == Py_None) req = NULL; else if (!PyDict_CheckExact(req)) return NULL;
    if (resp == Py_None) resp = NULL; else if (!PyDict_CheckExact(resp)) return NULL;
    if (trl == Py_None) trl = NULL; else if (!PyDict_CheckExact(trl)) return NULL;
    PyObject *method, *path, *authority, *host, *scheme, *req_ct, *resp_ct, *ua, *status, *trl_gs, *resp_gs,
        *trl_gm, *resp_gm, *resp_ge, *req_ge;
    if (rec_get(req, h_method, &method) < 0 || rec_get(req, h_path, &path) < 0 ||
        rec_get(req, h_authority, &authority) < 0 || rec_get(req, h_host, &host) < 0 ||
        rec_get(req, h_scheme, &scheme) < 0 || rec_get(req, h_content_type, &req_ct) < 0 ||
        rec_get(resp, h_content_type, &resp_ct) < 0 || rec_get(req, h_user_agent, &ua) < 0 ||
        rec_get(resp, h_status, &status) < 0 || rec_get(trl, h_grpc_status, &trl_gs) < 0 ||
        rec_get(resp, h_grpc_status, &resp_gs) < 0 || rec_get(trl, h_grpc_message, &trl_gm) < 0 ||
        rec_get(resp, h_grpc_message, &resp_gm) < 0 || rec_get(resp, h_grpc_encoding, &resp_ge) < 0 ||
        rec_get(req, h_grpc_encoding, &req_ge) < 0)
        return NULL;
    /* int(status) when status.isdigit(); int(gs) when gs.strip().isdigit(); unquote(gm):
     * only the plain forms here */
    PyObject *gs = or2(trl_gs, resp_gs), *gm = or2(trl_gm, resp_gm);
    int status_digits = status != NULL && ascii_digits(status);
    if (status != NULL && !status_digits && !PyUnicode_IS_ASCII(status)) return NULL;
    if (gs != NULL && !ascii_digits(gs)) return NULL;
    if (gm != NULL) {
        Py_ssize_t pct = PyUnicode_FindChar(gm, '%', 0, PyUnicode_GET_LENGTH(gm), 1);
        if (pct != -1) return NULL; /* %-escapes: unquote in Python (-2: error set) */
    }
    /* _grpc_kind */
    long long nreq, nresp;
    if (slot_ll_obj(PyList_GET_ITEM(lists[S_MSGS], c), &nreq) < 0 ||
        slot_ll_obj(PyList_GET_ITEM(lists[S_MSGS], s), &nresp) < 0)
        return NULL;
    int after_first = PyObject_IsTrue(PyList_GET_ITEM(lists[S_MSG_AFTER_FIRST], c));
    int before_end = PyObject_IsTrue(PyList_GET_ITEM(lists[S_MSG_BEFORE_END], s));
    if (after_first < 0 || before_end < 0) return NULL;
    PyObject *end_c = PyList_GET_ITEM(lists[S_END_TS], c);
    PyObject *kind;
    if (after_first || (before_end && end_c != Py_None && nresp > 0) || (nreq > 1 && nresp > 1))
        kind = k_bidi;
    else if (nreq > 1)
        kind = k_client_stream;
    else if (nresp > 1)
        kind = k_server_stream;
    else
        kind = k_unary;
    PyObject *end_off = PyList_GET_ITEM(lists[S_END_OFF], s);
    if (end_off == Py_None) end_off = PyList_GET_ITEM(lists[S_LAST_OFF], s); /* not reset */

    PyObject *http_status = NULL, *grpc_status = NULL;
    if (status_digits && (http_status = PyLong_FromUnicodeObject(status, 10)) == NULL) return NULL;
    if (gs != NULL && (grpc_status = PyLong_FromUnicodeObject(gs, 10)) == NULL) {
        Py_XDECREF(http_status);
        return NULL;
    }
    PyObject *vals[R_N] = {
        conn_key, SLOT(st, x_off[X_SID]), method, path, or2(authority, host), scheme, or2(req_ct, resp_ct), ua,
        kind, PyList_GET_ITEM(lists[S_HDR_TS], c), end_c, PyList_GET_ITEM(lists[S_HDR_TS], s),
        PyList_GET_ITEM(lists[S_FIRST_MSG_TS], s), PyList_GET_ITEM(lists[S_LAST_MSG_TS], s),
        PyList_GET_ITEM(lists[S_END_TS], s), http_status, grpc_status, gm, or2(resp_ge, req_ge),
        PyList_GET_ITEM(lists[S_MSGS], c), PyList_GET_ITEM(lists[S_MSGS], s),
        PyList_GET_ITEM(lists[S_DATA_BYTES], c), PyList_GET_ITEM(lists[S_DATA_BYTES], s),
        SLOT(st, x_off[X_RST_CODE]), SLOT(st, x_off[X_TRAILERS_ONLY]), SLOT(st, x_off[X_HEADERS_KNOWN]),
        PyList_GET_ITEM(lists[S_FIRST_MSG_OFF], s), end_off, v_h2, PyList_GET_ITEM(lists[S_FIRST_DATA_TS], s),
        NULL, NULL, NULL, NULL}; /* no model / LLM facts: a KServe request's tap is left to Python */
    PyObject *rec = record_type->tp_alloc(record_type, 0);
    if (rec != NULL) {
        for (int i = 0; i < R_N; i++) {
            PyObject *v = vals[i] != NULL ? vals[i] : Py_None;
            Py_INCREF(v);
            SLOT(rec, r_off[i]) = v;
        }
    }
    Py_XDECREF(http_status);
    Py_XDECREF(grpc_status);
    return rec;
}

/* to_records(streams, conn_key, client): [st.to_record(conn_key, client) for st in
 * streams], the common gRPC streams built here */
static PyObject *to_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "to_records(list of Stream, conn_key, client)");
        return NULL;
    }
    long long client = PyLong_AsLongLong(args[2]);
    if (client == -1 && PyErr_Occurred()) return NULL;
    if (client != 0 && client != 1) {
        PyErr_SetString(PyExc_ValueError, "client must be 0 or 1");
        return NULL;
    }
    PyObject *streams = args[0];
    Py_ssize_t n = PyList_GET_SIZE(streams);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *st = PyList_GET_ITEM(streams, i);
        PyObject *rec = record_of(st, args[1], client);
        if (rec == NULL) {
            if (PyErr_Occurred()) goto error;
            rec = PyObject_CallMethodObjArgs(st, s_to_record, args[1], args[2], NULL);
            if (rec == NULL) goto error;
            if (PyList_GET_SIZE(streams) != n) {
                Py_DECREF(rec);
                PyErr_SetString(PyExc_RuntimeError, "to_records: the list changed");
                goto error;
            }
        }
        PyList_SET_ITEM(out, i, rec);
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
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
    /* init(GrpcSplitter, _Dir, Stream, FlowState, PayloadChunk, TolerantDecoder, DecodedBlock,
     *      RequestRecord, EventSplitter) */
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "init(GrpcSplitter, _Dir, Stream, FlowState, PayloadChunk, "
                                         "TolerantDecoder, DecodedBlock, RequestRecord, EventSplitter)");
        return NULL;
    }
    for (int i = 0; i < 9; i++) {
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "init() takes classes");
            return NULL;
        }
    }
    if (slot_offsets(args[0], splitter_names, G_N, g_off) < 0 ||
        slot_offsets(args[1], dir_names, D_N, d_off) < 0 ||
        slot_offsets(args[2], stream_names, S_N, s_off) < 0 ||
        slot_offsets(args[3], flow_names, F_N, f_off) < 0 ||
        slot_offsets(args[4], chunk_names, C_N, c_off) < 0 ||
        slot_offsets(args[2], stream_x_names, X_N, x_off) < 0 ||
        slot_offsets(args[5], decoder_names, H_N, h_off) < 0 ||
        slot_offsets(args[6], block_names, B_N, b_off) < 0)
        return NULL;
    /* to_records fills every field of a RequestRecord: only when these are all of them */
    PyObject *fields = PyObject_GetAttrString(args[7], "__slots__");
    if (fields == NULL) return NULL;
    int all = PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == R_N;
    for (int i = 0; all && i < R_N; i++) {
        PyObject *f = PyTuple_GET_ITEM(fields, i);
        all = PyUnicode_Check(f) && PyUnicode_CompareWithASCIIString(f, record_names[i]) == 0;
    }
    Py_DECREF(fields);
    if (all && slot_offsets(args[7], record_names, R_N, r_off) < 0) return NULL;
    int stream_ok = tmpl_check(args[2], stream_tmpl, STREAM_TMPL_N, stream_tmpl_off);
    int splitter_ok = tmpl_check(args[0], splitter_tmpl, SPLITTER_TMPL_N, splitter_tmpl_off);
    if (stream_ok < 0 || splitter_ok < 0) return NULL;
    stream_tmpl_ok = stream_ok;
    splitter_tmpl_ok = splitter_ok;
    for (int i = 0; i < 7; i++) Py_INCREF(args[i]);
    if (all) Py_INCREF(args[7]);
    Py_XSETREF(record_type, all ? (PyTypeObject *)args[7] : NULL);
    Py_XSETREF(grpc_splitter_type, args[0]);
    Py_XSETREF(dir_type, (PyTypeObject *)args[1]);
    Py_XSETREF(stream_type, (PyTypeObject *)args[2]);
    Py_XSETREF(flow_type, (PyTypeObject *)args[3]);
    Py_XSETREF(chunk_type, (PyTypeObject *)args[4]);
    Py_XSETREF(decoder_type, (PyTypeObject *)args[5]);
    Py_XSETREF(block_type, (PyTypeObject *)args[6]);
    Py_INCREF(args[8]);
    Py_XSETREF(event_splitter_type, args[8]);
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
            bucket = floor_bucket(ts, bucket_ns);
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

/* run_sent(runs, bucket_ns): what sent_runs counts, for ChunkRuns (the TCP layer's bulk
 * path): per ChunkRun, its rows' payload bytes and rows summed per direction over
 * consecutive rows of one ts_ns // bucket_ns (a run is in capture order, its two
 * directions interleaved), as bytes of int64 (conn_key * 2 + direction, bucket, bytes,
 * rows) quadruples in run order; the caller merges equal keys and buckets. In numpy this
 * was a copy of every row and a two-key sort of them all, ~0.18 us a row. */
static PyObject *run_sent(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "run_sent(list of ChunkRun, bucket_ns)");
        return NULL;
    }
    long long bucket_ns = PyLong_AsLongLong(args[1]);
    if (bucket_ns <= 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bucket_ns must be > 0");
        return NULL;
    }
    PyObject *runs = args[0];
    Py_ssize_t nruns = PyList_GET_SIZE(runs), cap = 0;
    long long *out = NULL;
    Py_ssize_t used = 0; /* quadruples written */
    for (Py_ssize_t k = 0; k < nruns; k++) {
        PyObject *run = PyList_GET_ITEM(runs, k);
        PyObject *key_obj = PyObject_GetAttrString(run, "conn_key");
        if (key_obj == NULL) goto error;
        long long conn_key = PyLong_AsLongLong(key_obj);
        Py_DECREF(key_obj);
        if (conn_key == -1 && PyErr_Occurred()) goto error;
        PyObject *rows = PyObject_GetAttrString(run, "rows");
        if (rows == NULL) goto error;
        Py_buffer rv;
        int got = run_rows_buffer(rows, &rv);
        Py_DECREF(rows);
        if (got < 0) goto error;
        Py_ssize_t n = rv.shape[0];
        if (used + n > cap) { /* at most one quadruple a row */
            Py_ssize_t want = cap * 2 > used + n ? cap * 2 : used + n + 1024;
            long long *grown = PyMem_Realloc(out, (size_t)want * 4 * sizeof(long long));
            if (grown == NULL) {
                PyBuffer_Release(&rv);
                PyErr_NoMemory();
                goto error;
            }
            out = grown;
            cap = want;
        }
        /* the open quadruple of each direction (its index in out, -1: none) */
        Py_ssize_t open_at[2] = {-1, -1};
        const long long *r = (const long long *)rv.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            const long long *row = r + RUN_NCOLS * i;
            long long d = row[RUN_DIRECTION], ts = row[RUN_TS_NS];
            long long bucket = floor_bucket(ts, bucket_ns);
            long long len = row[RUN_END] - row[RUN_START];
            int slot = d == 1; /* directions are 0 and 1; another value gets its own rows */
            Py_ssize_t at = (d == 0 || d == 1) ? open_at[slot] : -1;
            if (at >= 0 && out[4 * at + 1] == bucket) {
                out[4 * at + 2] += len;
                out[4 * at + 3] += 1;
                continue;
            }
            long long *q = out + 4 * used;
            q[0] = conn_key * 2 + d;
            q[1] = bucket;
            q[2] = len;
            q[3] = 1;
            if (d == 0 || d == 1) open_at[slot] = used;
            used++;
        }
        PyBuffer_Release(&rv);
    }
    PyObject *res = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(used * 4 * sizeof(long long)));
    PyMem_Free(out);
    return res;
error:
    PyMem_Free(out);
    return NULL;
}

/* ---- HPACK Huffman strings (RFC 7541 5.2) ----
 *
 * hpack's own decoder (hpack.huffman_table.decode_huffman) walks a nibble state machine
 * in Python, about 20 us a header string: a capture of thousands of connections decodes
 * tens of thousands of them (each connection's first requests are literals). This walks
 * the same table, handed over once by huffman_init, so it decodes exactly what hpack
 * decodes; it declines (None) where hpack raises, and the caller lets hpack say why. */

enum { HUFF_COMPLETE = 1, HUFF_EMIT = 2, HUFF_FAIL = 4 };
static uint8_t huff_next[4096], huff_flags[4096], huff_sym[4096];
static int huff_ready;

static PyObject *huffman_init(PyObject *self, PyObject *arg) {
    Py_buffer t;
    if (PyObject_GetBuffer(arg, &t, PyBUF_SIMPLE) < 0) return NULL;
    if (t.len != 3 * 4096) {
        PyBuffer_Release(&t);
        PyErr_SetString(PyExc_ValueError, "huffman_init: 4096 (state, flags, symbol) entries expected");
        return NULL;
    }
    const uint8_t *b = t.buf;
    for (int i = 0; i < 4096; i++) {
        huff_next[i] = b[3 * i];
        huff_flags[i] = b[3 * i + 1];
        huff_sym[i] = b[3 * i + 2];
    }
    PyBuffer_Release(&t);
    huff_ready = 1;
    Py_RETURN_NONE;
}

static PyObject *huffman(PyObject *self, PyObject *arg) {
    if (!huff_ready) {
        PyErr_SetString(PyExc_RuntimeError, "huffman: huffman_init was not called");
        return NULL;
    }
    Py_buffer in;
    if (PyObject_GetBuffer(arg, &in, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *p = in.buf;
    Py_ssize_t n = in.len;
    /* a nibble emits at most one symbol */
    PyObject *out = PyBytes_FromStringAndSize(NULL, n ? 2 * n : 0);
    if (out == NULL || n == 0) {
        PyBuffer_Release(&in);
        return out;
    }
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    Py_ssize_t k = 0;
    unsigned state = 0, flags = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int half = 0; half < 2; half++) {
            unsigned idx = state * 16 + (half ? (p[i] & 0x0F) : (p[i] >> 4));
            flags = huff_flags[idx];
            if (flags & HUFF_FAIL) goto decline;
            if (flags & HUFF_EMIT) o[k++] = huff_sym[idx];
            state = huff_next[idx];
        }
    }
    if (!(flags & HUFF_COMPLETE)) goto decline;
    PyBuffer_Release(&in);
    if (_PyBytes_Resize(&out, k) < 0) return NULL;
    return out;
decline:
    PyBuffer_Release(&in);
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"run_sent", (PyCFunction)(void (*)(void))run_sent, METH_FASTCALL,
     "run_sent(runs, bucket_ns): int64 (key, bucket, bytes, rows) quadruples of ChunkRuns' rows, as bytes."},
    {"sent_runs", (PyCFunction)(void (*)(void))sent_runs, METH_FASTCALL,
     "sent_runs(chunks, bucket_ns): {(key, bucket): (bytes, chunks)} over the chunks."},
    {"feed_run", (PyCFunction)(void (*)(void))feed_run, METH_FASTCALL,
     "feed_run(conn, conn_key, rows, buf, first): feed_chunk over the rows of a ChunkRun."},
    {"stream", (PyCFunction)py_stream, METH_O, "stream(sid): Stream(sid) as the C fast path builds it."},
    {"splitter", (PyCFunction)py_splitter, METH_O,
     "splitter(web): GrpcSplitter(keep_trailer=web) as the C fast path builds it."},
    {"to_records", (PyCFunction)(void (*)(void))to_records, METH_FASTCALL,
     "to_records(streams, conn_key, client): Stream.to_record over a list of streams."},
    {"feed_chunk", (PyCFunction)(void (*)(void))feed_chunk, METH_FASTCALL,
     "feed_chunk(conn, chunk): H2Connection.feed_chunk with the whole-message DATA case in C."},
    {"huffman_init", (PyCFunction)huffman_init, METH_O,
     "huffman_init(table): hpack's Huffman state machine, (state, flags, symbol) bytes per entry."},
    {"huffman", (PyCFunction)huffman, METH_O,
     "huffman(data): the Huffman-coded string decoded as hpack decodes it, or None where hpack raises."},
    {"init", (PyCFunction)(void (*)(void))init, METH_FASTCALL,
     "init(GrpcSplitter, _Dir, Stream, FlowState, PayloadChunk, TolerantDecoder, DecodedBlock, RequestRecord, "
     "EventSplitter): the classes whose slots it reads or whose instances it recognises."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

#define INTERN(var, text) if (((var) = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__speedups(void) {
    INTERN(s_dirs, "dirs"); INTERN(s_streams, "streams"); INTERN(s_flows, "flows");
    INTERN(s_messages, "msg_buf"); INTERN(s_frame_no_attr, "_frame_no"); INTERN(s_feed_chunk, "feed_chunk");
    INTERN(s_orient_final, "orient_final"); INTERN(s_flipped, "flipped");
    INTERN(s_closed, "closed"); INTERN(s_done, "done"); INTERN(s_first_opened, "first_opened");
    INTERN(s_last_opened, "last_opened"); INTERN(s_lossy, "lossy"); INTERN(s_max_conc, "max_conc");
    INTERN(h_method, ":method"); INTERN(h_status, ":status"); INTERN(h_content_type, "content-type");
    INTERN(h_grpc_status, "grpc-status"); INTERN(v_grpc, "grpc"); INTERN(v_app_grpc, "application/grpc");
    INTERN(v_grpc_web_text, "grpc-web-text"); INTERN(v_grpc_web, "grpc-web");
    INTERN(h_path, ":path"); INTERN(h_authority, ":authority"); INTERN(h_host, "host"); INTERN(h_scheme, ":scheme");
    INTERN(h_user_agent, "user-agent"); INTERN(h_grpc_message, "grpc-message");
    INTERN(h_grpc_encoding, "grpc-encoding"); INTERN(k_bidi, "bidi"); INTERN(k_client_stream, "client_stream");
    INTERN(k_server_stream, "server_stream"); INTERN(k_unary, "unary"); INTERN(v_h2, "h2");
    INTERN(s_to_record, "to_record"); INTERN(v_http, "http");
    INTERN(s_tmp, "_tmp"); INTERN(s_takes_whole_events, "takes_whole_events");
    INTERN(s_feed_whole_events, "feed_whole_events"); INTERN(s_messages_of, "_messages"); INTERN(v_sse, "sse");
    if ((zero = PyLong_FromLong(0)) == NULL) return NULL;
    return PyModule_Create(&module);
}
