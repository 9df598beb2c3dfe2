"""flow_rates: bytes and segments each TCP direction sent, and bytes acknowledged, per
100 ms bucket, folded batch by batch and written once capture time has moved past them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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

RATE_BUCKET_NS = 100_000_000  # a bucket: fine enough to see a shaper's ceiling
# buckets of an open connection are written once capture time has moved this far past
# them (a bucket must not get more bytes after its row was written)
RATE_HOLD_NS = 60 * 1_000_000_000
_EMPTY_I64 = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class Rates:
    """flow_rates buckets of one TCP direction not written yet, as sorted columns: bytes
    and segments sent (zero when none) and the highest acked offset (-1: no ACK progress
    in that bucket). A bucket is kept when it saw either."""

    bucket: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    sent_bytes: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    sent_pkts: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    acked: np.ndarray = field(default_factory=lambda: _EMPTY_I64)

    def __len__(self) -> int:
        return len(self.bucket)

    def counted(self) -> int:
        """Buckets with bytes sent plus buckets with ACK progress."""
        return int((self.sent_pkts > 0).sum()) + int((self.acked >= 0).sum())

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
        k = len(self.bucket)
        if k and bucket[0] < self.bucket[-1]:
            self._fold(bucket, sent_bytes, sent_pkts, acked)
            return
        # the usual case, time going forward: append, the first bucket maybe onto the last
        same = int(k > 0 and bucket[0] == self.bucket[-1])
        self.bucket = np.concatenate((self.bucket, bucket[same:]))
        sb = np.concatenate((self.sent_bytes, sent_bytes[same:]))
        sp = np.concatenate((self.sent_pkts, sent_pkts[same:]))
        ac = np.concatenate((self.acked, acked[same:]))
        if same:  # (fresh arrays: the inputs may share memory)
            sb[k - 1] += sent_bytes[0]
            sp[k - 1] += sent_pkts[0]
            ac[k - 1] = max(ac[k - 1], acked[0])
        self.sent_bytes, self.sent_pkts, self.acked = sb, sp, ac

    def _fold(self, bucket: np.ndarray, sent_bytes: np.ndarray, sent_pkts: np.ndarray, acked: np.ndarray) -> None:
        """:meth:`add` for rows in any order: sort everything, reduce per bucket."""
        b = np.concatenate((self.bucket, bucket))
        order = np.argsort(b, kind="stable")
        b = b[order]
        starts = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
        self.bucket = b[starts]
        self.sent_bytes = np.add.reduceat(np.concatenate((self.sent_bytes, sent_bytes))[order], starts)
        self.sent_pkts = np.add.reduceat(np.concatenate((self.sent_pkts, sent_pkts))[order], starts)
        self.acked = np.maximum.reduceat(np.concatenate((self.acked, acked))[order], starts)

    def take(self, upto: int | None) -> Rates:
        """Remove and return the buckets before ``upto`` (all of them: None)."""
        k = len(self.bucket) if upto is None else int(np.searchsorted(self.bucket, upto, side="left"))
        out = Rates(self.bucket[:k], self.sent_bytes[:k], self.sent_pkts[:k], self.acked[:k])
        self.bucket, self.sent_bytes = self.bucket[k:], self.sent_bytes[k:]
        self.sent_pkts, self.acked = self.sent_pkts[k:], self.acked[k:]
        return out


def count_sent(chunks: list) -> dict[int, tuple[np.ndarray, ...]]:
    """flow_rates bytes/segments sent per connection direction and bucket, in bulk:
    conn key * 2 + TCP direction -> (bucket, bytes, segments, -1) rows, by bucket."""
    runs = [c for c in chunks if type(c) is ChunkRun]
    singles = [c for c in chunks if type(c) is not ChunkRun] if len(runs) < len(chunks) else []
    parts = [run_sent(runs)] if runs else []
    if singles:
        parts.append(chunk_sent(singles))
    cd, buckets, nbytes, npkts = concat_columns(parts)
    if not len(cd):
        return {}
    order = np.argsort(cd, kind="stable")
    cd, buckets = cd[order], buckets[order]
    # one row per stretch of equal (connection direction, bucket): summed here, for
    # every connection at once
    change = np.empty(len(cd), dtype=bool)
    change[:1] = True
    change[1:] = (cd[1:] != cd[:-1]) | (buckets[1:] != buckets[:-1])
    starts = np.flatnonzero(change)
    cd, buckets = cd[starts], buckets[starts]
    nbytes = np.add.reduceat(nbytes[order], starts)
    npkts = np.add.reduceat(npkts[order], starts)
    no_ack = np.full(len(cd), -1, dtype=np.int64)
    firsts = np.flatnonzero(np.concatenate(([True], cd[1:] != cd[:-1])))
    bounds = [*firsts.tolist(), len(cd)]
    return {
        k: (buckets[a:z], nbytes[a:z], npkts[a:z], no_ack[a:z])
        for k, a, z in zip(cd[firsts].tolist(), bounds[:-1], bounds[1:], strict=True)
    }


def run_sent(runs: list[ChunkRun]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(conn_key * 2 + direction, bucket, bytes, 1) per chunk of ChunkRuns, as columns."""
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
