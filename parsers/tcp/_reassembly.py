"""Per-direction reassembly: in-order delivery, out-of-order buffer, holes and skips.

Offsets are 64-bit "relative" sequence numbers (0 = first payload byte of the
direction). Bytes are delivered once, in order. A segment above the next expected
offset waits in ``Dir.buf`` until the hole before it is filled; then it is delivered
with the time and frame of the packet that filled the hole (the receiver could read it
no sooner). Holes that will never be filled (ACKed by the far end but not captured, cut
by the snaplen, or given up on when the buffer grows too large or too old) are skipped
and reported to the session layer as ``PayloadChunk.gap_before``. Bytes waiting behind
a hole the far end ACKed are delivered with their own packets' times and frames: the
capture missed the hole, the receiver did not, so nothing held them.
"""

from __future__ import annotations

from bisect import insort

from parsers.records import PayloadChunk
from parsers.tcp._state import Conn, Dir, Hole


def emit(conn: Conn, d: Dir, start: int, data: bytes, ts: int, frame: int, out: list) -> None:
    if data:
        out.append(PayloadChunk(conn.key, d.idx, data, ts, frame, start, d.pending_gap))
        d.pending_gap = 0


def drain(conn: Conn, d: Dir, ts: int, frame: int, out: list, upto: int | None = None,
          own_times: bool = False) -> None:  # fmt: skip
    """Deliver buffered segments that are now contiguous; with ``upto``, skip missing
    bytes below that offset (they are reported as a gap). With ``own_times``, each
    segment goes with its own packet's frame and time (never earlier than the one
    before it), not ``ts`` and ``frame``."""
    buf = d.buf
    run_start = -1
    parts: list[bytes] = []
    last_ts = -1  # own_times: the time of the segment before
    while True:
        if buf and buf[0][0] <= d.nxt:
            s, ce, we, data, seg_ts, seg_frame = buf.pop(0)
            d.buf_bytes -= len(data)
            if own_times and ce > d.nxt:
                seg_ts = max(seg_ts, last_ts)
                if parts and (seg_ts, seg_frame) != (ts, frame):  # what came before, at its time
                    emit(conn, d, run_start, b"".join(parts), ts, frame, out)
                    parts = []
                    run_start = -1
                ts, frame, last_ts = seg_ts, seg_frame, seg_ts
            if ce > d.nxt:
                if run_start < 0:
                    run_start = d.nxt
                parts.append(data[d.nxt - s :] if d.nxt > s else data)
                d.nxt = ce
            if we > d.nxt:  # the snaplen cut this segment's tail
                if parts:
                    emit(conn, d, run_start, b"".join(parts), ts, frame, out)
                    parts = []
                    run_start = -1
                d.pending_gap += we - d.nxt
                d.trunc_bytes += we - d.nxt
                d.nxt = we
        elif upto is not None and d.nxt < upto:
            target = min(upto, buf[0][0]) if buf else upto
            if parts:
                emit(conn, d, run_start, b"".join(parts), ts, frame, out)
                parts = []
                run_start = -1
            d.pending_gap += target - d.nxt
            d.nxt = target
        else:
            break
    if parts:
        emit(conn, d, run_start, parts[0] if len(parts) == 1 else b"".join(parts), ts, frame, out)


def insert(conn: Conn, d: Dir, start: int, cap_end: int, wire_end: int, data: bytes,
           ts: int, frame: int, out: list) -> None:  # fmt: skip
    """A segment's bytes [start, wire_end), of which [start, cap_end) were captured."""
    if wire_end <= d.nxt:
        return
    if start <= d.nxt and not d.buf and cap_end == wire_end:  # the common case: in order
        nxt = d.nxt
        emit(conn, d, nxt, data[nxt - start :] if nxt > start else data, ts, frame, out)
        d.nxt = cap_end
        return
    if start <= d.nxt:
        d.buf.insert(0, [start, cap_end, wire_end, data, ts, frame])
        d.buf_bytes += len(data)
        drain(conn, d, ts, frame, out)
    else:
        insort(d.buf, [start, cap_end, wire_end, data, ts, frame])
        d.buf_bytes += len(data)


# ----------------------------------------------------------------------------- holes


def new_bytes(d: Dir, s: int, e: int) -> tuple[int, Hole | None]:
    """How many bytes of [s, e) the capture has never seen (they lie in holes)."""
    n = 0
    first = None
    for h in d.holes:
        if h.start >= e:
            break
        if h.end <= s:
            continue
        for m0, m1 in h.missing:
            lo = m0 if m0 > s else s
            hi = m1 if m1 < e else e
            if hi > lo:
                n += hi - lo
                if first is None:
                    first = h
    return n, first


def subtract(h: Hole, s: int, e: int) -> int:
    """Remove [s, e) from the hole's missing ranges; returns the bytes removed."""
    out: list[list[int]] = []
    removed = 0
    for m0, m1 in h.missing:
        if m1 <= s or m0 >= e:
            out.append([m0, m1])
            continue
        removed += min(m1, e) - max(m0, s)
        if m0 < s:
            out.append([m0, s])
        if m1 > e:
            out.append([e, m1])
    h.missing = out
    return removed
