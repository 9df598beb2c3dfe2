"""The loss-gated send log behind the ``segment_sends`` table.

The policer test (queries/policer_bucket.sql) simulates a token bucket over every data
segment a sender put on the path around its losses: per segment its time, sequence
number and size, and whether it resent bytes. Logging every segment of every connection
would grow the store with the traffic; the test only needs the periods with losses. So a
path direction (sender address -> receiver address) is logged only while it loses:

* a retransmission (not a spurious one) on any connection of the path opens (or extends)
  a gate on the path direction: from ``LOOKBACK_NS`` before it (as far back as the
  pipeline still holds the segments: the last ``RETAIN_BATCHES`` batches it read, at
  least the current one) to ``HOLD_NS`` after the last retransmission;
* while a gate is open, every data segment of every connection of that path direction is
  logged (new bytes from the reassembly's in-order chunks, resent bytes from the
  retransmission events), once.

A gate opens when the TCP layer hands out the retransmission's event, i.e. once its verdict
(genuine or spurious) is settled. A bulk run (parsers/tcp/_fast.py) gives a verdict on the
packet the per-packet path gives it (the C run), or ends before the earliest packet one can
fall on (the numpy run; parsers/tcp/_losses.py: verdict_due), so it is handed out with the
same batch as when every packet is taken one by one, and the rows are the same either way
(samples/loss_burst: 5,487). What the lookback still holds when a gate opens,
and so the rows at a gate's edges, follow the batches.

A capture without losses logs nothing and pays for nothing but keeping a reference to
the previous batch's chunk list. Segments are seen at the capture point: the test makes
sense when that is the sender's side of the policer (a server-side capture for the
server's responses), where lost segments were captured and then resent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from parsers.records import ChunkRun, RunColumn
from telemetry.ingest.lockstep import Peer

LOOKBACK_NS = 3_000_000_000  # the lost segments were sent up to an RTO (backoff) before their resend
HOLD_NS = 3_000_000_000  # keep logging this long after the last retransmission of the path
RETAIN_BATCHES = 2  # batches of chunks kept for the lookback (bounded memory)

NEW, RETRANSMISSION, SPURIOUS = 0, 1, 2
KIND_NAMES = ("new", "retransmission", "spurious_retransmission")
_LOSS_KINDS = frozenset(("retransmission", "fast_retransmission", "rto_retransmission"))
_RESEND_KINDS = _LOSS_KINDS | {"spurious_retransmission"}

_KEY = attrgetter("conn_key")
_DIR = attrgetter("direction")
_TS = attrgetter("ts_ns")
_OFF = attrgetter("stream_offset")
_DATA = attrgetter("data")


@dataclass
class _Batch:
    chunks: list
    last_ns: int
    cols: tuple[np.ndarray, ...] | None = None  # cd, ts, seq, bytes (built on demand)
    groups: tuple[np.ndarray, np.ndarray] | None = None  # distinct cd, each row's index in them

    def columns(self) -> tuple[np.ndarray, ...]:
        if self.cols is None:
            self.cols = _columns(self.chunks)
        return self.cols

    def cd_groups(self) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct connection-directions, sorted; each row's index in them), as
        np.unique(cd, return_inverse=True) gives them: by a table over their range when
        it is dense (connection keys count up), with no sort of the batch's rows."""
        if self.groups is None:
            cd = self.columns()[0]
            if not len(cd):
                return cd, cd
            low = int(cd.min())
            span = int(cd.max()) - low + 1
            if span <= 4 * len(cd) + 4096:
                present = np.zeros(span, dtype=bool)
                present[cd - low] = True
                self.groups = (np.flatnonzero(present) + low, (np.cumsum(present) - 1)[cd - low])
            else:
                self.groups = np.unique(cd, return_inverse=True)
        return self.groups


def _columns(chunks: list) -> tuple[np.ndarray, ...]:
    """cd, ts, seq, bytes of the chunks' rows, in order. The runs (one per bulk run of a
    connection: thousands a batch, between single chunks) are read in one concatenation
    and their rows put in place by one scatter, as are the single chunks'."""
    n = len(chunks)
    is_run = np.fromiter((type(c) is _RunCols for c in chunks), bool, n)
    if not is_run.any():
        return _chunk_columns(chunks)
    runs = [c for c in chunks if type(c) is _RunCols]
    if len(runs) == n:
        return _run_columns(runs)
    lens = np.ones(n, np.int64)
    at_runs = np.flatnonzero(is_run)
    run_lens = np.fromiter((len(c.rows) for c in runs), np.int64, len(runs))
    lens[at_runs] = run_lens
    starts = np.cumsum(lens) - lens  # each chunk's first row
    out = tuple(np.empty(int(lens.sum()), np.int64) for _ in range(4))
    # a run's rows go from its start on: position in the concatenation + the shift
    shift = starts[at_runs] - (np.cumsum(run_lens) - run_lens)
    where = np.repeat(shift, run_lens) + np.arange(int(run_lens.sum()))
    for col, values in zip(out, _run_columns(runs), strict=True):
        col[where] = values
    at_singles = starts[~is_run]
    for col, values in zip(out, _chunk_columns([c for c in chunks if type(c) is not _RunCols]), strict=True):
        col[at_singles] = values
    return out


