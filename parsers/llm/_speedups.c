/* Optional C reader of the commonest streamed LLM response: server-sent events over an
 * HTTP/1.1 chunked body, one event a chunk (uvicorn and aiohttp send each event the
 * application yields as a chunk of its own: tests/test_real_stacks.py checks it on theirs).
 *
 * sse_chunk_run(rows, buf, first, direction) walks the rows of a ChunkRun (int64 rows in
 * the layout parsers/records.h declares; a row's bytes are buf[START:END]) from row
 * `first`, and takes each row while it is of `direction` and its bytes are whole chunks
 * and nothing else, each chunk
 *
 *     <1-15 hex digits> CR LF  "data:" [SP] <value: no CR, no LF> LF LF  CR LF
 *
 * i.e. one whole event of the form SseFramer.feed (parsers/llm/framing.py) reads at once,
 * in a chunk whose size line and data Http1Conn.feed (parsers/http1.py) reads at once. It
 * stops at the first row that is anything else (a row of the other direction, a chunk
 * split between rows, a comment, an "event:" line, CRLF line ends, the last chunk...):
 * the Python readers take that row. A row is taken whole or not at all.
 *
 * Returns (stop, events): stop is the first row not taken; events are the taken chunks'
 * (ts_ns, value as str (UTF-8, errors replaced, as bytes.decode does), chunk data bytes,
 * direction offset just after the chunk data), in order. sse_chunks(data, ts, offset) does
 * the same for the bytes of one feed (a packet's payload, or a TLS record's plaintext):
 * their events, or None. The caller (Http1Conn) does with them what its Python path does
 * with such chunks; tests/test_sse_speedups.py compares the two. Without this module the
 * Python path reads every row.
 *
 * shaped_events(raw, first, before, after, flags, out) reads what LlmStream.event
 * (parsers/llm/semantics.py) reads of a chat stream's content events once it knows their
 * shape: from raw[first] on, each framed event (type, data, ts_ns, size, end_offset) whose
 * data is `before` + plain text (no '"', '\\' or control character; not empty) + `after`
 * is a content event saying no tokens, and (ts_ns, size, flags, end_offset) is appended to
 * out. It stops at the first event that is anything else, for the Python reader, and
 * returns its index. (`before` begins with '{' and `after` ends with '}', so an event that
 * matches has nothing for str.strip to take and is not "[DONE]".)
 *
 * skip_nested(data, i, depth, in_str, esc) passes over the strings of a JSON body and what
 * it holds below its top level, as TopLevelJson.feed (parsers/llm/jsonscan.py) does (a
 * request's prompt or messages, an embedding's numbers: most of its bytes): from data[i],
 * with the scanner's depth and string state, it follows strings (and their escapes) and
 * brackets until it is at depth 1 outside a string, or the data ends; returns
 * (i, depth, in_str, esc).
 *
 * top_level_whole(data, keys, value_cap) reads a JSON body that comes whole in one feed (a
 * request's, the usual case) as TopLevelJson.feed reads it from its start: when data,
 * after whitespace, is not an object, {}; when it holds a whole top-level object, the raw
 * values (stripped) of its top-level keys in `keys` (a key as the bytes between its quotes),
 * those of at most value_cap bytes, a later one of a key replacing an earlier one; else
 * (the object goes on past data, or there is only whitespace) None, for the streamed reading.
 *
 * parse_head(raw, is_request) reads an HTTP/1.1 message head (start line and header lines,
 * without the blank line) as parse_head (parsers/http1.py) does: (method, target, version,
 * status, headers) of what it would return, or None where it returns None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records.h"
#include "_sse_event.h"

/* hex value of c, or -1 */
static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One chunk at p (row bytes up to end): its data's start and size, and the position after
 * its closing CRLF; 0 when the bytes there are not one whole chunk of one simple event. */
static int one_chunk(const unsigned char *p, const unsigned char *end, const unsigned char **data,
                     Py_ssize_t *size, const unsigned char **next) {
    Py_ssize_t n = 0;
    int digits = 0, h;
    while (p < end && (h = hexval(*p)) >= 0) {
        if (++digits > 15) return 0;
        n = n * 16 + h;
        p++;
    }
    if (digits == 0 || end - p < 2 || p[0] != '\r' || p[1] != '\n') return 0;
    p += 2;
    /* the chunk's CRLF after its data, which is one simple event exactly */
    const unsigned char *v, *vend;
    if (end - p < n + 2 || p[n] != '\r' || p[n + 1] != '\n' || sse_event_at(p, p + n, &v, &vend) != p + n) return 0;
    *data = p;
    *size = n;
    *next = p + n + 2;
    return 1;
}

