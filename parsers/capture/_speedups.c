/* Optional C versions of the record-chain walks of parsers/capture/_container.py and of
 * the header decode of parsers/capture/_packets.py.
 *
 * walk_pcap / walk_epb do exactly what _walk_pcap_py / _walk_epb_py do (find where each
 * complete record starts, stop at the first incomplete or foreign one) and return the
 * offsets as the bytes of an int64 array plus the position where the walk stopped. The
 * chain is sequential, so this one loop is what a Python walk spends its time on: one
 * interpreted iteration per packet. pcap_records also decodes the pcap record headers
 * on the way; decode_tcp decodes link, IP and TCP headers (see below). Without this
 * module the Python/numpy code runs and gives the same results.
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

/* The offsets as bytes (the vector stays owned by the caller). */
static PyObject *as_bytes(const offsets_t *o) {
    return PyBytes_FromStringAndSize((const char *)o->v, o->n * (Py_ssize_t)sizeof(int64_t));
}

static PyObject *result(offsets_t *o, Py_ssize_t pos) {
    PyObject *b = PyBytes_FromStringAndSize((const char *)o->v, o->n * (Py_ssize_t)sizeof(int64_t));
    PyMem_Free(o->v);
    if (b == NULL) return NULL;
    return Py_BuildValue("(Nn)", b, pos);
}

/* The walks' arguments: end clamped to the buffer; a negative position or a bad record
 * header length (hdr_ok false) releases the buffer and raises ValueError(why) (-1). */
static int span_ok(Py_buffer *view, Py_ssize_t pos, Py_ssize_t *end, int hdr_ok, const char *why) {
    if (*end > view->len) *end = view->len;
    if (pos < 0 || !hdr_ok) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, why);
        return -1;
    }
    return 0;
}

/* walk_pcap(data, pos, end, hdrlen, big_endian) -> (int64 offsets as bytes, stop) */
static PyObject *walk_pcap(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, hdrlen;
    int big;
    if (!PyArg_ParseTuple(args, "y*nnnp", &view, &pos, &end, &hdrlen, &big)) return NULL;
    if (span_ok(&view, pos, &end, hdrlen >= 16, "bad position or header length") < 0) return NULL;
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
    if (span_ok(&view, pos, &end, 1, "bad position") < 0) return NULL;
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

/* pcap_records(data, pos, end, hdrlen, big_endian, frac_ns, max_caplen, off_add)
 *   -> (stop, ts_ns, caplen, origlen, data_off)
 * The walk of walk_pcap, stopping also at a record that claims more than max_caplen
 * bytes, with the record headers decoded on the way into column bytes (int64, int32,
 * int32, int64) as _PcapReader._store would build them: ts = sec * 1e9 + frac * frac_ns,
 * origlen capped at 2**31 - 1, data_off = record offset + off_add. */
static PyObject *pcap_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, hdrlen, frac_ns, max_caplen, off_add;
    int big;
    if (!PyArg_ParseTuple(args, "y*nnnpnnn", &view, &pos, &end, &hdrlen, &big, &frac_ns, &max_caplen, &off_add))
        return NULL;
    if (span_ok(&view, pos, &end, hdrlen >= 16, "bad position or header length") < 0) return NULL;
    const unsigned char *d = view.buf;
    Py_ssize_t n = 0, stop = pos, last = end - hdrlen;
    for (Py_ssize_t p = pos; p <= last;) { /* count first, then fill exact-size columns */
        uint32_t cap = rd32(d + p + 8, big);
        Py_ssize_t nxt = p + hdrlen + (Py_ssize_t)cap;
        if (cap > (uint64_t)max_caplen || nxt > end) break;
        n++;
        p = stop = nxt;
    }
    PyObject *ts = PyByteArray_FromStringAndSize(NULL, n * 8), *caps = PyByteArray_FromStringAndSize(NULL, n * 4),
             *origs = PyByteArray_FromStringAndSize(NULL, n * 4), *offs = PyByteArray_FromStringAndSize(NULL, n * 8);
    if (ts && caps && origs && offs) {
        int64_t *t = (int64_t *)PyByteArray_AS_STRING(ts), *o = (int64_t *)PyByteArray_AS_STRING(offs);
        int32_t *c = (int32_t *)PyByteArray_AS_STRING(caps), *g = (int32_t *)PyByteArray_AS_STRING(origs);
        Py_ssize_t p = pos;
        for (Py_ssize_t i = 0; i < n; i++) {
            const unsigned char *h = d + p;
            uint32_t cap = rd32(h + 8, big), orig = rd32(h + 12, big);
            t[i] = (int64_t)rd32(h, big) * 1000000000LL + (int64_t)rd32(h + 4, big) * (int64_t)frac_ns;
            c[i] = (int32_t)cap;
            g[i] = (int32_t)(orig > 0x7FFFFFFFu ? 0x7FFFFFFFu : orig);
            o[i] = (int64_t)p + off_add;
            p += hdrlen + (Py_ssize_t)cap;
        }
    }
    PyBuffer_Release(&view);
    if (!(ts && caps && origs && offs)) {
        Py_XDECREF(ts);
        Py_XDECREF(caps);
        Py_XDECREF(origs);
        Py_XDECREF(offs);
        return NULL;
    }
    return Py_BuildValue("(nNNNN)", stop, ts, caps, origs, offs);
}

