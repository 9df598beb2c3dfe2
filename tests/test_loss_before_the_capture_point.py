"""Losses the capture point cannot see as holes (queries/request_evidence.sql's dark
stretches, queries/request_metrics.sql's holds and flushes) and the lab truth's recovered
effect end (telemetry/lab/truth.py), on real sweep captures of seed 3:

* ``samples/sweep/client_dark``: 25 s cut of run 48, captured at the client, bursty loss
  toward the client dropping only data packets: the server's data was lost whole and resent
  on backed-off timeouts for 14 s, with no hole at the client (the server's ACKs still came,
  numbered past the lost packets). Before: 182 of its window's 185 slow requests were
  blamed on the server.
* ``samples/sweep/stuck_resend``: 29 s cut of run 1, captured at the server, bursty loss
  toward the client on a 0.35 ms path, one connection: the server's resend lost again, its
  data stuck behind a timeout backed off to seconds while requests kept coming, until the
  client gave up (RST). Before: those requests were blamed on the server (a clean network:
  no loss event fell inside their span).
* ``samples/sweep/held_requests``: 8 s cut of run 4, captured at the server, loss toward
  the server: requests the client issued while its earlier bytes were resent on a timeout
  waited in its socket and left together after it. Before: estimated as fast as ever.
* ``samples/sweep/client_uplink_rto``: the whole of run 31 (tuning split), captured at both
  ends, loss toward the server read at the client: the client's bytes resent on timeouts
  backed off to 16 s, more than 250 calls held behind them, most after the window's
  labelled end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
from lab_samples import analyzed

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "sweep"


def _open(tmp_path_factory, name: str):
    """The sample analyzed into a fresh store, the client's own calls as table ``truth``."""
    if not (SAMPLES / name / "capture.pcap").exists():
        pytest.fail(f"{SAMPLES / name}/capture.pcap is missing: the sample is committed with the repository")
    return analyzed(tmp_path_factory.mktemp(name), f"sweep/{name}")


def _with_truth(con) -> list[tuple]:
    """(stream id, client's TTFT (its latency when it got no answer), tailtap's TTFT estimate,
    upstream_delay_ms, causes by delay) of every request the capture and the client's own
    log both have."""
    rows = con.sql("""
        SELECT m.stream_id, coalesce(t.ttft_ms, t.latency_ms), m.ttft_eff_ms, m.upstream_delay_ms,
            (SELECT list(c.cause ORDER BY c.delay_ms DESC, c.cause) FROM request_cause AS c
             WHERE c.conn_id = m.conn_id AND c.stream_id = m.stream_id) AS causes
        FROM request_metrics AS m
        JOIN requests AS r USING (conn_id, stream_id)
        JOIN truth AS t ON t.conn_local_port = r.client_port AND t.stream_id = m.stream_id
        WHERE coalesce(t.ttft_ms, t.latency_ms) IS NOT NULL
    """).fetchall()
    return [(sid, client, est, up, causes or []) for sid, client, est, up, causes in rows]


@pytest.fixture(scope="module")
def dark(tmp_path_factory):
    return _open(tmp_path_factory, "client_dark")


@pytest.fixture(scope="module")
def stuck(tmp_path_factory):
    return _open(tmp_path_factory, "stuck_resend")


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    return _open(tmp_path_factory, "held_requests")


def test_a_response_direction_gone_dark_is_the_loss(dark):
    rows = _with_truth(dark)
    blocked = [r for r in rows if r[1] > 1000]  # the client waited over a second
    assert len(blocked) >= 100
    # the capture point is at the client: its TTFT is seen about as the client saw it (a
    # few requests left the client later than it issued them)
    assert all(abs(est - ttft) <= 0.2 * ttft for _sid, ttft, est, _up, _c in blocked)
    primaries = [c[0] if c else "none" for *_x, c in blocked]
    assert primaries.count("loss_burst") == len(blocked), primaries
    # the few holes at the capture point explain almost none of it: the evidence is the
    # stretch with no data toward the client while the server's packets went missing (IP
    # ids), and the wait through it is the loss's stall
    hole_ms = dark.sql("SELECT sum(recovery_ms) FROM tcp_events WHERE kind = 'lost_segment' AND direction = 'to_client'").fetchall()[0][0]
    gaps = dark.sql("SELECT count(*) FROM tcp_events WHERE kind = 'upstream_loss' AND direction = 'to_client'").fetchall()[0][0]
    assert gaps >= 5 and (hole_ms or 0) < 1000 < 10 * 1000 <= max(r[1] for r in blocked), (gaps, hole_ms)
    stalls = dict(dark.sql("""
        SELECT e.stream_id, e.loss_stall_ms FROM request_evidence AS e WHERE e.loss_directions LIKE '%to_client%'
    """).fetchall())
    covered = [ttft for sid, ttft, *_x in blocked if stalls.get(sid, 0) >= 0.5 * ttft]
    assert len(covered) >= 0.9 * len(blocked)
    # and the evidence says so
    said = dark.sql("SELECT count(*) FROM request_cause WHERE cause = 'loss_burst' AND evidence LIKE '%no data toward the client%'").fetchall()[0][0]
    assert said >= 0.9 * len(blocked)


