"""A capture that drops packets itself (a mirror port or a busy tcpdump) is not a network
that loses them. Real lab captures with packets taken out of the file, as a capture drops
them (one at a time, or 50 in a row when its buffer overflows), run through `tailtap
analyze` as a user runs it: the verdict is the complete capture's, and a loss, reordering
or server stall the network really had is still found. Before, dropping 1 packet in 200
from samples/baseline (no impairment) had 2 windows blamed on loss bursts: holes the
client had acknowledged counted as losses, client ACKs missing by their IP ids made a
request look resent for 1.3 s, and tokens held behind a hole took the time of the ACK."""

from __future__ import annotations

import json
import random
import re
import struct
from pathlib import Path

import capture_builders as cb
import pytest
from cli_runs import analyze_json, sql_rows, tailtap

from fuzz import damaged

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
QUIET = "no p99 spike: every window stayed near its baseline"
NETWORK_CAUSES = ("loss_burst", "reordering", "queueing", "throttling")


def _analyze(sample: str, drop, tmp_path: Path, *options: str) -> dict:
    """``drop``: fuzz.damaged's drop_one_in / drop_runs, or a function of the packets."""
    order, header, packets = damaged.read_pcap((SAMPLES / sample / "capture.pcap").read_bytes())
    kept = drop(packets, random.Random(3))
    assert len(kept) < len(packets)
    capture = tmp_path / "dropped.pcap"
    capture.write_bytes(damaged.write_pcap(order, header, kept))
    return analyze_json(capture, tmp_path / "store", *options)


def _causes(report: dict) -> set[str]:
    """The cause the verdict gives each spike (the one behind most of its slow requests)."""
    return set(re.findall(r"\d\d:\d\d:\d\d: ([a-z_]+)", report["report_verdict"]))


@pytest.mark.parametrize("drop", [damaged.drop_one_in(200), damaged.drop_one_in(50), damaged.drop_runs(5, 50)], ids=["1-in-200", "1-in-50", "5-bursts-of-50"])
def test_an_unimpaired_run_stays_quiet_whatever_the_capture_dropped(drop, tmp_path):
    report = _analyze("baseline", drop, tmp_path)
    assert report["report_verdict"] == QUIET
    assert not any(c in (row["causes"] or "") for row in report["report_slowest_requests"] for c in NETWORK_CAUSES)
    (caveat,) = report["report_caveats"]  # and the report says the capture dropped packets
    assert re.match(r"the capture dropped packets: [\d,]+ bytes in [\d,]+ gaps on [1-3] connection", caveat)


def test_the_network_s_own_loss_is_still_found(tmp_path):
    report = _analyze("loss_burst", damaged.drop_one_in(200), tmp_path)
    assert report["report_verdict"].startswith("4 spike(s)")
    assert _causes(report) == {"loss_burst"}


def test_reordering_stays_reordering(tmp_path):
    report = _analyze("reorder", damaged.drop_one_in(200), tmp_path)
    assert report["report_spikes"]
    assert _causes(report) == {"reordering"}


def test_a_server_stall_stays_the_server_s(tmp_path):
    report = _analyze("server_stall", damaged.drop_runs(5, 50), tmp_path)
    assert report["report_spikes"]
    assert _causes(report) == {"server"}


def test_a_complete_capture_says_nothing_of_drops(tmp_path):
    report = _analyze("baseline", lambda packets, rng: packets[:-1], tmp_path)  # (one fewer: the file's last packet)
    assert report["report_caveats"] == []
    assert report["report_verdict"] == QUIET


