"""The randomized lab sweep (telemetry/lab/sweep.py) and its scoring (sweep_score.py,
sweep_diagnose.py).

Drawing: a run's parameters depend on (seed, index) only, cover the ranges the sweep
promises, and the split is fixed by the same draw (the same for both ranges). Scoring: on
a real sweep run (samples/sweep/uplink_loss), both ways of reading the attribution give the same
figures, every miss says why, and the README block is rewritten in place. One short real
run of the wider ranges (cross traffic over a limited link, client-side capture, real-time
priority) in namespaces, when the machine can run the lab.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

from telemetry.lab import sweep
from telemetry.lab.sweep_diagnose import diagnosis
from telemetry.lab.sweep_score import (
    MARK_BEGIN,
    MARK_END,
    csv_rows,
    expected_labels,
    markdown,
    score_run,
    summarize,
    write_readme,
)

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "sweep" / "uplink_loss"
N = 300


def test_a_run_is_its_seed_and_index():
    for ranges in sweep.RANGES:
        assert sweep.draw(3, 7, ranges) == sweep.draw(3, 7, ranges)
        assert sweep.draw(3, 7, ranges) != sweep.draw(4, 7, ranges)
        assert sweep.draw(3, 7, ranges) != sweep.draw(3, 8, ranges)
    # the first sweep's runs stay what they were when it ran (its committed results)
    run = sweep.draw(1, 0)
    assert (run.name, run.split, run.impairment, run.duration_s, run.rtt_floor_ms) == (
        "sweep-1-000", "tuning", "uplink_loss", 52.2, 3.371)
    if (SAMPLE / "sweep.json").exists():  # drawn again exactly as the lab ran it
        meta = json.loads((SAMPLE / "sweep.json").read_text())
        assert (run.load, run.server, run.windows) == (meta["load"], meta["server"], meta["windows"])
    assert sweep.draw(1, 0, 2).name == "sweep-r2-1-000"
    with pytest.raises(ValueError):
        sweep.draw(1, 0, 3)


def test_the_split_is_drawn_before_anything_else_and_holds_out_most_runs():
    for ranges in sweep.RANGES:
        splits = [sweep.draw(5, i, ranges).split for i in range(N)]
        assert splits == [sweep.draw(5, i, 1).split for i in range(N)]  # the same rule for both ranges
        assert 0.5 < splits.count("heldout") / N < 0.7


@pytest.mark.parametrize("ranges", sweep.RANGES)
def test_draws_cover_the_ranges(ranges):
    runs = [sweep.draw(9, i, ranges) for i in range(N)]
    floors = [r.rtt_floor_ms for r in runs]
    assert min(floors) < 0.15 and max(floors) > 50 and all(0.1 <= f <= 80 for f in floors)
    durations = [r.duration_s for r in runs]
    assert all(30 <= d <= 600 for d in durations) and max(durations) > 240
    assert statistics.median(durations) < 90  # most runs are short: the sweep's wall time stays sane
    assert {r.capture_point for r in runs} == {"server", "client"}
    assert any(r.link_mbps for r in runs) and any(not r.link_mbps for r in runs)
    load = [r.load for r in runs]
    assert min(x["connections"] for x in load) == 1 and max(x["connections"] for x in load) >= 6
    assert min(x["rate"] for x in load) < 6 and max(x["rate"] for x in load) > 18
    windows = [w for r in runs for w in r.windows]
    shortest = 3 if ranges == 2 else 1.2  # ranges 1 cuts one 3-60 s window in two for loss_then_stall
    assert all(shortest <= w["end_s"] - w["start_s"] <= 60 for w in windows)
    assert min(w["end_s"] - w["start_s"] for w in windows) < 6 and max(w["end_s"] - w["start_s"] for w in windows) > 40
    labels = Counter(label for w in windows for label in expected_labels(w))
    for label in ("loss_burst", "reordering", "queueing", "throttling/shaper", "throttling/policer",
                  "throttling/h2_flow_control", "throttling/application", "server"):
        assert labels[label] >= 5, (label, labels)
    assert any(not r.windows for r in runs)  # clean runs
    assert {w["direction"] for w in windows if w["layer"] == "bridge"} == {"to_client", "to_server"}
    for r in runs:
        ordered = sorted(r.windows, key=lambda w: w["start_s"])
        for a, b in zip(ordered, ordered[1:], strict=False):
            # ranges 1's loss_then_stall lets the loss settle into the stall (its requests count as the loss's)
            assert a["end_s"] + a["settle_s"] <= b["start_s"] or ranges == 1, r
        assert all(0 < w["start_s"] and w["end_s"] + w["settle_s"] < r.duration_s for w in ordered), r
        scn = sweep.scenario_of(r)
        assert scn.duration_s == r.duration_s and len(scn.windows) == len(r.windows)


def test_wider_ranges_add_cross_traffic_uplink_throttling_and_two_windows():
    runs = [sweep.draw(9, i, 2) for i in range(N)]
    assert set(Counter(r.cross_traffic for r in runs)) == {"off", "window", "run"}
    for r in runs:
        if r.cross_traffic != "off":  # the bulk download always meets a bottleneck
            assert r.link_mbps and 5 <= r.link_mbps <= 50 and r.bulk_windows
            assert r.link_buffer_bytes <= r.link_mbps * 1e6 / 8 * 0.2 + 1  # at most 200 ms of it
        if r.cross_traffic == "window":
            assert all({"cause": "queueing", "kind": "cross_traffic"} in w.get("also", []) or w["cause"] == "queueing"
                       for w in r.windows)
    uplink = {w["name"] for r in runs for w in r.windows if w.get("direction") == "to_server"}
    assert {"reordering", "jitter", "shaper", "policer", "uplink_loss"} <= {n.rsplit("_", 1)[0] if n[-1].isdigit() else n for n in uplink}
    zero = [r for r in runs if "zero_window" in r.impairment]
    assert zero and all(r.sysctls["server"] and r.client["embed_chars"][0] >= 8192 for r in zero)
    assert sum(len(r.windows) == 2 for r in runs) >= 0.15 * N
    scn = sweep.scenario_of(next(r for r in runs if r.cross_traffic == "run"))
    assert scn.bulk_windows == ((0.0, 1.0),)


@pytest.fixture(scope="module")
def sample_score(tmp_path_factory):
    if not (SAMPLE / "capture.pcap").exists():
        pytest.skip("samples/sweep/uplink_loss missing")
    run = tmp_path_factory.mktemp("sweep") / "sweep-1-000"
    run.mkdir()
    for f in SAMPLE.iterdir():
        (run / f.name).symlink_to(f)
    return score_run(run, store_dir=run.parent / "stores" / run.name)


def test_a_sweep_run_is_scored_both_ways_and_every_miss_says_why(sample_score):
    s = sample_score
    assert s["report_agrees"]
    for key in ("carry", "outside", "decomp", "request_confusion"):
        assert s[key] == s["report"][key]
    assert s["report"]["misses"] == "same as sql"
    assert [{k: w[k] for k in s["windows"][0]} for w in s["report"]["windows"]] == s["windows"]
    (w,) = s["windows"]
    assert w["slow"] == s["carry"][0] >= 30 and w["ok"] is True
    assert sum(w["primaries"].values()) == w["slow"]
    # every truth-slow request in the window either carries the cause or is a miss, with a reason
    assert s["carry"][0] - s["carry"][1] == len(s["misses"])
    assert all(m["reason"].startswith(("not_slow", "other:")) and ":" in m["request"] for m in s["misses"])
    assert s["report"]["windows"][0]["report_spikes"] >= 1


def test_the_readme_block_is_rewritten_in_place(sample_score, tmp_path):
    scores = [sample_score, {"run": "sweep-1-999", "split": "heldout", "impairment": "clean", "status": "ok",
                             "error": "RuntimeError: no capture"}]
    m = summarize(scores, "tuning")
    assert m["runs"] == 1 and m["carry"] == sample_score["carry"][1] / sample_score["carry"][0]
    assert summarize(scores, "heldout")["error_runs"] == 1
    readme = tmp_path / "README.md"
    readme.write_text("# title\n\nbefore\n")
    for _ in range(2):
        write_readme(readme, markdown(scores))
    body = readme.read_text()
    assert body.startswith("# title\n\nbefore\n") and body.count(MARK_BEGIN) == 1 and body.count(MARK_END) == 1
    assert "| sweep-1-000 | tuning | uplink_loss |" in body and "error: RuntimeError" in body
    rows = csv_rows(scores).splitlines()
    assert len(rows) == 3 and rows[1].startswith("sweep-1-000,tuning,ok,uplink_loss")
    text = diagnosis(scores)
    assert "## Per injected cause" in text and "| loss_burst |" in text
    json.dumps(scores)  # the per-run scores are plain JSON
    # a sweep of one split only (`--split`) has no rows for the other
    only = markdown([sample_score])
    assert f"| {sample_score['split']} | sql |" in only
    assert all(f"| {sp} | sql |" not in only for sp in ("tuning", "heldout") if sp != sample_score["split"])


@pytest.mark.lab
def test_a_short_run_of_the_wider_ranges(tmp_path):
    """Cross traffic over a limited link, captured at the client, under real-time priority."""
    from telemetry.lab.runner import missing_requirements, run_scenario
    from telemetry.lab.truth import iter_pcap

    missing = missing_requirements()
    if missing:
        pytest.skip("the lab needs " + ", ".join(missing))
    run = next(r for i in range(200) if (r := sweep.draw(9, i, 2)).cross_traffic == "run"
               and r.capture_point == "client" and not r.windows)
    scn = sweep.scenario_of(run)
    labels = run_scenario(run.name, tmp_path, duration=8, seed=1, client_capture=True, log=lambda m: None,
                          scenario=scn, realtime=True)
    assert labels["path"]["models"] == scn.path and labels["endpoints"]["bulk"]["windows"] == [{"start_s": 0.0, "end_s": 8.0}]
    bulk = client = 0
    for _ts, _orig, f in iter_pcap(tmp_path / "capture_client.pcap"):
        if len(f) > 54 and f[23] == 6:
            sport = int.from_bytes(f[34:36], "big")
            bulk += sport == sweep.sc.BULK_PORT
            client += sport == 50051
    assert bulk > 100 and client > 50  # the bulk download shared the link with the gRPC traffic
    assert labels["client_summary"][0]["requests"] > 0


def test_host_stalls_leave_out_what_the_injected_flow_control_itself_delays():
    window = {"start_ns": 100, "end_ns": 200, "effect_end_ns": 250}
    stalls = [{"source": "server", "start_ns": 150, "end_ns": 160, "max_late_ms": 40.0},
              {"source": "bridge", "start_ns": 170, "end_ns": 171, "max_late_ms": 25.0},
              {"source": "client_dispatch", "start_ns": 300, "end_ns": 310, "max_late_ms": 90.0},
              {"source": "bridge", "start_ns": 120, "end_ns": 121, "max_late_ms": 5.0}]  # under 20 ms: noise
    labels = {"windows": [window], "disturbed": stalls, "load": {}}
    assert [d["source"] for d in sweep.host_stalls(labels)] == ["server", "bridge", "client_dispatch"]
    assert [d["source"] for d in sweep.disturbed_in_windows(labels)] == ["server", "bridge"]
    # a slow-reader run: its small HTTP/2 windows hold the server's writes, so its token timers run late
    labels["load"] = {"channel_options": [["grpc.http2.lookahead_bytes", 256], ["grpc.http2.bdp_probe", 0]]}
    assert [d["source"] for d in sweep.disturbed_in_windows(labels)] == ["bridge"]


def test_a_held_out_only_sweep_skips_the_tuning_runs(tmp_path, monkeypatch):
    """`--split heldout` judges fixed settings on fresh runs without paying for the tuning ones:
    the other split's indices are skipped (no folder, no run), its own are run or resumed."""
    import telemetry.lab.runner as runner

    def no_lab(*_a, **_k):
        raise AssertionError("a run that should have been resumed or skipped was started")

    monkeypatch.setattr(runner, "run_scenario", no_lab)
    runs = [sweep.draw(4, i) for i in range(12)]
    held = [r for r in runs if r.split == "heldout"]
    assert held and len(held) < len(runs)
    for r in held:  # already captured: resumed, not run again
        (tmp_path / r.name).mkdir()
        (tmp_path / r.name / sweep.RUN_META).write_text(json.dumps({"name": r.name, "status": "ok", "ranges": 1}))
    metas = sweep.run_sweep(4, 12, tmp_path, split="heldout", log=lambda m: None)
    assert [m["name"] for m in metas] == [r.name for r in held]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(r.name for r in held)
