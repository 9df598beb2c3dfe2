"""What tailtap stores does not depend on how the capture was cut into batches: a file is
read 524,288 packets (or 96 MiB) at a time, a live capture (the daemon) in the files its
ring rotates.

A stream seen mid-connection whose response ended before the HTTP/2 layer knew which side
was the client stayed open until the connection's end, and the ACK of its end was looked
up after the pipeline had forgotten the ACK progress below newer streams: its end_acked
became a later ACK (27.5 s late in samples/sweep/server_jitter read in batches of 4,096;
on five requests of the realistic 200k capture read as a file in batches of 65,536, the
two looked at 6.4 and 6.6 s late). Likewise a stream still open when the capture ended
(samples/sweep/client_dark), whose last bytes and their ACK came in the batch before the
last: that batch's pruning dropped the ACK, and its end_acked became the capture's last
ACK, 11.5 ms late, when the last batch held only the last packet or four.

The TCP layer's C run once lost its mark on a resent segment when the run held neither
new data nor an ACK of that side (a resend at a batch's start, its ACK taken packet by
packet): the ACK then gave a Karn-violating RTT sample (samples/flow_control in batches
of 512).

The send log (``segment_sends``) is the one table left out: it keeps the last two batches
for the lookback of a loss gate (bounded memory), so its rows at a gate's edges follow the
batches (telemetry/ingest/sendlog.py). They do not follow the TCP layer's bulk runs: a
retransmission's verdict (which opens the gate) falls on the packet it falls on packet by
packet, given there by the C run itself or by the per-packet path after a numpy run that
ended before it.
"""

from __future__ import annotations

import functools
import gzip
import json
import mmap
import re
import weakref
from pathlib import Path

import pytest
from test_split import table_rows

from parsers.capture import CaptureDecoder
from parsers.tcp import _analyzer
from telemetry.ingest import IngestOptions, ingest_file, pipeline, source
from telemetry.store.parquet import Store

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
BATCH_DEPENDENT = {"segment_sends"}


def _ingest(capture: Path, root: Path) -> dict[str, list[str]]:
    res = ingest_file(capture, Store(root), IngestOptions(store_models=False))
    assert res.error is None
    return {t: rows for t, rows in table_rows(root).items() if t not in BATCH_DEPENDENT}


def _refuse_to_map(*args, **kwargs):
    raise OSError(19, "No such device")  # what mmap says on a file system without it


@pytest.mark.parametrize("sample", ["sweep/server_jitter", "loss_burst", "throttle_policer", "mixed", "flow_control"])
def test_small_batches_store_the_same_rows(sample, tmp_path, monkeypatch):
    capture = SAMPLES / sample / "capture.pcap"
    whole = _ingest(capture, tmp_path / "whole")
    monkeypatch.setattr(pipeline, "CaptureDecoder", functools.partial(CaptureDecoder, batch_packets=512))
    small = _ingest(capture, tmp_path / "small")
    assert whole["requests"] and whole["rtt_samples"]
    for table, rows in whole.items():
        assert small[table] == rows, table


@pytest.mark.parametrize("last", [1, 4])
def test_a_last_batch_of_a_few_packets_stores_the_same_rows(last, tmp_path, monkeypatch):
    """The capture's last packet or four in a batch of their own: the streams still open
    at the end keep the ACKs of their old last bytes."""
    capture = SAMPLES / "sweep" / "client_dark" / "capture.pcap"
    whole = _ingest(capture, tmp_path / "whole")
    decoder = CaptureDecoder()
    packets = sum(len(b) for b in decoder.feed(capture.read_bytes()) + decoder.close())
    monkeypatch.setattr(pipeline, "CaptureDecoder", functools.partial(CaptureDecoder, batch_packets=packets - last))
    cut = _ingest(capture, tmp_path / "cut")
    assert whole["requests"]
    for table, rows in whole.items():
        assert cut[table] == rows, table