def test_the_same_traffic_captured_twice_is_two_captures(tmp_path):
    """The same traffic captured twice into one store (a copy with drops, then the complete
    capture: a user re-analyzing a cut or filtered copy into the default store): the
    complete capture's report counts its requests once and says nothing of what the other
    dropped, as in a store of its own. Before, the two captures' rows joined as one
    connection's (one conn_id): every request twice in the timeline, baselines taken over
    four times the requests, the slow requests' causes said eight times over."""
    assert _analyze("baseline", damaged.drop_one_in(200), tmp_path)["report_caveats"]
    shared = analyze_json(SAMPLES / "baseline" / "capture.pcap", tmp_path / "store")
    alone = analyze_json(SAMPLES / "baseline" / "capture.pcap", tmp_path / "alone")
    (caveat,) = shared["report_caveats"]  # not the other's drops: that it holds the same traffic
    assert caveat == (f"3 connection(s) of {SAMPLES / 'baseline' / 'capture.pcap'} were captured in {tmp_path / 'dropped.pcap'} "
                      "too (already in the store): this report counts them once; a report over the whole store counts them twice")
    assert alone["report_caveats"] == [] and shared["report_verdict"] == alone["report_verdict"] == QUIET
    for section, column in (("methods", "requests"), ("report_timeline", "requests"),
                            ("report_baselines", "baseline_requests"), ("connections", "connections")):  # fmt: skip
        assert [row[column] for row in shared[section]] == [row[column] for row in alone[section]], section
    assert shared["report_slowest_requests"] == alone["report_slowest_requests"] == []
    assert _one_row(tmp_path / "store", "SELECT count(*), count(DISTINCT capture_id) FROM captures") == [2, 2]
    # every connection is one capture's: the two captures' ids are apart
    assert _one_row(tmp_path / "store", "SELECT count(DISTINCT conn_id), count(DISTINCT (capture_id, conn_id)) "
                                        "FROM connections") == [6, 6]
    assert _one_row(tmp_path / "store", "SELECT count(*) FROM capture_drops") == [1]  # (`sql`: every capture)
    # a report over the whole store says it counts that traffic twice
    report = json.loads(tailtap("report", "--store", str(tmp_path / "store"), "--format", "json").stdout)
    paths = {str(tmp_path / "dropped.pcap"), str(SAMPLES / "baseline" / "capture.pcap")}
    (twice,) = [c for c in report["caveats"] if "hold the same traffic" in c]
    assert re.fullmatch(r"(\S+) and (\S+) hold the same traffic \(3 connection\(s\)\): this report counts it twice; "
                        r"report on one of them \(tailtap analyze FILE --out NEW_STORE\)", twice)
    assert set(twice.split(" hold")[0].split(" and ")) == paths


def test_a_pcapng_whose_kernel_counted_drops_says_so(tmp_path):
    # samples/baseline (a nanosecond pcap) as pcapng, its capturing kernel's count in an ISB
    header, recs = cb.records((SAMPLES / "baseline" / "capture.pcap").read_bytes())
    assert header[:4] == b"\x4d\x3c\xb2\xa1"
    blocks = [cb.shb(), cb.idb(linktype=1, tsresol=9)]
    for r in recs:
        sec, nsec = struct.unpack_from("<II", r)
        blocks.append(cb.epb(0, sec * 10**9 + nsec, r[16:], struct.unpack_from("<I", r, 12)[0]))
    capture = tmp_path / "kernel-drops.pcapng"
    capture.write_bytes(b"".join([*blocks, cb.isb(0, 7)]))
    report = analyze_json(capture, tmp_path / "store")
    assert report["report_caveats"] == ["the capture dropped packets: its kernel reported 7 packets dropped. They are not "
                                        "counted as network loss, and token gaps and first tokens across them are not measured"]
    assert report["report_verdict"] == QUIET


def test_explain_says_which_holes_the_capture_missed(tmp_path):
    _analyze("baseline", damaged.drop_one_in(200), tmp_path)
    ((missed, holes),) = sql_rows(tmp_path / "store",
                                  "SELECT count(*) FILTER (WHERE event = 'lost_segment' AND detail LIKE '%missed by the capture, not lost%'), "
                                  "count(*) FILTER (WHERE event = 'lost_segment') FROM request_timeline")
    missed, holes = int(missed), int(holes)
    assert 0 < holes == missed  # every hole here was the capture's


