/* One simple server-sent event: the form SseFramer (parsers/llm/framing.py) reads at once and
 * the C readers of event streams take, parsers/llm/_speedups.c (HTTP/1.1 chunks) and
 * parsers/h2/_speedups.c (HTTP/2 DATA frames):
 *
 *     "data:" [SP] <value: no CR, no LF> LF LF
 */
#ifndef TAILTAP_SSE_EVENT_H
#define TAILTAP_SSE_EVENT_H

#include <Python.h>
#include <string.h>

/* The event at p (bytes up to end): the position just after its blank line, its value in
 * [*v, *vend) (one space after the colon dropped); NULL when the bytes there do not begin
 * with one. */
static inline const unsigned char *sse_event_at(const unsigned char *p, const unsigned char *end,
                                               const unsigned char **v, const unsigned char **vend) {
    if (end - p < 7 || memcmp(p, "data:", 5) != 0) return NULL;
    const unsigned char *q = p + 5;
    while (q < end && *q != '\n' && *q != '\r') q++;
    if (end - q < 2 || q[0] != '\n' || q[1] != '\n') return NULL;
    *v = (p + 5 < q && p[5] == ' ') ? p + 6 : p + 5;
    *vend = q;
    return q + 2;
}

/* (ts, value as str (UTF-8, errors replaced, as bytes.decode does), size, end offset)
 * appended to the list `events`: what SseFramer.whole_events takes. 0, or -1 on an error. */
static inline int sse_event_append(PyObject *events, PyObject *ts, const unsigned char *v,
                                   const unsigned char *vend, Py_ssize_t size, long long end_off) {
    PyObject *ev = Py_BuildValue("(ONnL)", ts, PyUnicode_DecodeUTF8((const char *)v, vend - v, "replace"), size,
                                 end_off);
    if (ev == NULL || PyList_Append(events, ev) < 0) {
        Py_XDECREF(ev);
        return -1;
    }
    Py_DECREF(ev);
    return 0;
}

#endif
