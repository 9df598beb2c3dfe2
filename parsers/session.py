"""Application-layer session of one TCP connection (sans-I/O public entry).

Feed it the in-order payload chunks of both directions; it decides the protocol from the
bytes (HTTP/2 preface on any port, HTTP/1.1 with ``Upgrade: h2c`` or ``CONNECT``, TLS,
or mid-connection HTTP/2 by a run of plausible frame headers), decodes HTTP/2 + HPACK +
gRPC (or HTTP/1.1) and hands out :class:`RequestRecord`, :class:`MessageRecord` and
:class:`H2Event` records::

    s = AppSession(conn_key, client_port, server_port)
    for chunk in chunks:            # PayloadChunk, both directions, capture order
        s.feed(chunk)
        reqs, msgs, events = s.take_records()   # optional, for bounded memory
    result = s.finish(end_ns)       # everything not taken yet, incl. open requests

Records use the *corrected* orientation: when the bytes show that the TCP layer's
TO_SERVER side is really the server, ``flipped`` is True and records say
``direction == TO_SERVER`` for true client->server bytes. Byte offsets are the
direction offsets of the chunks (the pipeline flips its TCP-side data to match).
Records are held back (not returned by take_records) while the orientation is still
unknown, e.g. mid-connection before any HEADERS was decoded.

Non-gRPC HTTP/2 bodies: ``first_message`` / ``last_message`` are the times of the first
and last response DATA frames with payload and ``response_messages`` counts those frames;
no MessageRecords are emitted for them. gRPC messages and SSE events do get
MessageRecords.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from parsers.h2 import H2Connection
from parsers.h2._frames import DEFAULT_MAX_FRAME_SIZE, NEED_MORE, PREFACE, scan_for_frames
from parsers.http1 import METHODS, REQUEST_START, RESPONSE_START, Http1Conn
from parsers.records import (
    ChunkRun,
    DecodeIssue,
    H2Event,
    MessageRecord,
    MessageRow,
    PayloadChunk,
    RequestRecord,
    RunBuilder,
    RunColumn,
    message_flags,
    message_from_row,
)
from parsers.records import MessageColumn as MC
from parsers.tls import KeyLog, TlsConnection

_SNIFF_MAX = 64 * 1024  # bytes per direction looked at before giving up
_SNIFF_NOFRAMES = 32 * 1024  # no frame chain in this many bytes: not HTTP/2
_ISSUE_CAP = 1000

_Held = tuple[int, bytes, int, int, int, int]  # direction, data, ts, frame_no, offset, gap


@dataclass
class SessionResult:
    protocol: str
    flipped: bool
    requests: list[RequestRecord] = field(default_factory=list)
    h2_events: list[H2Event] = field(default_factory=list)
    issues: list[DecodeIssue] = field(default_factory=list)
    message_rows: list[MessageRow] = field(default_factory=list)  # the messages, as tuples
    tls: dict | None = None  # a TLS connection's facts (TlsConnection.facts)
    conn_key: int = 0  # the connection's (its messages')

    @property
    def messages(self) -> list[MessageRecord]:
        """:attr:`message_rows` as records, made when asked (the pipeline reads the rows:
        a record each is ~1.5 us, 60,000 of them at the end of a keyless TLS connection)."""
        return [message_from_row(self.conn_key, row) for row in self.message_rows]


def _rows_of(msgs: list[MessageRecord]) -> list[MessageRow]:
    return [
        (m.stream_id, m.direction, m.index, m.ts_ns, m.size,
         message_flags(m.compressed, m.event, m.tokens), m.end_offset)
        for m in msgs
    ]  # fmt: skip


_NO_COLS = np.zeros((0, len(MC)), dtype=np.int64)


def _cols_of(rows: list[MessageRow]) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, len(MC))


def _finished_plaintext(d: int, data: bytes, ts: int, frame_no: int, offset: int, gap: int) -> None:
    raise RuntimeError("TLS plaintext after the session finished")


def _sniff(data: bytes | bytearray, final: bool = False) -> str | None:
    """Detailed sniff of the first bytes of one direction: 'h2-preface', 'h2-frames',
    'http1-request', 'http1-response', 'tls-client', 'tls-server', 'tls', 'unknown',
    or None when more bytes are needed."""
    return _sniff_from(data, final)[0]


def _sniff_from(data: bytes | bytearray, final: bool = False, scan_from: int = 0) -> tuple[str | None, int]:
    """`_sniff`, plus where a later call on the same bytes with more appended may resume
    the frame-chain scan: every offset before it was rejected by bytes already here, which
    more bytes do not change (the scan of a growing prefix stays linear, not quadratic)."""
    n = len(data)
    if n == 0:
        return None if not final else "unknown", 0
    m = min(n, 24)
    if data[:m] == PREFACE[:m]:
        if n >= 24:
            return "h2-preface", 0
        return None if not final else "unknown", 0
    b0 = data[0]
    if 0x14 <= b0 <= 0x17:
        if n < 6:
            if n >= 3 and (data[1] != 3 or data[2] > 4):
                pass
            elif not final:
                return None, 0
        elif data[1] == 3 and data[2] <= 4:
            if b0 == 0x16 and data[5] == 1:
                return "tls-client", 0
            if b0 == 0x16 and data[5] == 2:
                return "tls-server", 0
            return "tls", 0
    if 0x41 <= b0 <= 0x5A:
        for meth in METHODS:
            if data.startswith(meth):
                return ("http1-request" if meth != b"PRI " else "unknown"), 0
            if not final and meth.startswith(bytes(data[: len(meth)])) and n < len(meth):
                return None, 0
        if data.startswith(b"HTTP/1."):
            return "http1-response", 0
        if not final and b"HTTP/1.".startswith(bytes(data[:7])) and n < 7:
            return None, 0
    x, status = scan_for_frames(data, scan_from, n, DEFAULT_MAX_FRAME_SIZE, final=final)
    if status == 0:
        return "h2-frames", 0
    if final:
        return "unknown", 0
    if status == NEED_MORE:
        return (None if n < _SNIFF_MAX else "unknown"), x
    return (None if n < _SNIFF_NOFRAMES else "unknown"), x


_SNIFF_WAIT = 1 << 20  # undecidable bytes of one direction dropped while the other is silent


def _http1_inside(data: bytes | bytearray, start: int = 0) -> str | None:
    """'http1-request' / 'http1-response' when an HTTP/1.1 start line follows a line end
    in ``data[start:]`` (bytes that began inside a message), else None."""
    if RESPONSE_START.search(data, start):
        return "http1-response"
    if REQUEST_START.search(data, start):
        return "http1-request"
    return None


def sniff_protocol(data: bytes, final: bool = False) -> str | None:
    """Protocol suggested by the first bytes of one direction: 'h2c' (preface or a
    run of valid frame headers), 'http1', 'tls', 'unknown', or None when more bytes
    are needed to tell (``final``: no more bytes will come, always decide)."""
    k = _sniff(data, final)
    if k is None:
        return None
    if k.startswith("h2"):
        return "h2c"
    if k.startswith("http1"):
        return "http1"
    if k.startswith("tls"):
        return "tls"
    return "unknown"


class AppSession:
    """Protocol detection and application decoding for one TCP connection."""

    def __init__(
        self, conn_key: int, client_port: int, server_port: int, force_h2: bool = False,
        keylog: KeyLog | None = None,
    ) -> None:
        self.conn_key = conn_key
        self.keylog = keylog  # TLS secrets (key logs, Decryption Secrets Blocks)
        self._tls: TlsConnection | None = None
        self._inner: AppSession | None = None  # the decrypted plaintext's own session
        self.client_port = client_port
        self.server_port = server_port
        self.force_h2 = force_h2
        self.protocol = "unknown"
        self._flipped = False
        self._orient_locked = False  # orientation known from HTTP/1.1 before a tunnel/upgrade
        self._mode = "sniff"  # sniff | h2 | http1 | tls | opaque | broken (see broke)
        self._held: list[_Held] = []
        self._prefix = [bytearray(), bytearray()]
        self._scan_from = [0, 0]  # where the frame-chain scan of each prefix resumes
        self._waited = [0, 0]  # bytes of each direction dropped undecided (see _sniff_step)
        self._h2: H2Connection | None = None
        self._h1: Http1Conn | None = None
        self._strip = [0, 0]  # preface bytes still to drop per TCP direction
        # HTTP/2 steady state: a callable equivalent to feed() for every later chunk
        # (H2Connection.chunk_feeder()), None before
        self.fast_feed = None
        self._fresh = [True, True]  # no bytes of this direction handed to HTTP/2 yet
        self._h1_hold: list[list[_Held] | None] = [None, None]  # by role
        self._requests: list[RequestRecord] = []
        self._messages: list[MessageRecord] = []
        self._issues: list[DecodeIssue] = []
        self._h1_index_base = 0
        self._finished: SessionResult | None = None
        self._broken_tls: dict | None = None  # a broken TLS connection's facts (see broke)
        self._broken_rows: tuple | None = None  # what its decoders had ready (take_columns)
        # TLS: the plaintext of the rows being fed (_feed_rows), handed to the inner
        # session as one run when they are done, not record by record
        self._plain_run: RunBuilder | None = None

    # -- public ----------------------------------------------------------------------

    @property
    def flipped(self) -> bool:
        if self._tls is not None:
            return self._flipped  # from the ClientHello
        if self._h2 is not None:
            return self._h2.flipped
        return self._flipped

    def feed(self, chunk: PayloadChunk) -> None:
        fast = self.fast_feed
        if fast is not None:
            fast(chunk)
            return
        mode = self._mode
        if mode == "h2":
            d = chunk.direction
            if self._fresh[d]:
                self._fresh[d] = False
                if chunk.data[:24] == PREFACE and not chunk.gap_before and not self._strip[d]:
                    # mid-connection guess, but this side starts with the preface
                    self._h2.saw_preface(d)  # type: ignore[union-attr]
                    self._strip[d] = len(PREFACE)
            if self._strip[d]:
                self._feed_h2_strip(
                    d,
                    chunk.data,
                    chunk.ts_ns,
                    chunk.frame_no,
                    chunk.stream_offset,
                    chunk.gap_before,
                )
                return
            h2 = self._h2
            assert h2 is not None
            # (the C fast path's equivalent of h2.feed for the chunk, while the other
            # direction has not started: a connection seen from its middle whose client
            # only sends ACKs keeps it so)
            h2.chunk_feeder()(chunk)
            if not (self._fresh[0] or self._fresh[1] or self._strip[0] or self._strip[1]):
                # steady state: hand chunks straight to the HTTP/2 fast path; the instance
                # attribute shadows this method, so callers skip one Python call per chunk
                self.fast_feed = self.feed = h2.chunk_feeder()  # type: ignore[method-assign]
            return
        item = (
            chunk.direction,
            chunk.data,
            chunk.ts_ns,
            chunk.frame_no,
            chunk.stream_offset,
            chunk.gap_before,
        )
        if mode == "sniff":
            self._held.append(item)
            self._sniff_step(chunk.direction, chunk.data, chunk.gap_before)
        elif mode == "http1":
            self._feed_h1(item)
        elif mode == "tls":
            self._tls.feed(*item)  # type: ignore[union-attr]
        # opaque, broken: nothing to decode

    def broke(self, exc: Exception, frame_no: int = 0, where: str = "") -> None:
        """A decoder of this connection raised on its bytes: a bug of ours, never a reason
        to lose the rest of the capture. Say so (a ``session_internal_error`` issue at
        ``frame_no``), keep what was taken, decode nothing more of it (its TCP figures go
        on), keeping its orientation and what its decoders had ready (the rows and
        requests they finished; what they were reading is lost with them). At the packet
        its decoders were reading, where they say; else at ``frame_no``, ``where`` said
        after "stopped" (which packets)."""
        if self._mode == "broken":
            return
        reading = self._reading_frame()
        if reading:  # the packet the decoder was at, more exact than the caller's
            frame_no, where = reading, ""
        try:
            self._broken_rows = self.take_columns()
        except Exception:  # noqa: BLE001 - the decoders may be what raised: nothing ready then
            self._broken_rows = None
        self._flipped = self.flipped
        self._orient_locked = True
        if self._tls is not None:
            try:
                self._broken_tls = self._tls.facts()
            except Exception:  # noqa: BLE001 - the facts of a connection that broke: best effort
                self._broken_tls = None
        self._issues.append(DecodeIssue(
            "session_internal_error", frame_no,
            f"{self.protocol} decoding of this connection stopped{where}: {type(exc).__name__}: {exc}",
        ))  # fmt: skip
        for decoder in (self._h1, self._h2, self._tls):  # what they found wrong before
            if decoder is not None:
                self._issues += decoder.issues
        self._mode = "broken"
        self.fast_feed = None
        self.__dict__.pop("feed", None)  # the HTTP/2 steady state's shortcut
        self._held.clear()
        self._h1 = self._h2 = self._inner = None
        if self._tls is not None:
            self._tls.plaintext = _finished_plaintext
            self._tls = None

    def _reading_frame(self) -> int:
        """The packet this connection's decoders were reading (0: not known)."""
        sessions = [self] if self._inner is None else [self, self._inner]
        return max((d.frame_no for s in sessions for d in (s._h1, s._h2) if d is not None), default=0)

    def feed_run(self, run: ChunkRun) -> None:
        """Feed every chunk of ``run`` (same result as :meth:`feed` on each); in the
        HTTP/2 steady state the run goes to the HTTP/2 layer as columns, and HTTP/1.1
        and TLS take its rows as they are."""
        first, n = 0, len(run)
        step = 16
        if self._mode == "broken":
            return
        while first < n:
            if self.fast_feed is not None:
                h2 = self._h2
                assert h2 is not None  # fast_feed is set only in the HTTP/2 steady state
                h2.feed_run(run, first)
                return
            if self._mode in ("http1", "tls"):
                first = self._feed_rows(run, first)
                continue
            # chunk by chunk while the protocol is being told (often a few rows); rows
            # become PayloadChunks in growing slices, so few are made in vain. Rows of a
            # direction HTTP/2 already reads go to it as a run meanwhile.
            ready = self._h2_run_rows(run, first)
            if ready > first:
                assert self._h2 is not None
                self._h2.feed_run(ChunkRun(run.conn_key, run.rows[first:ready], run.buf))
                first = ready
                continue
            for c in run.chunks(first, first + step):
                self.feed(c)
                first += 1
                if self.fast_feed is not None or self._mode in ("http1", "tls"):
                    break
            step *= 2

    def _feed_rows(self, run: ChunkRun, first: int) -> int:
        """HTTP/1.1 and TLS read chunk by chunk: the rows from ``first`` go straight to
        them, with no PayloadChunk made and dispatched each (what feed does with one),
        until an Upgrade or CONNECT hands the connection on; TLS takes them all, and its
        plaintext goes on as one run. Returns the first row not fed."""
        mode, mv = self._mode, memoryview(run.buf)
        if mode == "tls":
            tls = self._tls
            assert tls is not None
            self._plain_run = plain = RunBuilder()
            try:
                tls.feed_rows(run.rows[first:], mv, plain)
            finally:  # (what was decrypted before a failure is decoded, as it was fed)
                self._flush_plain()
                self._plain_run = None
            return len(run)
        rows = run.rows[first:].tolist()
        i, n = first, first + len(rows)
        while i < n:
            if self._mode != mode:
                break
            d, ts, fno, off, a, z = rows[i - first]
            h1 = self._h1
            assert h1 is not None
            server = 0 if self._flipped else 1  # the TCP direction of role 1
            if d == server and self._h1_hold[1] is None:
                # an event stream's usual chunks, the rows from here at once
                taken = h1.feed_event_rows(run, i, server)
                if taken > i:
                    i = taken
                    continue
            self._feed_h1((d, bytes(mv[a:z]), ts, fno, off, 0))
            i += 1
        return i

    def _h2_run_rows(self, run: ChunkRun, first: int) -> int:
        """Before the HTTP/2 steady state, while one direction has not started (its first
        bytes may be a preface) or is still dropping a preface: the rows from ``first``
        up to that direction's next row, which HTTP/2 can take as a run (the returned
        end; ``first`` when there are none)."""
        if self._mode != "h2":
            return first
        waiting = [d for d in (0, 1) if self._fresh[d] or self._strip[d]]
        if len(waiting) != 1:
            return first
        hit = np.flatnonzero(run.rows[first:, RunColumn.DIRECTION] == waiting[0])
        return first + int(hit[0]) if len(hit) else len(run)

    def take_records(self) -> tuple[list[RequestRecord], list[MessageRecord], list[H2Event]]:
        reqs, rows, evs = self.take_rows()
        ck = self.conn_key
        return reqs, [message_from_row(ck, row) for row in rows], evs

    def open_ends(self) -> list[int]:
        """TCP offsets in the server's direction that the requests still open may name
        when they end (their first and last response bytes so far): the ACKs their
        lookups will need, though no finished row waits for them yet. HTTP/2 only: over
        HTTP/1.1 one response is read at a time, so the bytes after an open one's are
        its own and the rows waiting for them keep its ACKs."""
        if self._tls is not None:
            if self._inner is None:
                return []
            tls, server_dir = self._tls, 1 - self._tls.client_dir
            return [off for off in (tls.tcp_offset(server_dir, o) for o in self._inner.open_ends()) if off is not None]
        return self._h2.open_ends() if self._h2 is not None else []

    def take_columns(self) -> tuple[list[RequestRecord], np.ndarray, list[H2Event]]:
        """Like :meth:`take_rows`, with messages as one int64 (n, 7) array of the
        MessageRow fields (compressed as 0/1): no tuple per message."""
        if self._mode == "broken":
            taken, self._broken_rows = self._broken_rows, None
            return taken if taken is not None else ([], _NO_COLS, [])
        if self._tls is not None:
            return self._take_tls_columns(final=False)
        reqs, self._requests = self._requests, []
        parts = []
        if self._messages:
            parts.append(_cols_of(_rows_of(self._messages)))
            self._messages = []
        evs: list[H2Event] = []
        if self._h1 is not None:
            r, m = self._h1.drain_rows()
            reqs += r
            if m:
                parts.append(_cols_of(m))
        if self._h2 is not None:
            r, cols, e = self._h2.drain_columns()
            reqs += r
            if len(cols):
                parts.append(cols)
            evs = e
        if not parts:
            return reqs, _NO_COLS, evs
        return reqs, parts[0] if len(parts) == 1 else np.concatenate(parts), evs

    def take_rows(self) -> tuple[list[RequestRecord], list[MessageRow], list[H2Event]]:
        """Like :meth:`take_records`, with messages as :data:`MessageRow` tuples
        (stream_id, direction, index, ts_ns, size, compressed, end_offset): the
        pipeline turns them into columns without a record object per message."""
        if self._tls is not None or self._mode == "broken":
            reqs, cols, evs = self._take_tls_columns(final=False) if self._tls is not None else self.take_columns()
            return reqs, [tuple(r) for r in cols.tolist()], evs
        reqs, self._requests = self._requests, []
        rows = _rows_of(self._messages)
        self._messages = []
        evs: list[H2Event] = []
        if self._h1 is not None:
            r, m = self._h1.drain_rows()
            reqs += r
            rows += m
        if self._h2 is not None:
            r, m, e = self._h2.drain_rows()
            reqs += r
            rows += m
            evs = e
        return reqs, rows, evs

    @property
    def orientation_final(self) -> bool:
        """Whether :attr:`flipped` can no longer change (rows may be written out)."""
        if self._orient_locked:
            return True
        if self._mode == "sniff":
            return False
        return self._h2 is None or self._h2.orient_final

    def finish(self, end_ns: int) -> SessionResult:
        if self._finished is not None:
            return self._finished
        if self._mode == "sniff":
            self._decide_final()
        if self._tls is not None:
            return self._finish_tls(end_ns)
        if self._mode == "broken":
            reqs, cols, evs = self.take_columns()
            rows = [tuple(r) for r in cols.tolist()]
            self._finished = SessionResult(self.protocol, self._flipped, reqs, evs, list(self._issues), rows,
                                           self._broken_tls, self.conn_key)  # fmt: skip
            return self._finished
        reqs = self._requests
        rows = _rows_of(self._messages)
        self._requests, self._messages = [], []
        evs: list[H2Event] = []
        issues = list(self._issues)
        if self._h1 is not None:
            self._h1.finish(end_ns)
            r, m = self._h1.drain_rows()
            reqs += r
            rows += m
            issues += self._h1.issues
        if self._h2 is not None:
            self._h2.finish(end_ns)
            r, m, e = self._h2.drain_rows(final=True)
            reqs += r
            rows += m
            evs = e
            issues += self._h2.issues
        if len(issues) > _ISSUE_CAP:
            extra = len(issues) - _ISSUE_CAP
            issues = issues[:_ISSUE_CAP]
            issues.append(DecodeIssue("issues_truncated", 0, f"{extra} more issues not kept"))
        self._finished = SessionResult(self.protocol, self.flipped, reqs, evs, issues, rows, conn_key=self.conn_key)
        return self._finished

    # -- sniffing --------------------------------------------------------------------

    def _sniff_step(self, d: int, data: bytes, gap: int) -> None:
        p = self._prefix[d]
        if gap:
            p.clear()  # bytes before the gap do not continue into these
            self._scan_from[d] = 0
        if len(p) < _SNIFF_MAX:
            p += data[: _SNIFF_MAX - len(p)]
        if self.force_h2:
            if p[:24] == PREFACE:
                self._decide(d, "h2-preface")
            elif not (len(p) < 24 and PREFACE.startswith(bytes(p))):
                self._decide(d, "h2-frames")
            return
        k, self._scan_from[d] = _sniff_from(p, False, self._scan_from[d])
        if k is None or k == "unknown":
            # the capture may have begun inside an HTTP/1.1 message: a start line after a
            # line end says HTTP/1.1 (Http1Conn resynchronises there)
            k = _http1_inside(p, max(0, len(p) - len(data) - 256)) or k
        if k == "unknown" and not self._prefix[1 - d] and self._waited[d] < _SNIFF_WAIT:
            # nothing from the other side yet (it may be about to send a request head):
            # drop these bytes instead of giving up on the connection
            self._waited[d] += len(p)
            self._held = [it for it in self._held if it[0] != d]
            p.clear()
            self._scan_from[d] = 0
            return
        if k is not None:
            self._decide(d, k)

    def _decide_final(self) -> None:
        for d in (0, 1):
            p = self._prefix[d]
            if p:
                k = _sniff(p, final=True)
                if self.force_h2 and k in (None, "unknown"):
                    k = "h2-frames"
                if k is not None and k != "unknown":
                    self._decide(d, k)
                    return
        if self.force_h2 and self._held:
            self._decide(self._held[0][0], "h2-frames")
            return
        self._decide(0, "unknown")

    def _decide(self, d: int, kind: str) -> None:
        held = self._held
        self._held = []
        self._prefix = [bytearray(), bytearray()]
        self._scan_from = [0, 0]
        if kind == "h2-preface" or kind == "h2-frames":
            self.protocol = "h2c"
            self._mode = "h2"
            if kind == "h2-preface":
                if not self._orient_locked:
                    self._flipped = d == 1
                self._h2 = H2Connection(
                    self.conn_key, mid=False, flipped=self._flipped, orient_final=True
                )
                self._strip[d] = len(PREFACE)
            else:
                self._h2 = H2Connection(
                    self.conn_key, mid=True, flipped=self._flipped, orient_final=self._orient_locked
                )
            for item in held:
                self.feed(
                    PayloadChunk(
                        self.conn_key, item[0], item[1], item[2], item[3], item[4], item[5]
                    )
                )
            return
        if kind.startswith("http1"):
            self.protocol = "http1"
            self._mode = "http1"
            if not self._orient_locked:
                self._flipped = (d == 1) if kind == "http1-request" else (d == 0)
            self._h1 = Http1Conn(self.conn_key)
            self._h1.next_index = self._h1_index_base
            for item in held:
                self._feed_h1(item)
            return
        if kind.startswith("tls"):
            self.protocol = "tls"
            if not self._orient_locked:
                if kind == "tls-client":
                    self._flipped = d == 1
                elif kind == "tls-server":
                    self._flipped = d == 0
            self._mode = "tls"
            self._tls = TlsConnection(self.conn_key, 1 if self._flipped else 0, self.keylog, self._tls_plaintext)
            for item in held:
                self._tls.feed(*item)
            return
        self.protocol = "unknown"
        self._mode = "opaque"

    # -- TLS -------------------------------------------------------------------------

    def _tls_plaintext(self, d: int, data: bytes, ts: int, frame_no: int, offset: int, gap: int) -> None:
        """Decrypted application data: decoded as if it had come in clear (while rows are
        fed, gathered into one run first: see _flush_plain)."""
        pending = self._plain_run
        if pending is not None:
            if not gap:
                pending.add(d, data, ts, frame_no, offset)
                return
            self._flush_plain()  # (a run has no gaps: what came before it goes first)
        inner = self._inner_session()
        if inner._mode == "http1" and inner.fast_feed is None:
            inner._feed_h1((d, data, ts, frame_no, offset, gap))  # what feed() does with it then
            return
        inner.feed(PayloadChunk(self.conn_key, d, data, ts, frame_no, offset, gap))

    def _inner_session(self) -> AppSession:
        """The session of the decrypted plaintext (made at its first bytes: the hello's
        ALPN is known then)."""
        inner = self._inner
        if inner is None:
            alpn = (self._tls.hello.alpn or "") if self._tls else ""
            inner = self._inner = AppSession(self.conn_key, self.client_port, self.server_port,
                                             force_h2=alpn.startswith("h2"))  # fmt: skip
            inner._flipped, inner._orient_locked = self._flipped, True  # the ClientHello said
        return inner

    def _flush_plain(self) -> None:
        """The plaintext gathered while rows were fed, to the inner session as one run:
        HTTP/1.1 event streams and the HTTP/2 steady state take it as columns, as they
        take cleartext (one call a run, not a chain of calls a record)."""
        pending = self._plain_run
        run = pending.take(self.conn_key) if pending is not None else None
        if run is not None:
            self._inner_session().feed_run(run)

    def _map_tls(self, reqs: list[RequestRecord], cols: np.ndarray) -> None:
        """Plaintext offsets -> the TCP offsets of the records that carried them (what
        the ACKs are joined with); requests marked as decrypted."""
        tls = self._tls
        assert tls is not None
        server_dir = 1 - tls.client_dir
        for r in reqs:
            r.first_message_end_offset = tls.tcp_offset(server_dir, r.first_message_end_offset)
            r.end_offset = tls.tcp_offset(server_dir, r.end_offset)
            r.protocol = r.protocol + "-tls"
        for d in (0, 1):
            role = 0 if d == tls.client_dir else 1
            if not len(cols) or not tls.plain_ends[role]:
                continue
            sel = np.flatnonzero(cols[:, MC.DIRECTION] == d)
            if len(sel):
                ends = np.asarray(tls.plain_ends[role], dtype=np.int64)
                at = np.minimum(np.searchsorted(ends, cols[sel, MC.END_OFFSET], side="left"), len(ends) - 1)
                cols[sel, MC.END_OFFSET] = np.asarray(tls.tcp_ends[role], dtype=np.int64)[at]

    def _take_tls_columns(self, final: bool) -> tuple[list[RequestRecord], np.ndarray, list[H2Event]]:
        reqs: list[RequestRecord] = []
        cols, evs = _NO_COLS, []
        if self._inner is not None:
            reqs, cols, evs = self._inner.take_columns()
            cols = np.array(cols, dtype=np.int64, copy=True)
            self._map_tls(reqs, cols)
        if final:
            kreqs, krows = self._tls.keyless.take()  # type: ignore[union-attr]
            if kreqs:
                reqs += kreqs
                if krows:
                    cols = np.concatenate([cols, _cols_of(krows)]) if len(cols) else _cols_of(krows)
        return reqs, cols, evs

    def _finish_tls(self, end_ns: int) -> SessionResult:
        tls = self._tls
        assert tls is not None
        issues = list(self._issues) + tls.issues
        reqs, cols, evs = [], _NO_COLS, []
        if self._inner is not None:
            inner = self._inner.finish(end_ns)
            reqs = inner.requests
            cols = _cols_of(inner.message_rows) if inner.message_rows else _NO_COLS
            cols = np.array(cols, dtype=np.int64, copy=True)
            self._map_tls(reqs, cols)
            evs = inner.h2_events
            issues += inner.issues
            self.protocol = ("h2" if inner.protocol.startswith("h2") else inner.protocol) + "-tls"
        kreqs, krows = tls.keyless.take()
        reqs += kreqs
        if krows:
            cols = np.concatenate([cols, _cols_of(krows)]) if len(cols) else _cols_of(krows)
        rows = [tuple(r) for r in cols.tolist()]
        self._finished = SessionResult(self.protocol, self.flipped, reqs, evs, issues, rows, tls.facts(), self.conn_key)
        # the TLS connection's plaintext callback is this session's bound method: a cycle
        # that only the cycle collector would free; a finished session takes no more bytes
        tls.plaintext = _finished_plaintext
        return self._finished

    # -- HTTP/2 ----------------------------------------------------------------------

    def _feed_h2_strip(self, d: int, data: bytes, ts: int, fno: int, off: int, gap: int) -> None:
        """Drop the client connection preface (possibly split over chunks)."""
        h2 = self._h2
        assert h2 is not None
        k = self._strip[d]
        if gap:
            self._strip[d] = 0
            h2.feed(d, data, ts, fno, off, gap)
            return
        pos = len(PREFACE) - k
        take = min(k, len(data))
        if data[:take] != PREFACE[pos : pos + take]:
            self._issues.append(
                DecodeIssue("h2_bad_preface", fno, "expected the HTTP/2 connection preface")
            )
            self._strip[d] = 0
            h2.feed(d, data, ts, fno, off, gap)
            return
        self._strip[d] = k - take
        if take < len(data):
            h2.feed(d, data[take:], ts, fno, off + take, 0)
        elif h2.dirs[d].base < 0:
            h2.dirs[d].base = off + take

    # -- HTTP/1.1 --------------------------------------------------------------------

    def _feed_h1(self, item: _Held) -> None:
        h1 = self._h1
        assert h1 is not None
        d, data, ts, fno, off, gap = item
        role = d ^ (1 if self._flipped else 0)
        hold = self._h1_hold[role]
        if hold is not None:
            hold.append(item)
            return
        if gap:
            self._issues.append(
                DecodeIssue("http1_gap", fno, f"{gap} bytes lost; HTTP/1.1 parsing resumes at the next message head")
            )
            h1.lost(role)
        used = h1.feed(role, data, ts, off, fno)
        if used < len(data) or h1.holding(role):
            rest = [(d, data[used:], ts, fno, off + used, 0)] if used < len(data) else []
            self._h1_hold[role] = rest
        if h1.switch is not None:
            self._switch()
            return
        # a refused upgrade / CONNECT resumed the client: replay what it held
        other = 1 - role
        oh = self._h1_hold[other]
        if oh is not None and not h1.holding(other):
            self._h1_hold[other] = None
            for it in oh:
                if it[1]:
                    self._feed_h1(it)

    def _switch(self) -> None:
        """HTTP/1.1 gave way to HTTP/2 (Upgrade) or a tunnel (CONNECT)."""
        h1 = self._h1
        assert h1 is not None
        kind = h1.switch
        h1.finish(0) if kind == "h2c" else None
        r, m = h1.drain()
        self._requests += r
        self._messages += m
        self._issues += h1.issues
        self._h1_index_base = h1.next_index
        held: list[_Held] = []
        for role in (0, 1):
            hold = self._h1_hold[role]
            if hold:
                held += [it for it in hold if it[1]]
        self._h1_hold = [None, None]
        held.sort(key=lambda it: it[2])  # capture order across directions
        self._h1 = None
        self._orient_locked = True
        c = 1 if self._flipped else 0
        if kind == "h2c":
            ex = h1.upgraded
            assert ex is not None and ex.req is not None
            self.protocol = "h2c"
            self._mode = "h2"
            h2 = H2Connection(self.conn_key, mid=False, flipped=self._flipped, orient_final=True)
            self._h2 = h2
            hd = ex.req.headers
            headers = {
                ":method": ex.req.method or "GET",
                ":path": ex.req.target or "/",
                ":scheme": "http",
                ":authority": hd.get("host", ""),
            }
            for k, v in hd.items():
                if k not in ("host", "connection", "upgrade", "http2-settings"):
                    headers[k] = v
            h2.add_upgraded_stream(headers, ex.start or 0, ex.req_end, c)
            if "http2-settings" in hd:
                h2.apply_settings_b64(c, hd["http2-settings"], ex.start or 0)
            self._strip[c] = len(PREFACE)
            for it in held:
                self.feed(PayloadChunk(self.conn_key, it[0], it[1], it[2], it[3], it[4], it[5]))
        else:
            # CONNECT tunnel: sniff what flows inside it
            self._mode = "sniff"
            self.protocol = "unknown"
            for it in held:
                self.feed(PayloadChunk(self.conn_key, it[0], it[1], it[2], it[3], it[4], it[5]))
