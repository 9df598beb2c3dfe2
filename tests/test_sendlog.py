"""The loss-gated send log (telemetry/ingest/sendlog.py) on hand-made chunks and events: nothing
is logged without a retransmission; a retransmission logs its path direction from
LOOKBACK_NS before it (as far as the retained batches go) to HOLD_NS after the last one,
every connection of the path, each segment once; spurious retransmissions open nothing."""

from __future__ import annotations

from dataclasses import dataclass

from telemetry.ingest.sendlog import HOLD_NS, LOOKBACK_NS, SendLog

MS = 1_000_000


@dataclass
class Chunk:
    conn_key: int
    direction: int
    data: bytes
    ts_ns: int
    stream_offset: int


@dataclass
class Event:
    ts_ns: int
    conn_key: int
    direction: int
    kind: str
    seq: int
    bytes: int


PATHS = {1: ("10.0.0.1", "10.0.0.2"), 2: ("10.0.0.1", "10.0.0.2"), 3: ("10.0.0.9", "10.0.0.2")}


def _batch(t0: int, n: int, step: int = 10 * MS) -> list[Chunk]:
    """n segments of 100 bytes on each of the three connections, server -> client."""
    return [Chunk(k, 1, b"x" * 100, t0 + i * step, i * 100) for i in range(n) for k in (1, 2, 3)]


def _rows(log: SendLog, key: int):
    got = log.take(key)
    return [] if got is None else list(zip(*(c.tolist() for c in got), strict=True))


def test_nothing_without_loss():
    log = SendLog(PATHS.get)
    log.note_chunks(_batch(0, 100))
    log.note_events([Event(500 * MS, 1, 1, "spurious_retransmission", 0, 100), Event(5 * MS, 1, 1, "dup_ack", 0, 0)])
    log.note_chunks(_batch(1000 * MS, 100))
    assert all(log.take(k) is None for k in PATHS)


def test_gate_covers_the_path_around_its_losses():
    log = SendLog(PATHS.get)
    t_loss = 4000 * MS
    log.note_chunks(_batch(0, 300))  # 0 .. 3 s, before the loss: kept for the lookback
    log.note_chunks(_batch(3000 * MS, 100))
    log.note_events([Event(t_loss, 1, 1, "fast_retransmission", 100, 100)])
    log.note_chunks(_batch(t_loss, 200))  # 4 .. 6 s: logged
    log.note_chunks(_batch(t_loss + HOLD_NS + 10 * MS, 10))  # after the hold: not logged
    for key in (1, 2):  # the lossy connection and the other one of its path
        rows = _rows(log, key)
        new = [r for r in rows if r[4] == 0]
        assert min(r[1] for r in new) >= t_loss - LOOKBACK_NS
        assert min(r[1] for r in new) <= t_loss - LOOKBACK_NS + 10 * MS
        assert max(r[1] for r in new) <= t_loss + HOLD_NS
        assert len({r[1] for r in new}) == len(new)  # each segment once
        assert all(r[0] == 1 for r in rows)
        assert [r[1:] for r in rows if r[4] != 0] == ([(t_loss, 100, 100, 1)] if key == 1 else [])
    assert log.take(3) is None  # another path


def test_reopened_gate_logs_each_segment_once():
    log = SendLog(PATHS.get)
    log.note_chunks(_batch(0, 100))  # 0 .. 1 s
    log.note_events([Event(500 * MS, 1, 1, "rto_retransmission", 0, 100)])  # logs to 3.5 s
    log.note_chunks(_batch(3000 * MS, 100))  # 3 .. 4 s: up to 3.5 s logged, then the gate closes
    log.note_events([Event(3900 * MS, 1, 1, "retransmission", 10000, 100)])  # reopens from 0.9 s
    rows = [r for r in _rows(log, 1) if r[4] == 0]
    assert len(rows) == len({r[1] for r in rows}) == 200


def test_chunk_runs_log_like_their_chunks():
    """The TCP bulk path's ChunkRun columns (mixed with single chunks) log the same rows
    as the PayloadChunks they stand for."""
    import numpy as np

    from parsers.records import ChunkRun, PayloadChunk, expand_runs

    buf = np.zeros(100 * 200, np.uint8)

    def batch(t0: int, n: int) -> list:
        out: list = []
        for k in (1, 2, 3):
            rows = np.array(
                [[1, t0 + i * 10 * MS, i, i * 100, i * 100, i * 100 + 100] for i in range(n)], np.int64
            )
            out.append(ChunkRun(k, rows[: n // 2], buf))
            out += [PayloadChunk(k, 1, b"x" * 100, int(r[1]), int(r[2]), int(r[3])) for r in rows[n // 2 :]]
        return out

    logs = []
    for runs in (True, False):
        log = SendLog(PATHS.get)
        for t0, n in ((0, 300), (3000 * MS, 100), (4000 * MS, 200)):
            b = batch(t0, n)
            log.note_chunks(b if runs else expand_runs(b))
            if t0 == 4000 * MS:
                log.note_events([Event(t0 + 5 * MS, 1, 1, "retransmission", 0, 100)])
        logs.append([_rows(log, k) for k in (1, 2, 3)])
    assert logs[0] == logs[1] and logs[0][0] and logs[0][1] and not logs[0][2]


def test_connection_groups_as_numpy_unique_gives_them():
    """A batch's rows grouped by connection and direction without sorting them (a table
    over the keys' range when it is dense) come out as np.unique(return_inverse) has them."""
    import numpy as np

    from telemetry.ingest.sendlog import _Batch

    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 3000))
        spread = int(rng.choice([4, 1_000, 10**8]))  # a few connections, many, keys far apart
        cd = (int(rng.integers(0, 10**6)) + rng.integers(0, spread, n)).astype(np.int64)
        got = _Batch([], 0, (cd, cd, cd, cd)).cd_groups()
        want = np.unique(cd, return_inverse=True)
        assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want, strict=True))


def test_batch_columns_keep_the_chunks_order():
    """A batch's cd/ts/seq/bytes columns, runs read in one concatenation and put in place,
    single chunks likewise: row for row what each chunk gives in turn, for any mix."""
    import numpy as np

    from parsers.records import PayloadChunk
    from telemetry.ingest.sendlog import _columns, _RunCols

    rng = np.random.default_rng(11)
    for _ in range(300):
        chunks: list = []
        want: list[tuple[int, int, int, int]] = []
        for _ in range(int(rng.integers(0, 12))):
            key, d = int(rng.integers(1, 5)), int(rng.integers(0, 2))
            if rng.random() < 0.5:
                n = int(rng.integers(0, 6))
                ts, seq = rng.integers(0, 10**9, n), rng.integers(0, 10**6, n)
                size = rng.integers(1, 1500, n)
                rows = np.column_stack([np.full(n, d), ts, np.zeros(n), seq, np.zeros(n), size]).astype(np.int64)
                chunks.append(_RunCols(key, rows.reshape(n, 6)))
                want += [(key * 2 + d, int(t), int(s), int(z)) for t, s, z in zip(ts, seq, size, strict=True)]
            else:
                t, s, z = int(rng.integers(0, 10**9)), int(rng.integers(0, 10**6)), int(rng.integers(1, 50))
                chunks.append(PayloadChunk(key, d, b"x" * z, t, 0, s))
                want.append((key * 2 + d, t, s, z))
        got = _columns(chunks)
        assert all(c.dtype == np.int64 for c in got)
        assert list(zip(*(c.tolist() for c in got), strict=True)) == want
