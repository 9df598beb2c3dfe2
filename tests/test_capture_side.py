"""--capture-side on a client-side capture: a sweep run (samples/sweep/client_side, held-out
run 014: the capture taken at the client's veth, RTT floor 0.1 ms, loss of client -> server
frames). Told from the RTT floors it reads as client-side; the option overrides that, and
the analysis follows it (path_rtt measures the path on the far side of the capture point)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "sweep" / "client_side"
TAILTAP = [str(Path(sys.executable).parent / "tailtap")]
pytestmark = pytest.mark.skipif(not (SAMPLE / "capture.pcap").exists(), reason="samples/sweep/client_side missing")


def _analyze(tmp_path: Path, *option: str) -> dict:
    store = tmp_path / ("store" + "".join(option))
    subprocess.run([*TAILTAP, "analyze", str(SAMPLE / "capture.pcap"), "--out", str(store), "--no-report", *option],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    out = subprocess.run([*TAILTAP, "sql", "--store", str(store), "-f", "json",
                          "SELECT (SELECT list(DISTINCT capture_side) FROM connections) AS sides, "
                          "(SELECT list(DISTINCT direction) FROM path_rtt) AS measured"],
                         check=True, capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    return json.loads(out)["result"][0]


def test_client_side_capture_told_and_overridden(tmp_path):
    assert json.loads((SAMPLE / "sweep.json").read_text())["capture_point"] == "client"
    auto = _analyze(tmp_path)
    assert auto["sides"] == ["client"]
    assert auto["measured"] == ["to_server"]  # the far side of a client-side point
    forced = _analyze(tmp_path, "--capture-side", "server")
    assert forced["sides"] == ["server"]
    assert forced["measured"] == ["to_client"]
    client = _analyze(tmp_path, "--capture-side", "client")
    assert client == auto
