"""A capture of one direction only (a mirror port that copies one way, asymmetric routing)
says so, and says it cannot judge, instead of a report that looks calm or alarming. A real
lab capture (samples/server_stall) with one side's packets taken out, run as a user runs
`tailtap analyze`. Before: with only the client's packets, all 220 requests were
"unanswered" with latencies to the end of their connections and 11 spikes were reported;
with only the server's, the server ACKing every request byte read as 267 kB the capture
dropped, and the verdict was "no p99 spike"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import capture_builders as cb
import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "server_stall" / "capture.pcap"
CLIENT, SERVER = bytes([10, 77, 1, 1]), bytes([10, 77, 1, 2])


def _one_way(sender: bytes, tmp_path: Path) -> dict:
    header, recs = cb.records(SAMPLE.read_bytes())
    kept = [r for r in recs if r[16 + 14 + 12 : 16 + 14 + 16] == sender]  # Ethernet, IPv4 source
    assert 0 < len(kept) < len(recs)
    capture = tmp_path / "one-way.pcap"
    capture.write_bytes(header + b"".join(kept))
    run = subprocess.run([sys.executable, "-m", "telemetry", "analyze", str(capture), "--out", str(tmp_path / "store"),
                          "--format", "json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize(("sender", "column"), [(CLIENT, "only_client_seen"), (SERVER, "only_server_seen")])
def test_a_capture_of_one_direction_says_so_and_does_not_judge(sender, column, tmp_path):
    report = _one_way(sender, tmp_path)
    (conns,) = report["connections"]
    assert conns[column] == conns["connections"] == 3
    assert report["report_verdict"].startswith("nothing to judge on latency or TTFT")
    assert report["report_spikes"] == [] and report["report_slowest_requests"] == []
    assert report["capture_drops"] == []  # the other direction was not dropped: it was never there


def test_both_directions_are_judged(tmp_path):
    header, recs = cb.records(SAMPLE.read_bytes())
    capture = tmp_path / "both.pcap"
    capture.write_bytes(header + b"".join(recs))
    run = subprocess.run([sys.executable, "-m", "telemetry", "analyze", str(capture), "--out", str(tmp_path / "store"),
                          "--format", "json"], capture_output=True, text=True, timeout=300)
    report = json.loads(run.stdout)
    (conns,) = report["connections"]
    assert (conns["only_client_seen"], conns["only_server_seen"]) == (0, 0)
    assert report["report_verdict"].startswith("6 spike(s)")
