/* Optional C helpers for the TCP layer's bulk path (parsers/tcp/_fast.py, _flows.py).
 *
 * ewma(srtt, values): the smoothed RTT after folding int64 samples in order,
 * srtt = srtt * 0.875 + r * 0.125 (the first sample when srtt is None), with the same
 * double operations, in the same order, as the Python loop it replaces: built with
 * -ffp-contract=off so no multiply-add is fused (that would round differently).
 * fast_run folds its runs' samples the same way.
 *
 * pack_rows / fast_run: one connection's clean run checked and applied in C (see below);
 * group_flows: a batch's rows grouped by connection; take_rows: the per-packet path's
 * rows, read from the same records, as lists. Without this module the numpy code gives
 * the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records.h" /* RUN_*: the ChunkRun row layout of parsers/records.py */

/* One step of the smoothed-RTT fold (srtt = srtt * 0.875 + r * 0.125, the first sample
 * when there is none yet): ewma, fold_srtt and verdict_rows all fold with it. */
static inline void fold_one(double *s, int *have, int64_t r) {
    double x = (double)r;
    if (!*have) {
        *s = x;
        *have = 1;
    } else {
        double a = *s * 0.875;
        double b = x * 0.125;
        *s = a + b;
    }
}

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
    for (Py_ssize_t i = 0; i < n; i++) fold_one(&s, &have, r[i]);
    PyBuffer_Release(&v);
    if (!have) Py_RETURN_NONE;
    return PyFloat_FromDouble(s);
}

/* ---- fast_run: the bulk path of parsers/tcp/_fast.py as two loops over the rows ----
 *
 * BulkPath._fast checks a connection's rows for a clean run and applies it with numpy,
 * some 150 array operations per call. fast_run does the same in C: the first loop walks
 * the rows in capture order, stops at the first row that breaks a rule and gathers what
 * the run changes (sequence space, ACK progress, TSvals, IP IDs, in-order chunks,
 * window-full rows, resends); then each direction's advancing ACKs are matched against its
 * segment and TSval logs in row order with its resends (data->ACK and TSecr RTT samples,
 * Karn's marks), and the resends' kinds and the verdicts follow the smoothed RTTs row by
 * row. _fast.py applies the results
 * to the connection state in the numpy path's order, so both paths agree exactly. The
 * numpy semantics are kept where they differ from a per-packet view: the logs searched
 * hold every segment of the run, as np.searchsorted over them does. Windows are shifted
 * by at most 14 bits (the caller checks), so no value leaves int64.
 */

#define M32 0xFFFFFFFFLL
#define H31 0x80000000LL
#define MAX_SACK_BLOCKS 4 /* what a TCP option fits; a row with more goes per packet */

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} vec_t;

/* Room for cap values up front (the per-row vectors of a run hold at most one value per
 * row): no reallocation and copy while the rows are walked. */
static int vreserve(vec_t *a, Py_ssize_t cap) {
    if (cap <= a->cap) return 0;
    int64_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof(int64_t));
    if (v == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    a->v = v;
    a->cap = cap;
    return 0;
}

static int vpush(vec_t *a, int64_t x) {
    if (a->n == a->cap && vreserve(a, a->cap ? a->cap * 2 : 256) < 0) return -1;
    a->v[a->n++] = x;
    return 0;
}

static int vextend(vec_t *a, const int64_t *src, Py_ssize_t n) {
    if (n <= 0) return 0;
    if (vreserve(a, a->n + n) < 0) return -1;
    memcpy(a->v + a->n, src, (size_t)n * sizeof(int64_t));
    a->n += n;
    return 0;
}

/* The vector as a bytearray of int64 values (for np.frombuffer). */
static PyObject *vbytes(const vec_t *a) {
    return PyByteArray_FromStringAndSize((const char *)a->v, a->n * (Py_ssize_t)sizeof(int64_t));
}

/* One step of _fast._unwrap: from the previous unwrapped value to the next 32-bit one. */
static inline int64_t unwrap_step(int64_t prev, int64_t v) {
    int64_t d = v - (prev & M32);
    d = ((d + H31) & M32) - H31;
    return prev + d;
}

/* A retransmission of bytes the capture saw before, taken by the run (LossPath._retx_seen):
 * the row and what the per-packet path reads at it. The matching passes fill in the rest. */
typedef struct {
    Py_ssize_t row;
    int64_t s, e, ts, frame, tsv, acked, dupacks, dupack_ts, sack_hi, sack_ts, progress_ts, hi;
    int has_tsv;
    int64_t t_orig;           /* earliest send time of its outstanding bytes (has_orig) */
    int has_orig, kind;       /* kind: RESEND_PLAIN / _FAST / _RTO (_retx_kind) */
    Py_ssize_t starts0, starts1; /* its outstanding segments' starts: rstarts[starts0:starts1] */
} resend_t;
enum { RESEND_PLAIN = 0, RESEND_FAST = 1, RESEND_RTO = 2 };

typedef struct {
    /* state in (Dir fields; -1 stands for None where noted in _fast.py) */
    int base_known, tsv_known, ws_known, rwnd_known, ws;
    long long base, seq_ref, hi, ack_ref, acked, last_ack32, last_win, tsv_u, ipid_last, rwnd, sampled_end,
        last_echo;
    vec_t log[6]; /* SegLog st, en, ts; TsLog tv, t, s (their outstanding part) */
    vec_t rx_log; /* SegLog rx (0/1) of that outstanding part: retransmitted segments give no sample (Karn) */
    /* what this direction's own rows of the run tell */
    Py_ssize_t kd, nd;
    int64_t s_run, a_run, hi_run, ts_cur, tsv_max, hi_tsv, ipid_prev, ipid_good, ipid_bad, last_a32,
        last_wd, max_edge, arel_prev, a32_prev, wd_prev;
    int any_ts, hi_tsv_known, ipid_on, any_a32;
    int64_t hi_ts, hi_ipid;
    vec_t new_st, new_en, new_t, new_tv, new_tt, new_ts, wf_pos, wf_s, wf_n, tail;
    /* the far end's ACKs of this direction's data */
    vec_t A, TA, E, EA, ET; /* advancing ACKs; raw TSecr, ACK and time of those with one */
    int64_t far_acked, far_rw, far_a_abs;
    int far_rows;
    /* results of the log matching */
    vec_t st, en, t, rx, smp_t, smp_v, tv, tt, ts, tsmp_t, tsmp_v;
    vec_t E_u; /* each echo of E unwrapped (when e_on): the Eifel check on a covering ACK */
    int64_t sampled_out, last_echo_out;
    int e_on; /* echoes matched: the far end's advancing ACKs carry TSecr and TSvals are known */
    PyObject *srtt_in; /* Dir.srtt: a float or None */
    double srtt;
    int have_srtt;
    int64_t min_rtt;
    /* IP ids: the counters before the run (Dir.ipid_good, _bad, _gaps); what the run adds
     * to ipid_gaps and when its last packet was; the cut check's own walk (cut_*) */
    long long ipid_good_in, ipid_bad_in, ipid_gaps_in;
    PyObject *sigd, *sigq; /* Dir.sigd (dict) and Dir.sigq (list): recent packet signatures */
    int64_t ipid_gaps_run, ipid_ts, cut_prev, cut_good, cut_bad, cut_gaps;
    int cut_on; /* -1: not known before this side's first row */
    /* the far end's SACK blocks and duplicate ACKs about this direction's data (Dir.sack_hi,
     * sack_ts, dupacks, dupack_ts on the way in), as the run's rows leave them: sacks_state
     * 0 keeps Dir.sacks, 1 empties it, 2 replaces it by the n_blocks blocks */
    long long sack_hi, sack_ts, dupacks, dupack_ts;
    int sacks_state, n_blocks;
    int64_t blocks[2 * MAX_SACK_BLOCKS];
    vec_t dup_pos, dup_arel; /* the run's duplicate ACKs: row, ACK offset */
    /* retransmissions (fast_run's resend tuple given): Dir.progress_ts in; this side's
     * resends of the run, the starts they cover; the row of each new TSval */
    long long progress_in;
    resend_t *rs;
    Py_ssize_t n_rs, cap_rs;
    vec_t rstarts, new_trow;
    /* the row of each advancing ACK, ACK with a TSecr and RTT sample (verdict_rows) */
    vec_t A_row, E_row, smp_row, tsmp_row;
    double srtt0; /* Dir.srtt before the run (when have_srtt0) */
    int have_srtt0;
} dir_t;

#define DIR_VECS(D)                                                                                           \
    { &(D)->log[0], &(D)->log[1], &(D)->log[2], &(D)->log[3], &(D)->log[4], &(D)->log[5], &(D)->new_st,      \
      &(D)->new_en, &(D)->new_t, &(D)->new_tv, &(D)->new_tt, &(D)->new_ts, &(D)->wf_pos,                      \
      &(D)->wf_s, &(D)->wf_n, &(D)->tail, &(D)->A, &(D)->TA, &(D)->E, &(D)->EA, &(D)->ET, &(D)->st, &(D)->en, \
      &(D)->t, &(D)->smp_t, &(D)->smp_v, &(D)->tv, &(D)->tt, &(D)->ts, &(D)->tsmp_t, &(D)->tsmp_v,          \
      &(D)->dup_pos, &(D)->dup_arel, &(D)->A_row, &(D)->E_row, &(D)->smp_row, &(D)->tsmp_row, &(D)->rx_log,   \
      &(D)->rx, &(D)->E_u, &(D)->rstarts, &(D)->new_trow }

static void dir_free(dir_t *D) {
    vec_t *vs[] = DIR_VECS(D);
    for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) PyMem_Free(vs[i]->v);
    PyMem_Free(D->rs);
}

static resend_t *rs_push(dir_t *D) {
    if (D->n_rs == D->cap_rs) {
        Py_ssize_t cap = D->cap_rs ? 2 * D->cap_rs : 8;
        resend_t *v = PyMem_Realloc(D->rs, (size_t)cap * sizeof(resend_t));
        if (v == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        D->rs = v;
        D->cap_rs = cap;
    }
    resend_t *x = &D->rs[D->n_rs++];
    memset(x, 0, sizeof(*x));
    return x;
}

/* The values of a log's list from index h on (the SegLog and TsLog keep Python lists:
 * the per-packet path appends to them one by one). */
static int list_tail(PyObject *list, Py_ssize_t h, vec_t *out) {
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "fast_run: a log must be a list of ints");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (h < 0 || h > n) {
        PyErr_SetString(PyExc_ValueError, "fast_run: a log's start is outside it");
        return -1;
    }
    if (vreserve(out, n - h) < 0) return -1;
    for (Py_ssize_t i = h; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!PyLong_Check(item)) { /* (an int converts without running Python code) */
            PyErr_SetString(PyExc_TypeError, "fast_run: a log must be a list of ints");
            return -1;
        }
        long long x = PyLong_AsLongLong(item);
        if (x == -1 && PyErr_Occurred()) return -1;
        out->v[out->n++] = x;
    }
    return 0;
}

