"""Messages joined with the ACKs that acknowledged them, and requests with their
client-side times: the far end's ACK progress searched (sorted) for each message's end
offset; the gaps between consecutive messages of a stream and their statistics."""

from __future__ import annotations

from itertools import chain

import numpy as np

from parsers.llm.semantics import TOKEN_KINDS
from parsers.records import TO_CLIENT, TO_SERVER, ConnectionSummary
from parsers.records import MessageColumn as MC
from parsers.tcp import TcpAnalyzer
from telemetry.ingest.columns import NO_TS
from telemetry.ingest.state import STREAM_KEY_SHIFT, Conn, Msgs, Ready, StreamTimes, stream_keys

# messages TTFT and token gaps are measured on (the others are LLM stream events that carry
# no generated content: role, usage, finish, ping...), by kind (a message row's 4 kind
# bits): a lookup, where np.isin sorts
IS_GAP_KIND = np.zeros(16, dtype=bool)
IS_GAP_KIND[sorted(TOKEN_KINDS)] = True


def take_messages(taken: list[tuple[Conn, list[tuple] | np.ndarray]], times: StreamTimes) -> None:
    """Session message rows of several connections (each MessageRow tuples or their
    (n, 7) int64 columns) -> per-connection, per-direction columns waiting for their
    ACK, with the gap since the previous message of the same stream and direction. One
    pass for many connections: a numpy call costs microseconds whatever its size, and a
    pass per connection was most of the work on captures of thousands of them."""
    parts = [
        rows if isinstance(rows, np.ndarray)
        else np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=7 * len(rows)).reshape(len(rows), 7)
        for _conn, rows in taken
    ]
    a = parts[0] if len(parts) == 1 else np.concatenate(parts)
    n = len(a)
    owner = np.repeat(np.arange(len(taken)), [len(p) for p in parts])  # position in ``taken``
    slot_of = [times.slot(conn.key) for conn, _rows in taken]
    slots = np.array(slot_of, dtype=np.int64)
    gaps_by_slot = {slot: conn.response_gaps for (conn, _rows), slot in zip(taken, slot_of, strict=True)}
    dirs = a[:, MC.DIRECTION]
    # gaps between messages and between LLM stream events carrying content only
    sel = np.flatnonzero(IS_GAP_KIND[(a[:, MC.FLAGS] >> 8) & 0xF])
    if len(sel) == n:
        gap = stream_gaps(times, gaps_by_slot, slots[owner], a[:, MC.STREAM_ID], dirs, a[:, MC.TS_NS])
    else:
        gap = np.full(n, np.nan)
        if len(sel):
            gap[sel] = stream_gaps(times, gaps_by_slot, slots[owner[sel]], a[sel, MC.STREAM_ID], dirs[sel], a[sel, MC.TS_NS])
    # each connection's rows of each direction, in their order
    group = owner * 2 + dirs
    order = np.argsort(group, kind="stable")
    bounds = (np.flatnonzero(np.diff(group[order])) + 1).tolist()
    starts, stops = [0, *bounds], [*bounds, n]
    for g, lo, hi in zip(group[order[starts]].tolist(), starts, stops, strict=True):
        conn, d = taken[g >> 1][0], g & 1
        rows = order[lo:hi]
        # whole rows gathered once (a copy: a connection's waiting messages must not
        # keep the batch alive); the fields stay (strided) views of them
        part, part_gap = a[rows], gap[rows]
        pf = part[:, MC.FLAGS]
        block = Msgs(
            part[:, MC.STREAM_ID], part[:, MC.INDEX], part[:, MC.TS_NS], part[:, MC.SIZE], (pf & 1) != 0,
            part[:, MC.END_OFFSET], part_gap,
            np.full(hi - lo, NO_TS, dtype=np.int64), (pf >> 8) & 0xF, (pf >> 12) - 1,
        )
        old = conn.pending[d]
        conn.pending[d] = block if old is None else Msgs.concat([old, block])