/* epb_records(data, pos, end, big_endian)
 *   -> (stop, bad, bad_len, bad_trailer, bad_caplen, pos, iface, raw_ts, caplen, origlen)
 * The walk of walk_epb with the enhanced packet block headers decoded on the way into
 * column bytes (int64 offsets, interfaces, uint64 raw timestamps, int64 captured and
 * wire lengths), as _PcapngReader._decode_epbs reads them. It stops before a block whose
 * trailing length differs from its leading one (bad = 1) or whose captured length does
 * not fit the block (bad = 2), giving that block's lengths; stop is where it stopped. */
static PyObject *epb_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    int big;
    if (!PyArg_ParseTuple(args, "y*nnp", &view, &pos, &end, &big)) return NULL;
    if (span_ok(&view, pos, &end, 1, "bad position") < 0) return NULL;
    const unsigned char *d = view.buf;
    Py_ssize_t n = 0, stop = pos, last = end - 8;
    int bad = 0;
    uint32_t bad_len = 0, bad_trailer = 0, bad_cap = 0;
    for (Py_ssize_t p = pos; p <= last;) { /* count first, then fill exact-size columns */
        uint32_t btype = rd32(d + p, big), blen = rd32(d + p + 4, big);
        if (btype != 6 || blen < 32 || (blen & 3)) break; /* EPB only */
        Py_ssize_t nxt = p + (Py_ssize_t)blen;
        if (nxt > end) break;
        uint32_t trailer = rd32(d + nxt - 4, big), cap = rd32(d + p + 20, big);
        if (trailer != blen || cap > blen - 32) {
            bad = trailer != blen ? 1 : 2;
            bad_len = blen;
            bad_trailer = trailer;
            bad_cap = cap;
            break;
        }
        n++;
        p = stop = nxt;
    }
    PyObject *cols[5];
    int ok = 1;
    for (int i = 0; i < 5; i++) ok &= (cols[i] = PyByteArray_FromStringAndSize(NULL, n * 8)) != NULL;
    if (ok) {
        int64_t *po = (int64_t *)PyByteArray_AS_STRING(cols[0]), *ifc = (int64_t *)PyByteArray_AS_STRING(cols[1]),
                *cp = (int64_t *)PyByteArray_AS_STRING(cols[3]), *og = (int64_t *)PyByteArray_AS_STRING(cols[4]);
        uint64_t *raw = (uint64_t *)PyByteArray_AS_STRING(cols[2]);
        Py_ssize_t p = pos;
        for (Py_ssize_t i = 0; i < n; i++) {
            const unsigned char *h = d + p;
            po[i] = (int64_t)p;
            ifc[i] = rd32(h + 8, big);
            raw[i] = ((uint64_t)rd32(h + 12, big) << 32) | rd32(h + 16, big);
            cp[i] = rd32(h + 20, big);
            og[i] = rd32(h + 24, big);
            p += (Py_ssize_t)rd32(h + 4, big);
        }
    }
    PyBuffer_Release(&view);
    if (!ok) {
        for (int i = 0; i < 5; i++) Py_XDECREF(cols[i]);
        return NULL;
    }
    return Py_BuildValue("(nikkkNNNNN)", stop, bad, (unsigned long)bad_len, (unsigned long)bad_trailer,
                         (unsigned long)bad_cap, cols[0], cols[1], cols[2], cols[3], cols[4]);
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

/* ---- decode_tcp: the link + IP + TCP header decode of _packets.decode_segments ----
 *
 * One pass per packet instead of numpy passes per header field: classify every packet
 * (same codes and precedence as _packets.py: truncated > malformed > fragment) and write
 * the fields of the TCP ones into the caller's column arrays. Only packets whose TCP
 * options are not the common "NOP NOP timestamps" layout are left to the Python option
 * walk (their rows come back in slow_rows). Every read is bounds-checked against the
 * captured bytes, which must lie inside buf (else -1: the caller decodes with numpy). */