/* The vector as a list of ints (a SegLog's or TsLog's new contents). */
static PyObject *vlist(const vec_t *a) {
    PyObject *l = PyList_New(a->n);
    if (l == NULL) return NULL;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        PyObject *x = PyLong_FromLongLong(a->v[i]);
        if (x == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

/* The vector of 0/1 as a list of bools (SegLog.rx). */
static PyObject *vbools(const vec_t *a) {
    PyObject *l = PyList_New(a->n);
    if (l == NULL) return NULL;
    for (Py_ssize_t i = 0; i < a->n; i++) PyList_SET_ITEM(l, i, PyBool_FromLong((long)a->v[i]));
    return l;
}

/* Reads a direction's state; 1 when its segment log is not in end order (fast_run then
 * declines the run), -1 on error. */
static int parse_dir(PyObject *t, dir_t *D) {
    PyObject *o[6], *rx, *sacks;
    Py_ssize_t h_seg, h_ts;
    if (!PyArg_ParseTuple(t, "pLLLLLLLpLLippLOOOLOOOLOLLLO!O!nnLLLLOLO!", &D->base_known, &D->base, &D->seq_ref, &D->hi,
                          &D->ack_ref, &D->acked, &D->last_ack32, &D->last_win, &D->tsv_known, &D->tsv_u,
                          &D->ipid_last, &D->ws, &D->ws_known, &D->rwnd_known, &D->rwnd, &o[0], &o[1], &o[2],
                          &D->sampled_end, &o[3], &o[4], &o[5], &D->last_echo, &D->srtt_in, &D->ipid_good_in,
                          &D->ipid_bad_in, &D->ipid_gaps_in, &PyDict_Type, &D->sigd, &PyList_Type, &D->sigq, &h_seg, &h_ts, &D->sack_hi,
                          &D->sack_ts, &D->dupacks, &D->dupack_ts, &rx, &D->progress_in, &PyList_Type, &sacks))
        return -1;
    /* Dir.sacks, the blocks a resend is checked against until the run's ACKs change them
     * (sacks_state 0): more than a run keeps, and resends go per packet (n_blocks -1) */
    Py_ssize_t nsk = PyList_GET_SIZE(sacks);
    D->n_blocks = nsk > MAX_SACK_BLOCKS ? -1 : (int)nsk;
    for (Py_ssize_t i = 0; i < nsk && nsk <= MAX_SACK_BLOCKS; i++) {
        long long l, r;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(sacks, i), "LL", &l, &r)) return -1;
        D->blocks[2 * i] = l;
        D->blocks[2 * i + 1] = r;
    }
    D->have_srtt = D->srtt_in != Py_None;
    if (D->have_srtt) {
        D->srtt = PyFloat_AsDouble(D->srtt_in);
        if (D->srtt == -1.0 && PyErr_Occurred()) return -1;
    }
    D->srtt0 = D->srtt;
    D->have_srtt0 = D->have_srtt;
    if (D->ws < 0 || D->ws > 14) {
        PyErr_SetString(PyExc_ValueError, "fast_run: window scale out of range");
        return -1;
    }
    for (int i = 0; i < 6; i++) {
        if (list_tail(o[i], i < 3 ? h_seg : h_ts, &D->log[i]) < 0) return -1;
        if (D->log[i].n != D->log[i - i % 3].n) {
            PyErr_SetString(PyExc_ValueError, "fast_run: a log's lists must be of one length");
            return -1;
        }
    }
    if (list_tail(rx, h_seg, &D->rx_log) < 0) return -1;
    if (D->rx_log.n != D->log[0].n) {
        PyErr_SetString(PyExc_ValueError, "fast_run: a log's lists must be of one length");
        return -1;
    }
    /* seg_match walks the segment ends in order, as np.searchsorted assumes them sorted */
    const int64_t *en = D->log[1].v;
    for (Py_ssize_t i = 1; i < D->log[1].n; i++)
        if (en[i] < en[i - 1]) return 1;
    return 0;
}

static inline int64_t shl(int64_t x, int s) { return (int64_t)((uint64_t)x << s); }

/* A resend's outstanding segments at its row (SegLog.orig_ts, starts_in, mark_retx):
 * those from h (the first the cumulative ACK has not covered) that overlap [s, e), looked
 * for from the last one starting at or before s; their earliest send time and starts, and
 * they are marked retransmitted. */
static int resend_marks(dir_t *D, resend_t *q, Py_ssize_t h) {
    Py_ssize_t n = D->st.n, lo = h, hi = n; /* bisect_right(st, s, h) - 1, at least h */
    const int64_t *st = D->st.v, *en = D->en.v, *t = D->t.v;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (st[mid] <= q->s) lo = mid + 1;
        else hi = mid;
    }
    Py_ssize_t i = lo - 1 > h ? lo - 1 : h;
    q->starts0 = D->rstarts.n;
    for (; i < n && st[i] < q->e; i++)
        if (en[i] > q->s) {
            if (!q->has_orig || t[i] < q->t_orig) q->t_orig = t[i];
            q->has_orig = 1;
            if (vpush(&D->rstarts, st[i]) < 0) return -1;
            D->rx.v[i] = 1;
        }
    q->starts1 = D->rstarts.n;
    return 0;
}

/* Data->ACK samples (BulkPath._seg_ack, SegLog.ack): the log is the outstanding segments
 * plus this run's; the segment holding byte ack-1, once per segment, sent before the ACK,
 * unless a segment the ACK covers (that one or one before it) was retransmitted (Karn:
 * SegLog.rx, from before the run or marked by its resends, in row order). */
