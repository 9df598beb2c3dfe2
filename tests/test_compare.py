"""`tailtap compare` on lab samples: two periods of one capture (before and inside its
loss burst, from the lab's labels) and two captures by id; every output format, and the
HTML page rendered in headless Chromium."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
from lab_samples import SAMPLES, labels
from test_html_report import _console_errors, _open, browser, needs_browser  # noqa: F401 - the browser fixture

TAILTAP = [str(Path(sys.executable).parent / "tailtap")]


def _tailtap(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([*TAILTAP, *args], capture_output=True, text=True, timeout=300, check=check)


def _iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat()


@pytest.fixture(scope="module")
def loss_store(tmp_path_factory) -> tuple[Path, str, str]:
    store = tmp_path_factory.mktemp("compare") / "store"
    _tailtap("analyze", str(SAMPLES / "loss_burst" / "capture.pcap"), "--out", str(store), "--no-report")
    w = labels("loss_burst")["windows"][0]
    before = f"..{_iso(w['start_ns'])}"
    inside = f"{_iso(w['start_ns'])}..{_iso(w['effect_end_ns'])}"
    return store, before, inside


def test_periods_of_one_capture(loss_store):
    store, before, inside = loss_store
    out = json.loads(_tailtap("compare", "--store", str(store), "--a", before, "--b", inside, "-f", "json").stdout)
    gen = next(m for m in out["methods"] if m["method"].endswith("Generate"))
    assert gen["requests_a"] > 20 and gen["requests_b"] > 5
    assert gen["gap_p99_b"] > 2 * gen["gap_p99_a"] and gen["gap_p99_change"] > 1
    # methods ordered by how much their p99 moved
    moves = [max(abs(m[f"{k}_p99_change"] or 0) for k in ("latency", "ttft", "gap")) for m in out["methods"]]
    assert moves == sorted(moves, reverse=True)
    loss = next(c for c in out["causes"] if c["cause"] == "loss_burst")
    assert loss["slow_requests_b"] > loss["slow_requests_a"] and loss["share_b"] >= 0.8
    net = {n["period"]: n for n in out["network"]}
    assert net["b"]["retransmissions_per_1k"] > net["a"]["retransmissions_per_1k"]
    assert out["summary"].startswith("what changed most: ")
    md = _tailtap("compare", "--store", str(store), "--a", before, "--b", inside, "-f", "markdown").stdout
    assert "## methods" in md and "loss_burst" in md
    table = _tailtap("compare", "--store", str(store), "--a", before, "--b", inside).stdout
    assert "slow requests by cause" in table and "p99 change" in table


def test_two_captures_by_id(tmp_path):
    store = tmp_path / "store"
    ids = []
    for sample in ("baseline", "server_stall"):
        _tailtap("analyze", str(SAMPLES / sample / "capture.pcap"), "--out", str(store), "--no-report")
    for row in json.loads(_tailtap("sql", "--store", str(store), "-f", "json",
                                   "SELECT capture_id FROM captures ORDER BY first_ts").stdout)["result"]:  # fmt: skip
        ids.append(row["capture_id"])
    out = json.loads(_tailtap("compare", "--store", str(store), "--a", ids[0][:12], "--b", ids[1][:12], "-f", "json").stdout)
    gen = next(m for m in out["methods"] if m["method"].endswith("Generate"))
    assert gen["requests_a"] > 20 and gen["requests_b"] > 20
    assert any(c["cause"] == "server" and c["slow_requests_b"] > 0 for c in out["causes"])


def test_bad_periods_are_usage_errors(loss_store):
    store, _, _ = loss_store
    r = _tailtap("compare", "--store", str(store), "--a", "11:00..10:00", "--b", "..", check=False)
    assert r.returncode == 2 and "ends before it starts" in r.stderr
    r = _tailtap("compare", "--store", str(store), "--a", "ffff0000", "--b", "00:00..", check=False)
    assert r.returncode == 2 and "no capture" in r.stderr


@needs_browser
def test_compare_html_renders(loss_store, browser, tmp_path):  # noqa: F811
    store, before, inside = loss_store
    page = tmp_path / "compare.html"
    _tailtap("compare", "--store", str(store), "--a", before, "--b", inside, "--html", str(page))
    got = _open(browser, page)
    assert got["plots"] == 4 and got["drawn"] == 4
    assert got["resources"] == [] and _console_errors(browser) == []