enum { C_PENDING, C_TCP, C_UDP, C_OTHER_IP, C_NON_IP, C_FRAG, C_TRUNC, C_MALFORMED, C_UNKNOWN_LT };

static inline uint32_t be16(const unsigned char *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t be32(const unsigned char *p) { return rd32(p, 1); }
static inline uint64_t be64(const unsigned char *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

static inline int is_vlan(uint32_t et) { return et == 0x8100 || et == 0x88A8 || et == 0x9100 || et == 0x9200; }
static inline int is_v6ext(uint32_t nh) { return nh == 0 || nh == 43 || nh == 44 || nh == 51 || nh == 60 || nh == 135; }

/* Output columns, in the order decode_tcp takes them after the five inputs. */
enum { O_CLS, O_FRAME, O_TS, O_VER, O_SRC_HI, O_SRC_LO, O_DST_HI, O_DST_LO, O_SPORT, O_DPORT, O_SEQ, O_ACK,
       O_FLAGS, O_WIN, O_POFF, O_PLEN, O_WLEN, O_HAS_TS, O_TSV, O_TSE, O_IPID, O_COUNT };
static const Py_ssize_t out_size[O_COUNT] = {1, 8, 8, 1, 8, 8, 8, 8, 2, 2, 4, 4, 1, 2, 8, 4, 4, 1, 4, 4, 4};
#define N_IN 7 /* buf, offset, caplen, origlen, linktype, frame_no, ts_ns */

/* Network header offset l3 and ethertype for one packet; returns a class code
 * (C_PENDING when an IP header follows). */
static int link_layer(const unsigned char *b, int64_t s, int64_t pend, int32_t lt, int64_t *l3, uint32_t *et) {
    int64_t hdr;
    switch (lt) {
    case 1: /* Ethernet */
        hdr = 14;
        if (s + hdr > pend) return C_TRUNC;
        *et = be16(b + s + 12);
        break;
    case 113: /* Linux cooked v1 */
        hdr = 16;
        if (s + hdr > pend) return C_TRUNC;
        *et = be16(b + s + 14);
        break;
    case 276: /* Linux cooked v2 */
        hdr = 20;
        if (s + hdr > pend) return C_TRUNC;
        *et = be16(b + s);
        break;
    case 12: case 14: case 101: case 228: case 229: /* raw IP */
        hdr = 0;
        if (lt == 228) *et = 0x0800;
        else if (lt == 229) *et = 0x86DD;
        else *et = (s < pend && (b[s] >> 4) == 6) ? 0x86DD : 0x0800;
        break;
    case 0: case 108: { /* BSD loopback: address family in either byte order */
        hdr = 4;
        if (s + hdr > pend) return C_TRUNC;
        uint32_t af = rd32(b + s, 0);
        if (af > 0xFFFF) af = rd32(b + s, 1);
        *et = af == 2 ? 0x0800 : (af == 24 || af == 28 || af == 30) ? 0x86DD : 0;
        break;
    }
    default:
        return C_UNKNOWN_LT;
    }
    int64_t p = s + hdr;
    for (int depth = 0; depth < 16 && is_vlan(*et); depth++) {
        if (p + 4 > pend) return C_TRUNC;
        *et = be16(b + p + 2);
        p += 4;
    }
    *l3 = p;
    return C_PENDING;
}

typedef struct {
    int64_t l4, ipend;
    uint32_t proto;
    int32_t ip_id;
    uint8_t version;
    uint64_t src_hi, src_lo, dst_hi, dst_lo;
} net_t;

static int ipv4(const unsigned char *b, int64_t p, int64_t pend, int64_t wend, net_t *o) {
    if (pend - p < 20) return C_TRUNC;
    const unsigned char *h = b + p;
    int64_t ihl = (int64_t)(h[0] & 15) * 4, tot = be16(h + 2);
    if (pend - p < ihl) return C_TRUNC;
    if ((h[0] >> 4) != 4 || ihl < 20 || (tot != 0 && tot < ihl)) return C_MALFORMED;
    if (be16(h + 6) & 0x3FFF) return C_FRAG; /* MF flag or fragment offset */
    o->l4 = p + ihl;
    o->ipend = tot == 0 ? wend : p + tot; /* TSO/GSO captures: the frame length rules */
    o->proto = h[9];
    o->version = 4;
    o->ip_id = (int32_t)be16(h + 4);
    o->src_hi = o->dst_hi = 0;
    o->src_lo = (uint64_t)be32(h + 12) | ((uint64_t)0xFFFF << 32);
    o->dst_lo = (uint64_t)be32(h + 16) | ((uint64_t)0xFFFF << 32);
    return C_PENDING;
}

static int ipv6(const unsigned char *b, int64_t p, int64_t pend, int64_t wend, net_t *o) {
    if (pend - p < 40) return C_TRUNC;
    const unsigned char *h = b + p;
    if ((be32(h) >> 28) != 6) return C_MALFORMED;
    int64_t plen = be16(h + 4);
    int64_t end = plen == 0 ? wend : p + 40 + plen;
    int64_t q = p + 40;
    uint32_t nh = h[6];
    int frag = 0, walking = is_v6ext(nh);
    for (int i = 0; i < 16 && walking; i++) {
        if (q + 8 > pend) return C_TRUNC;
        const unsigned char *e = b + q;
        int64_t size = nh == 44 ? 8 : nh == 51 ? ((int64_t)e[1] + 2) * 4 : ((int64_t)e[1] + 1) * 8;
        /* fragment header: offset or M flag set (an atomic fragment is whole) */
        int fr = nh == 44 && (be16(e + 2) & 0xFFF9) != 0;
        q += size;
        nh = e[0];
        frag |= fr;
        walking = !fr && is_v6ext(nh);
    }
    if (walking || q > end) return C_MALFORMED; /* absurd chain, or past the IP end */
    if (frag) return C_FRAG;
    o->l4 = q;
    o->ipend = end;
    o->proto = nh;
    o->version = 6;
    o->ip_id = -1;
    o->src_hi = be64(h + 8);
    o->src_lo = be64(h + 16);
    o->dst_hi = be64(h + 24);
    o->dst_lo = be64(h + 32);
    return C_PENDING;
}

/* decode_tcp(buf, offset i64, caplen i32, origlen i32, linktype i32, frame_no i64, ts_ns i64,
 *            *21 output columns)
 *   -> (TCP segments, slow option rows, their option starts, their option ends) with the
 *      three as int64 bytes, or -1 when a packet's bytes lie outside buf. */
static PyObject *decode_tcp(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != N_IN + O_COUNT) {
        PyErr_SetString(PyExc_TypeError, "decode_tcp: wrong number of arguments");
        return NULL;
    }
    Py_buffer in[N_IN], out[O_COUNT];
    static const Py_ssize_t in_size[N_IN] = {1, 8, 4, 4, 4, 8, 8};
    int got_in = 0, got_out = 0;
    PyObject *res = NULL;
    offsets_t slow_rows = {NULL, 0, 0}, slow_start = {NULL, 0, 0}, slow_stop = {NULL, 0, 0};
    for (; got_in < N_IN; got_in++)
        if (PyObject_GetBuffer(args[got_in], &in[got_in], PyBUF_C_CONTIGUOUS) < 0) goto done;
    for (; got_out < O_COUNT; got_out++)
        if (PyObject_GetBuffer(args[N_IN + got_out], &out[got_out], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
            goto done;
    Py_ssize_t n = in[1].len / 8;
    for (int i = 1; i < N_IN; i++)
        if (in[i].len != n * in_size[i]) {
            PyErr_SetString(PyExc_ValueError, "decode_tcp: input columns differ in length");
            goto done;
        }
    for (int i = 0; i < O_COUNT; i++)
        if (out[i].len < n * out_size[i]) {
            PyErr_SetString(PyExc_ValueError, "decode_tcp: output column too short");
            goto done;
        }
    const unsigned char *b = in[0].buf;
    const int64_t *off = in[1].buf;
    const int32_t *cap = in[2].buf, *orig = in[3].buf, *lts = in[4].buf;
    const int64_t *frame_in = in[5].buf, *ts_in = in[6].buf;
    int8_t *cls = out[O_CLS].buf;
    int64_t *frame = out[O_FRAME].buf, *ts = out[O_TS].buf, *poff = out[O_POFF].buf;
    uint8_t *ver = out[O_VER].buf, *flags = out[O_FLAGS].buf, *has_ts = out[O_HAS_TS].buf;
    uint64_t *src_hi = out[O_SRC_HI].buf, *src_lo = out[O_SRC_LO].buf, *dst_hi = out[O_DST_HI].buf, *dst_lo = out[O_DST_LO].buf;
    uint16_t *sport = out[O_SPORT].buf, *dport = out[O_DPORT].buf, *win = out[O_WIN].buf;
    uint32_t *seq = out[O_SEQ].buf, *ack = out[O_ACK].buf, *tsv = out[O_TSV].buf, *tse = out[O_TSE].buf;
    int32_t *plen = out[O_PLEN].buf, *wlen = out[O_WLEN].buf, *ipid = out[O_IPID].buf;
    Py_ssize_t m = 0, blen = in[0].len;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = off[i], pend = s + cap[i];
        if (s < 0 || cap[i] < 0 || pend > blen) {
            res = PyLong_FromLong(-1);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = off[i], pend = s + cap[i], wend = s + orig[i], l3 = 0;
        uint32_t et = 0;
        net_t net;
        int c = link_layer(b, s, pend, lts[i], &l3, &et);
        if (c == C_PENDING) {
            if (et == 0x0800) c = ipv4(b, l3, pend, wend, &net);
            else if (et == 0x86DD) c = ipv6(b, l3, pend, wend, &net);
            else c = C_NON_IP;
        }
        if (c == C_PENDING) c = net.proto == 6 ? C_TCP : net.proto == 17 ? C_UDP : C_OTHER_IP;
        if (c == C_TCP) {
            int64_t p = net.l4, room = pend - p;
            int64_t doff = room >= 20 ? (int64_t)(b[p + 12] >> 4) * 4 : 0;
            if (room < 20 || room < doff) c = C_TRUNC;
            else if (doff < 20 || p + doff > net.ipend) c = C_MALFORMED;
            else {
                const unsigned char *h = b + p;
                frame[m] = frame_in[i];
                ts[m] = ts_in[i];
                ver[m] = net.version;
                src_hi[m] = net.src_hi;
                src_lo[m] = net.src_lo;
                dst_hi[m] = net.dst_hi;
                dst_lo[m] = net.dst_lo;
                ipid[m] = net.ip_id;
                sport[m] = (uint16_t)be16(h);
                dport[m] = (uint16_t)be16(h + 2);
                seq[m] = be32(h + 4);
                ack[m] = be32(h + 8);
                flags[m] = h[13];
                win[m] = (uint16_t)be16(h + 14);
                int64_t po = p + doff, lim = pend < net.ipend ? pend : net.ipend;
                poff[m] = po;
                wlen[m] = (int32_t)(net.ipend - po);
                plen[m] = (int32_t)(lim - po > 0 ? lim - po : 0);
                has_ts[m] = 0;
                tsv[m] = tse[m] = 0;
                if (doff == 32 && be32(h + 20) == 0x0101080A) { /* NOP, NOP, timestamps */
                    has_ts[m] = 1;
                    tsv[m] = be32(h + 24);
                    tse[m] = be32(h + 28);
                } else if (doff > 20) { /* other layouts: the Python option walk */
                    if (push(&slow_rows, m) < 0 || push(&slow_start, p + 20) < 0 || push(&slow_stop, p + doff) < 0)
                        goto done;
                }
                m++;
            }
        }
        cls[i] = (int8_t)c;
    }
    res = Py_BuildValue("(nNNN)", m, as_bytes(&slow_rows), as_bytes(&slow_start), as_bytes(&slow_stop));
done:
    for (int i = 0; i < got_in; i++) PyBuffer_Release(&in[i]);
    for (int i = 0; i < got_out; i++) PyBuffer_Release(&out[i]);
    PyMem_Free(slow_rows.v);
    PyMem_Free(slow_start.v);
    PyMem_Free(slow_stop.v);
    return res;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS,
     "gather(buf, pos, width): bytearray of the width bytes at each (clipped) int64 position."},
    {"walk_pcap", walk_pcap, METH_VARARGS,
     "walk_pcap(data, pos, end, hdrlen, big_endian): (int64 record offsets as bytes, stop)."},
    {"pcap_records", pcap_records, METH_VARARGS,
     "pcap_records(data, pos, end, hdrlen, big_endian, frac_ns, max_caplen, off_add): "
     "(stop, ts_ns, caplen, origlen, data_off) column bytes of the complete records."},
    {"epb_records", epb_records, METH_VARARGS,
     "epb_records(data, pos, end, big_endian): (stop, bad, bad_len, bad_trailer, bad_caplen, "
     "pos, iface, raw_ts, caplen, origlen) of the complete, sound enhanced packet blocks."},
    {"walk_epb", walk_epb, METH_VARARGS,
     "walk_epb(data, pos, end, big_endian): (int64 EPB offsets as bytes, stop)."},
    {"decode_tcp", (PyCFunction)(void (*)(void))decode_tcp, METH_FASTCALL,
     "decode_tcp(buf, offset, caplen, origlen, linktype, frame_no, ts_ns, *columns): "
     "(TCP segments, slow option rows, starts, ends)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
