"""HTTP/2 connection state machine fed with in-order bytes of both TCP directions.

Internally everything is kept per TCP direction (0/1 as the TCP layer named them); the
connection learns which side is the client from the bytes (preface, :method / :status,
PUSH_PROMISE) and records are oriented when handed out.

Hot path: DATA frames. They are never copied: the payload is handed to the stream's
splitter as (buffer, start, end) and streamed as it arrives, so a gRPC message's time is
the time of the packet that completed *it*, not the whole frame.
"""

from __future__ import annotations

import os
import struct
from functools import partial

import numpy as np

from parsers.grpc import GrpcSplitter, parse_grpc_web_trailers
from parsers.records import (
    ChunkRun,
    DecodeIssue,
    H2Event,
    PayloadChunk,
    RequestRecord,
    message_from_row,
)

from ._flow import FlowState
from ._frames import (
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME_SIZE,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    FLAG_PADDED,
    FLAG_PRIORITY,
    GOAWAY,
    HEADERS,
    MAX_FRAME_LEN,
    NEED_MORE,
    NOT_FOUND,
    PING,
    PRIORITY,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_NAMES,
    WINDOW_UPDATE,
    frame_ok_in_sync,
    scan_for_frames,
    unpack_header,
)
from ._hpack import DecodedBlock, TolerantDecoder
from ._streams import Stream

# (stream_id, direction, index, ts_ns, size, flags, end_offset): a MessageRecord without
# its conn_key, as a tuple (one per message on the hot path); flags: the compressed bit,
# and an event's kind and tokens (parsers.records.message_flags)
MessageRow = tuple[int, int, int, int, int, int, int]
# A message packed for H2Connection.msg_buf: the MessageRow fields as native int64s, so
# the C fast path appends bytes and the pipeline reads columns.
MSG_ROW = struct.Struct("=7q")
_FAST_HDR = struct.Struct(">IBIBI")  # length<<8|type, flags, stream id, gRPC flag, gRPC length

# HEADERS flags that change the payload layout (padding, priority) or need
# CONTINUATION frames: only FLAG_END_HEADERS set means the payload is the whole block
_HEADERS_LAYOUT = FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY

_KEPT_FLAGS = ~0xFE  # message flags kept: all but a gRPC flag byte's undefined bits 1-7
_CLOSED_KEEP = 4096  # recently closed stream ids remembered to ignore late frames
_HOLD_LIMIT = 20000  # records held while the orientation is unknown
# Largest believable jump between consecutive new stream ids (2 per stream); after a
# capture gap many HEADERS may have been lost, so allow more.
_MAX_SID_JUMP = 2 * 64
_MAX_SID_JUMP_LOSSY = 2 * 1_000_000


class _Dir:
    """Parsing state of one TCP direction (one sender)."""

    __slots__ = (
        "buf",
        "base",
        "synced",
        "skipped",
        "gap_note",
        "data_left",
        "pad_left",
        "data_stream",
        "data_sid",
        "data_flags",
        "data_len",
        "data_payload",
        "block",
        "block_sid",
        "block_type",
        "block_flags",
        "block_ts",
        "block_promised",
        "max_len",
        "max_known",
        "hpack",
        "frames",
        "marks",
        "plain",
    )

    def __init__(self, synced: bool, hpack_complete: bool) -> None:
        self.buf = bytearray()  # unconsumed bytes
        self.base = -1  # direction offset of buf[0] (-1: nothing seen yet)
        self.synced = synced
        self.skipped = 0  # bytes dropped while resynchronising
        self.gap_note = 0  # bytes lost (gap) that led to the current resync
        self.data_left = 0  # DATA payload bytes (without padding) still to come
        self.pad_left = 0
        self.data_stream: Stream | None = None
        self.data_sid = 0
        self.data_flags = 0
        self.data_len = 0  # data bytes of the current DATA frame (without padding)
        self.data_payload = 0  # whole payload length (flow-controlled)
        self.block: bytearray | None = None  # header block being assembled
        self.block_sid = 0
        self.block_type = HEADERS
        self.block_flags = 0
        self.block_ts = 0
        self.block_promised = 0
        self.max_len = DEFAULT_MAX_FRAME_SIZE  # the receiver's SETTINGS_MAX_FRAME_SIZE
        # Mid-connection the receiver may have raised it before the capture began.
        self.max_known = hpack_complete
        self.hpack = TolerantDecoder(complete=hpack_complete)
        self.frames = 0
        # (direction end offset, ts) of chunks held while looking for frame boundaries,
        # so frames found later still get the time of the packet that completed them
        self.marks: list[tuple[int, int]] = []
        # at a frame boundary with nothing buffered or pending (feed_chunk fast path)
        self.plain = False