static int seg_match(dir_t *D) {
    Py_ssize_t n0 = D->log[0].n;
    if (vextend(&D->st, D->log[0].v, n0) < 0 || vextend(&D->en, D->log[1].v, n0) < 0 ||
        vextend(&D->t, D->log[2].v, n0) < 0 || vextend(&D->rx, D->rx_log.v, n0) < 0 ||
        vextend(&D->st, D->new_st.v, D->new_st.n) < 0 || vextend(&D->en, D->new_en.v, D->new_en.n) < 0 ||
        vextend(&D->t, D->new_t.v, D->new_t.n) < 0 || vreserve(&D->rx, n0 + D->new_st.n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < D->new_st.n; i++) D->rx.v[D->rx.n++] = 0;
    D->sampled_out = D->sampled_end;
    Py_ssize_t n = D->en.n, m = 0; /* m: the next resend */
    const int64_t *st = D->st.v, *en = D->en.v, *t = D->t.v, *rx = D->rx.v;
    Py_ssize_t j = 0, h = 0, prev_jj = -1;
    for (Py_ssize_t i = 0; i < D->A.n && n; i++) {
        for (; m < D->n_rs && D->rs[m].row < D->A_row.v[i]; m++)
            if (resend_marks(D, &D->rs[m], h) < 0) return -1;
        int64_t a = D->A.v[i], ta = D->TA.v[i];
        while (j < n && en[j] < a) j++; /* searchsorted(en, a, "left"); ACKs increase */
        int any_rx = 0;                  /* SegLog.ack: the entries this ACK covers, and a partly covered one */
        for (; h < n && en[h] <= a; h++) any_rx |= rx[h] != 0;
        if (h < n && st[h] < a) any_rx |= rx[h] != 0;
        if (any_rx) continue; /* no sample, and the segment is not marked sampled: a later ACK may take it */
        Py_ssize_t jj = j < n ? j : n - 1;
        int ok = j < n && st[jj] < a && t[jj] <= ta && en[jj] > D->sampled_end && (i == 0 || jj != prev_jj);
        prev_jj = jj;
        if (ok) {
            if (vpush(&D->smp_t, ta) < 0 || vpush(&D->smp_v, ta - t[jj]) < 0 || vpush(&D->smp_row, D->A_row.v[i]) < 0)
                return -1;
            D->sampled_out = en[jj];
        }
    }
    for (; m < D->n_rs; m++)
        if (resend_marks(D, &D->rs[m], h) < 0) return -1;
    if (n == 0 || D->A.n == 0) return 0;
    int64_t acked = D->A.v[D->A.n - 1]; /* keep what the cumulative ACK has not covered */
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (en[i] > acked) {
            D->st.v[w] = st[i];
            D->en.v[w] = en[i];
            D->t.v[w] = t[i];
            D->rx.v[w] = rx[i];
            w++;
        }
    D->st.n = D->en.n = D->t.n = D->rx.n = w;
    return 0;
}

/* TSvals and TSecr samples (BulkPath._tsq_extend, TsLog.add and echo): the run's TSvals
 * (new data and resends) and, when e_on, the far end's echoes, in row order. A TSval newer
 * than any seen and than the latest echo is added; a resend's that equals the newest
 * lowers that entry's offset. The first echo of each value (unwrapped from tsv_ref, and
 * kept in E_u for the Eifel check) gives a sample when it matches a TSval sent before the
 * ACK and the ACK covers nothing first sent with a newer one. */
static int tsq_match(dir_t *D, int e_on, int64_t tsv_ref) {
    const int64_t *otv = D->log[3].v;
    Py_ssize_t n0 = D->log[3].n;
    if (vextend(&D->tv, otv, n0) < 0 || vextend(&D->tt, D->log[4].v, n0) < 0 ||
        vextend(&D->ts, D->log[5].v, n0) < 0 || vreserve(&D->tv, n0 + D->new_tv.n) < 0 ||
        vreserve(&D->tt, n0 + D->new_tv.n) < 0 || vreserve(&D->ts, n0 + D->new_tv.n) < 0)
        return -1;
    int64_t run = n0 ? otv[n0 - 1] : -1, erun = D->last_echo, e = tsv_ref;
    Py_ssize_t i = 0, q = 0, lo = 0, ne = e_on ? D->E.n : 0;
    while (i < D->new_tv.n || q < ne) {
        if (i < D->new_tv.n && (q >= ne || D->new_trow.v[i] < D->E_row.v[q])) { /* a TSval sent */
            int64_t v = D->new_tv.v[i], start = D->new_ts.v[i];
            Py_ssize_t n = D->tv.n;
            if (v > run && v > erun) {
                if (vpush(&D->tv, v) < 0 || vpush(&D->tt, D->new_tt.v[i]) < 0 || vpush(&D->ts, start) < 0) return -1;
            } else if (v == run && v > erun && n > lo && D->tv.v[n - 1] == v && start < D->ts.v[n - 1]) {
                D->ts.v[n - 1] = start;
            }
            if (v > run) run = v;
            i++;
            continue;
        }
        e = unwrap_step(e, D->E.v[q]); /* an echo */
        if (vpush(&D->E_u, e) < 0) return -1;
        Py_ssize_t k = q++;
        if (e <= erun) continue; /* not the first echo of this value */
        erun = e;
        Py_ssize_t n = D->tv.n;
        if (n == 0) continue;
        const int64_t *tv = D->tv.v, *tt = D->tt.v, *ts = D->ts.v;
        while (lo < n && tv[lo] < e) lo++; /* searchsorted(tv, e, "left"); first echoes increase */
        Py_ssize_t kc = lo < n ? lo : n - 1, nx = kc + 1 < n ? kc + 1 : n - 1;
        int64_t et = D->ET.v[k];
        /* nothing first sent with a newer TSval below the ACK (see TsLog) */
        int later_ok = kc + 1 >= n || ts[nx] >= D->EA.v[k];
        if (lo < n && tv[kc] == e) {
            if (tt[kc] <= et && later_ok &&
                (vpush(&D->tsmp_t, et) < 0 || vpush(&D->tsmp_v, et - tt[kc]) < 0 || vpush(&D->tsmp_row, D->E_row.v[k]) < 0))
                return -1;
            lo++; /* (TsLog.echo moves past the matched value) */
        }
    }
    int64_t last_echo = erun > D->last_echo ? erun : D->last_echo;
    Py_ssize_t w = 0; /* keep the TSvals not echoed yet */
    for (Py_ssize_t x = 0; x < D->tv.n; x++)
        if (D->tv.v[x] > last_echo) {
            D->tv.v[w] = D->tv.v[x];
            D->tt.v[w] = D->tt.v[x];
            D->ts.v[w] = D->ts.v[x];
            w++;
        }
    D->tv.n = D->tt.n = D->ts.n = w;
    D->last_echo_out = last_echo;
    return 0;
}

/* Smoothed and minimum RTT after this run's samples (BulkPath._fast_srtt): data->ACK and
 * TSecr samples merged by time, data->ACK first on a tie, folded as ewma() does. */
static void fold_srtt(dir_t *D) {
    Py_ssize_t i = 0, j = 0, n1 = D->smp_t.n, n2 = D->tsmp_t.n;
    while (i < n1 || j < n2) {
        int64_t r;
        if (j >= n2 || (i < n1 && D->smp_t.v[i] <= D->tsmp_t.v[j])) r = D->smp_v.v[i++];
        else r = D->tsmp_v.v[j++];
        fold_one(&D->srtt, &D->have_srtt, r);
        if ((i + j == 1) || r < D->min_rtt) D->min_rtt = r;
    }
}

/* One row as fast_run reads it: pack_rows lays a batch's rows out in flow order, so a
 * connection's run is one sequential read (its rows are scattered over the batch's
 * columns, a cache miss per column and row when read in place). */
typedef struct {
    int64_t ts, frame, poff;
    uint32_t seq, ack, tsv, tse;
    int32_t wl, pl, ipid, row;
    uint16_t win;
    uint8_t flags, bits; /* bits: ROW_SWAP | ROW_HAS_TS | ROW_SACK | ROW_MSS */
    int8_t wscale;       /* the per-packet path's only (take_rows) */
    uint8_t ipver;
    uint16_t mss;        /* with ROW_MSS; without, the column's -1 */
} rec_t;
_Static_assert(sizeof(rec_t) == 64, "one cache line per row");
enum { ROW_SWAP = 1, ROW_HAS_TS = 2, ROW_SACK = 4, ROW_MSS = 8 };

/* A retransmission waiting for its verdict (LossPath._timeouts): when it was sent, when
 * the cumulative ACK covered it (-1: not yet), what it resent; then what the run decides:
 * the covered time as the run leaves it (cover_rows) and the row its verdict falls after
 * (verdict_rows, -1: none). */
typedef struct {
    int64_t ts, covered, start, tsv; /* tsv: the retransmission's TSval, unwrapped (when has_tsv) */
    int dir, has_tsv;                /* dir: the direction whose bytes it resent */
    Py_ssize_t row;                  /* the row that resent it (-1: before the run) */
    resend_t *rs;                    /* the run's resend (NULL: before the run) */
    int64_t covered_out;
    Py_ssize_t verdict;
} waiting_t;

/* Those waiting, the connection's handshake RTT (-1: none), _limits.PENDING_RETX_NS and
 * DSACK_GRACE_NS. */
typedef struct {
    Py_ssize_t n, n_in, cap; /* n_in: those given; the run's resends follow, in row order */
    waiting_t *w;
    long long hs_rtt, pending_ns, grace_ns;
    int resend;                          /* the run takes resends: their constants follow */
    long long fast_win_ns, rto_min_ns;
} pend_t;

/* Room for cap retransmissions in P. */
static int pend_reserve(pend_t *P, Py_ssize_t cap) {
    if (cap <= P->cap) return 0;
    waiting_t *w = PyMem_Realloc(P->w, (size_t)cap * sizeof(waiting_t));
    if (w == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    P->w = w;
    P->cap = cap;
    return 0;
}

static int parse_pending(PyObject *o, pend_t *P) {
    PyObject *list, *hs, *resend = Py_None;
    if (!PyArg_ParseTuple(o, "O!OLL|O", &PyList_Type, &list, &hs, &P->pending_ns, &P->grace_ns, &resend)) return -1;
    P->hs_rtt = -1;
    if (hs != Py_None && ((P->hs_rtt = PyLong_AsLongLong(hs)) == -1 && PyErr_Occurred())) return -1;
    P->resend = resend != Py_None;
    if (P->resend && !PyArg_ParseTuple(resend, "LL", &P->fast_win_ns, &P->rto_min_ns)) return -1;
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (pend_reserve(P, n ? n : 1) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long t, c, s, v = 0;
        int d;
        PyObject *tsv;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "LLLOi", &t, &c, &s, &tsv, &d)) return -1;
        if (tsv != Py_None && (v = PyLong_AsLongLong(tsv)) == -1 && PyErr_Occurred()) return -1;
        if (d != 0 && d != 1) {
            PyErr_SetString(PyExc_ValueError, "fast_run: a pending retransmission's direction must be 0 or 1");
            return -1;
        }
        P->w[i] = (waiting_t){.ts = t, .covered = c, .start = s, .tsv = v, .dir = d, .has_tsv = tsv != Py_None, .row = -1};
    }
    P->n = P->n_in = n;
    return 0;
}

/* The run's resends join the retransmissions waiting for a verdict, in row order. */
static int pend_add_resends(pend_t *P, dir_t *dirs) {
    P->n = P->n_in;
    if (pend_reserve(P, P->n_in + dirs[0].n_rs + dirs[1].n_rs) < 0) return -1;
    Py_ssize_t a = 0, b = 0;
    while (a < dirs[0].n_rs || b < dirs[1].n_rs) {
        int d = b >= dirs[1].n_rs || (a < dirs[0].n_rs && dirs[0].rs[a].row < dirs[1].rs[b].row) ? 0 : 1;
        resend_t *q = d ? &dirs[1].rs[b++] : &dirs[0].rs[a++];
        P->w[P->n++] = (waiting_t){.ts = q->ts, .covered = -1, .start = q->s, .tsv = q->tsv, .dir = d,
                                   .has_tsv = q->has_tsv, .row = q->row, .rs = q};
    }
    return 0;
}

/* The smoothed RTTs of both directions walked through a run row by row: each row's
 * samples folded in the per-packet path's order (PacketPath._advance: data->ACK, then
 * TSecr), from the RTTs before the run. */
typedef struct {
    double s[2];
    int have[2];
    Py_ssize_t i[2], j[2]; /* the next data->ACK and TSecr sample of each direction */
} srtt_walk_t;

static void srtt_walk_init(srtt_walk_t *w, const dir_t *dirs) {
    memset(w, 0, sizeof(*w));
    for (int d = 0; d < 2; d++) {
        w->s[d] = dirs[d].srtt0;
        w->have[d] = dirs[d].have_srtt0;
    }
}

/* Fold the samples of the rows up to `row`. */
static void srtt_walk_to(srtt_walk_t *w, const dir_t *dirs, Py_ssize_t row) {
    for (int d = 0; d < 2; d++) {
        const dir_t *D = &dirs[d];
        Py_ssize_t *i = &w->i[d], *j = &w->j[d];
        for (;;) {
            int a = *i < D->smp_row.n && D->smp_row.v[*i] <= row;
            int b = *j < D->tsmp_row.n && D->tsmp_row.v[*j] <= row;
            if (a && (!b || D->smp_row.v[*i] <= D->tsmp_row.v[*j])) fold_one(&w->s[d], &w->have[d], D->smp_v.v[(*i)++]);
            else if (b) fold_one(&w->s[d], &w->have[d], D->tsmp_v.v[(*j)++]);
            else break;
        }
    }
}

/* Conn.full_rtt() as the walk stands; *known: not None. */
static double srtt_walk_full(const srtt_walk_t *w, long long hs_rtt, int *known) {
    *known = w->have[0] || w->have[1] || hs_rtt >= 0;
    return w->have[0] || w->have[1] ? (w->have[0] ? w->s[0] : 0.0) + (w->have[1] ? w->s[1] : 0.0) : (double)hs_rtt;
}

/* Each resend's kind (LossPath._retx_kind) with the smoothed RTTs as the rows before it,
 * and its own row's ACK, leave them (the samples folded by row, as verdict_rows does). */
