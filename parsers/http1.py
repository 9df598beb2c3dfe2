"""Minimal HTTP/1.1 message parsing (sans-I/O): request/response heads, Content-Length and
chunked bodies, and the two ways HTTP/2 can follow HTTP/1.1 on a connection:
``Upgrade: h2c`` + ``101 Switching Protocols`` and ``CONNECT`` + ``2xx`` (a tunnel).

:class:`Http1Conn` is fed in-order bytes per role (0 = client, 1 = server) and produces
one :class:`RequestRecord` per exchange (``protocol='http1'``, ``stream_id`` = 0-based
exchange index). Timings: ``request_start`` = the packet that completed the request
head, ``request_end`` = request body end, ``response_headers`` = response head,
``first_message`` / ``last_message`` = first / last response body bytes (the response
head when there is no body), ``first_byte`` = first response body byte, ``end`` =
response complete. A ``text/event-stream`` (or JSON-lines) response body is split into
events (MessageRecords, :class:`parsers.llm.taps.EventSplitter`): ``first_message`` is then
the first event carrying generated content; other bodies count as one "message" and emit
no MessageRecords. JSON request and response bodies are read for the model, finish reason
and token counts of LLM requests (:mod:`parsers.llm`).

Keep-alive and pipelined requests pair with responses in order. A side whose bytes do not
begin with a message head (the capture began inside a message) or that lost bytes
(:meth:`Http1Conn.lost`) resynchronises at the next start line that follows a line end;
the exchange cut by the loss is reported with what was seen of it.
"""

from __future__ import annotations

import re
from collections import deque

from parsers._native import speedups
from parsers.llm.taps import EventSplitter, JsonBodyTap, llm_facts, tap_for
from parsers.records import (
    ChunkRun,
    DecodeIssue,
    MessageRecord,
    MessageRow,
    RequestRecord,
    RunColumn,
    message_from_row,
)

# the usual event-stream body, whole events in whole chunks, read in C (None: in Python)
_speedups = speedups("parsers.llm")

_HEAD_MAX = 64 * 1024
_REQ_LINE = re.compile(rb"^([A-Z][A-Z0-9_-]{0,19}) (\S+) HTTP/(1\.[01])$")
_RESP_LINE = re.compile(rb"^HTTP/(1\.[01]) (\d{3})(?: (.*))?$")
METHODS = (
    b"GET ",
    b"POST ",
    b"PUT ",
    b"HEAD ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
    b"TRACE ",
    b"PRI ",
)

HEAD, BODY_LEN, CHUNK_SIZE, CHUNK_DATA, CHUNK_CRLF, TRAILERS, BODY_CLOSE, HOLD, BROKEN, SYNC = range(10)
_METHOD_NAMES = b"|".join(m.strip() for m in METHODS if m != b"PRI ")
# a start line after a line end: where a side resynchronises
REQUEST_START = re.compile(rb"\n((?:" + _METHOD_NAMES + rb") \S+ HTTP/1\.[01]\r?\n)")
RESPONSE_START = re.compile(rb"\n(HTTP/1\.[01] [1-5]\d\d(?: [^\r\n]*)?\r?\n)")
_METHOD_START = re.compile(rb"[A-Z][A-Z0-9_-]{0,19}( |$)")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]+")  # RFC 9112: chunk-size = 1*HEXDIG
_SYNC_KEEP = 8192  # bytes kept between feeds while looking for a start line (a long target)


class Head:
    __slots__ = ("method", "target", "status", "version", "headers")

    def __init__(self) -> None:
        self.method: str | None = None
        self.target: str | None = None
        self.status: int | None = None
        self.version = "1.1"
        self.headers: dict[str, str] = {}


