"""The whole pipeline writes the same tables with and without the optional C extensions
(record walks and header gather, HTTP/2 fast path over ChunkRuns, smoothed RTT), on the bench capture and real ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from parsers.capture import _container, _gather
from parsers.h2 import _conn
from parsers.tcp import _fast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gen_grpc_capture import write_capture  # noqa: E402
from golden_outputs import dump  # noqa: E402
from shared_paths import CAPTURES  # noqa: E402

pytestmark = pytest.mark.skipif(
    _conn._speedups is None or _container._speedups is None or _fast._speedups is None,
    reason="C extensions not built (pip install -e .)",
)
SHARED = CAPTURES


def _captures(tmp_path: Path) -> list[str]:
    bench = tmp_path / "bench.pcap"
    write_capture(str(bench), 20_000, connections=3, tokens=30)
    out = [str(bench), str(ROOT / "samples/loss_burst/capture.pcap")]
    for name in ("grpc-go_bidi_streaming.pcapng", "derived_grpc-go_bidi_streaming_midstream.pcapng"):
        if (SHARED / name).exists():
            out.append(str(SHARED / name))
    return out


def test_same_tables_with_and_without_c(tmp_path, monkeypatch):
    caps = _captures(tmp_path)
    fast = dump(caps)
    with monkeypatch.context() as m:
        m.setattr(_conn, "_speedups", None)
        m.setattr(_container, "_speedups", None)
        m.setattr(_gather, "_speedups", None)
        m.setattr(_fast, "_speedups", None)
        pure = dump(caps)
    assert fast == pure
    assert fast[f"{tmp_path.name}/bench.pcap"]["messages"]["rows"] > 10_000