def stream_gaps(
    times: StreamTimes, gaps_by_slot: dict[int, dict[int, list[np.ndarray]]], row_slots: np.ndarray,
    sid: np.ndarray, dirs: np.ndarray, ts: np.ndarray,
) -> np.ndarray:
    """ms since the previous message of the same connection, stream and direction (NaN:
    none known) of message rows in completion order (``row_slots``: each row's
    connection's StreamTimes slot); the response gaps go to each connection's response
    gaps (``gaps_by_slot``), for the requests' gap statistics."""
    n = len(sid)
    key = stream_keys(row_slots, sid, dirs)
    order = np.argsort(key, kind="stable")
    ks, tso = key[order], ts[order]
    first = np.ones(n, dtype=bool)  # first row of its key in this batch
    first[1:] = ks[1:] != ks[:-1]
    firsts = np.flatnonzero(first)
    lasts = np.append(firsts[1:] - 1, n - 1)
    prev = np.empty(n, dtype=np.int64)
    prev[1:] = tso[:-1]
    known, held = times.swap(ks[firsts], tso[lasts])
    prev[firsts] = held
    has = ~first  # a previous message is known
    has[firsts] = known
    diff = tso - prev  # ns since the previous message of the stream and direction
    gap = np.empty(n, dtype=np.float64)
    gap[order] = np.where(has, diff / 1e6, np.nan)
    note_response_gaps(gaps_by_slot, ks, diff, has)
    return gap


def ack_arrays(tcp: TcpAnalyzer, conn: Conn, session_dir: int, summary: ConnectionSummary | None):
    """(ts, acked offset) of the far end's ACKs for one session-oriented direction."""
    tcp_dir = session_dir ^ conn.flip
    if summary is not None:
        return summary.ack_progress[tcp_dir] if summary.ack_progress is not None else None
    return tcp.ack_progress(conn.key, tcp_dir)


