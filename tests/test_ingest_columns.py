"""The pipeline's column builders over the TCP layer's column records (RttRun,
ChunkRun) give what the one-object-per-row records give."""

from __future__ import annotations

import numpy as np

from parsers.records import ChunkRun, PayloadChunk, RttRun, RttSample, expand_rtts, expand_runs
from telemetry.ingest import _rtt_columns, _run_sent, _sent_runs_py


def test_rtt_columns_mix_runs_and_samples_in_order():
    items = [
        RttSample(5, 1, 0, 0.5, "handshake"),
        RttRun(1, 1, np.array([7, 9], np.int64), np.array([1.25, 2.5]), "data_ack"),
        RttSample(10, 1, 1, 3.0, "tsecr"),
        RttSample(11, 1, 0, 4.0, "data_ack"),
        RttRun(1, 0, np.array([12], np.int64), np.array([0.125]), "tsecr"),
    ]
    flat = expand_rtts(items)
    ts, dirs, rtt, src = _rtt_columns(items)
    assert ts.tolist() == [s.ts_ns for s in flat] == [5, 7, 9, 10, 11, 12]
    assert dirs.tolist() == [s.direction for s in flat]
    assert rtt.tolist() == [s.rtt_ms for s in flat]
    assert src.tolist() == [s.source for s in flat]


def test_run_sent_counts_like_chunks():
    buf = np.arange(256, dtype=np.uint8)
    rows = np.array(
        [[0, 1_000, 1, 0, 0, 10], [1, 50_000_000, 2, 0, 10, 30], [0, 150_000_000, 3, 10, 30, 31]],
        np.int64,
    )
    runs = [ChunkRun(3, rows, buf), ChunkRun(4, rows[:2].copy(), buf)]
    chunks: list[PayloadChunk] = expand_runs(runs)  # type: ignore[arg-type]
    assert sorted(_run_sent(runs)) == sorted(_sent_runs_py(chunks))
    assert chunks[1].data == bytes(range(10, 30)) and chunks[2].stream_offset == 10