def _run_columns(runs: list[_RunCols]) -> tuple[np.ndarray, ...]:
    r = np.concatenate([x.rows for x in runs]) if len(runs) > 1 else runs[0].rows
    keys = np.repeat(np.array([x.conn_key * 2 for x in runs], np.int64), [len(x.rows) for x in runs])
    return (keys + r[:, RunColumn.DIRECTION], r[:, RunColumn.TS_NS], r[:, RunColumn.STREAM_OFFSET],
            r[:, RunColumn.END] - r[:, RunColumn.START])  # fmt: skip


def _chunk_columns(chunks: list) -> tuple[np.ndarray, ...]:
    n = len(chunks)
    cd = np.fromiter(map(_KEY, chunks), np.int64, n) * 2 + np.fromiter(map(_DIR, chunks), np.int64, n)
    ts = np.fromiter(map(_TS, chunks), np.int64, n)
    seq = np.fromiter(map(_OFF, chunks), np.int64, n)
    size = np.fromiter(map(len, map(_DATA, chunks)), np.int64, n)
    return cd, ts, seq, size


def _last_ns(chunks: list) -> int:
    """Time of the batch's last chunk."""
    return max(int(c.rows[:, RunColumn.TS_NS].max()) if type(c) is ChunkRun else c.ts_ns for c in chunks)


@dataclass(slots=True)
class _RunCols:
    """A ChunkRun without its batch buffer (only the columns the log needs are kept)."""

    conn_key: int
    rows: np.ndarray  # ChunkRun.rows: direction, ts_ns, frame_no, stream_offset, start, end


@dataclass
class _Gate:
    start_ns: int
    until_ns: int


@dataclass
class _Rows:
    direction: list[np.ndarray] = field(default_factory=list)
    ts: list[np.ndarray] = field(default_factory=list)
    seq: list[np.ndarray] = field(default_factory=list)
    size: list[np.ndarray] = field(default_factory=list)
    kind: list[np.ndarray] = field(default_factory=list)
    count: int = 0

    def add(self, direction, ts, seq, size, kind) -> None:
        self.direction.append(direction)
        self.ts.append(ts)
        self.seq.append(seq)
        self.size.append(size)
        self.kind.append(kind)
        self.count += len(ts)


