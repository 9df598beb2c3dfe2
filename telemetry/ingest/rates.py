"""flow_rates: bytes and segments each TCP direction sent, and bytes acknowledged, per
100 ms bucket, folded batch by batch and written once capture time has moved past them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from parsers._native import speedups
from parsers.records import DIRECTION_NAMES, TO_CLIENT, TO_SERVER, ChunkRun, RunColumn
from telemetry.ingest.columns import TS, Part, coded_strings, concat_columns, id_columns
from telemetry.store.parquet import table_from_columns

if TYPE_CHECKING:
    from telemetry.ingest.state import Conn

# {(conn_key * 2 + direction, bucket): (bytes, chunks)} over PayloadChunks, in C (it
# lives in the h2 extension, which knows PayloadChunk's layout once parsers.h2 has loaded;
# it returns None otherwise, and so does this without the extension: then Python counts)
_sent_runs = getattr(speedups("parsers.h2"), "sent_runs", None)
# the same over ChunkRuns' rows, per run and direction over consecutive rows of a bucket
_run_sent = getattr(speedups("parsers.h2"), "run_sent", None)

RATE_BUCKET_NS = 100_000_000  # a bucket: fine enough to see a shaper's ceiling
# buckets of an open connection are written once capture time has moved this far past
# them (a bucket must not get more bytes after its row was written)
RATE_HOLD_NS = 60 * 1_000_000_000
_EMPTY_I64 = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class RateRows:
    """flow_rates buckets as sorted columns: bytes and segments sent (zero when none) and
    the highest acked offset (-1: no ACK progress in that bucket)."""

    bucket: np.ndarray
    sent_bytes: np.ndarray
    sent_pkts: np.ndarray
    acked: np.ndarray

    def __len__(self) -> int:
        return len(self.bucket)


class Rates:
    """flow_rates buckets of one TCP direction not written yet (:class:`RateRows` when
    taken). A bucket is kept when it saw either bytes sent or ACK progress.

    Held as runs of rows in bucket order, each run's buckets after the last one's: a
    batch's rows are appended, not copied into everything held before (a connection
    holds up to RATE_HOLD_NS of buckets), and the count of buckets with something is kept
    as they come (the pipeline asks for it every batch)."""

    __slots__ = ("_runs", "_counted")

    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._counted = 0

    def __len__(self) -> int:
        return sum(len(r[0]) for r in self._runs)

    def counted(self) -> int:
        """Buckets with bytes sent plus buckets with ACK progress."""
        return self._counted

    def add(self, bucket: np.ndarray, sent_bytes: np.ndarray, sent_pkts: np.ndarray, acked: np.ndarray) -> None:
        """Fold rows in (any order, repeated buckets allowed): sums sent, max acked."""
        n = len(bucket)
        if n > 1:
            step = bucket[1:] - bucket[:-1]
            if (step < 0).any():
                self._fold(bucket, sent_bytes, sent_pkts, acked)
                return
            if not step.all():  # repeats, next to each other: one row per bucket
                starts = np.flatnonzero(np.concatenate(([True], step != 0)))
                bucket = bucket[starts]
                sent_bytes = np.add.reduceat(sent_bytes, starts)
                sent_pkts = np.add.reduceat(sent_pkts, starts)
                acked = np.maximum.reduceat(acked, starts)
        elif not n:
            return
        self.add_distinct(bucket, sent_bytes, sent_pkts, acked)

    def add_distinct(self, bucket: np.ndarray, sent_bytes: np.ndarray, sent_pkts: np.ndarray,
                     acked: np.ndarray) -> None:  # fmt: skip
        """:meth:`add` for rows of distinct buckets in order (at least one)."""
        first = int(bucket[0])
        last = int(self._runs[-1][0][-1]) if self._runs else None  # the last bucket held
        if last is not None and first <= last:
            if first < last:
                self._fold(bucket, sent_bytes, sent_pkts, acked)
                return
            # the usual case, time going forward: the first bucket adds onto the last held
            # (fresh arrays: the inputs may share memory)
            _b, held_bytes, held_pkts, held_acked = self._pop_last()
            sent_bytes, sent_pkts, acked = sent_bytes.copy(), sent_pkts.copy(), acked.copy()
            sent_bytes[0] += held_bytes
            sent_pkts[0] += held_pkts
            if held_acked > acked[0]:
                acked[0] = held_acked
        self._append((bucket, sent_bytes, sent_pkts, acked))

    def _append(self, run: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
        self._runs.append(run)
        self._counted += int(np.count_nonzero(run[2] > 0)) + int(np.count_nonzero(run[3] >= 0))

    def _pop_last(self) -> tuple[int, int, int, int]:
        """Remove the last bucket held; returns its row."""
        bucket, sent_bytes, sent_pkts, acked = self._runs[-1]
        row = (int(bucket[-1]), int(sent_bytes[-1]), int(sent_pkts[-1]), int(acked[-1]))
        self._counted -= (row[2] > 0) + (row[3] >= 0)
        if len(bucket) > 1:
            self._runs[-1] = (bucket[:-1], sent_bytes[:-1], sent_pkts[:-1], acked[:-1])
        else:
            self._runs.pop()
        return row

    def _held(self) -> RateRows:
        """Everything held, as one set of columns (kept as the one run)."""
        runs = self._runs
        if not runs:
            return RateRows(_EMPTY_I64, _EMPTY_I64, _EMPTY_I64, _EMPTY_I64)
        if len(runs) > 1:
            runs[:] = [concat_columns(runs)]
        return RateRows(*runs[0])

    def _fold(self, bucket: np.ndarray, sent_bytes: np.ndarray, sent_pkts: np.ndarray, acked: np.ndarray) -> None:
        """:meth:`add` for rows in any order: sort everything, reduce per bucket."""
        held = self._held()
        b = np.concatenate((held.bucket, bucket))
        order = np.argsort(b, kind="stable")
        b = b[order]
        starts = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
        self._runs, self._counted = [], 0
        self._append((b[starts],
                      np.add.reduceat(np.concatenate((held.sent_bytes, sent_bytes))[order], starts),
                      np.add.reduceat(np.concatenate((held.sent_pkts, sent_pkts))[order], starts),
                      np.maximum.reduceat(np.concatenate((held.acked, acked))[order], starts)))

    def take(self, upto: int | None) -> RateRows:
        """Remove and return the buckets before ``upto`` (all of them: None)."""
        held = self._held()
        k = len(held) if upto is None else int(np.searchsorted(held.bucket, upto, side="left"))
        out = RateRows(held.bucket[:k], held.sent_bytes[:k], held.sent_pkts[:k], held.acked[:k])
        self._runs, self._counted = [], 0
        if k < len(held):
            self._append((held.bucket[k:], held.sent_bytes[k:], held.sent_pkts[k:], held.acked[k:]))
        return out


def sent_rows(chunks: list) -> tuple[np.ndarray, ...] | None:
    """flow_rates bytes/segments sent of a batch's chunks, as (conn key * 2 + TCP
    direction, bucket, bytes, segments, -1) rows, one per direction and bucket, in that
    order (None: no chunks)."""
    runs = [c for c in chunks if type(c) is ChunkRun]
    singles = [c for c in chunks if type(c) is not ChunkRun] if len(runs) < len(chunks) else []
    parts = [run_sent(runs)] if runs else []
    if singles:
        parts.append(chunk_sent(singles))
    if not parts:
        return None
    cols = concat_columns(parts) if len(parts) > 1 else parts[0]
    # one row per (direction, bucket) already: what note_rates sorts again is then a
    # bucket's worth of rows per connection direction, not a chunk's (less memory at once)
    return _by_bucket((*cols, np.full(len(cols[0]), -1, dtype=np.int64)))


def _by_bucket(rows: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """(direction key, bucket, bytes, segments, acked offset) rows sorted by direction key
    and bucket, one per (direction key, bucket): bytes and segments summed, the largest
    acked offset."""
    cd, buckets, nbytes, npkts, acked = rows
    order = np.lexsort((buckets, cd))
    cd, buckets = cd[order], buckets[order]
    change = np.empty(len(cd), dtype=bool)
    change[:1] = True
    change[1:] = (cd[1:] != cd[:-1]) | (buckets[1:] != buckets[:-1])
    starts = np.flatnonzero(change)
    return (cd[starts], buckets[starts], np.add.reduceat(nbytes[order], starts),
            np.add.reduceat(npkts[order], starts), np.maximum.reduceat(acked[order], starts))  # fmt: skip


def note_rates(conns: Mapping[int, Conn], ack_progress: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
               sent: tuple[np.ndarray, ...] | None = None) -> None:  # fmt: skip
    """Fold into each connection's flow_rates buckets its ACK progress not seen yet
    (``ack_progress(conn key, TCP direction)``: ACK times and acked offsets, both
    non-decreasing) and ``sent`` (:func:`sent_rows`), for all the connections at once:
    one sort of the batch's rows, then one :meth:`Rates.add_distinct` per connection
    direction with rows (numpy calls per connection cost ~100 us, more than the rows)."""
    keys: list[int] = []
    times: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    for key, conn in conns.items():
        seen_ns = conn.ack_seen_ns
        for tcp_dir in (TO_SERVER, TO_CLIENT):
            ts, off = ack_progress(key, tcp_dir)
            if not len(ts) or ts[-1] <= seen_ns[tcp_dir]:
                continue  # nothing new in this direction
            start = int(np.searchsorted(ts, seen_ns[tcp_dir], side="right"))
            keys.append(key * 2 + tcp_dir)
            times.append(ts[start:])
            offsets.append(off[start:])
            seen_ns[tcp_dir] = int(ts[-1])
    parts = [] if sent is None else [sent]
    if keys:
        cd = np.repeat(np.array(keys, dtype=np.int64), [len(t) for t in times])
        buckets = np.concatenate(times) // RATE_BUCKET_NS
        # the last entry of each (direction, bucket) holds its highest offset
        last = np.flatnonzero(np.append((cd[1:] != cd[:-1]) | (buckets[1:] != buckets[:-1]), True))
        zeros = np.zeros(len(last), dtype=np.int64)
        parts.append((cd[last], buckets[last], zeros, zeros, np.concatenate(offsets)[last].astype(np.int64)))
    if not parts:
        return
    if sent is None:  # the ACK rows alone: grouped by direction, each in bucket order
        cd, buckets, nbytes, npkts, acked = parts[0]
    else:
        cd, buckets, nbytes, npkts, acked = _by_bucket(concat_columns(parts) if len(parts) > 1 else sent)
    firsts = np.flatnonzero(np.concatenate(([True], cd[1:] != cd[:-1])))
    bounds = [*firsts.tolist(), len(cd)]
    for k, a, z in zip(cd[firsts].tolist(), bounds[:-1], bounds[1:], strict=True):
        conn = conns.get(k >> 1)
        if conn is not None:
            conn.rates[k & 1].add_distinct(buckets[a:z], nbytes[a:z], npkts[a:z], acked[a:z])


def run_sent(runs: list[ChunkRun]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(conn_key * 2 + direction, bucket, bytes, segments) of ChunkRuns' chunks, as
    columns: a row per chunk, or (in C) per run of a direction's consecutive chunks in one
    bucket; :func:`_by_bucket` sums either to the same rows."""
    if _run_sent is not None:
        sums = np.frombuffer(_run_sent(runs, RATE_BUCKET_NS), dtype=np.int64).reshape(-1, 4)
        return sums[:, 0], sums[:, 1], sums[:, 2], sums[:, 3]
    rows = np.concatenate([r.rows for r in runs]) if len(runs) > 1 else runs[0].rows
    keys = np.concatenate([np.full(len(r), r.conn_key * 2, dtype=np.int64) for r in runs])
    return (keys + rows[:, RunColumn.DIRECTION], rows[:, RunColumn.TS_NS] // RATE_BUCKET_NS,
            rows[:, RunColumn.END] - rows[:, RunColumn.START], np.ones(len(rows), dtype=np.int64))