def test_tls_decryption_follows_the_records_past_lost_bytes(tmp_path):
    # a lost record used to end decryption (its sequence number unknown): every request
    # after it estimated from record sizes. The record after the lost bytes is tried at
    # each sequence number they leave possible; the AEAD tag verifies at one only
    _analyze("sweep/tls_probe", damaged.drop_one_in(200), tmp_path, "--keylog", str(SAMPLES / "sweep" / "tls_probe" / "keys.txt"))
    ((decrypted, requests, estimated, timed),) = sql_rows(
        tmp_path / "store", "SELECT (SELECT bool_and(tls_decrypted) FROM connections), count(*), "
        "count(*) FILTER (WHERE estimated), count(latency_ms) FROM requests")
    assert (decrypted, requests, estimated) == ("True", "82", "0")  # all of the complete capture's 82
    assert int(timed) >= 80



def _one_row(store: Path, query: str) -> list[int]:
    (row,) = sql_rows(store, query)
    return [int(v) for v in row]


def test_the_timelines_count_the_capture_s_drops_once_as_drops(tmp_path):
    """samples/baseline (no impairment) with 1 packet in 200 taken out: the holes its
    receivers acknowledged are capture drops in the network panel, and no lost segment in
    it, in conn_timeline (the dashboards) or in network_events; tcp_events still records
    what the capture showed."""
    _analyze("baseline", damaged.drop_one_in(200), tmp_path)
    store = tmp_path / "store"
    holes, acked_unseen = _one_row(store, "SELECT count(*) FILTER (WHERE kind = 'lost_segment'), "
                                          "count(*) FILTER (WHERE kind = 'capture_loss') FROM tcp_events")
    assert holes > 0 and acked_unseen > 0
    assert _one_row(store, "SELECT sum(lost_segments), sum(capture_drops) FROM network_timeline") == [0, acked_unseen]
    assert _one_row(store, "SELECT sum(lost_segments) FROM conn_timeline") == [0]
    assert _one_row(store, "SELECT count(*) FROM network_events WHERE kind IN ('lost_segment', 'capture_loss')") == [0]


def test_the_network_s_own_lost_segments_stay_in_the_timelines(tmp_path):
    """samples/sweep/uplink_loss: client packets the network lost before the capture point
    show as holes that the client's resends filled. With 1 packet in 200 taken out of the
    file as well, those are still lost segments in the timelines, and only those the
    capture missed are not."""
    _analyze("sweep/uplink_loss", damaged.drop_one_in(200), tmp_path)
    store = tmp_path / "store"
    (filled,) = _one_row(store, "SELECT count(*) FROM tcp_events WHERE kind = 'lost_segment' AND recovery_ms IS NOT NULL")
    (missed,) = _one_row(store, "SELECT count(*) FROM capture_gaps WHERE shown_by = 'lost_segment'")
    (all_holes,) = _one_row(store, "SELECT count(*) FROM tcp_events WHERE kind = 'lost_segment'")
    assert filled > 0
    assert _one_row(store, "SELECT sum(lost_segments) FROM conn_timeline") == [all_holes - missed]


def test_flow_control_stays_flow_control_past_the_server_s_missed_packets(tmp_path):
    """samples/flow_control (the client's windows hold the server back) with 1 packet in
    200 taken out: DATA the capture missed leaves the server's windows upper bounds, so
    the blocks of the streams opened after it are still seen (before, the first packet
    missed from the server ended flow control for the connection, and every spike read
    as the server's)."""
    report = _analyze("flow_control", damaged.drop_one_in(200), tmp_path)
    assert report["report_spikes"]
    assert _causes(report) == {"throttling"} and "h2_flow_control" in report["report_verdict"]