static void resend_kinds(dir_t *dirs, const pend_t *P) {
    srtt_walk_t walk;
    srtt_walk_init(&walk, dirs);
    for (Py_ssize_t q = P->n_in; q < P->n; q++) {
        resend_t *x = P->w[q].rs;
        srtt_walk_to(&walk, dirs, x->row);
        int known;
        double full = srtt_walk_full(&walk, P->hs_rtt, &known);
        int truthy = known && full != 0.0;
        double fast_win = (double)P->fast_win_ns, rto = (double)P->rto_min_ns;
        if (truthy && 2.0 * full > fast_win) fast_win = 2.0 * full;
        if (truthy && 1.5 * full > rto) rto = 1.5 * full;
        if (x->dupacks >= 2 && x->s <= x->acked && (double)(x->ts - x->dupack_ts) <= fast_win) x->kind = RESEND_FAST;
        else if (x->sack_hi > x->s && (double)(x->ts - x->sack_ts) <= fast_win) x->kind = RESEND_FAST;
        else if (x->has_orig && (double)(x->ts - x->t_orig) >= rto && x->ts - x->progress_ts >= P->rto_min_ns)
            x->kind = RESEND_RTO;
        else x->kind = RESEND_PLAIN;
    }
}

/* The ACKs that cover retransmissions still waiting for theirs (PacketPath._advance):
 * the first advancing ACK past a retransmission's start sets its covered time (then the
 * D-SACK grace runs, verdict_rows). An ACK that echoes a TSval older than the
 * retransmission's makes it spurious (Eifel, RFC 3522), which the per-packet path decides
 * (the burst it belonged to shrinks): returns the row of the first such ACK, the run to
 * end before it, or k. covered_out: the input's where none covers. */
static Py_ssize_t cover_rows(const dir_t *dirs, Py_ssize_t k, pend_t *P) {
    Py_ssize_t stop = k;
    for (Py_ssize_t q = 0; q < P->n; q++) {
        waiting_t *p = &P->w[q];
        p->covered_out = p->covered;
        if (p->covered >= 0) continue;
        const dir_t *D = &dirs[p->dir];
        for (Py_ssize_t i = 0, e = 0; i < D->A.n; i++) {
            if (D->A_row.v[i] <= p->row || D->A.v[i] <= p->start || D->TA.v[i] < p->ts) continue;
            Py_ssize_t row = D->A_row.v[i];
            while (e < D->E_row.n && D->E_row.v[e] < row) e++;
            if (p->has_tsv && e < D->E_u.n && D->E_row.v[e] == row && D->E_u.v[e] < p->tsv) {
                if (row < stop) stop = row;
            } else {
                p->covered_out = D->TA.v[i];
            }
            break;
        }
    }
    return stop;
}

/* The verdicts the per-packet path gives on pending retransmissions over rows [0, k)
 * (LossPath._timeouts, after each row: sent more than pending_ns ago, or covered by the
 * ACK more than max(grace_ns, 4 full RTTs) ago, the smoothed RTTs as the rows up to this
 * one leave them; the covered times cover_rows left): each one's verdict row. Such a verdict only hands out the retransmission's event (no D-SACK, no
 * Eifel: those rows go per packet), so the run goes on past it. Returns the first row earlier than the row
 * before it while a retransmission still waits (the RTT folds go by time: the run ends
 * there, to be safe), or k. */
static Py_ssize_t verdict_rows(const dir_t *dirs, const rec_t *rec, Py_ssize_t k, pend_t *P) {
    Py_ssize_t waiting = P->n;
    for (Py_ssize_t q = 0; q < P->n; q++) P->w[q].verdict = -1;
    srtt_walk_t walk;
    srtt_walk_init(&walk, dirs);
    for (Py_ssize_t r = 0; r < k && waiting; r++) {
        int64_t ts = rec[r].ts;
        if (r && ts < rec[r - 1].ts) return r;
        srtt_walk_to(&walk, dirs, r); /* (this row's samples too: _timeouts runs after the row) */
        int known;
        double full = srtt_walk_full(&walk, P->hs_rtt, &known);
        double grace = (double)P->grace_ns;
        if (known && full != 0.0 && 4.0 * full > grace) grace = 4.0 * full;
        for (Py_ssize_t q = 0; q < P->n; q++) {
            waiting_t *p = &P->w[q];
            if (p->verdict < 0 &&
                (ts - p->ts > P->pending_ns || (p->covered_out >= 0 && (double)(ts - p->covered_out) > grace))) {
                p->verdict = r;
                waiting--;
            }
        }
    }
    return k;
}

/* Columns of the SegmentBatch, in pack_rows' argument order: item size each. */
enum { F_FLAGS, F_WL, F_PL, F_WIN, F_SACK, F_SWAP, F_SEQ, F_ACK, F_TS, F_FRAME, F_HAS_TS, F_TSV, F_TSE, F_IPID,
       F_POFF, F_ORDER, F_WSCALE, F_MSS, F_IPVER, F_COUNT };
static const Py_ssize_t col_size[F_COUNT] = {1, 4, 4, 2, 1, 1, 4, 4, 8, 8, 1, 4, 4, 4, 8, 8, 1, 4, 1};

/* What scan and the signature helpers read besides the rows and the state. */
typedef struct {
    int client_is_lo, keep;
    PyObject *sacks;          /* SegmentBatch.sack: row -> [(left, right), ...] (raw numbers), or None */
    int64_t dw_ipid, dw_noid; /* capture-duplicate windows (_limits.DUP_WINDOW_IPID_NS, _NOID_NS) */
    int resend;               /* the run takes retransmissions of bytes the capture saw (see scan) */
} run_ctx_t;

static inline int side(const run_ctx_t *c, const rec_t *x) {
    return (x->bits & ROW_SWAP) != 0 ? c->client_is_lo : !c->client_is_lo;
}

/* The SACK blocks of row x as raw numbers (left, right, left, ...): their count, 0 when it
 * has none; *list: the batch's list of them (borrowed), NULL when none. -1 on error, -2
 * when more than MAX_SACK_BLOCKS (that row goes per packet). */
static int row_blocks(const run_ctx_t *c, const rec_t *x, int64_t *out, PyObject **list) {
    *list = NULL;
    if (!(x->bits & ROW_SACK) || c->sacks == Py_None) return 0;
    PyObject *key = PyLong_FromLong(x->row);
    if (key == NULL) return -1;
    PyObject *l = PyDict_GetItemWithError(c->sacks, key);
    Py_DECREF(key);
    if (l == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyList_Check(l)) goto bad;
    Py_ssize_t n = PyList_GET_SIZE(l);
    if (n > MAX_SACK_BLOCKS) return -2;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyList_GET_ITEM(l, i);
        if (!PyTuple_Check(b) || PyTuple_GET_SIZE(b) != 2) goto bad;
        for (int j = 0; j < 2; j++) { /* (ints, or what has __index__: numpy's) */
            out[2 * i + j] = PyLong_AsLongLong(PyTuple_GET_ITEM(b, j));
            if (out[2 * i + j] == -1 && PyErr_Occurred()) return -1;
        }
    }
    *list = n ? l : NULL;
    return (int)n;
bad:
    PyErr_SetString(PyExc_TypeError, "fast_run: a row's SACK blocks must be a list of (left, right)");
    return -1;
}

/* A packet's signature as the per-packet path keys capture duplicates
 * (_state.packet_signature): IP ID, seq, ack, flags, wire payload length, window, TSval or
 * -1, then the nb SACK blocks' numbers (left, right, ...), each a little-endian int64, as
 * one bytes object. */
static PyObject *row_sig(const rec_t *x, const int64_t *blk, int nb) {
    int64_t v[7 + 2 * MAX_SACK_BLOCKS] = {x->ipid, (int64_t)x->seq, (int64_t)x->ack, x->flags, x->wl, x->win,
                                          (x->bits & ROW_HAS_TS) ? (int64_t)x->tsv : -1};
    int n = 7 + 2 * nb;
    for (int i = 0; i < 2 * nb; i++) v[7 + i] = blk[i];
    unsigned char out[8 * (7 + 2 * MAX_SACK_BLOCKS)];
    for (int i = 0; i < n; i++) {
        uint64_t u = (uint64_t)v[i];
        for (int j = 0; j < 8; j++) out[8 * i + j] = (unsigned char)(u >> (8 * j));
    }
    return PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(8 * n));
}

/* How long after a packet its capture duplicate is taken for one (0: never looked for). */
static inline int64_t dup_window(const run_ctx_t *c, const rec_t *x) {
    if (x->ipid > 0) return c->dw_ipid;
    return (x->wl || (x->bits & ROW_HAS_TS)) ? c->dw_noid : 0;
}

/* Might the per-packet path drop row r as a capture duplicate: the same signature on one
 * of its side's last `keep` packets that have one (in this run, or before it: D->sigd),
 * within the duplicate window? Asked for the pure ACKs that repeat their side's last ACK
 * number and for resends (its original may be the same packet captured twice), the only
 * rows of a clean run that can repeat a signature. Also yes when the
 * match is older than the per-packet path still remembers: the run then ends early, which
 * changes nothing. 1 yes, 0 no, -1 error. */
static int maybe_capture_dup(const run_ctx_t *c, const dir_t *D, const rec_t *rec, Py_ssize_t r, const int64_t *blk,
                             int nb) {
    const rec_t *x = &rec[r];
    int64_t dw = dup_window(c, x);
    if (dw == 0) return 0;
    int xd = side(c, x), xts = (x->bits & ROW_HAS_TS) != 0;
    int seen = 0;
    for (Py_ssize_t q = r - 1; q >= 0 && seen < c->keep; q--) {
        if (r - q > 8 * (Py_ssize_t)c->keep) return 1; /* that far back unsure: end the run (bounded cost) */
        const rec_t *y = &rec[q];
        if (side(c, y) != xd || dup_window(c, y) == 0) continue;
        seen++;
        int yts = (y->bits & ROW_HAS_TS) != 0;
        if (y->ipid != x->ipid || y->seq != x->seq || y->ack != x->ack || y->flags != x->flags || y->wl != x->wl ||
            y->win != x->win || yts != xts || (xts && y->tsv != x->tsv) || x->ts - y->ts < 0 || x->ts - y->ts > dw)
            continue;
        int64_t yb[2 * MAX_SACK_BLOCKS];
        PyObject *yl;
        int ny = row_blocks(c, y, yb, &yl);
        if (ny == -1) return -1;
        if (ny == nb && (nb == 0 || memcmp(yb, blk, (size_t)(2 * nb) * sizeof(int64_t)) == 0)) return 1;
    }
    PyObject *sig = row_sig(x, blk, nb);
    if (sig == NULL) return -1;
    PyObject *t0 = PyDict_GetItemWithError(D->sigd, sig);
    Py_DECREF(sig);
    if (t0 == NULL) return PyErr_Occurred() ? -1 : 0;
    long long t = PyLong_AsLongLong(t0);
    if (t == -1 && PyErr_Occurred()) return -1;
    return x->ts - t >= 0 && x->ts - t <= dw;
}

