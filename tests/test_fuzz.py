"""A short run of every fuzz target (the long one is `make fuzz`, 10^6 inputs) and a replay of
every input that ever crashed one (fuzz/regressions/<target>/): only the documented input
problems may come out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parents[1]
REGRESSIONS = ROOT / "fuzz" / "regressions"
SHORT_RUNS = {"hpack": 3000, "tls": 1500, "session": 600, "capture": 150, "sse_rows": 1500, "h2_events": 1500,
              "llm_shapes": 5000, "json_top": 5000}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_short_fuzz_run(target):
    pytest.importorskip("atheris", reason="atheris (pip, the test extra) is needed")
    proc = subprocess.run([sys.executable, "-m", "fuzz", target, f"-runs={SHORT_RUNS[target]}", "-seed=1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = re.search(r"^Done (\d+) runs", proc.stderr, re.M)
    assert done and int(done.group(1)) >= SHORT_RUNS[target], proc.stderr[-2000:]


def test_long_runs_go_in_slices():
    """More inputs than a slice holds run as several processes one after the other (an
    atheris process grows with its inputs), every slice's figures printed."""
    pytest.importorskip("atheris", reason="atheris (pip, the test extra) is needed")
    proc = subprocess.run([sys.executable, "-m", "fuzz", "hpack", "-runs=2500", "-seed=1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TAILTAP_FUZZ_SLICE": "1000"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [int(n) for n in re.findall(r"^Done (\d+) runs", proc.stderr, re.M)]
    # (a slice runs its corpus first: after long fuzzing, fuzz/seeds/hpack holds more than
    # the last slice's 500 inputs, and it runs those)
    assert done[:2] == [1000, 1000] and len(done) == 3 and done[2] >= 500, proc.stderr[-2000:]
    assert "inputs 2,001-2,500 of 2,500" in proc.stderr


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_regressions_replay(target):
    for path in sorted((REGRESSIONS / target).glob("*")) if (REGRESSIONS / target).is_dir() else []:
        TARGETS[target](path.read_bytes())  # raises if it crashes again