def parse_head(raw: bytes, is_request: bool) -> Head | None:
    """Parse a message head (start line + header lines, without the blank line)."""
    if _speedups is not None:  # (the same reading in C: tests/test_http1_heads.py compares them)
        got = _speedups.parse_head(raw, is_request)
        if got is None:
            return None
        h = Head()
        h.method, h.target, h.version, h.status, h.headers = got
        return h
    lines = raw.replace(b"\r\n", b"\n").split(b"\n")
    h = Head()
    first = lines[0].rstrip()
    if is_request:
        m = _REQ_LINE.match(first)
        if not m:
            return None
        h.method = m.group(1).decode("ascii")
        h.target = m.group(2).decode("latin-1")
        h.version = m.group(3).decode("ascii")
    else:
        m = _RESP_LINE.match(first)
        if not m:
            return None
        h.version = m.group(1).decode("ascii")
        h.status = int(m.group(2))
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        k = name.strip().lower().decode("latin-1")
        v = value.strip().decode("latin-1")
        h.headers[k] = f"{h.headers[k]}, {v}" if k in h.headers else v
    return h


class _Exchange:
    __slots__ = (
        "index",
        "req",
        "resp",
        "start",
        "req_end",
        "resp_head",
        "first_body",
        "first_body_off",
        "last_body",
        "end",
        "end_off",
        "req_bytes",
        "resp_bytes",
        "upgrade",
        "taps",
        "msgs",
        "cut",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.req: Head | None = None
        self.resp: Head | None = None
        self.start: int | None = None
        self.req_end: int | None = None
        self.resp_head: int | None = None
        self.first_body: int | None = None
        self.first_body_off: int | None = None
        self.last_body: int | None = None
        self.end: int | None = None
        self.end_off: int | None = None
        self.req_bytes = 0
        self.resp_bytes = 0
        self.upgrade = False  # Upgrade: h2c requested
        # body readers by role (parsers.llm.taps): a JSON request; a response's events or JSON
        self.taps: list[EventSplitter | JsonBodyTap | None] = [None, None]
        self.msgs = 0
        self.cut = False  # bytes of its response were lost: it ends where they were


class _Side:
    __slots__ = ("is_req", "state", "buf", "left", "ex", "head_start_ts", "heads", "skipped")

    def __init__(self, is_req: bool) -> None:
        self.is_req = is_req
        self.state = HEAD
        self.buf = bytearray()
        self.left = 0
        self.ex: _Exchange | None = None
        self.head_start_ts: int | None = None
        self.heads = 0  # message heads parsed
        self.skipped = 0  # bytes skipped while resynchronising


class Http1Conn:
    """HTTP/1.1 exchanges of one connection; roles 0 = client, 1 = server."""

    def __init__(self, conn_key: int) -> None:
        self.conn_key = conn_key
        self.sides = (_Side(True), _Side(False))
        self.pending: deque[_Exchange] = deque()  # requests without a complete response
        self.next_index = 0
        self.records: list[RequestRecord] = []
        # response events as MessageRows, no record object each (drain_rows; drain makes
        # MessageRecords of them)
        self.rows: list[MessageRow] = []
        self.issues: list[DecodeIssue] = []
        self.switch: str | None = None  # 'h2c' after 101, 'tunnel' after CONNECT 2xx
        self.upgraded: _Exchange | None = None
        self._frame_no = 0
        self._tmp: list[tuple[int, int, int, int]] = []

    @property
    def frame_no(self) -> int:
        """The packet whose bytes it reads (the last of a run read at once): where its
        issues are placed."""
        return self._frame_no

    # -- feeding ---------------------------------------------------------------------

    def holding(self, role: int) -> bool:
        return self.sides[role].state == HOLD

    def feed_event_rows(self, run: ChunkRun, first: int, direction: int) -> int:
        """The server's rows of ``run`` (TCP ``direction``) from ``first`` while each is
        whole chunks of one whole event each, read in C (parsers/llm/_speedups.c), when
        the server side reads an event stream between its chunks: what :meth:`feed` of
        each row gives. Returns the first row not taken (``first``: none)."""
        tap = self._whole_events_tap()
        if tap is None:
            return first
        stop, events = _speedups.sse_chunk_run(run.rows, run.buf, first, direction)
        if stop > first:
            self._frame_no = int(run.rows[stop - 1, RunColumn.FRAME_NO])
            self._whole_events(tap, events)
        return stop

    def _whole_events_tap(self) -> EventSplitter | None:
        """The server side's event-stream reader when the C reader may take its next bytes:
        between chunks, nothing half-read (None: the Python path reads them)."""
        side = self.sides[1]
        ex = side.ex
        if _speedups is None or side.state != CHUNK_SIZE or side.buf or ex is None:
            return None
        tap = ex.taps[1]
        return tap if type(tap) is EventSplitter and tap.takes_whole_events() else None

    def _whole_events(self, tap: EventSplitter, events: list[tuple[int, str, int, int]]) -> None:
        """What reading the chunks of these events (ts, data, chunk data bytes, offset after
        it) does: the exchange's body figures, the events, their message rows."""
        ex = self.sides[1].ex
        assert ex is not None
        for _ts, _data, n, _end in events:
            ex.resp_bytes += n
        if ex.first_body is None:
            ex.first_body, _data, _n, ex.first_body_off = events[0]
        ex.last_body, _data, _n, ex.end_off = events[-1]
        tap.feed_whole_events(events, self._tmp)
        self._take_messages(ex)

    def feed(self, role: int, data: bytes, ts: int, off: int, frame_no: int = 0) -> int:
        """Consume bytes; returns how many were consumed (fewer when the side stopped:
        the rest belongs to whatever follows the upgrade / tunnel)."""
        self._frame_no = frame_no
        # (the state compared first: no call on the server's other feeds)
        if role == 1 and self.sides[1].state == CHUNK_SIZE and (tap := self._whole_events_tap()) is not None:
            # an event stream's usual chunks (a packet's, or a TLS record's), read in C
            events = _speedups.sse_chunks(data, ts, off)
            if events is not None:
                self._whole_events(tap, events)
                return len(data)
        side = self.sides[role]
        total = len(data)
        end_off = off + total  # direction offset after data (also after any bytes that
        # replace it below: resynchronising hands on bytes that end where data ends)
        i, n = 0, total
        while i < n:
            st = side.state
            if st == HEAD:
                if not side.buf:
                    # tolerate CRLFs between messages
                    while i < n and data[i] in (13, 10):
                        i += 1
                    if i >= n:
                        break
                    side.head_start_ts = ts
                prev = len(side.buf)
                side.buf += data[i:n]
                if prev < 8 and (len(side.buf) >= 8 or b"\n" in side.buf) and not self._head_start_ok(side):
                    # not a message head: the side began (or went on after lost bytes)
                    # inside a message
                    rest = bytes(side.buf)
                    side.buf.clear()
                    side.state = SYNC
                    data, i, n = rest, 0, len(rest)
                    off = end_off - n
                    continue
                k = side.buf.find(b"\r\n\r\n", max(0, prev - 3))
                sep = 4
                if k < 0:
                    k = side.buf.find(b"\n\n", max(0, prev - 1))
                    sep = 2
                if k < 0:
                    if len(side.buf) > _HEAD_MAX:
                        self._broken(role, "http1_head_too_long", "no end of head within 64 KiB")
                    return total
                raw = bytes(side.buf[:k])
                rest = len(side.buf) - (k + sep)
                side.buf.clear()
                i = n - rest
                self._head(role, side, raw, ts, off + i)
            elif st == BODY_LEN or st == CHUNK_DATA:
                take = min(side.left, n - i)
                i += take
                side.left -= take
                self._body(role, side, data, i - take, i, ts, off)
                if side.left == 0:
                    if st == BODY_LEN:
                        self._end(role, side, ts, off + i)
                    else:
                        side.state = CHUNK_CRLF
                        side.left = 2
            elif st == CHUNK_CRLF:
                if side.left == 2 and data[i : i + 2] == b"\r\n":  # the usual whole CRLF at once
                    i += 2
                    side.left = 0
                while side.left and i < n:
                    c = data[i]
                    i += 1
                    side.left -= 1
                    if c == 10:  # LF ends it (bare LF tolerated)
                        side.left = 0
                if not side.left:
                    side.state = CHUNK_SIZE
            elif st == CHUNK_SIZE or st == TRAILERS:
                j = data.find(b"\n", i)
                if j < 0:
                    side.buf += data[i:n]
                    if len(side.buf) > 4096:
                        side.buf.clear()
                        self._broken(role, "http1_bad_chunk", "chunk-size line too long")
                    return total
                if side.buf:
                    side.buf += data[i:j]
                    line = bytes(side.buf).strip()
                    side.buf.clear()
                else:  # the usual case: the whole line in this feed
                    line = bytes(data[i:j]).strip()
                i = j + 1
                if st == TRAILERS:
                    if not line:
                        self._end(role, side, ts, off + i)
                    continue
                digits = line.split(b";", 1)[0].rstrip()
                if not _CHUNK_SIZE.fullmatch(digits):  # (int() takes a sign, 0x, _ too)
                    self._broken(role, "http1_bad_chunk", f"bad chunk size {line[:20]!r}")
                    continue
                size = int(digits, 16)
                if size == 0:
                    side.state = TRAILERS
                elif data[i + size : i + size + 2] == b"\r\n":
                    # the usual chunk, whole in this feed with its CRLF: read at once (as
                    # CHUNK_DATA and CHUNK_CRLF would), the side at the next chunk size
                    self._body(role, side, data, i, i + size, ts, off)
                    i += size + 2
                else:
                    side.state = CHUNK_DATA
                    side.left = size
            elif st == BODY_CLOSE:
                self._body(role, side, data, i, n, ts, off)
                i = n
            elif st == SYNC:
                found = self._sync(side, data, i, n)
                if found is None:
                    return total
                data, i, n = found, 0, len(found)
                off = end_off - n
            elif st == HOLD:
                return total - (n - i)
            else:  # BROKEN: cannot find message boundaries any more
                return total
        return total

    def lost(self, role: int) -> None:
        """Bytes of this side were lost: the exchange in flight is cut, and the side
        resynchronises at its next message head."""
        side = self.sides[role]
        if side.state == HOLD:
            return
        self._cut(role)
        side.state = HEAD
        side.buf.clear()
        side.left = 0

    def _issue(self, kind: str, msg: str) -> None:
        self.issues.append(DecodeIssue(kind, self._frame_no, msg))

    def _broken(self, role: int, kind: str, msg: str) -> None:
        """The bytes of a message make no sense: cut its exchange, find the next head."""
        self._issue(kind, msg)
        self._cut(role)
        self.sides[role].state = SYNC

    def _cut(self, role: int) -> None:
        side = self.sides[role]
        ex, side.ex = side.ex, None
        if ex is None:
            return
        for tap in ex.taps:
            if tap is not None:
                tap.lost()
        if role == 1:  # what was seen of the response is all there is: report it now
            ex.cut = True
            try:
                self.pending.remove(ex)
            except ValueError:
                pass
            self.records.append(self._record(ex))
        # a cut request stays pending: its response may still come

    @staticmethod
    def _head_start_ok(side: _Side) -> bool:
        """Whether the buffered bytes can begin a message head of this side (a request:
        any method token, as _REQ_LINE takes it)."""
        if side.is_req:
            b = bytes(side.buf[:21])
            m = _METHOD_START.match(b)
            return m is not None and (m.group(1) == b" " or len(b) < 21)
        return b"HTTP/1.".startswith(bytes(side.buf[:7]))

    def _sync(self, side: _Side, data: bytes, i: int, n: int) -> bytes | None:
        """Skip bytes up to the next start line of this side (after a line end): the bytes
        from it on, or None when it did not come yet."""
        buf = side.buf
        buf += data[i:n]
        m = (REQUEST_START if side.is_req else RESPONSE_START).search(buf)
        if m is None:
            drop = max(0, len(buf) - _SYNC_KEEP)
            side.skipped += drop
            del buf[:drop]
            return None
        start = m.start(1)
        self._issue("http1_resync", f"skipped {side.skipped + start} bytes to the next {'request' if side.is_req else 'response'} head")
        side.skipped = 0
        found = bytes(buf[start:])
        buf.clear()
        side.state = HEAD
        return found

    def _head(self, role: int, side: _Side, raw: bytes, ts: int, end_off: int) -> None:
        h = parse_head(raw, side.is_req)
        if h is None:
            self._broken(role, "http1_bad_head", f"not an HTTP/1 {'request' if role == 0 else 'response'} head")
            return
        side.heads += 1
        hd = h.headers
        if role == 0:
            ex = _Exchange(self.next_index)
            self.next_index += 1
            ex.req = h
            ex.start = ts
            up = hd.get("upgrade", "").lower()
            ex.upgrade = "h2c" in up
            self.pending.append(ex)
            side.ex = ex
            if h.method == "CONNECT":
                self._end(role, side, ts, end_off)
                return
            ex.taps[0] = tap_for(hd.get("content-type"), False)
            self._body_mode(side, hd, role, ts, end_off, no_body=False)
            return
        status = h.status or 0
        ex = self.pending[0] if self.pending else None
        if status == 101 and ex is not None and ex.upgrade:
            ex.resp = h
            ex.resp_head = ts
            self.pending.popleft()
            self.upgraded = ex
            self.switch = "h2c"
            side.state = HOLD
            return
        if 100 <= status < 200:
            return  # informational; the final head follows
        if ex is None:
            # response without a request we saw (capture began mid-exchange)
            ex = _Exchange(self.next_index)
            self.next_index += 1
            self.pending.append(ex)
        ex.resp = h
        ex.resp_head = ts
        side.ex = ex
        method = ex.req.method if ex.req else None
        if method == "CONNECT" and 200 <= status < 300:
            self._end(role, side, ts, end_off)
            self.switch = "tunnel"
            side.state = HOLD
            return
        if self.sides[0].state == HOLD:
            # upgrade / CONNECT refused: the client side goes on as HTTP/1.1
            self.sides[0].state = HEAD
        no_body = method == "HEAD" or status in (204, 304)
        if not no_body:
            ex.taps[1] = tap_for(hd.get("content-type"), True)
        self._body_mode(side, hd, role, ts, end_off, no_body)

    def _body_mode(
        self, side: _Side, hd: dict[str, str], role: int, ts: int, end_off: int, no_body: bool
    ) -> None:
        te = hd.get("transfer-encoding", "").lower()
        if no_body:
            self._end(role, side, ts, end_off)
        elif "chunked" in te:
            side.state = CHUNK_SIZE
        elif "content-length" in hd:
            try:
                cl = int(hd["content-length"].split(",")[0])
            except ValueError:
                cl = -1
            if cl < 0:
                self._broken(role, "http1_bad_length", "bad Content-Length")
            elif cl == 0:
                self._end(role, side, ts, end_off)
            else:
                side.state = BODY_LEN
                side.left = cl
        elif role == 1:
            side.state = BODY_CLOSE  # read until the connection closes
        else:
            self._end(role, side, ts, end_off)

    def _body(self, role: int, side: _Side, data: bytes, i: int, j: int, ts: int, off: int) -> None:
        ex = side.ex
        if ex is None or j <= i:
            return
        tap = ex.taps[role]
        if role == 0:
            ex.req_bytes += j - i
            if tap is not None:
                tap.feed(data, i, j, off, ts, self._tmp)
            return
        ex.resp_bytes += j - i
        if ex.first_body is None:
            ex.first_body = ts
            ex.first_body_off = off + j
        ex.last_body = ts
        ex.end_off = off + j
        if tap is not None:
            tap.feed(data, i, j, off, ts, self._tmp)
            if self._tmp:
                self._take_messages(ex)

    def _take_messages(self, ex: _Exchange) -> None:
        """The response messages its body reader gave, as rows."""
        rows, index, tmp = self.rows, ex.index, self._tmp
        for t, size, flags, end in tmp:
            rows.append((index, 1, ex.msgs, t, size, flags, end))
            ex.msgs += 1
        tmp.clear()

    def _end(self, role: int, side: _Side, ts: int, end_off: int) -> None:
        ex = side.ex
        side.state = HEAD
        side.ex = None
        if ex is None:
            return
        if role == 0:
            ex.req_end = ts
            if ex.upgrade or (ex.req is not None and ex.req.method == "CONNECT"):
                side.state = HOLD  # wait for the response: 101 / 2xx switch protocols
            return
        ex.end = ts
        ex.end_off = end_off
        try:
            self.pending.remove(ex)
        except ValueError:
            pass
        self.records.append(self._record(ex))

    # -- output ----------------------------------------------------------------------

    def _record(self, ex: _Exchange) -> RequestRecord:
        r = RequestRecord(conn_key=self.conn_key, stream_id=ex.index, protocol="http1", kind="http")
        req = ex.req.headers if ex.req else {}
        resp = ex.resp.headers if ex.resp else {}
        if ex.req is not None:
            r.method = ex.req.method
            r.path = ex.req.target
        r.authority = req.get("host")
        r.content_type = req.get("content-type") or resp.get("content-type")
        r.user_agent = req.get("user-agent")
        r.request_start = ex.start
        r.request_end = ex.req_end
        r.response_headers = ex.resp_head
        r.http_status = ex.resp.status if ex.resp else None
        r.request_bytes = ex.req_bytes
        r.response_bytes = ex.resp_bytes
        r.headers_known = ex.req is not None
        r.end = ex.end
        r.end_offset = ex.end_off
        r.first_byte = ex.first_body
        events = ex.taps[1]
        if isinstance(events, EventSplitter):
            r.kind = "ndjson" if events.ndjson else "sse"
            r.response_messages = ex.msgs
            # the first event carrying generated content is the time-to-first-token point
            r.first_message = events.first_ts
            r.first_message_end_offset = events.first_off
            r.last_message = ex.last_body
        else:
            r.request_messages = 1 if ex.req_bytes else 0
            r.response_messages = 1 if ex.resp_bytes else 0
            r.first_message = ex.first_body if ex.first_body is not None else ex.resp_head
            r.first_message_end_offset = ex.first_body_off
            r.last_message = ex.last_body if ex.last_body is not None else ex.resp_head
        r.model, r.finish_reason, r.prompt_tokens, r.completion_tokens = llm_facts(r.path, ex.taps[0], events)
        return r

    def finish(self, end_ns: int) -> None:
        """Flush exchanges still open (a read-until-close body ends at the close)."""
        srv = self.sides[1]
        if srv.state == BODY_CLOSE and srv.ex is not None:
            self._end(1, srv, srv.ex.last_body or end_ns, srv.ex.end_off or 0)
        for ex in list(self.pending):
            if ex is self.upgraded:
                continue
            self.records.append(self._record(ex))
        self.pending.clear()

    def drain(self) -> tuple[list[RequestRecord], list[MessageRecord]]:
        r, m = self.drain_rows()
        return r, [message_from_row(self.conn_key, row) for row in m]

    def drain_rows(self) -> tuple[list[RequestRecord], list[MessageRow]]:
        """Like :meth:`drain`, messages as MessageRows."""
        r, self.records = self.records, []
        m, self.rows = self.rows, []
        return r, m