/* Does the row's IP id skip 2-64 numbers while its side numbers packets one by one
 * (_analyzer._before_ipid_gap, with the counters as they stand before the row)? That
 * row is the per-packet path's: it records the packets lost upstream of the capture
 * point. Walks every row of the window in order, whether the run takes it or not. */
static int ipid_cut(dir_t *D, const rec_t *x) {
    int64_t id = x->ipid;
    if (D->cut_on < 0) D->cut_on = id >= 0;
    if (!D->cut_on) return 0;
    int64_t prev = D->cut_prev;
    D->cut_prev = id;
    if (id < 0 || prev < 0) return 0;
    int64_t delta = (id - prev) & 0xFFFF;
    int good = delta > 0 && delta <= 64, gap = good && delta >= 2;
    if (gap && D->cut_good >= 32 && D->cut_bad * 5 <= D->cut_good && D->cut_gaps * 8 <= D->cut_good) return 1;
    D->cut_good += good;
    D->cut_bad += !good;
    D->cut_gaps += gap;
    return 0;
}

/* The first loop: check each row, stop at the first that breaks a rule or has an IP id
 * gap (ipid_cut); returns k. *w: the row of the first IP id gap (the run may take the
 * rows before it), n when there is none; it is only looked for up to row min_rows when
 * the run stops before that (below min_rows rows before a gap, no run is made). A data
 * row below the highest offset is taken (c->resend) as a resend (resend_t: what the
 * per-packet path reads at it), in-order data and pure ACKs as they always are. */
static Py_ssize_t scan(dir_t *dirs, const rec_t *rec, Py_ssize_t n, const run_ctx_t *c, vec_t *chunks,
                       Py_ssize_t min_rows, Py_ssize_t *w_out) {
    Py_ssize_t r;
    *w_out = n;
    for (int d = 0; d < 2; d++) {
        dir_t *D = &dirs[d], *R = &dirs[1 - d];
        D->s_run = D->seq_ref;
        D->hi_run = D->hi;
        D->a_run = R->ack_ref;
        D->arel_prev = R->acked;
        D->a32_prev = D->last_ack32;
        D->wd_prev = D->last_win;
        D->ipid_prev = D->ipid_last;
        D->far_acked = D->acked;
        D->far_rw = D->rwnd;
        D->max_edge = INT64_MIN;
        D->cut_on = -1;
        D->cut_prev = D->ipid_last;
        D->cut_good = D->ipid_good_in;
        D->cut_bad = D->ipid_bad_in;
        D->cut_gaps = D->ipid_gaps_in;
    }
    for (r = 0; r < n; r++) {
        const rec_t *x = &rec[r];
        if (ipid_cut(&dirs[side(c, x)], x)) {
            *w_out = r;
            return r;
        }
        uint8_t fl = x->flags;
        int64_t w = x->wl, wd = x->win;
        if ((fl & 0x07) || !(fl & 0x10) || w != x->pl || wd == 0) break;
        int d = side(c, x);
        dir_t *D = &dirs[d], *R = &dirs[1 - d];
        if (!D->base_known) break; /* first packet of this direction: per-packet path */
        int64_t s_abs = unwrap_step(D->s_run, x->seq), rel = s_abs - D->base;
        /* a resend: old bytes only, not a keep-alive probe, not already ACKed or SACKed
         * (spurious at once: per packet), not a capture duplicate of the original */
        int resend = rel != D->hi_run;
        if (resend && !(c->resend && w > 1 && rel < D->hi_run && rel + w <= D->hi_run && rel + w > D->far_acked &&
                        D->n_blocks >= 0))
            break;
        if (resend && D->sacks_state != 1) {
            int covered = 0;
            for (int i = 0; i < D->n_blocks; i++) covered |= D->blocks[2 * i] <= rel && rel + w <= D->blocks[2 * i + 1];
            if (covered) break;
        }
        int64_t blk[2 * MAX_SACK_BLOCKS], sack_rel[2 * MAX_SACK_BLOCKS];
        PyObject *blocks;
        int nb = row_blocks(c, x, blk, &blocks);
        if (nb == -1) return -1;
        if (nb == -2) break;
        int64_t a32 = x->ack, a_rel = 0;
        int dup = 0;
        if (R->base_known) {
            int64_t a_abs = unwrap_step(D->a_run, a32);
            a_rel = a_abs - R->base;
            if (a_rel < D->arel_prev) break;
            if (a_rel > R->hi_run) break; /* ACKs bytes the capture has not seen */
            if (resend) {
                int cd = maybe_capture_dup(c, D, rec, r, blk, nb);
                if (cd < 0) return -1;
                if (cd) break;
            }
            if (w == 0 && a32 == D->a32_prev) {
                int cd = maybe_capture_dup(c, D, rec, r, blk, nb);
                if (cd < 0) return -1;
                if (cd) break;
                dup = wd == D->wd_prev; /* a duplicate ACK (tshark's rule; see _analysis) */
            }
            if (nb) { /* blocks relative to the ACK reference before this row */
                for (int i = 0; i < 2 * nb; i++) sack_rel[i] = unwrap_step(D->a_run, blk[i]) - R->base;
                if (sack_rel[1] <= a_rel || (nb > 1 && sack_rel[2] <= sack_rel[0] && sack_rel[1] <= sack_rel[3]))
                    break; /* a D-SACK may decide a retransmission's verdict: per packet */
            }
            D->a_run = a_abs;
        } else if (nb || resend) {
            break;
        }
        /* the row is clean: apply it */
        if (!resend) D->s_run = s_abs;
        D->kd++;
        int64_t t = x->ts;
        int64_t tv_u = 0;
        int row_ts = (x->bits & ROW_HAS_TS) != 0;
        if (row_ts) {
            tv_u = unwrap_step(D->any_ts ? D->ts_cur : (D->tsv_known ? D->tsv_u : x->tsv), x->tsv);
            if (!D->any_ts || tv_u > D->tsv_max) D->tsv_max = tv_u;
            D->ts_cur = tv_u;
            D->any_ts = 1;
        }
        if (resend) { /* what LossPath._retx_seen reads, as the row finds it */
            resend_t *q = rs_push(D);
            if (q == NULL) return -1;
            q->row = r;
            q->s = rel;
            q->e = rel + w;
            q->ts = t;
            q->frame = x->frame;
            q->has_tsv = row_ts;
            q->tsv = tv_u;
            q->acked = D->far_acked;
            q->dupacks = D->dupacks;
            q->dupack_ts = D->dupack_ts;
            q->sack_hi = D->sack_hi;
            q->sack_ts = D->sack_ts;
            q->progress_ts = D->TA.n ? D->TA.v[D->TA.n - 1] : D->progress_in;
            q->hi = D->hi_run;
            if (row_ts && (vpush(&D->new_tv, tv_u) < 0 || vpush(&D->new_tt, t) < 0 || vpush(&D->new_ts, rel) < 0 ||
                           vpush(&D->new_trow, r) < 0))
                return -1;
            if (rel + w >= D->far_acked + D->far_rw) /* window full, as for new data */
                if (vpush(&D->wf_pos, r) < 0 || vpush(&D->wf_s, rel) < 0 || vpush(&D->wf_n, w) < 0) return -1;
        } else if (w > 0) {
            int64_t end = rel + w;
            if (vpush(&D->new_st, rel) < 0 || vpush(&D->new_en, end) < 0 || vpush(&D->new_t, t) < 0) return -1;
            if (row_ts && (vpush(&D->new_tv, tv_u) < 0 || vpush(&D->new_tt, t) < 0 || vpush(&D->new_ts, rel) < 0 ||
                           vpush(&D->new_trow, r) < 0))
                return -1;
            D->nd++;
            D->hi_run = end;
            D->hi_ts = t;
            D->hi_ipid = x->ipid;
            D->hi_tsv_known = row_ts;
            D->hi_tsv = tv_u;
            int64_t ch[RUN_NCOLS];
            ch[RUN_DIRECTION] = d;
            ch[RUN_TS_NS] = t;
            ch[RUN_FRAME_NO] = x->frame;
            ch[RUN_STREAM_OFFSET] = rel;
            ch[RUN_START] = x->poff;
            ch[RUN_END] = x->poff + x->pl;
            for (int i = 0; i < RUN_NCOLS; i++)
                if (vpush(chunks, ch[i]) < 0) return -1;
            /* window full: data reaching the far end's advertised window (filtered later) */
            if (end >= D->far_acked + D->far_rw)
                if (vpush(&D->wf_pos, r) < 0 || vpush(&D->wf_s, rel) < 0 || vpush(&D->wf_n, w) < 0) return -1;
        }
        int64_t id = x->ipid;
        if (D->kd == 1) D->ipid_on = id >= 0;
        if (D->ipid_on) {
            if (D->ipid_prev >= 0) {
                int64_t delta = (id - D->ipid_prev) & 0xFFFF;
                if (delta > 0 && delta <= 64) D->ipid_good++;
                else D->ipid_bad++;
                if (id >= 0 && delta >= 2 && delta <= 64) D->ipid_gaps_run++;
            }
            D->ipid_prev = id;
            D->ipid_ts = t;
        }
        if (R->base_known) {
            D->any_a32 = 1;
            D->last_a32 = a32;
            D->last_wd = wd;
            int64_t edge = a_rel + shl(shl(wd, D->ws), D->ws_known ? 0 : 14);
            if (edge > D->max_edge) D->max_edge = edge;
            D->arel_prev = a_rel;
            D->a32_prev = a32;
            D->wd_prev = wd;
            /* far end (R's data): ACK progress, and what the window-full check uses */
            R->far_rows = 1;
            R->far_a_abs = D->a_run;
            if (dup) { /* (_analysis.PacketPath._ack's order: duplicate ACK, SACK blocks, progress) */
                R->dupacks++;
                R->dupack_ts = t;
                if (vpush(&R->dup_pos, r) < 0 || vpush(&R->dup_arel, a_rel) < 0) return -1;
            }
            if (nb) {
                memcpy(R->blocks, sack_rel, (size_t)(2 * nb) * sizeof(int64_t));
                R->n_blocks = nb;
                R->sacks_state = 2;
                for (int i = 1; i < 2 * nb; i += 2)
                    if (sack_rel[i] > R->sack_hi) R->sack_hi = sack_rel[i];
                R->sack_ts = t;
            }
            if (a_rel > R->far_acked) {
                if (vpush(&R->A, a_rel) < 0 || vpush(&R->TA, t) < 0 || vpush(&R->A_row, r) < 0) return -1;
                if (row_ts && (vpush(&R->E, x->tse) < 0 || vpush(&R->EA, a_rel) < 0 || vpush(&R->ET, t) < 0 ||
                               vpush(&R->E_row, r) < 0))
                    return -1;
                R->dupacks = 0;
                if (R->sack_hi && a_rel >= R->sack_hi) {
                    R->sack_hi = 0;
                    R->sacks_state = 1;
                }
            }
            R->far_acked = a_rel;
            R->far_rw = shl(wd, D->ws);
        }
    }
    for (Py_ssize_t q = r + 1; q < min_rows && q < n; q++) /* a gap close after the stop: no run */
        if (ipid_cut(&dirs[side(c, &rec[q])], &rec[q])) {
            *w_out = q;
            break;
        }
    return r;
}

