"""A capture split between two processes by connection (IngestOptions.processes=2, `analyze
-j 2`) stores exactly the rows one process stores: every table, compared row by row, on
lossy lab samples (the send log's gates span connections), on real captures, and through
the CLI on a capture big enough to be split by default."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from shared_paths import CAPTURES

from telemetry.ingest import IngestOptions, ingest_file
from telemetry.ingest import split as ingest_split
from telemetry.ingest.lockstep import PeerGone, fork_pair
from telemetry.store.parquet import Store
from telemetry.store.schema import TABLES

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
TAILTAP = shutil.which("tailtap", path=str(Path(sys.executable).parent)) or "tailtap"
VOLATILE = {"ingest_time", "path"}


def table_rows(store_dir: Path) -> dict[str, list[str]]:
    """Every table's rows as sorted JSON lines (file layout and row order aside)."""
    out = {}
    for table in TABLES:
        rows = []
        for f in sorted((store_dir / table).glob("**/*.parquet")):
            t = pq.read_table(f)
            t = t.select([c for c in t.column_names if c not in VOLATILE | {"date", "hour"}])
            for i, f in enumerate(t.schema):
                if pa.types.is_timestamp(f.type):  # ns times do not fit datetime
                    t = t.set_column(i, f.name, t.column(i).cast(pa.int64()))
            rows += [json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist()]
        out[table] = sorted(rows)
    return out


def ingest_both(capture: Path, tmp_path: Path, monkeypatch) -> tuple[dict, dict, Store]:
    monkeypatch.setattr(ingest_split, "SPLIT_MIN_BYTES", 0)  # split however small
    one, two = Store(tmp_path / "one"), Store(tmp_path / "two")
    r1 = ingest_file(capture, one, IngestOptions(processes=1))
    r2 = ingest_file(capture, two, IngestOptions(processes=2))
    assert r1.error is None and r2.error is None
    assert (r1.packets, r1.connections, r1.requests) == (r2.packets, r2.connections, r2.requests)
    assert sorted(i.kind for i in r1.issues) == sorted(i.kind for i in r2.issues)
    return table_rows(one.root), table_rows(two.root), two


@pytest.mark.parametrize("sample", ["loss_burst", "throttle_policer", "mixed", "baseline"])
def test_split_sample_stores_the_same_rows(sample, tmp_path, monkeypatch):
    one, two, store = ingest_both(SAMPLES / sample / "capture.pcap", tmp_path, monkeypatch)
    assert one == two
    assert len(one["connections"]) >= 2  # both processes had connections
    # the child's share is in the store under its own file names, committed with the parent's
    assert list(store.root.glob("connections/**/*-p1-*.parquet"))
    if sample != "baseline":
        assert one["segment_sends"], "lossy sample: the send log's gates were exercised"


@pytest.mark.parametrize("name", ["grpc-go_bidi_streaming.pcapng", "http2-h2c.pcap", "tcp_smtp_retrans_ooo.pcap"])
def test_split_real_capture_stores_the_same_rows(name, tmp_path, monkeypatch):
    capture = CAPTURES / name
    if not capture.exists():
        pytest.skip(f"{capture} not present")
    one, two, _ = ingest_both(capture, tmp_path, monkeypatch)
    assert one == two


def test_loss_bursts_are_numbered_within_their_connection(tmp_path):
    store = Store(tmp_path / "s")
    assert ingest_file(SAMPLES / "loss_burst" / "capture.pcap", store, IngestOptions()).error is None
    events = pq.read_table(store.root / "tcp_events", columns=["conn_id", "burst_id"]).to_pylist()
    per_conn: dict[str, set[int]] = {}
    for e in events:
        if e["burst_id"] is not None:
            per_conn.setdefault(e["conn_id"], set()).add(e["burst_id"])
    assert len(per_conn) >= 2
    # 1, 2, ... in every connection (a burst found spurious in the end leaves a gap); ids
    # counted across the capture would go on from the previous connection's
    for ids in per_conn.values():
        assert max(ids) <= len(ids) + 2
    assert any(min(ids) == 1 for ids in per_conn.values())


def test_cli_splits_a_big_capture_by_default(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from gen_grpc_capture import write_capture

    capture = tmp_path / "big.pcap"
    write_capture(str(capture), 160_000)  # ~18 MiB: above the split threshold
    assert capture.stat().st_size >= ingest_split.SPLIT_MIN_BYTES
    env = {**os.environ, "NO_COLOR": "1"}
    runs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"store{jobs}"
        p = subprocess.run([TAILTAP, "analyze", str(capture), "--out", str(out), "--no-report", "-j", jobs],
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        assert "160,000 packets, 8 connections" in p.stderr
        runs[jobs] = table_rows(out)
    assert runs["1"] == runs["2"]
    assert list((tmp_path / "store2").glob("messages/**/*-p1-*.parquet"))
    assert not (tmp_path / "store2" / ".staging").exists()


def test_lockstep_exchange_large_messages_and_peer_gone():
    peer = fork_pair()
    if peer.index == 1:
        try:
            got = peer.exchange(b"c" * 300_000)  # larger than a pipe buffer, both ways
            peer.send(len(got))
        finally:
            os._exit(0)
    try:
        assert peer.exchange(b"p" * 500_000) == b"c" * 300_000
        assert peer.receive() == 500_000
        with pytest.raises(PeerGone):  # the child has exited: no hang
            peer.exchange("more")
    finally:
        os.waitpid(peer.child_pid, 0)
        peer.close()


def test_default_processes_split_a_file_from_four_cores(monkeypatch):
    from telemetry.cli import analyze

    for cores, expected in ((1, (1, 1)), (2, (2, 1)), (4, (4, 2)), (16, (16, 2))):
        monkeypatch.setattr(analyze.os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert analyze._processes(None) == expected
    assert analyze._processes(1) == (1, 1)
    assert analyze._processes(3) == (3, 2)  # -j: files at once; a single file in two