class SendLog:
    """Loss-gated per-segment send rows, per connection, until the pipeline takes them.

    ``paths`` maps a connection key to its (client address, server address) as the TCP
    layer names it (None when unknown); the sender of TCP direction 0 is the client.
    """

    def __init__(self, path_of, peer: Peer | None = None) -> None:
        self._path_of = path_of
        self._peer = peer
        self._paths: dict[int, tuple[str, str] | None] = {}
        self._batches: list[_Batch] = []
        self._incoming: list | None = None  # with a peer: the batch's chunks, until note_events
        self._gates: dict[tuple, _Gate] = {}
        self._logged_ns: dict[int, int] = {}  # cd -> time of the last new-bytes row logged
        self._rows: dict[int, _Rows] = {}

    # -- inputs ---------------------------------------------------------------------
    def note_chunks(self, chunks: list) -> None:
        """In-order chunks of one batch (PayloadChunks and ChunkRuns; call before
        :meth:`note_events` of the batch). With a peer they are logged at that call, once
        the peer's batch is known."""
        if not chunks:
            return
        if self._peer is None:
            self._add_batch(chunks, _last_ns(chunks))
        else:
            self._incoming = chunks

    def note_events(self, events: list) -> None:
        """TCP events (after the batch's :meth:`note_chunks`, or of connections closing):
        retransmissions open gates and are logged.

        With a peer (the other process of a capture split by connection), both processes
        call this at the same points and exchange what the gates need, so the gates and
        the rows are those of one process reading every connection: whether the batch
        had chunks and its last chunk time (retention, gate expiry), and the gate
        openings. The batch's chunks are logged first, as :meth:`note_chunks` does alone."""
        resends = [e for e in events if e.kind in _RESEND_KINDS]
        openings = [
            (self._gate_key(ev.conn_key, ev.direction), ev.ts_ns) for ev in resends if ev.kind in _LOSS_KINDS
        ]
        if self._peer is not None:
            incoming, self._incoming = self._incoming, None
            last = _last_ns(incoming) if incoming else None
            # per-connection gates (path unknown) are the process's own: not exchanged
            theirs_last, theirs_openings = self._peer.exchange((last, [o for o in openings if o[0][0] != "conn"]))
            if theirs_last is not None:
                last = theirs_last if last is None else max(last, theirs_last)
            if last is not None:
                self._add_batch(incoming or [], last)
            openings += theirs_openings
        if not resends and not openings:
            return
        opened: dict[tuple, _Gate] = {}
        for gkey, ts in openings:
            gate = self._gates.get(gkey)
            if gate is None:
                gate = self._gates[gkey] = _Gate(ts - LOOKBACK_NS, ts + HOLD_NS)
                opened[gkey] = gate
            gate.start_ns = min(gate.start_ns, ts - LOOKBACK_NS)
            gate.until_ns = max(gate.until_ns, ts + HOLD_NS)
        if opened:
            for batch in self._batches:
                self._log_batch(batch, opened)
        for ev in resends:
            gate = self._gates.get(self._gate_key(ev.conn_key, ev.direction))
            if gate is None or not gate.start_ns <= ev.ts_ns <= gate.until_ns:
                continue
            kind = SPURIOUS if ev.kind == "spurious_retransmission" else RETRANSMISSION
            self._rows_of(ev.conn_key).add(
                np.array([ev.direction], np.int8), np.array([ev.ts_ns], np.int64),
                np.array([ev.seq], np.int64), np.array([ev.bytes], np.int64), np.array([kind], np.int8),
            )

    def _add_batch(self, chunks: list, last_ns: int) -> None:
        """Retain a batch for the lookback; log it in the open gates; expire gates."""
        if any(type(c) is ChunkRun for c in chunks):
            # keep the runs' columns, not their batch buffers (bounded memory)
            chunks = [_RunCols(c.conn_key, c.rows) if type(c) is ChunkRun else c for c in chunks]
        batch = _Batch(chunks, last_ns)
        self._batches.append(batch)
        if len(self._batches) > RETAIN_BATCHES:
            del self._batches[0]
        if self._gates:
            self._log_batch(batch, None)
            self._gates = {k: g for k, g in self._gates.items() if g.until_ns >= last_ns}

    # -- outputs --------------------------------------------------------------------
    def pending(self, conn_key: int) -> int:
        rows = self._rows.get(conn_key)
        return 0 if rows is None else rows.count

    def take(self, conn_key: int) -> tuple[np.ndarray, ...] | None:
        """(direction, ts, seq, bytes, kind) rows of a connection, in time order, or None."""
        rows = self._rows.pop(conn_key, None)
        if rows is None or rows.count == 0:
            return None
        cols = [np.concatenate(c) for c in (rows.direction, rows.ts, rows.seq, rows.size, rows.kind)]
        order = np.argsort(cols[1], kind="stable")
        return tuple(c[order] for c in cols)

    def forget(self, conn_key: int) -> None:
        """The connection closed (after :meth:`take`)."""
        self._paths.pop(conn_key, None)
        for cd in (conn_key * 2, conn_key * 2 + 1):
            self._logged_ns.pop(cd, None)

    # -- inside ---------------------------------------------------------------------
    def _gate_key(self, conn_key: int, direction: int) -> tuple:
        if conn_key not in self._paths:
            self._paths[conn_key] = self._path_of(conn_key)
        path = self._paths[conn_key]
        if path is None:
            return ("conn", conn_key, direction)
        client, server = path
        return (client, server) if direction == 0 else (server, client)

    def _rows_of(self, conn_key: int) -> _Rows:
        rows = self._rows.get(conn_key)
        if rows is None:
            rows = self._rows[conn_key] = _Rows()
        return rows

    def _log_batch(self, batch: _Batch, gates: dict[tuple, _Gate] | None) -> None:
        """Log the batch's segments that fall in an open gate (in ``gates`` when given)."""
        gates = self._gates if gates is None else gates
        cd, ts, seq, size = batch.columns()
        uc, inv = batch.cd_groups()
        lo = np.full(len(uc), np.iinfo(np.int64).max, np.int64)
        hi = np.full(len(uc), -1, np.int64)
        for i, c in enumerate(uc.tolist()):
            gate = gates.get(self._gate_key(c >> 1, c & 1))
            if gate is not None:
                lo[i] = max(gate.start_ns - 1, self._logged_ns.get(c, -1))
                hi[i] = gate.until_ns
        sel = np.flatnonzero((ts > lo[inv]) & (ts <= hi[inv]))
        if not len(sel):
            return
        # grouped by connection direction with one stable sort (each group in batch
        # order), not a pass over every selected row per connection direction
        cds = cd[sel]
        order = np.argsort(cds, kind="stable")
        sel, cds = sel[order], cds[order]
        cuts = (np.flatnonzero(cds[1:] != cds[:-1]) + 1).tolist()
        starts, stops = [0, *cuts], [*cuts, len(sel)]
        for c, a, z in zip(cds[starts].tolist(), starts, stops, strict=True):
            part = sel[a:z]
            self._logged_ns[c] = int(ts[part].max())
            n = len(part)
            self._rows_of(c >> 1).add(
                np.full(n, c & 1, np.int8), ts[part], seq[part], size[part], np.zeros(n, np.int8)
            )
