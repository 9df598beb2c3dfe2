"""A capture of part of the traffic says so, and does not pass for a calm or an alarming
one. Real lab captures run as a user runs `tailtap analyze`:

* one direction only (a mirror port that copies one way, asymmetric routing):
  samples/server_stall with one side's packets taken out. Before: with only the client's
  packets, all 220 requests were "unanswered" with latencies to the end of their
  connections and 11 spikes were reported; with only the server's, the server ACKing
  every request byte read as 267 kB the capture dropped, and the verdict was "no p99
  spike";
* packets cut by a small snap length (tcpdump -s 96: headers and 30 bytes of payload):
  samples/loss_burst, 4 spikes from loss bursts in full, read 40 of its 224 requests and
  said "no p99 spike: every window stayed near its baseline"."""

from __future__ import annotations

import html
import struct
from pathlib import Path

import capture_builders as cb
import pytest
from cli_runs import analyze_json, tailtap

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SAMPLE = SAMPLES / "server_stall" / "capture.pcap"
CLIENT, SERVER = bytes([10, 77, 1, 1]), bytes([10, 77, 1, 2])


def _analyze(header: bytes, recs: list[bytes], tmp_path: Path) -> dict:
    capture = tmp_path / "partial.pcap"
    capture.write_bytes(header + b"".join(recs))
    return analyze_json(capture, tmp_path / "store")


def _one_way(sender: bytes, tmp_path: Path) -> dict:
    header, recs = cb.records(SAMPLE.read_bytes())
    kept = [r for r in recs if r[16 + 14 + 12 : 16 + 14 + 16] == sender]  # Ethernet, IPv4 source
    assert 0 < len(kept) < len(recs)
    return _analyze(header, kept, tmp_path)


@pytest.mark.parametrize(("sender", "column"), [(CLIENT, "only_client_seen"), (SERVER, "only_server_seen")])
def test_a_capture_of_one_direction_says_so_and_does_not_judge(sender, column, tmp_path):
    report = _one_way(sender, tmp_path)
    (conns,) = report["connections"]
    assert conns[column] == conns["connections"] == 3
    assert report["report_verdict"].startswith("nothing to judge on latency or TTFT")
    assert report["report_spikes"] == [] and report["report_slowest_requests"] == []
    (caveat,) = report["report_caveats"]  # (the other direction is not said dropped: it was never there)
    assert caveat.startswith("3 h2c connection(s) captured one way")


def test_both_directions_are_judged(tmp_path):
    report = _analyze(*cb.records(SAMPLE.read_bytes()), tmp_path)
    (conns,) = report["connections"]
    assert (conns["only_client_seen"], conns["only_server_seen"], conns["payload_cut"]) == (0, 0, 0)
    assert report["report_verdict"].startswith("6 spike(s)")


def test_payloads_cut_by_the_snap_length_are_said(tmp_path):
    header, recs = cb.records((SAMPLES / "loss_burst" / "capture.pcap").read_bytes())
    header = header[:16] + struct.pack("<I", 96) + header[20:]
    cut = [struct.pack("<II", *struct.unpack_from("<II", r)) + struct.pack("<II", min(len(r) - 16, 96),
           struct.unpack_from("<I", r, 12)[0]) + r[16 : 16 + 96] for r in recs]
    report = _analyze(header, cut, tmp_path)
    (conns,) = report["connections"]
    assert conns["payload_cut"] == conns["connections"] == 3
    assert conns["retransmissions"] > 0  # what TCP shows stays
    assert [c for c in report["report_caveats"] if "snap length" in c]
    assert report["report_verdict"] == "no p99 spike among the requests that could be read (3 connection(s) had payloads cut by the snap length)"


def test_the_html_report_says_the_same_caveats(tmp_path):
    report = _one_way(SERVER, tmp_path)
    page = tmp_path / "report.html"
    run = tailtap("report", "--store", str(tmp_path / "store"), "--html", str(page))
    (caveat,) = report["report_caveats"]
    assert f'<p class="caveat">caveat: {html.escape(caveat)}</p>' in page.read_text()
    assert f"caveat: {caveat[:40]}" in " ".join(run.stdout.split())  # and the terminal's report