/* The last `keep` records of each direction in [0, k), oldest first (their packet
 * signatures are remembered for capture-duplicate detection). */
static int tails(dir_t *dirs, const rec_t *rec, const run_ctx_t *c, Py_ssize_t k, int keep) {
    for (Py_ssize_t r = k - 1; r >= 0 && (dirs[0].tail.n < keep || dirs[1].tail.n < keep); r--) {
        int d = side(c, &rec[r]);
        if (dirs[d].tail.n < keep && vpush(&dirs[d].tail, r) < 0) return -1;
    }
    for (int d = 0; d < 2; d++) {
        int64_t *v = dirs[d].tail.v;
        for (Py_ssize_t i = 0, j = dirs[d].tail.n - 1; i < j; i++, j--) {
            int64_t x = v[i];
            v[i] = v[j];
            v[j] = x;
        }
    }
    return 0;
}

/* The signatures of the tail records (row_sig), remembered as the per-packet path does
 * (capture-duplicate detection): signature -> ts_ns in Dir.sigd and, in order, in
 * Dir.sigq, which keeps the last `keep` (the oldest leaves both), for the packets that have
 * an IP ID, payload or a TSval. 0, or -1 on error. */
static int remember_sigs(const run_ctx_t *c, const dir_t *D, const rec_t *rec, int keep) {
    for (Py_ssize_t i = 0; i < D->tail.n; i++) {
        const rec_t *x = &rec[D->tail.v[i]];
        if (dup_window(c, x) == 0) continue; /* no signature kept (PacketPath._packet's rule) */
        int64_t blk[2 * MAX_SACK_BLOCKS];
        PyObject *blocks;
        int nb = row_blocks(c, x, blk, &blocks);
        if (nb == -1) return -1; /* (-2: more blocks than a run takes, not here) */
        PyObject *sig = row_sig(x, blk, nb);
        PyObject *t = sig ? PyLong_FromLongLong((long long)x->ts) : NULL;
        int err = t == NULL || PyDict_SetItem(D->sigd, sig, t) < 0 || PyList_Append(D->sigq, sig) < 0;
        Py_XDECREF(t);
        Py_XDECREF(sig);
        if (err) return -1;
        if (PyList_GET_SIZE(D->sigq) > keep) { /* the oldest leaves both */
            PyObject *old = PyList_GET_ITEM(D->sigq, 0);
            Py_INCREF(old);
            err = PyList_SetSlice(D->sigq, 0, 1, NULL) < 0;
            int has = err ? 0 : PyDict_Contains(D->sigd, old);
            err = err || has < 0 || (has && PyDict_DelItem(D->sigd, old) < 0);
            Py_DECREF(old);
            if (err) return -1;
        }
    }
    return 0;
}

/* Dir.sacks after the run: None (as before it), [] or the last blocks, (left, right) offsets. */
static PyObject *sacks_after(const dir_t *D) {
    if (D->sacks_state == 0) return Py_NewRef(Py_None);
    int n = D->sacks_state == 2 ? D->n_blocks : 0;
    PyObject *l = PyList_New(n);
    for (int i = 0; l != NULL && i < n; i++) {
        PyObject *b = Py_BuildValue("(LL)", (long long)D->blocks[2 * i], (long long)D->blocks[2 * i + 1]);
        if (b == NULL) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, b);
    }
    return l;
}

static PyObject *dir_result(dir_t *D, const rec_t *rec) {
    return Py_BuildValue(
        "{sn sn sL sL sL sL si sL si sL si sL sL sL si sL sL sL sN sN sN si sN sN sL sN sN sN sL sN sN "
        "sN sN sN sL sN sN sn si sN sL sL sL sL sL sL sL sN sN sN sN}",
        "kd", D->kd, "nd", D->nd, "s_abs", (long long)D->s_run, "hi", (long long)D->hi_run, "hi_ts",
        (long long)D->hi_ts, "hi_ipid", (long long)D->hi_ipid, "any_ts", D->any_ts, "tsv_max",
        (long long)D->tsv_max, "hi_tsv_known", D->hi_tsv_known, "hi_tsv", (long long)D->hi_tsv, "ipid_on",
        D->ipid_on, "ipid_good", (long long)D->ipid_good, "ipid_bad", (long long)D->ipid_bad, "ipid_last",
        (long long)D->ipid_prev, "any_a32", D->any_a32, "last_a32", (long long)D->last_a32, "last_wd",
        (long long)D->last_wd, "max_edge", (long long)D->max_edge, "wf_pos", vbytes(&D->wf_pos), "wf_s", vbytes(&D->wf_s), "wf_n", vbytes(&D->wf_n),
        "far_rows", D->far_rows, "A", vbytes(&D->A), "TA", vbytes(&D->TA), "far_a_abs", (long long)D->far_a_abs,
        "st", vlist(&D->st), "en", vlist(&D->en), "t", vlist(&D->t), "sampled_end",
        (long long)D->sampled_out, "smp_t", vbytes(&D->smp_t), "smp_v", vbytes(&D->smp_v), "tv",
        vlist(&D->tv), "tt", vlist(&D->tt), "ts", vlist(&D->ts), "last_echo", (long long)D->last_echo_out,
        "tsmp_t", vbytes(&D->tsmp_t), "tsmp_v", vbytes(&D->tsmp_v), "new_tv", D->new_tv.n, "e_on", D->e_on,
        "srtt", D->have_srtt ? PyFloat_FromDouble(D->srtt) : Py_NewRef(Py_None), "min_rtt", (long long)D->min_rtt,
        "ipid_gaps", (long long)D->ipid_gaps_run, "ipid_ts", (long long)D->ipid_ts, "sack_hi", D->sack_hi, "sack_ts",
        D->sack_ts, "dupacks", D->dupacks, "dupack_ts", D->dupack_ts, "sacks", sacks_after(D), "dup_pos",
        vbytes(&D->dup_pos), "dup_arel", vbytes(&D->dup_arel), "rx", vbools(&D->rx));
}

/* pack_rows(columns, out): writes the rows columns[F_ORDER] (int64 row indices) names, in
 * that order, as rec_t records to the start of the writable buffer out (at least 64 bytes
 * per row). columns: the F_* buffers (the SACK one may be None). */
static PyObject *pack_rows(PyObject *self, PyObject *args) {
    PyObject *cols;
    Py_buffer ob;
    if (!PyArg_ParseTuple(args, "O!w*", &PyTuple_Type, &cols, &ob)) return NULL;
    Py_buffer c[F_COUNT];
    int got[F_COUNT] = {0};
    int32_t *pos = NULL;
    if (PyTuple_GET_SIZE(cols) != F_COUNT) {
        PyErr_SetString(PyExc_TypeError, "pack_rows: wrong number of columns");
        goto done;
    }
    Py_ssize_t nb = -1;
    for (int i = 0; i < F_COUNT; i++) {
        PyObject *o = PyTuple_GET_ITEM(cols, i);
        if (i == F_SACK && o == Py_None) continue;
        if (PyObject_GetBuffer(o, &c[i], PyBUF_C_CONTIGUOUS) < 0) goto done;
        got[i] = 1;
        if (c[i].len % col_size[i]) goto bad;
        if (nb < 0) nb = c[i].len / col_size[i];
        if (c[i].len / col_size[i] != nb) goto bad;
    }
    if (nb > INT32_MAX || ob.len / (Py_ssize_t)sizeof(rec_t) < nb) goto bad;
    const uint8_t *flags = c[F_FLAGS].buf, *sack = got[F_SACK] ? c[F_SACK].buf : NULL, *swap = c[F_SWAP].buf,
                  *has_ts = c[F_HAS_TS].buf;
    const int32_t *wl = c[F_WL].buf, *pl = c[F_PL].buf, *ipid = c[F_IPID].buf;
    const uint16_t *win = c[F_WIN].buf;
    const uint32_t *seq = c[F_SEQ].buf, *ack = c[F_ACK].buf, *tsv = c[F_TSV].buf, *tse = c[F_TSE].buf;
    const int64_t *ts = c[F_TS].buf, *frame = c[F_FRAME].buf, *poff = c[F_POFF].buf, *order = c[F_ORDER].buf;
    const int8_t *wscale = c[F_WSCALE].buf;
    const int32_t *mss = c[F_MSS].buf;
    const uint8_t *ipver = c[F_IPVER].buf;
    /* where each row goes; rows not named stay out (a permutation names them all) */
    pos = PyMem_Malloc((size_t)(nb ? nb : 1) * sizeof(int32_t));
    if (pos == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(pos, 0xFF, (size_t)nb * sizeof(int32_t));
    for (Py_ssize_t j = 0; j < nb; j++) {
        if (order[j] < 0 || order[j] >= nb || pos[order[j]] >= 0) goto bad;
        pos[order[j]] = (int32_t)j;
    }
    rec_t *out = (rec_t *)ob.buf;
    for (Py_ssize_t i = 0; i < nb; i++) /* (the decoder gives a 16-bit option's value, or -1) */
        if (mss[i] < -1 || mss[i] > 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "pack_rows: MSS outside -1..65535");
            goto done;
        }
    for (Py_ssize_t i = 0; i < nb; i++) { /* read the columns in order, write records anywhere */
        rec_t *x = &out[pos[i]];
        x->ts = ts[i];
        x->frame = frame[i];
        x->poff = poff[i];
        x->seq = seq[i];
        x->ack = ack[i];
        x->tsv = tsv[i];
        x->tse = tse[i];
        x->wl = wl[i];
        x->pl = pl[i];
        x->ipid = ipid[i];
        x->row = (int32_t)i;
        x->win = win[i];
        x->flags = flags[i];
        x->bits = (uint8_t)((swap[i] ? ROW_SWAP : 0) | (has_ts[i] ? ROW_HAS_TS : 0) | (sack && sack[i] ? ROW_SACK : 0) |
                            (mss[i] >= 0 ? ROW_MSS : 0));
        x->wscale = wscale[i];
        x->ipver = ipver[i];
        x->mss = (uint16_t)(mss[i] >= 0 ? mss[i] : 0);
    }
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "pack_rows: bad column length, row order or output size");
done:
    for (int i = 0; i < F_COUNT; i++)
        if (got[i]) PyBuffer_Release(&c[i]);
    PyBuffer_Release(&ob);
    PyMem_Free(pos);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* fast_run(records, at, count, client_is_lo, dir0, dir1, tail_keep, min_rows, sacks,
 *          (dup_window_ipid, dup_window_noid), (pending, hs_rtt, pending_ns, grace_ns))
 *   -> (k, chunk rows, res0, res1, w, limit, verdicts, covered, resends)
 * records: pack_rows output; the rows are records [at, at + count); dirN: the state tuple
 * parse_dir reads (its signature dict and list take the run's last signatures: the
 * only state written here); sacks: the batch's SACK blocks by row (SegmentBatch.sack) or
 * None; pending: (sent, covered or -1, start offset, TSval unwrapped or None, direction) of
 * the retransmissions waiting for a verdict.
 * limit: count, or the row the run must end before (verdict_rows: time going back while
 * a retransmission waits for its verdict). w: the first row with an IP id gap before
 * limit (limit when none; see scan); when it is below min_rows, k is 0 (no run).
 * verdicts: (pending index, row) of the verdicts that fell in the run, in row order;
 * covered: each pending's covered time as the run leaves it (cover_rows; the run also ends
 * before an ACK whose Eifel check makes one spurious). pending's optional fifth item,
 * (FAST_WIN_NS, RTO_MIN_NS), lets the run take resends (scan): resends lists them in row
 * order, (side, row, start, end, ts, frame, TSval or None, kind, first send time or None,
 * ACK and highest offset at the row, starts of the segments it covers); they wait for
 * their verdicts after the pending given (their indices follow). None when a segment log
 * is out of end order (the numpy path runs). */