def resolve_acks(tcp: TcpAnalyzer, conn: Conn, summary: ConnectionSummary | None, times: StreamTimes) -> None:
    """Give messages their ACK time and requests their client-side times; hand over
    what is resolved (everything, at close); then forget ACK progress nothing needs."""
    final = summary is not None
    for session_dir in (TO_SERVER, TO_CLIENT):
        pending = conn.pending[session_dir]
        if pending is None:
            continue
        arrays = ack_arrays(tcp, conn, session_dir, summary)
        if arrays is not None and len(arrays[0]):
            ack_ts, ack_off = arrays
            idx = np.searchsorted(ack_off, pending.end, side="left")
            found = idx < len(ack_ts)
            if found.any():
                got = np.asarray(ack_ts, dtype=np.int64)[np.minimum(idx, len(ack_ts) - 1)]
                pending.acked = np.where(found, got, pending.acked)
        n = len(pending)
        if final:
            n_done = n
        else:
            # messages complete in offset order: the resolved ones form a prefix
            unresolved = np.flatnonzero(pending.acked == NO_TS)
            n_done = int(unresolved[0]) if len(unresolved) else n
        if not n_done:
            continue
        done = pending if n_done == n else pending.part(0, n_done)
        conn.pending[session_dir] = None if n_done == n else pending.part(n_done, n)
        if session_dir == TO_CLIENT:
            # the first response message's ACK; of an LLM stream, its first event
            # carrying content (the TTFT point)
            firsts = np.flatnonzero((done.idx == 0) & (done.kind == 0))
            conn.first_acked.update(zip(done.sid[firsts].tolist(), done.acked[firsts].tolist(), strict=True))
            events = np.flatnonzero((done.kind != 0) & IS_GAP_KIND[done.kind])
            for sid, acked in zip(done.sid[events].tolist(), done.acked[events].tolist(), strict=True):
                conn.first_acked.setdefault(sid, acked)
        conn.rows.messages.append((session_dir, done))
    if final:
        ready, waiting = conn.pending_requests, []
    else:
        arrays = ack_arrays(tcp, conn, TO_CLIENT, None)
        upto = int(arrays[1][-1]) if arrays is not None and len(arrays[1]) else -1  # acked so far
        ready, waiting = [], []
        for r in conn.pending_requests:
            (ready if r.end_offset is None or r.end_offset <= upto else waiting).append(r)
    conn.pending_requests = waiting
    if not ready:
        if not final:
            prune_acks(tcp, conn)
        return
    # ACK times of every ready request's end (and first response byte) in one lookup
    k = len(ready)
    sids = [r.stream_id for r in ready]
    firsts = [conn.first_acked.pop(s, NO_TS) for s in sids]
    lookups = [r.end_offset for r in ready]
    lookups += [r.first_message_end_offset if f == NO_TS else None for r, f in zip(ready, firsts, strict=True)]
    found = acked_many(tcp, conn, lookups, summary)
    if conn.open_acks:  # ACKs no longer kept, found while the requests were open
        for i, offset in enumerate(lookups):
            acked = conn.open_acks.get(offset) if offset is not None else None
            if acked is not None:
                found[i] = acked
    first_acked = np.array(firsts, dtype=np.int64)
    # a non-gRPC response has no message rows: its first byte's ACK was looked up
    first_acked = np.where(first_acked == NO_TS, found[k:], first_acked)
    # the streams are over: their last message times are not needed again (bounded
    # memory on long connections)
    times.forget(conn.key, sids)
    gaps_of = conn.response_gaps
    gaps = [gaps_of.pop(s, None) for s in sids]
    floor = conn.rtt_floor_ms(TO_CLIENT ^ conn.flip) or 0.0
    conn.rows.requests.append(Ready(ready, first_acked, found[:k], floor, gaps))
    conn.rows.n_requests += k
    conn.requests += k
    if not final:
        prune_acks(tcp, conn)


def prune_acks(tcp: TcpAnalyzer, conn: Conn) -> None:
    """ACK progress below every offset still waiting for its ACK is not needed again
    (the ACKs of offsets that open requests may name when they end are kept aside)."""
    for session_dir in (TO_SERVER, TO_CLIENT):
        pending = conn.pending[session_dir]
        needed = [int(pending.end[0])] if pending is not None else []
        if session_dir == TO_CLIENT:
            for r in conn.pending_requests:
                needed += [o for o in (r.first_message_end_offset, r.end_offset) if o is not None]
        if not needed:
            continue
        kept_from = min(needed)
        if session_dir == TO_CLIENT:
            remember_open_acks(tcp, conn, kept_from)
        tcp.prune_acks(conn.key, session_dir ^ conn.flip, kept_from)


def remember_open_acks(tcp: TcpAnalyzer, conn: Conn, kept_from: int) -> None:
    """Before the ACK progress below ``kept_from`` goes: the ACK times of the offsets
    below it that a request still open may name when it ends (a stream that went quiet,
    then ended by the capture's end, a reset or the connection's close: its end is a
    byte seen batches ago). One entry per such offset, dropped once no open request
    names it."""
    named = conn.session.open_ends() if conn.session is not None else []
    known = conn.open_acks
    keep = {o: known[o] for o in named if o in known}
    todo = [o for o in named if o < kept_from and o not in keep]
    if todo:
        found = acked_many(tcp, conn, todo, None)
        keep.update((o, t) for o, t in zip(todo, found.tolist(), strict=True) if t != NO_TS)
    conn.open_acks = keep


