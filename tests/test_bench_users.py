"""The users' benchmark times only runs that did the whole work: a run in which tailtap
warned that a connection's decoder failed (it reads on without that connection, so it
does less) stops the benchmark, as a command that fails does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_users import DECODER_FAILED, Timing, run  # noqa: E402


def test_a_run_whose_decoder_failed_stops_the_benchmark():
    timing = Timing()
    run([sys.executable, "-c", "import sys; sys.stderr.write('some other warning\\n')"], timing)
    assert len(timing.cpu) == 1
    warned = f"warning: x.pcap: packet 9: http1 {DECODER_FAILED}: AttributeError: oops"
    with pytest.raises(RuntimeError, match="1 connections not decoded"):
        run([sys.executable, "-c", f"import sys; sys.stderr.write({warned!r} + '\\n')"], timing)
    with pytest.raises(RuntimeError, match="exited with 3"):
        run([sys.executable, "-c", "raise SystemExit(3)"], timing)
    assert len(timing.cpu) == 1