static PyObject *fast_run(PyObject *self, PyObject *args) {
    Py_buffer pk;
    Py_ssize_t at, count;
    PyObject *t0, *t1, *pend_obj;
    run_ctx_t c;
    Py_ssize_t min_rows, w = 0;
    long long dw_ipid, dw_noid;
    if (!PyArg_ParseTuple(args, "y*nnpO!O!inO(LL)O!", &pk, &at, &count, &c.client_is_lo, &PyTuple_Type, &t0,
                          &PyTuple_Type, &t1, &c.keep, &min_rows, &c.sacks, &dw_ipid, &dw_noid, &PyTuple_Type,
                          &pend_obj))
        return NULL;
    c.dw_ipid = dw_ipid;
    c.dw_noid = dw_noid;
    dir_t dirs[2];
    memset(dirs, 0, sizeof(dirs));
    vec_t chunks = {NULL, 0, 0};
    pend_t P;
    memset(&P, 0, sizeof(P));
    PyObject *res = NULL;
    if (c.sacks != Py_None && !PyDict_Check(c.sacks)) {
        PyErr_SetString(PyExc_TypeError, "fast_run: sacks must be a dict or None");
        goto done;
    }
    if (pk.len % (Py_ssize_t)sizeof(rec_t) || at < 0 || count < 0 || at + count > pk.len / (Py_ssize_t)sizeof(rec_t)) {
        PyErr_SetString(PyExc_ValueError, "fast_run: records out of range");
        goto done;
    }
    if (parse_pending(pend_obj, &P) < 0) goto done;
    c.resend = P.resend;
    const rec_t *rec = (const rec_t *)pk.buf + at;
    Py_ssize_t k, limit = count;
    for (;;) { /* again, up to a row earlier than the one before it (verdict_rows) or an Eifel check (cover_rows) */
        int p0 = parse_dir(t0, &dirs[0]), p1 = p0 < 0 ? -1 : parse_dir(t1, &dirs[1]);
        if (p0 < 0 || p1 < 0) goto done;
        if (p0 || p1) { /* not the case _fast.py's numpy code is written for: let it run */
            res = Py_NewRef(Py_None);
            goto done;
        }
        if (vreserve(&chunks, RUN_NCOLS * limit) < 0) goto done;
        for (int d = 0; d < 2; d++) {
            dir_t *D = &dirs[d];
            vec_t *per_row[] = {&D->new_st, &D->new_en, &D->new_t, &D->new_tv, &D->new_tt, &D->new_ts,
                                &D->A, &D->TA, &D->E, &D->EA, &D->ET, &D->A_row, &D->E_row};
            for (size_t i = 0; i < sizeof(per_row) / sizeof(per_row[0]); i++)
                if (vreserve(per_row[i], limit) < 0) goto done;
        }
        k = scan(dirs, rec, limit, &c, &chunks, min_rows, &w);
        if (k < 0) goto done;
        if (w < min_rows && w < limit) { /* an IP id gap too close: no run (a cut at `limit` ends one, however short) */
            res = Py_BuildValue("(ny{}{}nn()()[])", (Py_ssize_t)0, "", w, limit);
            goto done;
        }
        for (int d = 0; d < 2; d++) {
            dir_t *D = &dirs[d];
            /* the TSval reference after this run's own rows (X.tsv_u when the echoes are read) */
            int tsv_known = D->tsv_known || D->any_ts;
            int64_t tsv_ref = D->tsv_known ? D->tsv_u : D->tsv_max;
            if (D->any_ts && D->tsv_known && D->tsv_max > D->tsv_u) tsv_ref = D->tsv_max;
            D->e_on = tsv_known && D->E.n > 0;
            if (seg_match(D) < 0 || tsq_match(D, D->e_on, tsv_ref) < 0) goto done;
            fold_srtt(D);
        }
        if (pend_add_resends(&P, dirs) < 0) goto done;
        resend_kinds(dirs, &P);
        Py_ssize_t v = cover_rows(dirs, k, &P);
        if (v == k) v = verdict_rows(dirs, rec, k, &P);
        if (v == k) break;
        limit = v; /* the same rows again, up to that one */
        for (int d = 0; d < 2; d++) dir_free(&dirs[d]);
        memset(dirs, 0, sizeof(dirs));
        chunks.n = 0;
    }
    if (tails(dirs, rec, &c, k, c.keep) < 0) goto done;
    if (remember_sigs(&c, &dirs[0], rec, c.keep) < 0 || remember_sigs(&c, &dirs[1], rec, c.keep) < 0) goto done;
    PyObject *r0 = dir_result(&dirs[0], rec), *r1 = r0 ? dir_result(&dirs[1], rec) : NULL;
    if (r0 == NULL || r1 == NULL) {
        Py_XDECREF(r0);
        goto done;
    }
    PyObject *fell = PyList_New(0);
    for (Py_ssize_t r = 0; fell != NULL && r < k; r++) /* in row order, pending order within a row */
        for (Py_ssize_t q = 0; q < P.n; q++)
            if (P.w[q].verdict == r) {
                PyObject *x = Py_BuildValue("(nn)", q, r);
                if (x == NULL || PyList_Append(fell, x) < 0) Py_CLEAR(fell);
                Py_XDECREF(x);
                if (fell == NULL) break;
            }
    if (fell == NULL) {
        Py_DECREF(r0);
        Py_DECREF(r1);
        goto done;
    }
    PyObject *cov = PyTuple_New(P.n);
    for (Py_ssize_t q = 0; cov != NULL && q < P.n; q++) {
        PyObject *x = PyLong_FromLongLong((long long)P.w[q].covered_out);
        if (x == NULL) Py_CLEAR(cov);
        else PyTuple_SET_ITEM(cov, q, x);
    }
    if (cov == NULL) {
        Py_DECREF(r0);
        Py_DECREF(r1);
        Py_DECREF(fell);
        goto done;
    }
    PyObject *resends = PyList_New(0); /* the run's resends, in row order (their pending indices follow P.n_in) */
    for (Py_ssize_t q = P.n_in; resends != NULL && q < P.n; q++) {
        const resend_t *x = P.w[q].rs;
        const dir_t *D = &dirs[P.w[q].dir];
        PyObject *starts = PyList_New(x->starts1 - x->starts0);
        for (Py_ssize_t i = x->starts0; starts != NULL && i < x->starts1; i++) {
            PyObject *v = PyLong_FromLongLong((long long)D->rstarts.v[i]);
            if (v == NULL) Py_CLEAR(starts);
            else PyList_SET_ITEM(starts, i - x->starts0, v);
        }
        PyObject *tsv = x->has_tsv ? PyLong_FromLongLong((long long)x->tsv) : Py_NewRef(Py_None);
        PyObject *orig = x->has_orig ? PyLong_FromLongLong((long long)x->t_orig) : Py_NewRef(Py_None);
        PyObject *t = starts && tsv && orig
                          ? Py_BuildValue("(inLLLLOiOLLO)", P.w[q].dir, x->row, (long long)x->s, (long long)x->e,
                                          (long long)x->ts, (long long)x->frame, tsv, x->kind, orig,
                                          (long long)x->acked, (long long)x->hi, starts)
                          : NULL;
        Py_XDECREF(starts);
        Py_XDECREF(tsv);
        Py_XDECREF(orig);
        if (t == NULL || PyList_Append(resends, t) < 0) Py_CLEAR(resends);
        Py_XDECREF(t);
    }
    if (resends == NULL) {
        Py_DECREF(r0);
        Py_DECREF(r1);
        Py_DECREF(fell);
        Py_DECREF(cov);
        goto done;
    }
    res = Py_BuildValue("(nNNNnnNNN)", k, vbytes(&chunks), r0, r1, w, limit, fell, cov, resends);
done:
    PyBuffer_Release(&pk);
    dir_free(&dirs[0]);
    dir_free(&dirs[1]);
    PyMem_Free(chunks.v);
    PyMem_Free(P.w);
    return res;
}

