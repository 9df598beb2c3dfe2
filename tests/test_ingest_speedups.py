"""The whole pipeline writes the same tables with and without the optional C extensions,
switched off the way users switch them off (TAILTAP_PURE_PYTHON=1, a fresh process: every
C path at once), over every bundled sample, every shared capture and the bench capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parsers.capture import _format, _packets
from parsers.h2 import _conn
from parsers.records import H2EventKind, HistoryLetter, RttSource, TcpEventKind
from parsers.tcp import _fast, _flows

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gen_grpc_capture import write_capture  # noqa: E402
from shared_paths import CAPTURES  # noqa: E402

pytestmark = pytest.mark.skipif(
    any(m._speedups is None for m in (_conn, _format, _packets, _fast, _flows)),
    reason="C extensions not built (pip install -e .)",
)


def _captures(tmp_path: Path) -> list[str]:
    bench = tmp_path / "bench.pcap"
    write_capture(str(bench), 20_000, connections=3, tokens=30)
    out = [str(bench)]
    out += sorted(str(p) for p in (ROOT / "samples").glob("**/capture.pcap"))
    out += sorted(str(p) for p in CAPTURES.glob("*.pcap*"))
    return out


def _dump(caps: list[str], out: Path, pure: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TAILTAP_PURE_PYTHON"}
    if pure:
        env["TAILTAP_PURE_PYTHON"] = "1"
    subprocess.run([sys.executable, str(ROOT / "bench" / "golden_outputs.py"), str(out), *caps],
                   check=True, env=env, timeout=900)
    return json.loads(out.read_text())


def test_same_tables_with_and_without_c(tmp_path):
    caps = _captures(tmp_path)
    assert len(caps) > 30
    fast = _dump(caps, tmp_path / "c.json", pure=False)
    pure = _dump(caps, tmp_path / "pure.json", pure=True)
    assert fast.keys() == pure.keys()
    for cap in fast:
        assert fast[cap] == pure[cap], cap
    assert fast[f"{tmp_path.name}/bench.pcap"]["messages"]["rows"] > 10_000


VOCABULARIES = {"tcp_events.kind": TcpEventKind, "h2_events.kind": H2EventKind, "rtt_samples.source": RttSource}


def test_every_kind_written_is_in_its_vocabulary(tmp_path):
    """What the tables hold is what parsers/records.py documents (and schema.py says)."""
    caps = _captures(tmp_path)
    seen: dict[str, set[str]] = {}
    for tables in _dump(caps, tmp_path / "c.json", pure=False).values():
        for column, values in tables["vocabulary"].items():
            seen.setdefault(column, set()).update(values)
    for column, vocabulary in VOCABULARIES.items():
        assert seen[column], column
        assert seen[column] <= {m.value for m in vocabulary}, column
    letters = {m.value for m in HistoryLetter} | {m.value.lower() for m in HistoryLetter}
    assert set("".join(seen["connections.history"])) <= letters
    # the samples and shared captures show most of each vocabulary
    assert len(seen["tcp_events.kind"]) >= 8 and len(seen["h2_events.kind"]) >= 5


def test_the_c_paths_read_the_row_layouts_of_records_py():
    """The rows the C paths write and read (message rows, ChunkRun rows) have one layout,
    declared in parsers/records.py: the header the C files include is generated from it, and
    a row of another width is refused, not read at the wrong places."""
    import numpy as np

    from parsers.h2._conn import H2Connection
    from parsers.records import RunColumn, c_header

    header = (ROOT / "parsers" / "records.h").read_text()
    assert header == c_header(), "parsers/records.h is stale: python -m parsers.records > parsers/records.h"
    for c_file in ("parsers/h2/_speedups.c", "parsers/tcp/_speedups.c"):
        assert '#include "../records.h"' in (ROOT / c_file).read_text()
    conn = H2Connection(1, mid=False)
    for width in (len(RunColumn) - 1, len(RunColumn) + 1):
        with pytest.raises(TypeError, match="RUN_NCOLS"):
            _conn._speedups.feed_run(conn, 1, np.zeros((1, width), dtype=np.int64), b"", 0)
