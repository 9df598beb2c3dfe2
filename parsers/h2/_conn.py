"""HTTP/2 connection state machine fed with in-order bytes of both TCP directions.

Internally everything is kept per TCP direction (0/1 as the TCP layer named them); the
connection learns which side is the client from the bytes (preface, :method / :status,
PUSH_PROMISE) and records are oriented when handed out.

Hot path: DATA frames. They are never copied: the payload is handed to the stream's
splitter as (buffer, start, end) and streamed as it arrives, so a gRPC message's time is
the time of the packet that completed *it*, not the whole frame.
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np

from parsers._native import speedups
from parsers.grpc import GrpcSplitter, parse_grpc_web_trailers
from parsers.llm.taps import EventSplitter
from parsers.records import (
    ChunkRun,
    DecodeIssue,
    H2Event,
    H2EventKind,
    MessageColumn,
    PayloadChunk,
    RequestRecord,
    message_from_row,
)

from ._flow import FlowState
from ._frames import (
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_END_STREAM,
    SETTINGS,
    scan_for_frames,
)
from ._handlers import FrameHandlers
from ._hpack import DecodedBlock, TolerantDecoder
from ._state import MSG_ROW, _Dir, _pack_msg
from ._streams import Stream

# Optional C version of the feed_chunk fast path (parsers/h2/_speedups.c, built by
# `pip install -e .`); without it, or with TAILTAP_PURE_PYTHON=1, the same Python code
# runs and gives the same records.
_speedups = speedups("parsers.h2")
if _speedups is not None:
    try:
        _speedups.init(
            GrpcSplitter, _Dir, Stream, FlowState, PayloadChunk, TolerantDecoder, DecodedBlock, RequestRecord,
            EventSplitter,
        )
    except (AttributeError, TypeError) as exc:  # built from another _layout.py: not used
        warnings.warn(f"parsers.h2._speedups is out of date ({exc}); rebuild it with `pip install -e .`. "
                      "HTTP/2 runs in pure Python meanwhile.", RuntimeWarning, stacklevel=1)
        _speedups = None


class H2Connection(FrameHandlers):
    """HTTP/2 framing, HPACK and stream bookkeeping for one TCP connection."""

    def __init__(
        self, conn_key: int, mid: bool, flipped: bool = False, orient_final: bool = False
    ) -> None:
        self.conn_key = conn_key
        self.mid = mid  # started mid-connection (no preface seen)
        self.flipped = flipped
        self.orient_final = orient_final
        self.dirs = (_Dir(not mid, not mid), _Dir(not mid, not mid))
        self.flows = (FlowState(not mid), FlowState(not mid))
        self.max_conc: list[int | None] = [None, None]  # SETTINGS_MAX_CONCURRENT_STREAMS sent by d
        self.conc_hit = [False, False]
        self.streams: dict[int, Stream] = {}
        self.closed: dict[int, bool] = {}
        self.first_opened = [0, 0]  # first stream id opened by HEADERS, per id parity
        self.last_opened = [0, 0]  # highest stream id opened by HEADERS, per id parity
        self.lossy = False
        self.done: list[Stream] = []
        # messages (TCP direction) packed as MSG_ROW: cheaper than a record or tuple each
        self.msg_buf = bytearray()
        self.events: list[H2Event] = []
        self.issues: list[DecodeIssue] = []
        self._tmp: list[tuple[int, int, int, int]] = []
        self._frame_no = 0
        self._orient_conflict = False

    # -- orientation -----------------------------------------------------------------

    @property
    def client_dir(self) -> int:
        return 1 if self.flipped else 0

    def _orient(self, client: int) -> None:
        if not self.orient_final:
            self.flipped = client == 1
            self.orient_final = True
            self._end_unseen_requests()
        elif (client == 1) != self.flipped and not self._orient_conflict:
            self._orient_conflict = True
            self._issue("h2_orientation_conflict", "bytes disagree on which side is the client")

    def held(self) -> int:
        return len(self.done) + len(self.msg_buf) // MSG_ROW.size + len(self.events)

    @property
    def frame_no(self) -> int:
        """The packet whose bytes it reads: where its issues are placed."""
        return self._frame_no

    def _issue(self, kind: str, msg: str) -> None:
        self.issues.append(DecodeIssue(kind, self._frame_no, msg))

    def _event(
        self,
        ts: int,
        sid: int,
        d: int,
        kind: str,
        value: int | None = None,
        detail: str | None = None,
        duration_ms: float | None = None,
    ) -> None:
        self.events.append(H2Event(ts, self.conn_key, sid, d, kind, value, detail, duration_ms))

    # -- upgrade ---------------------------------------------------------------------

    def add_upgraded_stream(
        self, headers: dict[str, str], start_ts: int, end_ts: int | None, client: int
    ) -> None:
        """HTTP/1.1 ``Upgrade: h2c``: the upgraded request is stream 1, half-closed by
        the client; its response comes as HTTP/2 on stream 1."""
        st = Stream(1)
        st.opener = client
        h = {k.lower(): v for k, v in headers.items()}
        if ":method" not in h:
            h[":method"] = h.pop("_method", "GET")
        st.hdr[client] = h
        st.hdr_ts[client] = start_ts
        st.end_ts[client] = end_ts
        st.set_content_type(h.get("content-type"), client, False)
        self.streams[1] = st
        self.first_opened[1] = 1
        self.flows[1 - client].open_stream(1)

    def saw_preface(self, d: int) -> None:
        """Direction d began with the client preface after we had settled for
        mid-connection (the server's SETTINGS came first). If the other direction so far
        also parsed cleanly from its first byte, we did see the connection start."""
        self._orient(d)
        o = self.dirs[1 - d]
        if self.mid and o.synced and not o.skipped and not o.gap_note and not self.lossy:
            self.mid = False
            for D in self.dirs:
                D.hpack.complete = True
                D.max_known = True
            for fs in self.flows:
                fs.known = True
        self.dirs[d].synced = True

    def apply_settings_b64(self, d: int, value: str, ts: int) -> None:
        """``HTTP2-Settings`` header of an h2c upgrade: a SETTINGS payload sent by d."""
        import base64

        try:
            raw = base64.urlsafe_b64decode(value.strip() + "=" * (-len(value.strip()) % 4))
        except ValueError:
            self._issue("h2_bad_upgrade_settings", "HTTP2-Settings is not base64url")
            return
        self._control(self.dirs[d], d, SETTINGS, 0, 0, raw, ts, 0)

    # -- input -----------------------------------------------------------------------

    def feed(self, d: int, data: bytes, ts: int, frame_no: int, off: int, gap: int = 0) -> None:
        self._frame_no = frame_no
        D = self.dirs[d]
        buf = D.buf
        if D.base < 0:
            D.base = off
            if gap > 0:
                # this direction's first bytes already follow a hole: no frame boundary
                self._lost(D, d, gap, ts)
        elif gap > 0 or off != D.base + len(buf):
            if gap <= 0:
                gap = off - (D.base + len(buf))
            self._lost(D, d, gap if gap > 0 else 0, ts)
            buf.clear()
            D.marks.clear()
            D.base = off
        if buf:
            buf += data
            b: bytes | bytearray = buf
        else:
            b = data
        base = D.base
        try:
            if D.marks:
                i = self._parse_marked(D, d, b, base, ts)
            else:
                i = self._parse(D, d, b, base, ts, 0)
                if not D.synced and i < len(b):
                    D.marks.append((base + len(b), ts))
        except Exception as exc:  # never let odd bytes take the pipeline down
            self._issue("h2_internal_error", f"{type(exc).__name__}: {exc}")
            self._desync(D, d, ts)
            i = len(b)
        # Keep the unconsumed tail.
        if b is buf:
            if i:
                del buf[:i]
        else:
            if i < len(b):
                buf += b[i:]
        D.base = base + i
        D.plain = (
            D.synced
            and not buf
            and not D.data_left
            and not D.pad_left
            and D.block is None
            and not D.marks
        )

    def chunk_feeder(self):
        """The fastest callable equivalent to :meth:`feed_chunk` (the C fast path when
        the extension is built)."""
        if _speedups is not None:
            return partial(_speedups.feed_chunk, self)
        return self.feed_chunk

    def feed_run(self, run: ChunkRun, first: int = 0) -> None:
        """:meth:`feed_chunk` for every chunk of ``run`` from row ``first`` on; with the
        extension, the whole-message DATA rows never become PayloadChunks."""
        if _speedups is not None:
            _speedups.feed_run(self, run.conn_key, run.rows, run.buf, first)
            return
        feed = self.feed_chunk
        for c in run.chunks(first):
            feed(c)

    def feed_chunk(self, c: PayloadChunk) -> None:
        """:meth:`feed` for one payload chunk. The steady-state case (one unpadded DATA
        frame carrying one whole message on a known stream) has its fast path in C
        (:meth:`chunk_feeder`, :meth:`feed_run`); in Python there is one path, this one."""
        self.feed(c.direction, c.data, c.ts_ns, c.frame_no, c.stream_offset, c.gap_before)

    def _whole_data(
        self,
        d: int,
        st: Stream,
        sid: int,
        flags: int,
        b: bytes | bytearray,
        p: int,
        dend: int,
        length: int,
        base: int,
        off_end: int,
        ts: int,
    ) -> None:
        """One complete DATA frame (data bytes ``b[p:dend]``) on a known stream."""
        dl = dend - p
        sp = st.splitter[d]
        if sp is None and not st.data_frames[d]:
            sp = st.late_tap(d)
        if sp is not None:
            probing = sp.probing or st.mode[d] == "probe"
            if probing:
                sp.frame_start()
            if dl:
                if (
                    not probing
                    and sp.__class__ is GrpcSplitter
                    and sp.left == -1
                    and not sp.hdr
                    and not sp.keep_trailer
                    and dl >= 5
                    and b[p] < 0x80
                    and int.from_bytes(b[p + 1 : p + 5], "big") + 5 == dl
                ):
                    # one whole gRPC message: the common case, inlined
                    idx = st.msgs[d]
                    msg_end = base + dend
                    if idx == 0:
                        st.first_msg_ts[d] = ts
                        st.first_msg_off[d] = msg_end
                    if st.end_ts[1 - d] is None:
                        st.msg_before_end[d] = True
                    if st.msgs[1 - d]:
                        st.msg_after_first[d] = True
                    self.msg_buf += _pack_msg(sid, d, idx, ts, dl - 5, b[p] == 1, msg_end)
                    st.msgs[d] = idx + 1
                    st.last_msg_ts[d] = ts
                else:
                    tmp = self._tmp
                    sp.feed(b, p, dend, base, ts, tmp)
                    if tmp:
                        self._messages(st, d, tmp)
            if probing:
                tmp = self._tmp
                sp.frame_end(tmp)
                if tmp:
                    self._messages(st, d, tmp)
            if sp.__class__ is GrpcSplitter and sp.trailer and st.web_trailers is None:
                st.web_trailers = parse_grpc_web_trailers(bytes(sp.trailer))
        if dl:
            if not st.data_frames[d]:
                st.first_data_ts[d] = ts
                st.first_data_off[d] = off_end
            st.data_frames[d] += 1
            st.last_data_ts[d] = ts
            st.data_bytes[d] += dl
        st.last_off[d] = off_end
        fs = self.flows[d]
        if fs.known:
            fs.consume(sid, length, ts, bool(flags & FLAG_END_STREAM))
        if flags & FLAG_END_STREAM:
            self._end_stream(st, d, ts, off_end)

    def _lost(self, D: _Dir, d: int, gap: int, ts: int) -> None:
        """``gap`` bytes of direction d were never seen."""
        self.lossy = True
        if (
            not D.buf
            and D.synced
            and (D.data_left or D.pad_left)
            and gap < D.data_left + D.pad_left
        ):
            # The gap falls inside the current DATA frame: framing survives, but the
            # stream's message boundaries are lost.
            st = D.data_stream
            if gap <= D.data_left:
                D.data_left -= gap
                D.data_len -= gap
            else:
                D.pad_left -= gap - D.data_left
                D.data_len -= D.data_left
                D.data_left = 0
            if st is not None:
                sp = st.splitter[d]
                if sp is not None:
                    sp.lost()
            return
        self._desync(D, d, ts)
        D.gap_note += gap

    def _desync(self, D: _Dir, d: int, ts: int) -> None:
        """Frame boundaries of direction d are unknown from here: scan for them again,
        and forget the HPACK context (a lost block may have changed the table).
        The caller owns the buffer (it may be iterating over it)."""
        D.synced = False
        D.data_left = D.pad_left = 0
        D.data_stream = None
        D.block = None
        D.hpack.lose_context()
        # d's lost bytes held DATA it sent (its windows go on, overstated: parsers/h2/_flow.py)
        # and window it gave the other direction as the receiver: that one's windows are
        # unbounded from here
        self.flows[1 - d].lose_updates()
        for st in self.streams.values():
            sp = st.splitter[d]
            if sp is not None:
                sp.lost()

    def _synced(self, D: _Dir, d: int, ts: int) -> None:
        D.synced = True
        if D.skipped or D.gap_note:
            detail = f"gap={D.gap_note}" if D.gap_note else None
            self._event(ts, 0, d, H2EventKind.RESYNC, D.skipped, detail)
            if D.skipped:
                self._issue("h2_resync", f"skipped {D.skipped} bytes to a frame boundary")
        D.skipped = D.gap_note = 0

    def _parse_marked(self, D: _Dir, d: int, b: bytes | bytearray, base: int, ts: int) -> int:
        """Parse bytes held while unsynced: find the boundary over everything held,
        then parse chunk by chunk with each chunk's own time."""
        n = len(b)
        i = 0
        if not D.synced:
            x, status = scan_for_frames(b, 0, n, max(D.max_len, DEFAULT_MAX_FRAME_SIZE))
            D.skipped += x
            if status != 0:
                D.marks.append((base + n, ts))
                return x
            i = x
            self._synced(D, d, ts)
        marks = D.marks
        D.marks = []
        for mend, mts in marks:
            rel = mend - base
            if rel > i:
                i = self._parse(D, d, b, base, mts, i, rel)
        return self._parse(D, d, b, base, ts, i, n)

    # -- output ------------------------------------------------------------------------

    def finish(self, end_ns: int) -> None:
        """Flush: unfinished streams become records (end=None), open blocks are reported."""
        for flow_dir, fs in enumerate(self.flows):
            for key, (since, _fn) in list(fs.blocked.items()):
                self._event(
                    since,
                    key,
                    flow_dir,
                    H2EventKind.FLOW_CONTROL_BLOCKED,
                    key,
                    "unresolved",
                    (end_ns - since) / 1e6,
                )
            fs.blocked.clear()
        for D in self.dirs:
            if not D.synced and (D.skipped or D.gap_note):
                self._issue("h2_resync", f"{D.skipped} bytes skipped without finding frames")
        for st in list(self.streams.values()):
            if (
                st.data_frames[0]
                or st.data_frames[1]
                or st.hdr_ts[0]
                or st.hdr_ts[1]
                or st.end_ts[0]
                or st.end_ts[1]
            ):
                self.done.append(st)
        self.streams.clear()
        self.orient_final = True

    def open_ends(self) -> list[int]:
        """Offsets in the server's direction that an open stream's record may give when
        it ends (the end of its first response message or data, of its response so far):
        what the ACK lookups of its request will ask for. Empty while the orientation is
        unknown."""
        if not self.orient_final:
            return []
        s = 1 - self.client_dir
        return [off for st in self.streams.values() for off in st.offsets_named(s)]

    def drain(self, final: bool = False):
        """Hand out records (oriented). Held back while the orientation is unknown."""
        reqs, rows, evs = self.drain_rows(final)
        ck = self.conn_key
        return reqs, [message_from_row(ck, row) for row in rows], evs

    def drain_rows(self, final: bool = False):
        """Like :meth:`drain`, with messages as oriented :data:`MessageRow` tuples."""
        reqs, cols, evs = self.drain_columns(final)
        rows = [tuple(r) for r in cols.tolist()]
        return reqs, rows, evs

    def drain_columns(self, final: bool = False):
        """Like :meth:`drain_rows`, with messages as one int64 array of (n, 7) columns
        (the MessageRow fields, compressed as 0/1)."""
        if not self.orient_final and not final:
            return [], _NO_ROWS, []
        c = self.client_dir
        if _speedups is not None:
            reqs = _speedups.to_records(self.done, self.conn_key, c)
        else:
            reqs = [st.to_record(self.conn_key, c) for st in self.done]
        self.done = []
        buf, self.msg_buf = self.msg_buf, bytearray()
        cols = np.frombuffer(buf, dtype=np.int64).reshape(-1, len(MessageColumn))
        evs, self.events = self.events, []
        if self.flipped:
            cols = cols.copy()
            cols[:, MessageColumn.DIRECTION] ^= 1
            for e in evs:
                e.direction ^= 1
        return reqs, cols, evs


_NO_ROWS = np.zeros((0, 7), dtype=np.int64)


__all__ = ["H2Connection", "MSG_ROW"]