/* The events of the whole chunks in [p, end) appended to `events` as (ts, data, size,
 * end offset), `off` the direction offset of p; 1 when taken, 0 when the bytes are not
 * whole chunks of one simple event each (nothing appended), -1 on an error. */
static int take_chunks(const unsigned char *p, const unsigned char *end, long long ts, long long off,
                       PyObject *events) {
    const unsigned char *start = p, *data, *next, *v, *vend;
    Py_ssize_t size;
    if (p >= end) return 0;
    for (const unsigned char *q = p; q < end; q = next) {  /* the whole row first */
        if (!one_chunk(q, end, &data, &size, &next)) return 0;
    }
    PyObject *ts_obj = PyLong_FromLongLong(ts);
    if (ts_obj == NULL) return -1;
    int ret = 1;
    for (; p < end; p = next) {
        one_chunk(p, end, &data, &size, &next);
        sse_event_at(data, data + size, &v, &vend);
        if (sse_event_append(events, ts_obj, v, vend, size, off + (long long)(data + size - start)) < 0) {
            ret = -1;
            break;
        }
    }
    Py_DECREF(ts_obj);
    return ret;
}

static PyObject *sse_chunks(PyObject *self, PyObject *args) {
    Py_buffer bv;
    long long ts, off;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*LL", &bv, &ts, &off)) return NULL;
    PyObject *events = PyList_New(0);
    int got = events == NULL ? -1
                             : take_chunks((const unsigned char *)bv.buf, (const unsigned char *)bv.buf + bv.len, ts,
                                           off, events);
    PyBuffer_Release(&bv);
    if (got < 0) {
        Py_XDECREF(events);
        return NULL;
    }
    if (got == 0) {
        Py_DECREF(events);
        Py_RETURN_NONE;
    }
    return events;
}

static PyObject *sse_chunk_run(PyObject *self, PyObject *args) {
    Py_buffer rv, bv;
    Py_ssize_t first, direction;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*nn", &rv, &bv, &first, &direction)) return NULL;
    PyObject *events = NULL;
    Py_ssize_t nrows = rv.len / (Py_ssize_t)(RUN_NCOLS * sizeof(int64_t));
    if (rv.len % (Py_ssize_t)(RUN_NCOLS * sizeof(int64_t)) != 0 || first < 0 || first > nrows) {
        PyErr_SetString(PyExc_ValueError, "sse_chunk_run: rows are not a ChunkRun's, or first is out of range");
        goto fail;
    }
    events = PyList_New(0);
    if (events == NULL) goto fail;
    const int64_t *rows = (const int64_t *)rv.buf;
    const unsigned char *buf = (const unsigned char *)bv.buf;
    Py_ssize_t row = first;
    for (; row < nrows; row++) {
        const int64_t *r = rows + row * RUN_NCOLS;
        if (r[RUN_DIRECTION] != direction) break;
        int64_t a = r[RUN_START], z = r[RUN_END];
        if (a < 0 || z <= a || z > bv.len) break;
        int got = take_chunks(buf + a, buf + z, (long long)r[RUN_TS_NS], (long long)r[RUN_STREAM_OFFSET], events);
        if (got < 0) goto fail;
        if (got == 0) break;
    }
    PyBuffer_Release(&rv);
    PyBuffer_Release(&bv);
    return Py_BuildValue("(nN)", row, events);
fail:
    Py_XDECREF(events);
    PyBuffer_Release(&rv);
    PyBuffer_Release(&bv);
    return NULL;
}

/* data is before + plain text + after (see shaped_events) */
static int is_shaped(PyObject *data, PyObject *before, PyObject *after) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(data), nb = PyUnicode_GET_LENGTH(before), na = PyUnicode_GET_LENGTH(after);
    Py_ssize_t end = n - na;
    if (end <= nb) return 0;
    if (PyUnicode_Tailmatch(data, before, 0, nb, -1) != 1) return 0;
    if (PyUnicode_Tailmatch(data, after, end, n, 1) != 1) return 0;
    int kind = PyUnicode_KIND(data);
    const void *chars = PyUnicode_DATA(data);
    for (Py_ssize_t i = nb; i < end; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, chars, i);
        if (c < 0x20 || c == '"' || c == '\\') return 0;
    }
    return 1;
}