def test_a_server_that_merely_had_nothing_to_send_is_not_dark(dark):
    # the quiet before the loss (idle moments between calls): no stall there
    outside = dark.sql("""
        SELECT count(*) FROM request_evidence
        WHERE loss_stall_ms > 0
          AND finished_at < (SELECT min(ts) FROM tcp_events WHERE kind IN ('upstream_loss', 'lost_segment', 'retransmission',
                                                                          'fast_retransmission', 'rto_retransmission'))
    """).fetchall()[0][0]
    assert outside == 0


def test_data_stuck_behind_a_backed_off_timeout_is_the_loss(stuck):
    rows = _with_truth(stuck)
    waited = [r for r in rows if r[1] > 2000]  # the client waited over 2 s (up to its 20 s deadline)
    assert len(waited) >= 50
    primaries = [c[0] if c else "none" for *_x, c in waited]
    assert primaries.count("loss_burst") >= 0.95 * len(waited), primaries
    assert "server" not in primaries
    # the wait is the loss's stall: no new data toward the client acknowledged while the
    # server's resend of it was lost again
    stalls = dict(stuck.sql("SELECT stream_id, loss_stall_ms FROM request_evidence").fetchall())
    assert all(stalls.get(sid, 0) >= 0.8 * ttft for sid, ttft, *_x in waited)


def test_requests_held_behind_a_timeout_in_the_client_are_estimated(held):
    rows = _with_truth(held)
    waited = [r for r in rows if r[1] >= 300]  # the client's TTFT 300 ms or more (clean p99: 117 ms)
    assert len(waited) >= 6
    # when in the hold each was issued is unknown: spread over it, each estimate is within
    # a factor of two of what the client saw (all were under 130 ms before)
    for sid, ttft, est, up, causes in waited:
        assert up > 0 and 0.5 * ttft <= est <= 2 * ttft, (sid, ttft, est, up)
        assert causes and causes[0] == "loss_burst", (sid, causes)


def test_requests_after_a_hold_that_came_at_their_own_pace_are_not_held(held):
    # the flush ends at the first gap longer than a round trip and 50 ms: requests after
    # it keep no upstream wait
    rows = held.sql("""
        SELECT count(*) FILTER (WHERE upstream_delay_ms > 0), count(*) FROM request_metrics
    """).fetchall()[0]
    assert 0 < rows[0] <= 0.35 * rows[1], rows


@pytest.fixture(scope="module")
def rto_run(tmp_path_factory):
    from telemetry.lab.sweep_score import score_run

    folder = SAMPLES / "client_uplink_rto"
    if not (folder / "capture_client.pcap").exists():
        pytest.fail(f"{folder} is missing: the sample is committed with the repository")
    run = tmp_path_factory.mktemp("sweep") / "sweep-3-031"
    run.mkdir()
    for f in folder.iterdir():
        (run / f.name).symlink_to(f)
    return run, score_run(run, store_dir=run.parent / "stores" / run.name)


def test_calls_held_by_a_backed_off_timeout_count_in_the_window_and_carry_the_loss(rto_run):
    _run, s = rto_run
    (w,) = s["windows"]
    assert w["ok"] and w["dominant"] == "loss_burst"
    assert w["slow"] >= 200  # 123 inside the labelled window, the rest held until 16 s later
    assert s["carry"][1] >= 0.9 * s["carry"][0]
    assert s["outside"][1] == 0
    assert s["decomp"][1] >= 0.7 * s["decomp"][0]
    assert s["report_agrees"]


def test_the_recovered_effect_end_is_where_tshark_sees_the_last_drop_resent(rto_run):
    from telemetry.lab.truth import recovered_effect_ends

    run, _s = rto_run
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    labels = json.loads((run / "labels.json").read_text())
    (window,) = labels["windows"]
    ends = recovered_effect_ends(run, labels["windows"])
    assert ends[window["name"]] > window["effect_end_ns"] + 4_000_000_000  # the settle time fell short
    # the reference: tshark's decode of the server-side capture, each drop's first later copy
    drops = duckdb.sql(f"""
        SELECT src_port, dst_port, tcp_seq, t_rx_ns FROM read_parquet('{run / "bridge_events.parquet"}')
        WHERE action = 'drop' AND payload_len > 0 AND direction = 'to_server'
    """).fetchall()
    out = subprocess.run(
        ["tshark", "-r", str(run / "capture.pcap"), "-Y", "tcp.len > 0", "-T", "fields", "-e", "frame.time_epoch",
         "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.len",
         "-o", "tcp.analyze_sequence_numbers:FALSE"],
        capture_output=True, text=True, check=True).stdout
    packets = []
    for line in out.splitlines():
        t, sp, dp, seq, n = line.split("\t")
        sec, _, frac = t.partition(".")
        packets.append((int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9]), int(sp), int(dp), int(seq), int(n)))
    latest = 0
    for sp, dp, seq, t in drops:
        first = min(ts for ts, a, b, lo, n in packets if (a, b) == (sp, dp) and ts > t and (seq - lo) % 2**32 < n)
        latest = max(latest, first)
    assert ends[window["name"]] == latest
