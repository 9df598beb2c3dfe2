"""TcpAnalyzer: the public, sans-I/O entry point (see the package docstring)."""

from __future__ import annotations

import numpy as np

from parsers.records import (
    ChunkRun,
    ConnectionSummary,
    PayloadChunk,
    RttRun,
    RttSample,
    SegmentBatch,
    TcpEvent,
    expand_rtts,
    expand_runs,
)
from parsers.tcp._analysis import PacketPath
from parsers.tcp._fast import BulkPath
from parsers.tcp._flows import group_flows
from parsers.tcp._limits import FIN_LINGER_NS
from parsers.tcp._losses import LossPath
from parsers.tcp._state import CLOSING, DONE, Conn

_EMPTY = np.zeros(0, dtype=np.int64)

FAST_MIN_ROWS = 24  # shorter runs are cheaper per packet than in bulk
FAST_WINDOW = 16384  # rows checked per bulk attempt (bounds re-checking after a stop)
SLOW_BLOCK = 32  # at most this many rows per packet after a bulk stop before trying bulk again
SLOW_MIN = 2  # ... and at least this many, then until the connection is ready for bulk again
MAX_CLOSED_INFO = 200_000


class TcpAnalyzer(PacketPath, LossPath, BulkPath):
    """Per-connection, per-direction TCP reassembly and analysis over SegmentBatches.

    Feed batches in capture order; collect in-order payload from :meth:`feed`, events
    and RTT samples from :meth:`take_events`, finished connections from
    :meth:`take_closed` / :meth:`finish`.

    ``share=(index, count)``: this analyzer is one of ``count`` that split a capture's
    connections; it handles the 4-tuples whose order of first appearance is ``index``
    modulo ``count`` and skips the others' segments. Every analyzer of the split sees
    the same batches, so they agree without talking, and equal connections are shared
    out evenly. Call :meth:`advance_clock` with each batch's last time.
    """

    def __init__(self, share: tuple[int, int] | None = None, run: bytes = b"") -> None:
        self._share = share
        self.run = run  # names the capture run in conn ids (make_conn_id)
        self._owner: dict[tuple, int] = {}  # 4-tuple -> analyzer of the split
        self._table: dict[tuple, Conn] = {}
        self._by_key: dict[int, Conn] = {}
        self._tomb: dict[tuple, tuple] = {}
        self._closed_info: dict[int, tuple[int, int]] = {}
        self._events: list[TcpEvent] = []
        self._rtts: list[RttSample | RttRun] = []
        self._done: list[ConnectionSummary] = []
        self._late: list[PayloadChunk] = []
        self._pack_args: tuple = ()
        self._packed: bytearray | None = None
        self._pack_buf = bytearray()
        self._next_key = 1
        self._now = 0
        self.stats: dict[str, int] = {
            "segments": 0,
            "fast_rows": 0,
            "slow_rows": 0,
            "duplicates": 0,
            "stragglers": 0,
            "out_of_window": 0,
        }

    # ------------------------------------------------------------------ input

    def feed(self, segments: SegmentBatch) -> list[PayloadChunk]:
        """Process one batch (capture order); returns newly deliverable in-order bytes."""
        return expand_runs(self.feed_runs(segments))

    def feed_runs(self, segments: SegmentBatch) -> list[PayloadChunk | ChunkRun]:
        """Like :meth:`feed`, with the bulk path's chunks as :class:`ChunkRun` columns
        (same chunks, same order, once expanded): no object per packet."""
        n = len(segments)
        out: list[PayloadChunk | ChunkRun] = []
        if n == 0:
            return out
        self.stats["segments"] += n
        b = segments
        g = group_flows(b)
        sackm = None
        if b.sack:
            sackm = np.zeros(n, dtype=bool)
            sackm[np.fromiter(b.sack.keys(), dtype=np.int64, count=len(b.sack))] = True
        mv = memoryview(b.buf)
        order = g.order
        self._pack_args, self._packed = (b, sackm, g.swap, order), None
        # flows in order of their first packet: connection keys follow capture order
        first = np.argsort(order[g.starts], kind="stable")
        starts, stops = g.starts[first], g.stops[first]
        small = (stops - starts) < 2 * FAST_MIN_ROWS
        cols = None
        if int((stops - starts)[small].sum()) * 4 >= n:
            # many short flows: one conversion to lists for the whole batch is cheaper
            cols = self._take_rows(0, n)
        share, owner = self._share, self._owner
        for a, z, sm in zip(starts.tolist(), stops.tolist(), small.tolist(), strict=True):
            idx = order[a:z]
            key6 = g.key(int(idx[0]))
            if share is not None:
                k = owner.get(key6)
                if k is None:
                    k = owner[key6] = len(owner) % share[1]
                if k != share[0]:
                    continue
            if sm and cols is not None:
                self._slow_rows(key6, tuple(c[a:z] for c in cols), b, out, mv)
            else:
                self._group(key6, idx, b, g.swap, sackm, mv, out, a)
        # the batch is done: do not keep it alive
        self._pack_args, self._packed = (), None
        if len(self._tomb) > 4096:
            horizon = self._now - 60_000_000_000
            self._tomb = {k: v for k, v in self._tomb.items() if v[0] >= horizon}
        return out

    def _group(self, key6: tuple, idx: np.ndarray, b, swap, sackm, mv, out: list, at: int) -> None:
        """Rows ``idx`` (``order[at:]`` of the flow grouping) of one connection: bulk
        runs while they are clean, the per-packet path in between. A numpy run ends before
        the packet on which a verdict on a retransmission can fall: that packet goes per
        packet, as it would without bulk runs (the verdict opens the send log's gate); the
        C run gives such verdicts itself."""
        n = len(idx)
        pos = 0
        while pos < n:
            conn = self._table.get(key6)
            ready_after, block = SLOW_MIN, SLOW_BLOCK
            if conn is not None and n - pos >= FAST_MIN_ROWS and self._bulk_ready(conn):
                window = idx[pos : pos + min(n - pos, FAST_WINDOW)]
                k, w, limit = self._bulk(conn, window, b, swap, sackm, mv, out, at + pos, FAST_MIN_ROWS)
                if k == 0 and w == limit < FAST_MIN_ROWS:
                    ready_after = block = limit + 1  # the verdict's packet too close for a run: up to it per packet
                elif k == 0 and w < FAST_MIN_ROWS:  # an IP id gap too close for a run: past it per packet
                    ready_after = max(SLOW_MIN, w + 1)
                else:
                    pos += k
                    if k == w and (k < limit or limit == len(window)):
                        continue  # up to an IP id gap or the window's end: a run from there
                    if k == limit:  # up to the verdict's packet: that one per packet
                        ready_after = block = 1
            if n - pos < FAST_MIN_ROWS * 2:
                self._slow_rows(key6, self._take_rows(at + pos, at + n), b, out, mv)
                return
            z = min(n, pos + block)
            pos += self._slow_rows(key6, self._take_rows(at + pos, at + z), b, out, mv, ready_after=ready_after)

    # ------------------------------------------------------------------ outputs

    def take_events(self) -> tuple[list[TcpEvent], list[RttSample]]:
        """Events and RTT samples produced since the last call."""
        ev, rt = self.take_events_runs()
        return ev, expand_rtts(rt)

    def take_events_runs(self) -> tuple[list[TcpEvent], list[RttSample | RttRun]]:
        """Like :meth:`take_events`, with the bulk path's samples as :class:`RttRun`
        columns (same samples, same order, once expanded)."""
        ev, rt = self._events, self._rtts
        self._events, self._rtts = [], []
        return ev, rt

    def take_chunks(self) -> list[PayloadChunk]:
        """Payload made deliverable outside :meth:`feed`: out-of-order data still buffered
        behind a hole when :meth:`take_closed` / :meth:`finish` closed its connection
        (delivered after a gap). Call before handling the returned summaries if the
        session layer should see those bytes; otherwise they are dropped at the next call."""
        out, self._late = self._late, []
        return out

    def ack_progress(self, conn_key: int, direction: int) -> tuple[np.ndarray, np.ndarray]:
        """(ts_ns, acked offset of ``direction``), both non-decreasing."""
        conn = self._by_key.get(conn_key)
        if conn is None:
            return _EMPTY, _EMPTY
        return conn.dirs[direction].acks.arrays()

    def prune_acks(self, conn_key: int, direction: int, below_offset: int) -> None:
        conn = self._by_key.get(conn_key)
        if conn is not None:
            conn.dirs[direction].acks.prune(below_offset)

    def advance_clock(self, ts_ns: int) -> None:
        """Capture time reached ``ts_ns`` through segments this analyzer was not fed (the
        other connections, when a capture's connections are split between analyzers):
        lingering and idle connections close when they would with every segment fed."""
        if ts_ns > self._now:
            self._now = ts_ns

    def take_closed(self, idle_ns: int | None = None) -> list[ConnectionSummary]:
        """Connections that finished (RST, or FIN both ways and ACKed / lingering 1 s),
        plus, with ``idle_ns``, those silent for longer than that (relative to the last
        packet time seen); they are removed from the table."""
        self._late = []
        now = self._now
        for conn in list(self._by_key.values()):
            if conn.state == CLOSING and now - conn.closing_since > FIN_LINGER_NS:
                self._finalize(conn, None, tomb=True)
            elif idle_ns is not None and conn.state != DONE and now - conn.last_ns > idle_ns:
                self._finalize(conn, None, tomb=False)
        out, self._done = self._done, []
        return out

    def finish(self) -> list[ConnectionSummary]:
        """Close every remaining connection (end of input)."""
        self._late = []
        for conn in list(self._by_key.values()):
            self._finalize(conn, None, tomb=False)
        out, self._done = self._done, []
        return out

    def connection_info(self, conn_key: int) -> tuple[int, int]:
        """(client_port, server_port) as currently oriented."""
        conn = self._by_key.get(conn_key)
        if conn is not None:
            return self._ports(conn)
        return self._closed_info[conn_key]

    def open_summary(self, conn_key: int) -> ConnectionSummary | None:
        """The summary of a connection still open, as it stands now (ids, addresses,
        counters so far), or None when it is not open. The pipeline writes a long-lived
        connection's rows before it closes and needs its conn_id and addresses for that."""
        conn = self._by_key.get(conn_key)
        return None if conn is None else self._summary(conn)

    def open_addresses(self, conn_key: int) -> tuple[str, str] | None:
        """(client, server) address of a connection still open, as its summary names them,
        or None when it is not open: without the rest of :meth:`open_summary` (its ACK
        logs as arrays, its history as text)."""
        conn = self._by_key.get(conn_key)
        if conn is None:
            return None
        (client, _), (server, _) = self._endpoints(conn)
        return client, server

    def flip_connection(self, conn_key: int) -> None:
        """Swap client and server of a live connection (e.g. the HTTP/2 preface showed
        the heuristic guessed wrong). Later chunks, events and the summary use the new
        orientation; what was already returned is not changed (see ``flip_*``)."""
        conn = self._by_key[conn_key]
        conn.client_is_lo = not conn.client_is_lo
        conn.client_known = True
        c, s = conn.dirs
        c.idx, s.idx = 1, 0
        conn.dirs = (s, c)
        h = conn.hist
        h.chars = [ch.swapcase() for ch in h.chars]
        h.counts = {k.swapcase(): v for k, v in h.counts.items()}

    def _finalize(self, conn: Conn, out, tomb: bool) -> None:  # noqa: D401 - see PacketPath
        super()._finalize(conn, out, tomb)
        if len(self._closed_info) > MAX_CLOSED_INFO:
            for k in list(self._closed_info)[: MAX_CLOSED_INFO // 2]:
                del self._closed_info[k]