static PyObject *shaped_events(PyObject *self, PyObject *args) {
    PyObject *raw, *before, *after, *flags, *out;
    Py_ssize_t first;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!nUUOO!", &PyList_Type, &raw, &first, &before, &after, &flags, &PyList_Type, &out))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(raw), i = first < 0 ? 0 : first;
    for (; i < n; i++) {
        PyObject *ev = PyList_GET_ITEM(raw, i);
        if (!PyTuple_Check(ev) || PyTuple_GET_SIZE(ev) != 5) break;
        PyObject *data = PyTuple_GET_ITEM(ev, 1);
        if (!PyUnicode_Check(data) || !is_shaped(data, before, after)) break;
        PyObject *row = PyTuple_Pack(4, PyTuple_GET_ITEM(ev, 2), PyTuple_GET_ITEM(ev, 3), flags, PyTuple_GET_ITEM(ev, 4));
        if (row == NULL) return NULL;
        int failed = PyList_Append(out, row);
        Py_DECREF(row);
        if (failed) return NULL;
    }
    return PyLong_FromSsize_t(i);
}

static PyObject *skip_nested(PyObject *self, PyObject *args) {
    Py_buffer bv;
    Py_ssize_t i, depth;
    int in_str, esc;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnpp", &bv, &i, &depth, &in_str, &esc)) return NULL;
    const unsigned char *b = (const unsigned char *)bv.buf;
    Py_ssize_t n = bv.len;
    if (i < 0) i = 0;
    while (i < n) {
        if (in_str) {
            if (esc) {
                esc = 0;
                i++;
                continue;
            }
            while (i < n && b[i] != '"' && b[i] != '\\') i++;
            if (i == n) break;
            if (b[i] == '\\') esc = 1;
            else in_str = 0;
            i++;
            continue;
        }
        if (depth <= 1) break;
        while (i < n && b[i] != '"' && b[i] != '{' && b[i] != '}' && b[i] != '[' && b[i] != ']') i++;
        if (i == n) break;
        unsigned char c = b[i++];
        if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') depth++;
        else depth--;
    }
    PyBuffer_Release(&bv);
    return Py_BuildValue("(nnOO)", i, depth, in_str ? Py_True : Py_False, esc ? Py_True : Py_False);
}

/* the position after the string whose first byte (after its opening quote) is at i, or -1
 * when it goes on past n */
static Py_ssize_t after_string(const unsigned char *b, Py_ssize_t i, Py_ssize_t n) {
    while (i < n) {
        if (b[i] == '\\') {
            i += 2;
        } else if (b[i] == '"') {
            return i + 1;
        } else {
            i++;
        }
    }
    return -1;
}

static inline int json_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* bytes.strip()'s whitespace */
static inline int strip_ws(unsigned char c) { return json_ws(c) || c == '\v' || c == '\f'; }