def acked_many(
    tcp: TcpAnalyzer, conn: Conn, offsets: list[int | None], summary: ConnectionSummary | None
) -> np.ndarray:
    """When the client's ACK covering each offset was seen (NO_TS: no offset, or not
    acked yet), with one search over the connection's ACK progress."""
    arrays = ack_arrays(tcp, conn, TO_CLIENT, summary)
    if arrays is None or not len(arrays[0]):
        return np.full(len(offsets), NO_TS, dtype=np.int64)
    ack_ts, ack_off = arrays
    want = np.array([-1 if o is None else o for o in offsets], dtype=np.int64)
    idx = np.searchsorted(ack_off, want, side="left")
    ok = (want >= 0) & (idx < len(ack_ts))
    got = np.asarray(ack_ts, dtype=np.int64)[np.minimum(idx, len(ack_ts) - 1)]
    return np.where(ok, got, NO_TS)


def note_response_gaps(
    held: dict[int, dict[int, list[np.ndarray]]], keys: np.ndarray, diff: np.ndarray, has: np.ndarray
) -> None:
    """Keep the gaps (ns) between consecutive response messages of each stream, from a
    batch's message rows sorted by :func:`stream_keys` (``held``: each connection's
    gaps by stream, by StreamTimes slot; ``has``: a previous message is known, ``diff``:
    ns since it)."""
    resp = np.flatnonzero(has & ((keys & 1) == TO_CLIENT))
    if not len(resp):
        return
    streams = keys[resp] >> 1  # slot and stream id
    gaps = diff[resp]  # grouped by stream, each in order
    cuts = (np.flatnonzero(streams[1:] != streams[:-1]) + 1).tolist()
    starts, stops = [0, *cuts], [*cuts, len(streams)]
    slot_shift, sid_mask = STREAM_KEY_SHIFT - 1, (1 << (STREAM_KEY_SHIFT - 1)) - 1
    for stream, a, z in zip(streams[starts].tolist(), starts, stops, strict=True):
        # a copy unless whole: a long stream must not keep every batch's array alive
        part = gaps if len(starts) == 1 else gaps[a:z].copy()
        of_conn = held[stream >> slot_shift]
        sid = stream & sid_mask
        arrays = of_conn.get(sid)
        if arrays is None:
            of_conn[sid] = [part]
        else:
            arrays.append(part)


def gap_stats(gaps: list[list[np.ndarray] | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """p50, p99 and max (ms) of each request's response gaps (ns, in arrays; None: no
    gaps), NaN for none, for all requests at once: the linear-interpolated quantiles
    (numpy's default method) of each sorted list of gaps in ms, with the same float
    operations as taking them one list at a time."""
    n = len(gaps)
    out = (np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan))
    owners = [i for i, g in enumerate(gaps) if g]
    if not owners:
        return out
    arrays = [a for i in owners for a in gaps[i]]  # type: ignore[union-attr]
    k = np.array([sum(map(len, gaps[i])) for i in owners], dtype=np.int64)  # type: ignore[arg-type]
    owner = np.repeat(np.arange(len(owners)), k)
    # x -> x / 1e6 keeps the order: sort the exact ns, divide after
    g = sort_within(owner, arrays[0] if len(arrays) == 1 else np.concatenate(arrays)) / 1e6
    first = np.zeros(len(k), dtype=np.int64)  # each request's first gap in g
    np.cumsum(k[:-1], out=first[1:])
    for j, q in enumerate((0.50, 0.99)):
        pos = q * (k - 1)
        lo = pos.astype(np.int64)
        hi = np.minimum(lo + 1, k - 1)
        a, b = g[first + lo], g[first + hi]
        out[j][owners] = a + (b - a) * (pos - lo)
    out[2][owners] = g[first + k - 1]
    return out


def sort_within(owner: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` sorted within each run of equal ``owner`` (non-decreasing): one sort of
    a combined int64 key where it fits, else a two-key sort."""
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    if span * (int(owner[-1]) + 1) < 2**63:
        key = owner * span + (values - lo)
        key.sort(kind="stable")  # timsort: fast on the runs the groups already are
        return key - owner * span + lo
    return values[np.lexsort((values, owner))]
