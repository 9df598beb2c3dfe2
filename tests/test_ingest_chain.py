"""IngestChain: a capture split into consecutive files (as the daemon rotates it) and read
with one parser state gives the rows of the unsplit capture, each file committed on its own.

The split is real: ``editcap -c`` cuts samples/baseline/capture.pcap (long-lived gRPC
connections) into files of N packets.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from telemetry.ingest import (
    ANALYSING,
    CLOSING_SUFFIX,
    FINISHING,
    IngestChain,
    closing_id,
    ingest_file,
)
from telemetry.models.db import connect
from telemetry.store.parquet import Store

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "samples" / "baseline" / "capture.pcap"
EDITCAP = shutil.which("editcap")
pytestmark = pytest.mark.skipif(EDITCAP is None, reason="needs editcap (wireshark-common)")

# what a request is, as the analyses read it (capture_id differs by design)
REQUEST_COLUMNS = (
    "conn_id, stream_id, method, path, grpc_status, response_messages, first_message, last_message, headers_known"
)
TABLES = ("requests", "connections", "messages", "rtt_samples", "h2_events", "flow_rates", "tcp_events")


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("split")
    subprocess.run([EDITCAP, "-c", "4200", str(BASELINE), str(folder / "part.pcap")], check=True, capture_output=True)
    files = sorted(folder.glob("part_*.pcap"))
    assert len(files) == 4, files
    return files


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Store:
    store = Store(tmp_path_factory.mktemp("whole") / "store")
    assert ingest_file(BASELINE, store).error is None
    return store


def _rows(store: Store, table: str) -> list[tuple]:
    """The table's rows, capture_id left out and each conn_id given as its connection's
    4-tuple and start (the ids hash the capture run in: a chain's first file's, or the
    unsplit file's)."""
    con = connect(store)
    cols = [c[0] for c in con.execute(f"DESCRIBE {table}").fetchall() if c[0] != "capture_id"]
    quoted = ", ".join(f'"{c}"' for c in cols)
    rows = con.execute(f"SELECT {quoted} FROM {table}").fetchall()
    if "conn_id" in cols:
        at, named = cols.index("conn_id"), _connections(store)
        rows = [(*r[:at], named[r[at]], *r[at + 1 :]) for r in rows]
    return sorted(rows, key=repr)


def _connections(store: Store) -> dict[str, str]:
    """conn_id -> the connection's 4-tuple and start."""
    return {cid: f"{ca}:{cp}-{sa}:{sp}@{start}" for cid, ca, cp, sa, sp, start in connect(store).execute(
        "SELECT conn_id, client_addr, client_port, server_addr, server_port, epoch_ns(start) FROM connections").fetchall()}


def _rows_of_requests(store: Store) -> list[tuple]:
    named = _connections(store)
    rows = connect(store).execute(f"SELECT {REQUEST_COLUMNS} FROM requests").fetchall()
    return sorted(((named[r[0]], *r[1:]) for r in rows), key=repr)


def _chain(store: Store, files: list[Path]):
    chain = IngestChain(store)
    results = [chain.ingest(p) for p in files]
    return results, chain.close()


def test_split_capture_read_as_a_chain_equals_the_unsplit_capture(tmp_path, parts, whole):
    store = Store(tmp_path / "store")
    results, closing = _chain(store, parts)
    assert [r.error for r in results] == [None] * len(parts) and not any(r.skipped for r in results)

    got = _rows_of_requests(store)
    assert got == _rows_of_requests(whole)
    assert got and all(row[-1] for row in got), "every request keeps its headers across rotations"
    # not only requests: every table holds the unsplit capture's rows
    for table in TABLES:
        assert _rows(store, table) == _rows(whole, table), table

    # each file its own captures row (its packets, its requests), plus the closing commit
    captures = connect(store).execute("SELECT capture_id, path, packets, requests FROM captures").fetchall()
    by_path = {path: (cid, packets, requests) for cid, path, packets, requests in captures}
    for r in results:
        assert by_path[r.path] == (r.capture_id, r.packets, r.requests) and r.packets > 0 and r.requests > 0
    assert closing is not None  # the connections outlive the last file
    assert by_path[f"{parts[-1]}{CLOSING_SUFFIX}"] == (closing_id(results[-1].capture_id), 0, closing.requests)
    assert sum(r.packets for r in results) == connect(whole).execute("SELECT packets FROM captures").fetchone()[0]
    # the requests are spread over the files, each written with the file it ended in
    per_file = dict(connect(store).execute("SELECT capture_id, count(*) FROM requests GROUP BY ALL").fetchall())
    assert all(per_file.get(r.capture_id) == r.requests for r in results)


def test_without_a_chain_the_split_loses_headers_and_splits_requests(tmp_path, parts, whole):
    """What the chain fixes (and proof that the split cuts through live connections)."""
    store = Store(tmp_path / "store")
    for p in parts:
        ingest_file(p, store)
    unknown, total = connect(store).execute(
        "SELECT count(*) FILTER (WHERE NOT headers_known), count(*) FROM requests"
    ).fetchone()
    assert unknown > 0
    assert total > connect(whole).execute("SELECT count(*) FROM requests").fetchone()[0]


def test_each_file_is_committed_when_it_was_read(tmp_path, parts):
    store = Store(tmp_path / "store")
    chain = IngestChain(store)
    first = chain.ingest(parts[0])
    # visible before the chain goes on or closes (the daemon deletes the file now)
    assert store.has_capture(first.capture_id) and chain.open
    count = connect(store).execute("SELECT count(*) FROM requests").fetchone()[0]
    assert count == first.requests > 0
    assert not (store.root / ".staging").exists()
    chain.close()
    assert not chain.open and chain.close() is None


def test_rerunning_the_chain_adds_no_rows(tmp_path, parts):
    store = Store(tmp_path / "store")
    _chain(store, parts)
    before = {t: sorted(_rows(store, t)) for t in (*TABLES, "captures")}
    n_captures = len(before["captures"])

    results, closing = _chain(store, parts)
    assert all(r.skipped for r in results) and closing is None
    assert {t: sorted(_rows(store, t)) for t in TABLES} == {t: before[t] for t in TABLES}
    assert connect(store).execute("SELECT count(*) FROM captures").fetchone()[0] == n_captures


def test_a_file_already_stored_breaks_the_chain(tmp_path, parts):
    """The chain closes before the stored file and starts afresh after it: every file's
    rows are in the store once, and no stream of a connection is written twice by the chain."""
    store = Store(tmp_path / "store")
    middle = ingest_file(parts[1], store)
    results, _closing = _chain(store, parts)
    assert [r.skipped for r in results] == [False, True, False, False]
    captures = connect(store).execute("SELECT capture_id, count(*) FROM captures GROUP BY ALL").fetchall()
    assert all(n == 1 for _cid, n in captures)
    assert middle.capture_id in dict(captures)
    # rows written by the chain (not the separate ingest of the middle file) are unique
    dupes = connect(store).execute(
        "SELECT conn_id, stream_id, count(*) FROM requests WHERE capture_id != ? GROUP BY ALL HAVING count(*) > 1",
        [middle.capture_id],
    ).fetchall()
    assert dupes == []


def test_ingest_file_is_a_chain_of_one(tmp_path, whole):
    store = Store(tmp_path / "store")
    chain = IngestChain(store)
    result = chain.ingest(BASELINE, final=True)
    assert not chain.open and chain.close() is None
    assert connect(store).execute("SELECT count(*) FROM captures").fetchone()[0] == 1
    for table in TABLES:
        assert _rows(store, table) == _rows(whole, table), table
    assert result.requests == connect(whole).execute("SELECT requests FROM captures").fetchone()[0]


def test_what_follows_the_reading_is_said_as_it_begins(tmp_path):
    """After the last progress tick come seconds of work on a big capture (on the realistic
    10M one, 20 s after 30 s of reading): each stage is said as it begins, FINISHING (the open connections
    closed, their last rows written), then ANALYSING (the models kept with the capture),
    both before the commit puts the capture in the store."""
    store = Store(tmp_path / "store")
    said: list[tuple[str, object]] = []
    result = ingest_file(BASELINE, store, progress=lambda pos, packets: said.append(("read", packets)),
                         stage=lambda name: said.append((name, store.capture_ids())))
    assert result.error is None and store.capture_ids()
    assert said[0][0] == "read" and said[-3][0] == "read"
    assert said[-2:] == [(FINISHING, []), (ANALYSING, [])]