static PyObject *top_level_whole(PyObject *self, PyObject *args) {
    Py_buffer bv;
    PyObject *keys, *values = NULL, *key = NULL, *captured = NULL;
    Py_ssize_t cap;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*On", &bv, &keys, &cap)) return NULL;
    const unsigned char *b = (const unsigned char *)bv.buf;
    Py_ssize_t n = bv.len, i = 0, mark = 0, depth = 1;
    int want_key = 1;
    while (i < n && json_ws(b[i])) i++;
    if (i == n) goto streamed;
    values = PyDict_New();
    if (values == NULL) goto fail;
    if (b[i] != '{') goto done; /* not a JSON object */
    if ((key = PyBytes_FromStringAndSize("", 0)) == NULL) goto fail;
    for (i++; i < n;) {
        unsigned char c = b[i];
        if (c == '"') {
            Py_ssize_t end = after_string(b, i + 1, n);
            if (end < 0) goto streamed;
            if (depth == 1 && want_key) { /* a key: the bytes between its quotes */
                want_key = 0;
                Py_SETREF(key, PyBytes_FromStringAndSize((const char *)b + i + 1, end - 1 - (i + 1)));
                if (key == NULL) goto fail;
            }
            i = end;
            continue;
        }
        i++;
        if (c == '{' || c == '[') {
            depth++;
        } else if (depth > 1) {
            if (c == '}' || c == ']') depth--;
        } else if (c == ':') { /* a value begins: kept when its key is wanted */
            int wanted = PySet_Contains(keys, key);
            if (wanted < 0) goto fail;
            if (wanted) {
                Py_INCREF(key);
                Py_XSETREF(captured, key);
                mark = i;
            }
        } else if (c == ',' || c == '}') { /* the value ends */
            if (captured != NULL) {
                Py_ssize_t a = mark, z = i - 1;
                if (z - a <= cap) {
                    while (a < z && strip_ws(b[a])) a++;
                    while (z > a && strip_ws(b[z - 1])) z--;
                    PyObject *raw = PyBytes_FromStringAndSize((const char *)b + a, z - a);
                    if (raw == NULL || PyDict_SetItem(values, captured, raw) < 0) {
                        Py_XDECREF(raw);
                        goto fail;
                    }
                    Py_DECREF(raw);
                }
                Py_CLEAR(captured);
            }
            Py_SETREF(key, PyBytes_FromStringAndSize("", 0));
            if (key == NULL) goto fail;
            if (c == '}') goto done;
            want_key = 1;
        }
    }
streamed:
    Py_CLEAR(values);
    values = Py_NewRef(Py_None);
done:
    Py_XDECREF(key);
    Py_XDECREF(captured);
    PyBuffer_Release(&bv);
    return values;
fail:
    Py_XDECREF(values);
    Py_XDECREF(key);
    Py_XDECREF(captured);
    PyBuffer_Release(&bv);
    return NULL;
}

/* the position of the first '\n' in b[i:n], or n */
static Py_ssize_t line_end(const unsigned char *b, Py_ssize_t i, Py_ssize_t n) {
    const unsigned char *nl = memchr(b + i, '\n', (size_t)(n - i));
    return nl == NULL ? n : nl - b;
}

static inline int is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* the start line: (method, target, version, status) as parse_head's regular expressions
 * read it (b[0:n] rstripped), or NULL with no exception when they do not match */
