"""The whole pipeline writes the same tables with and without the optional C extensions,
switched off the way users switch them off (TAILTAP_PURE_PYTHON=1, a fresh process: every
C path at once), over every bundled sample, every shared capture and the bench capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import capture_builders as cb
import pytest

from parsers.capture import _format, _packets
from parsers.h2 import _conn
from parsers.records import H2EventKind, HistoryLetter, ResendPrompt, RttSource, TcpEventKind
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
    # clocks that misbehaved: a sample whose packets from the middle on are stamped from 1970
    # (bulk runs across the step: a connection ends at its latest time, as packet by packet),
    # and one with every 30th packet stamped 0 (read at the time of the packet before)
    mixed = (ROOT / "samples" / "mixed" / "capture.pcap").read_bytes()
    n = len(cb.records(mixed)[1])
    lost = tmp_path / "clock_lost.pcap"
    lost.write_bytes(cb.restamp(mixed, lambda i, sec, usec: (sec, usec) if i < n // 2 else (i, usec)))
    zeros = tmp_path / "stamped_zero.pcap"
    zeros.write_bytes(cb.restamp(mixed, lambda i, sec, usec: (0, 0) if i % 30 == 29 else (sec, usec)))
    return out + [str(lost), str(zeros)]


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


VOCABULARIES = {"tcp_events.kind": TcpEventKind, "tcp_events.prompt": ResendPrompt, "h2_events.kind": H2EventKind,
                "rtt_samples.source": RttSource}


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
    assert set(seen["tcp_events.prompt"]) == {m.value for m in ResendPrompt}  # resends of both kinds


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


def test_the_h2_fast_path_reads_the_fields_h2_layout_declares():
    """What the HTTP/2 C path reads and writes of the parser's objects is declared once
    (parsers/h2/_layout.py), its header generated from it; every declared field exists on
    its class, the templates are the classes' own __slots__ in order, and the records'
    layouts are the dataclasses' fields."""
    from dataclasses import fields

    from parsers.grpc import GrpcSplitter
    from parsers.h2 import _layout
    from parsers.h2._flow import FlowState
    from parsers.h2._hpack import DecodedBlock, TolerantDecoder
    from parsers.h2._state import _Dir
    from parsers.h2._streams import Stream
    from parsers.records import PayloadChunk, RequestRecord

    header = (ROOT / "parsers" / "h2" / "_layout.h").read_text()
    assert header == _layout.c_header(), "parsers/h2/_layout.h is stale: TAILTAP_PURE_PYTHON=1 python -m parsers.h2._layout > parsers/h2/_layout.h"
    assert '#include "_layout.h"' in (ROOT / "parsers" / "h2" / "_speedups.c").read_text()
    classes = {"C": PayloadChunk, "D": _Dir, "S": Stream, "X": Stream, "G": GrpcSplitter, "F": FlowState,
               "H": TolerantDecoder, "B": DecodedBlock, "R": RequestRecord}
    for prefix, _array, _what, names in _layout.LAYOUTS:
        slots = set(classes[prefix].__slots__)
        assert set(names) <= slots, (prefix, set(names) - slots)
    assert tuple(f.name for f in fields(RequestRecord)) == _layout.LAYOUTS[-1][3]
    assert tuple(n for n, _k in _layout.STREAM_TEMPLATE) == Stream.__slots__
    assert tuple(n for n, _k in _layout.SPLITTER_TEMPLATE) == GrpcSplitter.__slots__
    # and what C builds without __init__ is what __init__ builds
    for sid in (1, 3):
        built, made = _conn._speedups.stream(sid), Stream(sid)
        assert [getattr(built, n) for n in Stream.__slots__] == [getattr(made, n) for n in Stream.__slots__]
    for web in (False, True):
        built, made = _conn._speedups.splitter(web), GrpcSplitter(False, web)
        assert [getattr(built, n) for n in GrpcSplitter.__slots__] == [getattr(made, n) for n in GrpcSplitter.__slots__]


def test_take_rows_reads_what_the_columns_hold():
    """The per-packet path's rows read in C from the bulk path's records are what numpy
    reads from the columns (value and type), on a real capture's batches and on edge
    values of the fields only the per-packet path reads (MSS, window scale, IP version)."""
    import numpy as np
    from tcp_builders import decode_file

    from parsers.tcp import TcpAnalyzer, _analysis, _flows

    batches = decode_file(ROOT / "samples" / "loss_burst" / "capture.pcap", batch_packets=4096)
    edge = decode_file(ROOT / "samples" / "mixed" / "capture.pcap", batch_packets=600)[0]
    k = len(edge)
    edge.mss = np.resize(np.array([-1, 0, 1460, 65535], np.int32), k)
    edge.wscale = np.resize(np.array([-1, 0, 14, 127, -128], np.int8), k)
    edge.ip_version = np.resize(np.array([4, 6], np.uint8), k)
    for b in [*batches, edge]:
        g = _flows.group_flows(b)
        sackm = np.zeros(len(b), bool)
        sackm[list(b.sack)] = True
        tcp = TcpAnalyzer()
        tcp._pack_args = (b, sackm, g.swap, g.order)
        records, numpy_rows = tcp._records(), _analysis.RowLists(b, g.swap, g.order)
        n = len(b)
        for a, z in ((0, n), (n // 3, n // 3 + 32), (n - 1, n), (7, 7)):
            got, want = _fast._speedups.take_rows(records, a, z), numpy_rows.take(a, z)
            assert got == want
            assert [type(v) for g_ in got for v in g_] == [type(v) for w in want for v in w]
    with pytest.raises(IndexError):
        _fast._speedups.take_rows(records, 0, n + 1)
