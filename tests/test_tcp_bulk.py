"""The bulk (numpy) path must give exactly what the per-packet path gives."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from tcp_builders import analyze, batches_of, concat_batches, decode_file

from parsers.tcp import _analyzer

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = Path("/work/shared/captures")
sys.path.insert(0, str(ROOT / "bench"))
from bench_tcp import synth  # noqa: E402


def _norm(r):
    chunks = {}
    for c in r.chunks:
        chunks.setdefault((c.conn_key, c.direction), []).append(
            (c.data, c.ts_ns, c.frame_no, c.stream_offset, c.gap_before)
        )
    events = sorted(dataclasses.astuple(e) for e in r.events)
    rtts = sorted(dataclasses.astuple(s) for s in r.rtts)
    sums = []
    for s in sorted(r.summaries, key=lambda s: s.conn_key):
        acks = [a.tolist() for p in s.ack_progress for a in p]
        sums.append((dataclasses.replace(s, ack_progress=None), acks))
    return chunks, events, rtts, sums


def _both_ways(monkeypatch, batches, batch_size=None):
    bulk = analyze(batches, batch_size=batch_size)
    with monkeypatch.context() as m:
        m.setattr(_analyzer, "FAST_MIN_ROWS", 10**9)
        per_packet = analyze(batches, batch_size=batch_size)
    assert per_packet.an.stats["fast_rows"] == 0
    return bulk, per_packet


CAPTURE_NAMES = sorted(p.name for p in CAPTURES.glob("*.pcap*")) if CAPTURES.is_dir() else []


@pytest.mark.skipif(not CAPTURE_NAMES, reason="captures not available")
def test_real_captures_same_result_both_paths(monkeypatch):
    fast_rows = 0
    for name in CAPTURE_NAMES:
        batches = decode_file(CAPTURES / name)
        bulk, per_packet = _both_ways(monkeypatch, batches)
        assert _norm(bulk) == _norm(per_packet), name
        fast_rows += bulk.an.stats["fast_rows"]
        small = analyze(concat_batches(batches), batch_size=29)
        assert _norm(small) == _norm(bulk), name
    assert fast_rows > 4000  # the bulk path did take part


@pytest.mark.parametrize("batch_size", [4096, 997])
def test_synthetic_traffic_same_result_both_paths(monkeypatch, batch_size):
    b = synth(30_000, 3)
    bulk, per_packet = _both_ways(monkeypatch, [b], batch_size=batch_size)
    assert _norm(bulk) == _norm(per_packet)
    st = bulk.an.stats
    assert st["fast_rows"] > 0.95 * st["segments"]
    # the synthetic losses: a hole upstream, SACKed dup ACKs, the retransmission
    k = bulk.kinds()
    assert k["lost_segment"] == k["fast_retransmission"] > 0 and set(k) == {
        "lost_segment",
        "fast_retransmission",
        "dup_ack",
    }
    assert {r.source for r in bulk.rtts} == {"handshake", "data_ack", "tsecr"}
    for s in bulk.summaries:
        assert s.retransmissions[0] == 0 and s.loss_bursts[1] == s.retransmissions[1] > 0
        assert len(bulk.data(1, s.conn_key)) == s.bytes[1]


def test_one_row_batches_through_the_bulk_path(monkeypatch):
    """Re-cut batches make the bulk path start and stop at every possible row."""
    b = synth(3_000, 2)
    whole = analyze(b)
    for size in (25, 48, 50, 64):
        assert _norm(analyze(batches_of(b, size))) == _norm(whole)