/* ---- group_flows: rows grouped by connection (see _flows.group_flows) ----
 *
 * One hash-table pass instead of numpy hashing and a stable argsort: each row's two
 * endpoints in canonical order ("lo" first, by address then port), flows numbered by
 * their first row, then a counting sort keeps capture order inside each flow. */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

typedef struct {
    uint64_t a[4];
    uint32_t ports;
} flow_key_t;

/* group_flows(src_hi, src_lo, dst_hi, dst_lo, sport, dport)
 *   -> (order int64, starts int64, stops int64, swap bool) as bytes; flows in order of
 * their first row. Columns: four uint64, two uint16, all of one length. */
static PyObject *group_flows(PyObject *self, PyObject *args) {
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    Py_buffer c[6];
    int got = 0;
    PyObject *res = NULL, *order = NULL, *starts = NULL, *stops = NULL, *swap = NULL;
    int32_t *table = NULL, *flow = NULL, *rep = NULL;
    int64_t *count = NULL;
    uint64_t *fhash = NULL; /* hash of each flow's key */
    for (; got < 6; got++)
        if (PyObject_GetBuffer(o[got], &c[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
    Py_ssize_t n = c[0].len / 8;
    for (int i = 0; i < 6; i++)
        if (c[i].len != n * (i < 4 ? 8 : 2)) {
            PyErr_SetString(PyExc_ValueError, "group_flows: columns must be 4 x uint64, 2 x uint16 of one length");
            goto done;
        }
    if (n > INT32_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "group_flows: too many rows");
        goto done;
    }
    const uint64_t *sh = c[0].buf, *sl = c[1].buf, *dh = c[2].buf, *dl = c[3].buf;
    const uint16_t *sp = c[4].buf, *dp = c[5].buf;
    /* open addressing, at most half full: starts small (a batch has few flows as a
     * rule) and doubles as flows appear */
    Py_ssize_t size = 1024;
    table = PyMem_Malloc((size_t)size * sizeof(int32_t));
    flow = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    rep = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    fhash = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    swap = PyByteArray_FromStringAndSize(NULL, n);
    if (!table || !flow || !rep || !fhash || !swap) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    memset(table, 0xFF, (size_t)size * sizeof(int32_t));
    uint8_t *sw = (uint8_t *)PyByteArray_AS_STRING(swap);
    Py_ssize_t nflows = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int src_first = sh[i] < dh[i] || (sh[i] == dh[i] && (sl[i] < dl[i] || (sl[i] == dl[i] && sp[i] <= dp[i])));
        sw[i] = !src_first;
        flow_key_t k = src_first ? (flow_key_t){{sh[i], sl[i], dh[i], dl[i]}, ((uint32_t)sp[i] << 16) | dp[i]}
                                 : (flow_key_t){{dh[i], dl[i], sh[i], sl[i]}, ((uint32_t)dp[i] << 16) | sp[i]};
        uint64_t h = mix64(k.a[0] ^ (k.a[1] * 0x9E3779B97F4A7C15ULL) ^ (k.a[2] * 0xC2B2AE3D27D4EB4FULL) ^
                           (k.a[3] * 0x165667B19E3779F9ULL) ^ ((uint64_t)k.ports << 1));
        Py_ssize_t slot = (Py_ssize_t)(h & (uint64_t)(size - 1));
        for (;;) {
            int32_t f = table[slot];
            if (f < 0) { /* a new flow */
                table[slot] = (int32_t)nflows;
                rep[nflows] = (int32_t)i;
                fhash[nflows] = h;
                flow[i] = (int32_t)nflows++;
                break;
            }
            Py_ssize_t r = rep[f];
            if (fhash[f] == h) {
                int rs = sw[r];
                flow_key_t q = !rs ? (flow_key_t){{sh[r], sl[r], dh[r], dl[r]}, ((uint32_t)sp[r] << 16) | dp[r]}
                                   : (flow_key_t){{dh[r], dl[r], sh[r], sl[r]}, ((uint32_t)dp[r] << 16) | sp[r]};
                if (q.ports == k.ports && q.a[0] == k.a[0] && q.a[1] == k.a[1] && q.a[2] == k.a[2] &&
                    q.a[3] == k.a[3]) {
                    flow[i] = f;
                    break;
                }
            }
            slot = (slot + 1) & (size - 1);
        }
        if (2 * nflows > size) { /* grow and re-insert every flow */
            int32_t *grown = PyMem_Malloc((size_t)size * 2 * sizeof(int32_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            PyMem_Free(table);
            table = grown;
            size *= 2;
            memset(table, 0xFF, (size_t)size * sizeof(int32_t));
            for (Py_ssize_t f = 0; f < nflows; f++) {
                Py_ssize_t sl2 = (Py_ssize_t)(fhash[f] & (uint64_t)(size - 1));
                while (table[sl2] >= 0) sl2 = (sl2 + 1) & (size - 1);
                table[sl2] = (int32_t)f;
            }
        }
    }
    count = PyMem_Calloc((size_t)nflows + 1, sizeof(int64_t));
    if (count == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) count[flow[i] + 1]++;
    order = PyByteArray_FromStringAndSize(NULL, n * 8);
    starts = PyByteArray_FromStringAndSize(NULL, nflows * 8);
    stops = PyByteArray_FromStringAndSize(NULL, nflows * 8);
    if (!order || !starts || !stops) goto done;
    int64_t *ov = (int64_t *)PyByteArray_AS_STRING(order), *st = (int64_t *)PyByteArray_AS_STRING(starts),
            *sp_ = (int64_t *)PyByteArray_AS_STRING(stops);
    for (Py_ssize_t f = 0; f < nflows; f++) count[f + 1] += count[f];
    for (Py_ssize_t f = 0; f < nflows; f++) {
        st[f] = count[f];
        sp_[f] = count[f + 1];
    }
    for (Py_ssize_t i = 0; i < n; i++) ov[count[flow[i]]++] = i;
    res = Py_BuildValue("(OOOO)", order, starts, stops, swap);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&c[i]);
    PyMem_Free(table);
    PyMem_Free(flow);
    PyMem_Free(rep);
    PyMem_Free(fhash);
    PyMem_Free(count);
    Py_XDECREF(order);
    Py_XDECREF(starts);
    Py_XDECREF(stops);
    Py_XDECREF(swap);
    return res;
}

/* take_rows(records, start, stop) -> the per-packet path's columns of records
 * [start, stop) as lists, in PacketPath._slow_rows' order: ts, frame, flags, seq, ack,
 * window, payload len, wire len, has_ts, TSval, TSecr, IP id, window scale, MSS, payload
 * offset, swap, row, IP version (the values numpy's column[rows].tolist() gives; bools
 * for has_ts and swap). A connection's rows between bulk runs are a few dozen at a time:
 * read in place they are a cache miss per column and row, here one sequential read. */
enum { T_TS, T_FRAME, T_FLAGS, T_SEQ, T_ACK, T_WIN, T_PL, T_WL, T_HAS_TS, T_TSV, T_TSE, T_IPID, T_WSCALE, T_MSS,
       T_POFF, T_SWAP, T_ROW, T_IPVER, T_COUNT };

static PyObject *take_rows(PyObject *self, PyObject *args) {
    Py_buffer rb;
    Py_ssize_t a, z;
    if (!PyArg_ParseTuple(args, "y*nn", &rb, &a, &z)) return NULL;
    PyObject *out = NULL;
    if (a < 0 || z < a || z > rb.len / (Py_ssize_t)sizeof(rec_t)) {
        PyErr_SetString(PyExc_IndexError, "take_rows: rows outside the records");
        goto done;
    }
    Py_ssize_t n = z - a;
    out = PyTuple_New(T_COUNT);
    if (out == NULL) goto done;
    PyObject *lists[T_COUNT];
    for (int c = 0; c < T_COUNT; c++) {
        if ((lists[c] = PyList_New(n)) == NULL) goto fail;
        PyTuple_SET_ITEM(out, c, lists[c]);
    }
    const rec_t *rec = (const rec_t *)rb.buf + a;
    for (Py_ssize_t i = 0; i < n; i++) {
        const rec_t *x = &rec[i];
        PyObject *v[T_COUNT] = {
            PyLong_FromLongLong(x->ts), PyLong_FromLongLong(x->frame), PyLong_FromLong(x->flags),
            PyLong_FromUnsignedLong(x->seq), PyLong_FromUnsignedLong(x->ack), PyLong_FromLong(x->win),
            PyLong_FromLong(x->pl), PyLong_FromLong(x->wl), PyBool_FromLong((x->bits & ROW_HAS_TS) != 0),
            PyLong_FromUnsignedLong(x->tsv), PyLong_FromUnsignedLong(x->tse), PyLong_FromLong(x->ipid),
            PyLong_FromLong(x->wscale), PyLong_FromLong((x->bits & ROW_MSS) ? (long)x->mss : -1L),
            PyLong_FromLongLong(x->poff), PyBool_FromLong((x->bits & ROW_SWAP) != 0), PyLong_FromLong(x->row),
            PyLong_FromLong(x->ipver),
        };
        for (int c = 0; c < T_COUNT; c++) {
            if (v[c] == NULL) {
                for (int k = 0; k < T_COUNT; k++) Py_XDECREF(v[k]);
                goto fail;
            }
        }
        for (int c = 0; c < T_COUNT; c++) PyList_SET_ITEM(lists[c], i, v[c]);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&rb);
    return out;
}

static PyMethodDef methods[] = {
    {"ewma", (PyCFunction)(void (*)(void))ewma, METH_FASTCALL,
     "ewma(srtt, values): smoothed RTT after the int64 samples, in order."},
    {"pack_rows", pack_rows, METH_VARARGS, "pack_rows(columns, out): the rows in flow order as fast_run records."},
    {"fast_run", fast_run, METH_VARARGS,
     "fast_run(records, at, count, client_is_lo, dir0, dir1, tail_keep, min_rows, sacks, dup_windows, pending): "
     "one bulk run (see _fast.py)."},
    {"group_flows", group_flows, METH_VARARGS,
     "group_flows(src_hi, src_lo, dst_hi, dst_lo, sport, dport): (order, starts, stops, swap) bytes."},
    {"take_rows", take_rows, METH_VARARGS,
     "take_rows(records, start, stop): the per-packet path's columns of records [start, stop), as lists."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