# Optional C version of the feed_chunk fast path (parsers/h2/_speedups.c, built by
# `pip install -e .`); without it, or with TAILTAP_PURE_PYTHON=1, the same Python code
# runs and gives the same records.
_speedups = None
if not os.environ.get("TAILTAP_PURE_PYTHON"):
    try:
        from . import _speedups  # type: ignore[no-redef]
    except ImportError:
        pass
    else:
        _speedups.init(
            GrpcSplitter, _Dir, Stream, FlowState, PayloadChunk, TolerantDecoder, DecodedBlock, RequestRecord
        )
# {(conn_key * 2 + direction, bucket): (bytes, chunks)} over PayloadChunks, for the
# pipeline's flow_rates counting; None without the extension
sent_runs = _speedups.sent_runs if _speedups is not None else None


class H2Connection:
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
        elif (client == 1) != self.flipped and not self._orient_conflict:
            self._orient_conflict = True
            self._issue("h2_orientation_conflict", "bytes disagree on which side is the client")

    def held(self) -> int:
        return len(self.done) + len(self.msg_buf) // MSG_ROW.size + len(self.events)

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
        """Same as :meth:`feed`, with a fast path for the common case: the chunk is
        exactly one unpadded DATA frame carrying one whole gRPC message (or a plain
        body) on a known stream, with nothing buffered."""
        d = c.direction
        D = self.dirs[d]
        data = c.data
        n = len(data)
        if not D.plain or c.stream_offset != D.base or c.gap_before or n < 14:
            self.feed(d, data, c.ts_ns, c.frame_no, c.stream_offset, c.gap_before)
            return
        # one unpack instead of five slices: (length << 8 | type), flags, stream id,
        # and the first gRPC prefix (flag, length) right after the frame header
        lt, flags, sid, gflag, glen = _FAST_HDR.unpack_from(data)
        length = n - 9
        st = self.streams.get(sid)
        if (
            lt != length << 8  # not DATA, or not exactly this chunk
            or flags & 0x08  # padded
            or st is None
            or sid & 0x80000000
            or (D.max_known and length > D.max_len)
        ):
            self.feed(d, data, c.ts_ns, c.frame_no, c.stream_offset, c.gap_before)
            return
        self._frame_no = c.frame_no
        base = D.base
        off_end = base + n
        D.frames += 1
        D.base = off_end
        sp = st.splitter[d]
        if (
            sp is None
            or sp.__class__ is not GrpcSplitter
            or sp.probing
            or sp.left != -1
            or sp.hdr
            or sp.keep_trailer
            or gflag >= 0x80
            or glen + 5 != length
        ):
            self._whole_data(d, st, sid, flags, data, 9, n, length, base, off_end, c.ts_ns)
            return
        # one whole gRPC message in one unpadded DATA frame in one packet
        ts = c.ts_ns
        msgs = st.msgs
        idx = msgs[d]
        if idx == 0:
            st.first_msg_ts[d] = ts
            st.first_msg_off[d] = off_end
        if st.end_ts[1 - d] is None:
            st.msg_before_end[d] = True
        if msgs[1 - d]:
            st.msg_after_first[d] = True
        self.msg_buf += _pack_msg(sid, d, idx, ts, glen, gflag == 1, off_end)
        msgs[d] = idx + 1
        st.last_msg_ts[d] = ts
        frames = st.data_frames
        if not frames[d]:
            st.first_data_ts[d] = ts
            st.first_data_off[d] = off_end
        frames[d] += 1
        st.last_data_ts[d] = ts
        st.data_bytes[d] += length
        st.last_off[d] = off_end
        fs = self.flows[d]
        if fs.known:
            # FlowState.consume, inlined (once per packet)
            end_stream = flags & 1
            fs.conn -= length
            windows = fs.streams
            w = windows.get(sid)
            if w is not None:
                w -= length
                windows[sid] = w
                if w <= 0 and not end_stream and sid not in fs.blocked:
                    fs.blocked[sid] = (ts, 0)
            if fs.conn <= 0 and not end_stream and 0 not in fs.blocked:
                fs.blocked[0] = (ts, 0)
        if flags & 1:
            self._end_stream(st, d, ts, off_end)

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
        self.flows[d].known = False
        for st in self.streams.values():
            sp = st.splitter[d]
            if sp is not None:
                sp.lost()

    def _synced(self, D: _Dir, d: int, ts: int) -> None:
        D.synced = True
        if D.skipped or D.gap_note:
            detail = f"gap={D.gap_note}" if D.gap_note else None
            self._event(ts, 0, d, "resync", D.skipped, detail)
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

    def _parse(
        self, D: _Dir, d: int, b: bytes | bytearray, base: int, ts: int, i: int, n: int = -1
    ) -> int:
        if n < 0:
            n = len(b)
        tmp = self._tmp
        while True:
            if not D.synced:
                x, status = scan_for_frames(b, i, n, max(D.max_len, DEFAULT_MAX_FRAME_SIZE))
                D.skipped += x - i
                i = x
                if status == NOT_FOUND or status == NEED_MORE:
                    return i
                self._synced(D, d, ts)

            # -- streaming the payload of a DATA frame ---------------------------------
            if D.data_left or D.pad_left:
                left = D.data_left
                if left:
                    take = n - i
                    if take > left:
                        take = left
                    if take:
                        st = D.data_stream
                        if st is not None:
                            sp = st.splitter[d]
                            if sp is not None:
                                sp.feed(b, i, i + take, base, ts, tmp)
                                if tmp:
                                    self._messages(st, d, tmp)
                        i += take
                        left -= take
                        D.data_left = left
                if not left and D.pad_left:
                    take = n - i
                    if take > D.pad_left:
                        take = D.pad_left
                    i += take
                    D.pad_left -= take
                if D.data_left or D.pad_left:
                    return i
                self._data_end(D, d, base + i, ts)
                continue

            if n - i < 9:
                return i
            hi, lo, ftype, flags, sid = unpack_header(b, i)
            length = (hi << 8) | lo
            limit = D.max_len if D.max_known else MAX_FRAME_LEN
            if ftype == DATA and sid and not sid & 0x80000000 and length <= limit:
                # -- DATA fast path ------------------------------------------------------
                if D.block is not None:
                    self._stray_block(D, d)
                st = self.streams.get(sid)
                if st is None:
                    st = self._data_stream(sid, d)
                p = i + 9
                end = p + length
                if flags & FLAG_PADDED:
                    if n - i < 10:
                        return i
                    pad = b[p]
                    if pad >= length:
                        self._issue("h2_bad_padding", f"DATA pad {pad} >= length {length}")
                        self._desync(D, d, ts)
                        i += 1
                        continue
                    p += 1
                    dend = end - pad
                else:
                    pad = 0
                    dend = end
                D.frames += 1
                if end <= n:
                    # whole frame buffered
                    if st is not None:
                        self._whole_data(
                            d, st, sid, flags, b, p, dend, length, base, base + end, ts
                        )
                    elif self.flows[d].known:
                        self.flows[d].consume(sid, length, ts, bool(flags & FLAG_END_STREAM))
                    i = end
                    continue
                D.data_sid = sid
                D.data_flags = flags
                D.data_len = dend - p
                D.data_payload = length
                D.data_stream = st
                if st is not None:
                    sp = st.splitter[d]
                    if sp is None and not st.data_frames[d]:
                        sp = st.late_tap(d)
                    if sp is not None and (sp.probing or st.mode[d] == "probe"):
                        sp.frame_start()
                # partial frame: stream what we have
                i = p
                D.data_left = dend - p
                D.pad_left = pad
                continue

            if (
                ftype == HEADERS
                and flags & _HEADERS_LAYOUT == FLAG_END_HEADERS
                and sid
                and not sid & 0x80000000
                and length <= limit
                and D.block is None
            ):
                # -- a whole header block in one HEADERS frame: the common case ----------
                e = i + 9 + length
                if e > n:
                    return i
                D.frames += 1
                self._block(D, d, HEADERS, flags, sid, b[i + 9 : e], ts, base + e, 0)
                i = e
                continue
            if not frame_ok_in_sync(length, ftype, flags, sid, limit):
                self._issue(
                    "h2_bad_frame",
                    f"implausible frame header type={ftype} len={length} flags={flags:#x} sid={sid}",
                )
                self._desync(D, d, ts)
                D.skipped += 1
                i += 1
                continue
            if n - i < 9 + length:
                return i
            payload = bytes(b[i + 9 : i + 9 + length])
            i += 9 + length
            D.frames += 1
            self._control(D, d, ftype, flags, sid, payload, ts, base + i)

    # -- DATA --------------------------------------------------------------------------

    def _data_stream(self, sid: int, d: int) -> Stream | None:
        """DATA on a stream we have no state for."""
        if sid in self.closed:
            return None
        first = self.first_opened[sid & 1]
        if not (self.mid or self.lossy) or (first and sid >= first):
            # opened and closed within what we saw, or never opened: ignore
            return None
        st = Stream(sid, mid=True)
        self.streams[sid] = st
        return st

    def _messages(self, st: Stream, d: int, tmp: list[tuple[int, int, int, int]]) -> None:
        o = 1 - d
        idx = st.msgs[d]
        if idx == 0:
            st.first_msg_ts[d] = tmp[0][0]
            st.first_msg_off[d] = tmp[0][3]
        other_open = st.end_ts[o] is None
        if other_open:
            st.msg_before_end[d] = True
        if st.msgs[o]:
            st.msg_after_first[d] = True
        sid = st.sid
        out = self.msg_buf
        for ts, size, flag, end in tmp:
            # gRPC: the compressed bit of the flag byte; events: their kind and tokens too
            out += _pack_msg(sid, d, idx, ts, size, flag & _KEPT_FLAGS, end)
            idx += 1
        st.last_msg_ts[d] = tmp[-1][0]
        st.msgs[d] = idx
        tmp.clear()
        if not self.orient_final and len(out) > _HOLD_LIMIT * MSG_ROW.size:
            self._settle_orientation()

    def _data_end(self, D: _Dir, d: int, end_off: int, ts: int) -> None:
        st = D.data_stream
        sid = D.data_sid
        flags = D.data_flags
        D.data_stream = None
        self.flows[d].consume(sid, D.data_payload, ts, bool(flags & FLAG_END_STREAM))
        if st is None:
            return
        dl = D.data_len
        if dl > 0:
            if st.data_frames[d] == 0:
                st.first_data_ts[d] = ts
                st.first_data_off[d] = end_off
            st.data_frames[d] += 1
            st.last_data_ts[d] = ts
            st.data_bytes[d] += dl
        st.last_off[d] = end_off
        sp = st.splitter[d]
        if sp is not None:
            if isinstance(sp, GrpcSplitter):
                if sp.probing:
                    tmp = self._tmp
                    sp.frame_end(tmp)
                    if tmp:
                        self._messages(st, d, tmp)
                if sp.trailer and st.web_trailers is None:
                    st.web_trailers = parse_grpc_web_trailers(bytes(sp.trailer))
        if flags & FLAG_END_STREAM:
            self._end_stream(st, d, ts, end_off)

    # -- other frames ----------------------------------------------------------------

    def _stray_block(self, D: _Dir, d: int) -> None:
        self._issue("h2_bad_continuation", "header block interrupted by another frame")
        D.block = None
        D.hpack.lose_context()

    def _control(
        self, D: _Dir, d: int, ftype: int, flags: int, sid: int, p: bytes, ts: int, end_off: int
    ) -> None:
        if D.block is not None and ftype != CONTINUATION:
            self._stray_block(D, d)
        if ftype == HEADERS or ftype == PUSH_PROMISE:
            j, e = 0, len(p)
            if flags & FLAG_PADDED:
                j = 1
                e -= p[0]
            promised = 0
            if ftype == HEADERS:
                if flags & FLAG_PRIORITY:
                    j += 5
            else:
                promised = int.from_bytes(p[j : j + 4], "big") & 0x7FFFFFFF
                j += 4
            if e < j:
                self._issue("h2_bad_padding", f"frame type {ftype} padding exceeds payload")
                D.hpack.lose_context()
                return
            frag = p[j:e]
            if flags & FLAG_END_HEADERS:
                self._block(D, d, ftype, flags, sid, frag, ts, end_off, promised)
            else:
                D.block = bytearray(frag)
                D.block_sid = sid
                D.block_type = ftype
                D.block_flags = flags
                D.block_ts = ts
                D.block_promised = promised
        elif ftype == CONTINUATION:
            if D.block is None or sid != D.block_sid:
                # its HEADERS was lost (e.g. resync landed here): context is gone
                self._issue("h2_bad_continuation", f"CONTINUATION on {sid} without HEADERS")
                D.block = None
                D.hpack.lose_context()
                return
            D.block += p
            if flags & FLAG_END_HEADERS:
                blk = D.block
                D.block = None
                self._block(
                    D,
                    d,
                    D.block_type,
                    D.block_flags,
                    sid,
                    blk,
                    D.block_ts,
                    end_off,
                    D.block_promised,
                )
        elif ftype == SETTINGS:
            if flags & FLAG_ACK:
                return
            parts = []
            o = 1 - d
            for k in range(0, len(p) - 5, 6):
                ident = int.from_bytes(p[k : k + 2], "big")
                val = int.from_bytes(p[k + 2 : k + 6], "big")
                parts.append(f"{SETTINGS_NAMES.get(ident, str(ident))}={val}")
                if ident == 1:
                    # our decoder of what the peer sends must fit this size
                    self.dirs[o].hpack.set_max_allowed(val)
                elif ident == 3:
                    self.max_conc[d] = val
                elif ident == 4:
                    self.flows[o].set_initial(val, ts)
                elif ident == 5:
                    self.dirs[o].max_len = max(DEFAULT_MAX_FRAME_SIZE, min(val, MAX_FRAME_LEN))
                    self.dirs[o].max_known = True
            self._event(ts, 0, d, "settings", len(parts), ",".join(parts))
        elif ftype == WINDOW_UPDATE:
            inc = int.from_bytes(p[:4], "big") & 0x7FFFFFFF
            self._event(ts, sid, d, "window_update", inc)
            since = self.flows[1 - d].update(sid, inc)
            if since is not None:
                self._event(
                    since,
                    sid,
                    1 - d,
                    "flow_control_blocked",
                    sid,
                    "connection" if sid == 0 else "stream",
                    (ts - since) / 1e6,
                )
        elif ftype == RST_STREAM:
            code = int.from_bytes(p[:4], "big")
            self._event(ts, sid, d, "rst_stream", code)
            st = self.streams.get(sid)
            if st is not None:
                st.rst_ts = ts
                st.rst_code = code
                st.rst_dir = d
                st.rst_off = end_off
                st.last_off[d] = end_off
                self._finalize(st)
        elif ftype == PING:
            self._event(ts, 0, d, "ping", 1 if flags & FLAG_ACK else 0, p.hex())
        elif ftype == GOAWAY:
            last = int.from_bytes(p[:4], "big") & 0x7FFFFFFF
            code = int.from_bytes(p[4:8], "big")
            dbg = p[8:].decode("utf-8", "replace")
            detail = str(last) if not dbg else f"{last} {dbg}"
            self._event(ts, 0, d, "goaway", code, detail)
        elif ftype == PRIORITY:
            dep = int.from_bytes(p[:4], "big")
            self._event(ts, sid, d, "priority", dep & 0x7FFFFFFF, f"weight={p[4] + 1}")
        # unknown types: ignored (RFC 9113 section 4.1)

    def _block(
        self,
        D: _Dir,
        d: int,
        ftype: int,
        flags: int,
        sid: int,
        frag: bytes | bytearray,
        ts: int,
        end_off: int,
        promised: int,
    ) -> None:
        blk: DecodedBlock = D.hpack.decode(frag)
        h = blk.as_dict()  # shared with the decoder's cache: stored, never changed
        unknown = bool(blk.unknown or blk.error)
        if unknown:
            if blk.error:
                self._issue("hpack_error", f"stream {sid}: {blk.error}")
            if blk.unknown:
                idx = ",".join(str(x) for x in blk.unknown_indexes[:16])
                self._event(ts, sid, d, "headers_unknown", blk.unknown, f"indexes={idx}")
        if ftype == PUSH_PROMISE:
            self._orient(1 - d)
            self._event(ts, sid, d, "push_promise", promised, h.get(":path"))
            if promised in self.streams or promised in self.closed or not promised:
                return
            c = 1 - d
            st = Stream(promised)
            st.promised = True
            st.opener = d
            st.hdr[c] = h
            st.hdr_ts[c] = ts
            st.end_ts[c] = ts  # a promised request has no body
            st.headers_known = not unknown
            st.set_content_type(h.get("content-type"), c, False)
            self.streams[promised] = st
            self.flows[d].open_stream(promised)
            return
        method = ":method" in h
        status = h.get(":status")
        st = self.streams.get(sid)
        if st is None:
            if sid in self.closed:
                return
            if not self._may_open(sid, method):
                self._issue("h2_bad_stream_id", f"HEADERS cannot open stream {sid} here; ignored")
                return
            st = Stream(sid)
            st.opener = d
            if method:
                if not self.first_opened[sid & 1]:
                    self.first_opened[sid & 1] = sid
                self.last_opened[sid & 1] = sid
            elif status is not None or "grpc-status" in h:
                # we missed the request's HEADERS: mid-connection
                st.mid = True
                st.headers_known = False
                st.opener = 1 - d
            elif unknown:
                st.headers_known = False
            self.streams[sid] = st
            self.flows[0].open_stream(sid)
            self.flows[1].open_stream(sid)
            if self.max_conc[1 - d] is not None:
                self._check_concurrency(d, ts, sid)
        if unknown:
            st.headers_known = False
        # the side that sent :method is the client; :status, the server
        client = d if method else (1 - d if status is not None else -1)
        if client >= 0 and (not self.orient_final or (client == 1) != self.flipped):
            self._orient(client)
        if st.hdr[d] is None and (status is not None or method or st.data_frames[d] == 0):
            if status is not None and status[:1] == "1":
                st.informational = True  # 1xx: the final response headers follow
            else:
                st.hdr[d] = h
                st.hdr_ts[d] = ts
                is_resp = status is not None or (self.orient_final and d != self.client_dir)
                ct = h.get("content-type")
                st.set_content_type(ct, d, is_resp, h.get(":path"))
                if ct is None and unknown:
                    # content-type may be hidden behind an unknown index: probe bodies
                    for k in (0, 1):
                        if st.mode[k] == "http" and st.data_frames[k] == 0:
                            st.mode[k] = "probe"
                            st.splitter[k] = GrpcSplitter(probing=True)
                if flags & FLAG_END_STREAM and "grpc-status" in h and is_resp:
                    st.trailers_only = True
        else:
            trl = st.trailers[d]
            # a second trailer block: merged into a new dict (h is shared)
            st.trailers[d] = h if trl is None else {**trl, **h}
        st.last_off[d] = end_off
        if flags & FLAG_END_STREAM:
            self._end_stream(st, d, ts, end_off)

    def _may_open(self, sid: int, is_request: bool) -> bool:
        """Stream ids only grow (RFC 9113 5.1.1): a new request on an id at or below the
        last one opened, or far beyond it, means the bytes are not what they seem (the
        block was still decoded, so HPACK stays aligned). Streams whose request we never
        saw only exist mid-connection or after loss."""
        if not is_request:
            return self.mid or self.lossy
        last = self.last_opened[sid & 1]
        if not last:
            return True
        jump = sid - last
        return 0 < jump <= (_MAX_SID_JUMP_LOSSY if self.lossy else _MAX_SID_JUMP)

    def _check_concurrency(self, d: int, ts: int, sid: int) -> None:
        limit = self.max_conc[1 - d]
        if limit is None:
            return
        n = 0
        for st in self.streams.values():
            if st.opener == d and not st.done():
                n += 1
        if n >= limit:
            if not self.conc_hit[d]:
                self.conc_hit[d] = True
                self._event(ts, sid, d, "max_concurrent_streams", limit, f"open={n}")
        else:
            self.conc_hit[d] = False

    def _end_stream(self, st: Stream, d: int, ts: int, end_off: int) -> None:
        if st.end_ts[d] is None:
            st.end_ts[d] = ts
            st.end_off[d] = end_off
        self.flows[d].close_stream(st.sid)
        if st.done():
            self._finalize(st)
        elif st.mid and st.hdr_ts[1 - d] is None and self.orient_final and d != self.client_dir:
            # mid-connection stream whose request we never saw: the response end ends it
            self._finalize(st)

    def _finalize(self, st: Stream) -> None:
        sid = st.sid
        if self.streams.pop(sid, None) is None:
            return
        closed = self.closed
        closed[sid] = True
        if len(closed) > _CLOSED_KEEP:
            del closed[next(iter(closed))]
        self.flows[0].close_stream(sid)
        self.flows[1].close_stream(sid)
        self.done.append(st)
        if not self.orient_final and self.held() > _HOLD_LIMIT:
            self._settle_orientation()

    def _settle_orientation(self) -> None:
        # keep memory bounded: settle for the TCP layer's orientation
        self.orient_final = True
        self._issue("h2_orientation_guess", "no bytes told the client side; kept TCP's")

    # -- output ------------------------------------------------------------------------

    def finish(self, end_ns: int) -> None:
        """Flush: unfinished streams become records (end=None), open blocks are reported."""
        for flow_dir, fs in enumerate(self.flows):
            for key, (since, _fn) in list(fs.blocked.items()):
                self._event(
                    since,
                    key,
                    flow_dir,
                    "flow_control_blocked",
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
        cols = np.frombuffer(buf, dtype=np.int64).reshape(-1, 7)
        evs, self.events = self.events, []
        if self.flipped:
            cols = cols.copy()
            cols[:, 1] ^= 1
            for e in evs:
                e.direction ^= 1
        return reqs, cols, evs


_NO_ROWS = np.zeros((0, 7), dtype=np.int64)
_pack_msg = MSG_ROW.pack


__all__ = ["H2Connection", "MessageRow", "MSG_ROW"]