static PyObject *start_line(const unsigned char *b, Py_ssize_t n, int is_request) {
    Py_ssize_t p = 0;
    if (is_request) { /* ([A-Z][A-Z0-9_-]{0,19}) (\S+) HTTP/(1\.[01]) */
        if (n == 0 || !is_upper(b[0])) return NULL;
        while (p < n && (is_upper(b[p]) || is_digit(b[p]) || b[p] == '_' || b[p] == '-')) p++;
        Py_ssize_t method_end = p;
        if (method_end > 20 || p >= n || b[p] != ' ') return NULL;
        Py_ssize_t t = ++p;
        while (p < n && !strip_ws(b[p])) p++;
        Py_ssize_t target_end = p;
        if (target_end == t || n - p != 9 || memcmp(b + p, " HTTP/1.", 8) != 0 || (b[p + 8] != '0' && b[p + 8] != '1'))
            return NULL;
        return Py_BuildValue("(NNNO)", PyUnicode_DecodeASCII((const char *)b, method_end, NULL),
                             PyUnicode_DecodeLatin1((const char *)b + t, target_end - t, NULL),
                             PyUnicode_DecodeASCII((const char *)b + p + 6, 3, NULL), Py_None);
    }
    /* HTTP/(1\.[01]) (\d{3})(?: (.*))? */
    if (n < 12 || memcmp(b, "HTTP/1.", 7) != 0 || (b[7] != '0' && b[7] != '1') || b[8] != ' ' || !is_digit(b[9]) ||
        !is_digit(b[10]) || !is_digit(b[11]) || (n > 12 && b[12] != ' '))
        return NULL;
    return Py_BuildValue("(OONN)", Py_None, Py_None, PyUnicode_DecodeASCII((const char *)b + 5, 3, NULL),
                         PyLong_FromLong((b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0')));
}

static PyObject *parse_head(PyObject *self, PyObject *args) {
    Py_buffer bv;
    int is_request;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*p", &bv, &is_request)) return NULL;
    const unsigned char *b = (const unsigned char *)bv.buf;
    Py_ssize_t n = bv.len;
    PyObject *line = NULL, *headers = NULL, *result = NULL;
    /* lines: split at '\n' (the '\r' raw.replace(b"\r\n", b"\n") drops before it is
     * whitespace every part of a line is stripped of) */
    Py_ssize_t eol = line_end(b, 0, n), fe = eol;
    while (fe > 0 && strip_ws(b[fe - 1])) fe--; /* (rstrip) */
    line = start_line(b, fe, is_request);
    if (line == NULL) {
        if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
        goto done;
    }
    if ((headers = PyDict_New()) == NULL) goto done;
    for (Py_ssize_t i = eol + 1; i <= n && eol < n; i = eol + 1) {
        eol = line_end(b, i, n);
        Py_ssize_t e = eol;
        if (e == i) continue; /* an empty line */
        const unsigned char *colon = memchr(b + i, ':', (size_t)(e - i));
        if (colon == NULL) continue;
        Py_ssize_t a = i, z = colon - b, va = z + 1, vz = e;
        while (a < z && strip_ws(b[a])) a++;
        while (z > a && strip_ws(b[z - 1])) z--;
        while (va < vz && strip_ws(b[va])) va++;
        while (vz > va && strip_ws(b[vz - 1])) vz--;
        char small[256], *lower = z - a <= (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)(z - a));
        if (lower == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t j = a; j < z; j++) lower[j - a] = (char)(is_upper(b[j]) ? b[j] + 32 : b[j]);
        PyObject *k = PyUnicode_DecodeLatin1(lower, z - a, NULL);
        if (lower != small) PyMem_Free(lower);
        if (k == NULL) goto done;
        PyObject *v = PyUnicode_DecodeLatin1((const char *)b + va, vz - va, NULL);
        if (v == NULL) {
            Py_DECREF(k);
            goto done;
        }
        PyObject *had = PyDict_GetItemWithError(headers, k);
        if (had != NULL) { /* a repeated field: its values joined as parse_head joins them */
            PyObject *both = PyUnicode_FromFormat("%U, %U", had, v);
            Py_DECREF(v);
            v = both;
        }
        int bad = v == NULL || PyErr_Occurred() || PyDict_SetItem(headers, k, v) < 0;
        Py_DECREF(k);
        Py_XDECREF(v);
        if (bad) goto done;
    }
    result = Py_BuildValue("(OOOOO)", PyTuple_GET_ITEM(line, 0), PyTuple_GET_ITEM(line, 1), PyTuple_GET_ITEM(line, 2),
                           PyTuple_GET_ITEM(line, 3), headers);
done:
    Py_XDECREF(line);
    Py_XDECREF(headers);
    PyBuffer_Release(&bv);
    return result;
}

static PyMethodDef methods[] = {
    {"sse_chunks", sse_chunks, METH_VARARGS,
     "sse_chunks(data, ts_ns, offset): [(ts_ns, data, size, end_offset)] of the chunks when data is whole "
     "chunks of one whole simple event each, else None."},
    {"sse_chunk_run", sse_chunk_run, METH_VARARGS,
     "sse_chunk_run(rows, buf, first, direction): (stop, [(ts_ns, data, size, end_offset)]) of the "
     "rows from first that are whole chunks of one whole simple event each."},
    {"shaped_events", shaped_events, METH_VARARGS,
     "shaped_events(raw, first, before, after, flags, out): appends (ts_ns, size, flags, end_offset) of the "
     "framed events from raw[first] whose data is before + plain text + after; returns the index it stopped at."},
    {"parse_head", parse_head, METH_VARARGS,
     "parse_head(raw, is_request): (method, target, version, status, headers) of an HTTP/1.1 message head, "
     "or None where parsers.http1.parse_head returns None."},
    {"top_level_whole", top_level_whole, METH_VARARGS,
     "top_level_whole(data, keys, value_cap): the wanted top-level values of the JSON object data holds whole "
     "({} when data is not an object), or None when it does not hold it whole."},
    {"skip_nested", skip_nested, METH_VARARGS,
     "skip_nested(data, i, depth, in_str, esc): (i, depth, in_str, esc) after passing over the JSON below "
     "the top level from data[i], up to depth 1 outside a string or the end of data."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
