"""A shaper seen from a capture point at the client (queries/shaper_evidence.sql).

There the sends are not seen, so the server-side test (busy deliveries under busy sends)
cannot run; what tells a shaper from a delay is how the queued packets come out: a delay,
however jittery, releases what it held back to back, a rate limit spaces it at its rate.
Two real sweep runs (seed 2, real kernel TCP through the lab's bridge, captured at the
client): a 445 kbit/s token-bucket shaper (samples/sweep/client_shaper, run 9), and a
54 ms +- 23 ms delay (samples/sweep/client_jitter, run 38). Before the pacing test the
shaper's window was read as queueing (15 of its 18 truth-slow requests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from telemetry.lab.sweep_score import score_run
from telemetry.models.db import connect
from telemetry.store.parquet import Store

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "sweep"


def _scored(tmp_path: Path, name: str) -> tuple[dict, Store]:
    sample = SAMPLES / name
    if not (sample / "capture.pcap").exists():
        pytest.fail(f"{sample} is missing: the sample is committed with the repository")
    run = tmp_path / name
    run.mkdir()
    for f in sample.iterdir():
        (run / f.name).symlink_to(f)
    score = score_run(run, store_dir=tmp_path / "store")
    return score, Store(tmp_path / "store")


def test_a_shaper_seen_from_the_client_is_the_shaper(tmp_path):
    score, store = _scored(tmp_path, "client_shaper")
    (window,) = score["windows"]
    assert window["slow"] >= 15
    assert window["dominant"] == "throttling/shaper" and window["ok"], window
    assert score["report_agrees"]
    con = connect(store)
    side = con.sql("SELECT DISTINCT capture_side FROM connections").fetchall()
    assert side == [("client",)]
    details = [d for (d,) in con.sql("SELECT throttle_detail FROM shaper_evidence").fetchall()]
    assert details and all(d.startswith("response packets paced at the client") for d in details)
    # the queue is reported beside the shaper: packets alone cannot tell it from a
    # bottleneck saturated by traffic the capture does not see
    both = con.sql("""
        SELECT count(*) FROM request_cause AS a JOIN request_cause AS b USING (conn_id, stream_id)
        WHERE a.cause = 'throttling' AND a.kind = 'shaper' AND b.cause = 'queueing'
    """).fetchall()[0][0]
    assert both >= window["slow"] * 0.8


def test_a_jittery_delay_seen_from_the_client_stays_queueing(tmp_path):
    score, store = _scored(tmp_path, "client_jitter")
    (window,) = score["windows"]
    assert window["slow"] >= 100
    assert window["dominant"] == "queueing" and window["ok"], window
    assert window["primaries"].get("throttling/shaper", 0) == 0
    con = connect(store)
    shaped = con.sql("""
        SELECT count(*) FROM request_cause WHERE cause = 'throttling' AND kind = 'shaper'
    """).fetchall()[0][0]
    # a few queued requests outside the window may meet no back-to-back arrivals; none of
    # the window's hundreds
    assert shaped <= 5