def test_a_batch_is_let_go_before_the_next_is_handed_out(tmp_path, monkeypatch):
    """A file read into a buffer (gzip, or one that cannot be mapped, as here) is read a
    chunk at a time and each chunk's batches are processed before the next chunk is read; the reader lets go of them first, so when the decoder hands out
    the next batch no earlier one holds an input store: the one the last batch had is
    reused, and a file is read with two stores, not three (95 MiB each at the default
    batch size). The rows are those of one batch."""
    capture = SAMPLES / "loss_burst" / "capture.pcap"
    whole = _ingest(capture, tmp_path / "whole")
    monkeypatch.setattr(pipeline, "CaptureDecoder", functools.partial(CaptureDecoder, batch_packets=512))
    monkeypatch.setattr(source, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(mmap, "mmap", _refuse_to_map)
    in_use: list[int] = []  # at each hand-out: retired stores an earlier batch still holds
    spare = CaptureDecoder._spare

    def spy(self: CaptureDecoder, size: int):
        in_use.append(sum(buf() is not None for _, buf in self._retired))
        return spare(self, size)

    monkeypatch.setattr(CaptureDecoder, "_spare", spy)
    small = _ingest(capture, tmp_path / "small")
    assert len(in_use) >= 20 and not any(in_use), in_use
    for table, rows in whole.items():
        assert small[table] == rows, table


@pytest.mark.parametrize("sample", ["mixed", "sweep/server_jitter"])
def test_message_rows_taken_per_connection_or_together_store_the_same_rows(sample, tmp_path, monkeypatch):
    """The pipeline takes the message rows of many connections in one pass (up to
    TAKE_ROWS rows): a pass per connection stores the same rows."""
    capture = SAMPLES / sample / "capture.pcap"
    monkeypatch.setattr(pipeline, "CaptureDecoder", functools.partial(CaptureDecoder, batch_packets=512))
    together = _ingest(capture, tmp_path / "together")
    monkeypatch.setattr(pipeline, "TAKE_ROWS", 1)
    alone = _ingest(capture, tmp_path / "alone")
    assert together["messages"] and together["requests"]
    for table, rows in together.items():
        assert alone[table] == rows, table


def test_mid_connection_stream_ended_before_orientation_gets_its_own_ack(tmp_path, monkeypatch):
    """Every request of the mid-connection sample has its end ACKed within 0.1 s (the
    path is 9.2 ms plus 14 ms of jitter), however small the batches."""
    import duckdb

    monkeypatch.setattr(pipeline, "CaptureDecoder", functools.partial(CaptureDecoder, batch_packets=512))
    store = Store(tmp_path)
    ingest_file(SAMPLES / "sweep" / "server_jitter" / "capture.pcap", store, IngestOptions(store_models=False))
    files = [str(p) for p in store.table_files("requests")]
    n, late_ms = duckdb.connect().execute(
        f"SELECT count(*), max(epoch_ns(end_acked) - epoch_ns(\"end\")) / 1e6 FROM read_parquet({files!r}) "
        "WHERE end_acked IS NOT NULL"
    ).fetchone()
    assert n >= 150 and late_ms < 100


def test_open_connections_written_past_the_pending_budget(tmp_path, monkeypatch):
    """Past PENDING_ROWS rows waiting in all open connections the largest are written
    (memory bounded whatever the number of connections), and the rows are the same."""
    capture = SAMPLES / "loss_burst" / "capture.pcap"
    monkeypatch.setattr(pipeline, "CaptureDecoder", functools.partial(CaptureDecoder, batch_packets=512))

    def ingest(root: Path) -> dict[str, list[str]]:
        assert ingest_file(capture, Store(root), IngestOptions(store_models=False)).error is None
        return table_rows(root)

    held = ingest(tmp_path / "held")
    written: list[int] = []
    flush = pipeline.CapturePipeline._flush_open

    def spy(self, conn):
        wrote = flush(self, conn)
        if wrote:
            written.append(conn.key)
        return wrote

    monkeypatch.setattr(pipeline.CapturePipeline, "_flush_open", spy)
    monkeypatch.setattr(pipeline, "PENDING_ROWS", 400)
    budget = ingest(tmp_path / "budget")
    assert len(written) >= 10 and len(set(written)) >= 2
    assert held["requests"] and held["segment_sends"]
    for table, rows in held.items():
        assert budget[table] == rows, table


@pytest.mark.parametrize("sample", ["loss_burst", "mixed", "queueing", "throttle_policer"])
def test_send_log_the_same_without_bulk_runs(sample, tmp_path, monkeypatch):
    """Every table, the send log included, is the same when every packet goes through
    the per-packet path. Before bulk runs ended at a verdict's packet, the send log of
    these samples lost up to 625 of its rows (mixed: 4,856 against 5,481)."""
    capture = SAMPLES / sample / "capture.pcap"

    def ingest(root: Path) -> dict[str, list[str]]:
        assert ingest_file(capture, Store(root), IngestOptions(store_models=False)).error is None
        return table_rows(root)

    bulk = ingest(tmp_path / "bulk")
    monkeypatch.setattr(_analyzer, "FAST_MIN_ROWS", 10**9)
    per_packet = ingest(tmp_path / "per_packet")
    assert bulk["segment_sends"]
    for table, rows in per_packet.items():
        assert bulk[table] == rows, table


def test_a_mapped_file_stores_the_rows_of_the_same_file_read(tmp_path, monkeypatch):
    """An uncompressed file is decoded in place from windows of it mapped into memory
    (64 KiB here, so that a window starts again at the records not handed out yet); a
    gzip file is read into a buffer and copied. Their rows are the same. A window is
    let go once its batches are processed: when the next is mapped, the decoder holds
    the last one (its unread records), and no batch holds an older one."""
    capture = SAMPLES / "mixed" / "capture.pcap"
    monkeypatch.setattr(pipeline, "CaptureDecoder", functools.partial(CaptureDecoder, batch_packets=512))
    monkeypatch.setattr(source, "MAP_BYTES", 64 << 10)
    alive: list[int] = []  # at each mapping: the earlier windows still mapped
    windows: list[weakref.ref] = []
    real_mmap = mmap.mmap

    def mapping(*args, **kwargs):
        alive.append(sum(w() is not None for w in windows))
        window = real_mmap(*args, **kwargs)
        windows.append(weakref.ref(window))
        return window

    monkeypatch.setattr(mmap, "mmap", mapping)
    mapped = _ingest(capture, tmp_path / "mapped")
    assert len(alive) > 20 and max(alive) <= 1, alive
    mappings = len(alive)
    packed = tmp_path / "mixed.pcap.gz"
    packed.write_bytes(gzip.compress(capture.read_bytes()))
    read = _ingest(packed, tmp_path / "read")
    assert len(alive) == mappings  # (read, not mapped)
    mapped_id, read_id = (json.loads(tables["captures"][0])["capture_id"] for tables in (mapped, read))
    assert mapped_id != read_id  # (the ids are the files' hashes)
    conn_ids = _same_connections(read, mapped)  # (conn ids hash the capture in too)
    for table, rows in mapped.items():
        if table != "captures":  # (it names the file)
            assert sorted(_CONN_ID.sub(lambda m: conn_ids[m.group()], r.replace(read_id, mapped_id))
                          for r in read[table]) == rows, table


_CONN_ID = re.compile(r"C[0-9a-f]{16}")


def _same_connections(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, str]:
    """The conn_id in ``b`` of each connection of ``a`` (the same 4-tuple and start): two
    captures of the same packets, each with ids of its own."""
    def by_tuple(tables: dict[str, list[str]]) -> dict[tuple, str]:
        rows = map(json.loads, tables["connections"])
        return {(r["client_addr"], r["client_port"], r["server_addr"], r["server_port"], r["start"]): r["conn_id"] for r in rows}

    x, y = by_tuple(a), by_tuple(b)
    assert x.keys() == y.keys() and not set(x.values()) & set(y.values())
    return {x[k]: y[k] for k in x}


def test_a_file_that_cannot_be_mapped_is_read(tmp_path, monkeypatch):
    """A file system that refuses to map files: the file is read into a buffer instead,
    with the same rows."""
    capture = SAMPLES / "loss_burst" / "capture.pcap"
    whole = _ingest(capture, tmp_path / "whole")
    monkeypatch.setattr(mmap, "mmap", _refuse_to_map)
    monkeypatch.setattr(source, "CHUNK_BYTES", 64 << 10)
    assert _ingest(capture, tmp_path / "read") == whole