def chunk_sent(chunks: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`run_sent` gives, for PayloadChunks (summed per group where the C
    extension does it)."""
    totals = _sent_runs(chunks, RATE_BUCKET_NS) if _sent_runs is not None else None
    if totals is None:
        cd = np.array([c.conn_key * 2 + c.direction for c in chunks], dtype=np.int64)
        buckets = np.array([c.ts_ns for c in chunks], dtype=np.int64) // RATE_BUCKET_NS
        lens = np.array([len(c.data) for c in chunks], dtype=np.int64)
        return cd, buckets, lens, np.ones(len(chunks), dtype=np.int64)
    keys = np.array(list(totals.keys()), dtype=np.int64).reshape(-1, 2)
    vals = np.array(list(totals.values()), dtype=np.int64).reshape(-1, 2)
    return keys[:, 0], keys[:, 1], vals[:, 0], vals[:, 1]


def flow_rates_rows(conn: Conn, upto: int | None = None, final: bool = True) -> list[tuple[np.ndarray, ...]]:
    """A connection's flow_rates rows to write: every bucket when ``final``, else those
    before bucket ``upto`` (none when it is None), per TCP direction with rows, as (ts ns,
    direction code, bytes sent, segments sent, bytes acked) columns."""
    parts: list[tuple[np.ndarray, ...]] = []
    if not final and upto is None:
        return parts
    for tcp_dir in (TO_SERVER, TO_CLIENT):
        rates = conn.rates[tcp_dir]
        if not len(rates):
            continue
        done = rates.take(None if final else upto)
        n = len(done)
        if not n:
            continue
        # bytes_acked: a bucket's highest acked offset minus the previous bucket's that
        # had one (carried over from rows already written), never negative
        has = done.acked >= 0
        values = done.acked[has]
        delta = np.zeros(n, dtype=np.int64)
        if len(values):
            prev = np.empty(len(values), dtype=np.int64)
            prev[1:] = values[:-1]
            carried = conn.prev_acked[tcp_dir]
            prev[0] = carried if carried is not None else 0
            delta[has] = np.maximum(values - prev, 0)
            conn.prev_acked[tcp_dir] = int(values[-1])
        code = np.full(n, tcp_dir ^ conn.flip, dtype=np.int64)
        parts.append((done.bucket * RATE_BUCKET_NS, code, done.sent_bytes, done.sent_pkts, delta))
    return parts


def flow_rates_table(capture_id: str, parts: Sequence[Part]) -> pa.Table:
    """Parts' rows: :func:`flow_rates_rows` lists of columns (their directions already the
    session's), concatenated once for all the parts."""
    ts, direction, sent, packets, acked = concat_columns([cols for p in parts for cols in p.rows])
    return table_from_columns("flow_rates", {
        **id_columns(capture_id, parts),
        "ts": pa.array(ts, TS),
        "direction": coded_strings(direction, DIRECTION_NAMES),
        "bytes_sent": pa.array(sent, pa.int64()),
        "packets_sent": pa.array(packets, pa.int64()),
        "bytes_acked": pa.array(acked, pa.int64()),
        "bucket_ms": pa.array(np.full(len(ts), RATE_BUCKET_NS // 1_000_000, dtype=np.int32)),
    })
