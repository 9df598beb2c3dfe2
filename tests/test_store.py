"""The Parquet store: schema documentation, Hive partitions, idempotency, atomicity."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from telemetry.models.db import connect, load_models
from telemetry.store.parquet import Store, clean_staging, table_from_columns
from telemetry.store.schema import PARTITION_TIME, TABLES, describe

HOUR = 3_600_000_000_000
T0 = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z


def test_every_column_is_documented():
    for table, schema in TABLES.items():
        assert PARTITION_TIME[table] in schema.names
        for name, _typ, doc in describe(table):
            assert len(doc) > 10, f"{table}.{name} lacks documentation"


def test_design_column_names_kept():
    required = {
        "requests": "conn_id stream_id client_addr client_port server_addr server_port method path authority kind "
        "request_start request_end response_headers first_message last_message end http_status grpc_status "
        "response_messages ttft_ms latency_ms max_gap_ms headers_known first_message_acked end_acked "
        "ttft_client_est_ms latency_client_est_ms",
        "messages": "conn_id stream_id direction index ts acked_ts size",
        "tcp_events": "ts conn_id direction kind seq bytes recovery_ms",
        "rtt_samples": "ts conn_id direction rtt_ms source",
    }
    for table, names in required.items():
        missing = set(names.split()) - set(TABLES[table].names)
        assert not missing, f"{table} lacks {missing}"


def _rtt_rows(capture_id: str, times: list[int]):
    return table_from_columns("rtt_samples", fill_missing=True, columns={
        "capture_id": [capture_id] * len(times),
        "conn_id": ["Cx"] * len(times),
        "ts": times,
        "direction": ["to_client"] * len(times),
        "rtt_ms": [1.5] * len(times),
        "source": ["data_ack"] * len(times),
    })


def _capture_row(capture_id: str):
    return table_from_columns("captures", fill_missing=True, columns={"capture_id": [capture_id], "path": ["x.pcap"], "first_ts": [T0]})


def test_integers_and_times_delta_encoded_the_rest_zstd_but_what_the_schema_keeps_plain(tmp_path):
    """A real capture's files: integer and time columns DELTA_BINARY_PACKED without zstd;
    the others zstd, but messages.gap_ms, which the schema keeps plain (zstd saved 8 % of
    its bytes and cost a fifth of the table's write); text columns dictionary-encoded."""
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.store.schema import COLUMNS

    capture = Path(__file__).resolve().parents[1] / "samples" / "loss_burst" / "capture.pcap"
    store = Store(tmp_path)
    assert ingest_file(capture, store, IngestOptions(store_models=False)).error is None
    seen = set()
    for table, cols in COLUMNS.items():
        fields = {f.name: f.type for f in TABLES[table]}
        delta = {n for n, t in fields.items() if pa.types.is_integer(t) or pa.types.is_timestamp(t)}
        want = {c.name: "UNCOMPRESSED" if c.name in delta or not c.compress else "ZSTD" for c in cols}
        for f in store.table_files(table):
            meta = pq.read_metadata(f)
            for rg in range(meta.num_row_groups):
                columns = [meta.row_group(rg).column(i) for i in range(meta.num_columns)]
                assert {c.path_in_schema: c.compression for c in columns} == want, (table, f.name)
                for c in columns:
                    if c.path_in_schema in delta:
                        assert "DELTA_BINARY_PACKED" in c.encodings, (table, c.path_in_schema, c.encodings)
                    elif pa.types.is_string(fields[c.path_in_schema]):
                        assert "RLE_DICTIONARY" in c.encodings, (table, c.path_in_schema, c.encodings)
                seen.add(table)
    assert {"messages", "rtt_samples", "segment_sends", "requests"} <= seen
    assert want_plain(COLUMNS) == {("messages", "gap_ms")}


def test_text_columns_are_written_as_codes_and_read_back_as_text(tmp_path):
    """The ingest hands text (ids, directions, kinds) to the writer as dictionary arrays;
    the files are plain Parquet text columns, dictionary-encoded, without an Arrow schema
    that would say "dictionary": read back, every table has the store schema's types, and
    DuckDB reads the same values."""
    import duckdb

    from telemetry.ingest import IngestOptions, ingest_file

    capture = Path(__file__).resolve().parents[1] / "samples" / "loss_burst" / "capture.pcap"
    store = Store(tmp_path)
    assert ingest_file(capture, store, IngestOptions(store_models=False)).error is None
    for table, schema in TABLES.items():
        for f in store.table_files(table):
            got = pq.read_table(f)
            assert got.schema.remove_metadata() == schema, (table, f.name)
            assert b"ARROW:schema" not in (pq.read_metadata(f).metadata or {})
            for i, field in enumerate(schema):
                if field.type == "string":
                    assert "RLE_DICTIONARY" in pq.read_metadata(f).row_group(0).column(i).encodings, (table, field.name)
    messages = [str(f) for f in store.table_files("messages")]
    directions = duckdb.sql(f"SELECT direction, count(*) FROM read_parquet({messages!r}) GROUP BY ALL ORDER BY 1").fetchall()
    want = pq.read_table(messages[0]).column("direction").to_pylist()
    assert directions == sorted((d, want.count(d)) for d in set(want)) and len(directions) == 2


def test_arrow_compute_is_registered_before_any_write_thread():
    """The Parquet writer looks up Arrow compute functions (a dictionary column's
    statistics); Arrow registers them when pyarrow._compute is first imported. Done
    lazily in one thread (by a cast) while a write ran in another, the write failed now and
    then ("No function registered with name: unique"): the store imports it up front."""
    import subprocess
    import sys

    code = "import sys, telemetry.store.parquet; print('pyarrow._compute' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "True"


def want_plain(columns) -> set[tuple[str, str]]:
    return {(t, c.name) for t, cols in columns.items() for c in cols if not c.compress}


def test_hive_partitions_and_idempotent_rewrite(tmp_path):
    store = Store(tmp_path)
    for _ in range(2):  # the second ingest of the same capture replaces the first
        w = store.writer("abc")
        w.append("rtt_samples", _rtt_rows("abc", [T0, T0 + 1, T0 + HOUR]))
        w.commit(_capture_row("abc"))
    files = store.table_files("rtt_samples")
    parts = sorted(str(f.parent.relative_to(tmp_path)) for f in files)
    assert parts == ["rtt_samples/date=2023-11-14/hour=22", "rtt_samples/date=2023-11-14/hour=23"]
    assert all(pq.read_metadata(f).row_group(0).column(0).path_in_schema == "capture_id" for f in files)
    assert all(pq.read_metadata(f).row_group(0).column(0).compression == "ZSTD" for f in files)
    con = connect(store)
    assert con.execute("SELECT count(*) FROM rtt_samples").fetchone()[0] == 3
    assert con.execute("SELECT count(*) FROM captures").fetchone()[0] == 1
    assert store.has_capture("abc")


def test_interrupted_write_is_invisible(tmp_path):
    store = Store(tmp_path)
    w = store.writer("def")
    w.flush_rows = 1  # force files into staging before the crash
    w.append("rtt_samples", _rtt_rows("def", [T0, T0 + 5]))
    w.wait()  # the background write reached the staging file
    # the process dies here: no commit, no abort
    assert list((tmp_path / ".staging").rglob("*.parquet"))
    assert store.table_files("rtt_samples") == []
    assert not store.has_capture("def")
    assert connect(store).execute("SELECT count(*) FROM rtt_samples").fetchone()[0] == 0
    clean_staging(tmp_path)
    assert not (tmp_path / ".staging").exists()


def test_null_partition_time_is_kept(tmp_path):
    """A request whose HEADERS were never seen is partitioned by a later time, not dropped."""
    store = Store(tmp_path)
    w = store.writer("ghi")
    w.append("requests", table_from_columns("requests", fill_missing=True, columns={
        "capture_id": ["ghi", "ghi"], "conn_id": ["C1", "C1"], "stream_id": [1, 3],
        "request_start": [None, T0], "first_message": [T0 + HOUR, None], "headers_known": [False, True],
    }))
    w.commit(_capture_row("ghi"))
    con = connect(store)
    assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 2
    # each in the hour of the time it has (the first: its first message's, an hour later)
    by_hour = {f.parent.name: pq.read_table(f).column("stream_id").to_pylist() for f in store.table_files("requests")}
    assert by_hour == {"hour=22": [3], "hour=23": [1]}


def test_statistics_of_times_and_numbers_only(tmp_path):
    """Row groups carry min/max of their times and numbers (what a reader can skip row
    groups by) and none of their text columns (costly to write, never a range)."""
    store = Store(tmp_path)
    w = store.writer("sta")
    w.append("rtt_samples", _rtt_rows("sta", [T0 + 5, T0 + 9]))
    w.commit(_capture_row("sta"))
    (path,) = store.table_files("rtt_samples")
    group = pq.read_metadata(path).row_group(0)
    stats = {group.column(i).path_in_schema: group.column(i).statistics for i in range(group.num_columns)}
    assert stats["ts"].has_min_max and stats["rtt_ms"].has_min_max
    assert (stats["ts"].min_raw, stats["ts"].max_raw) == (T0 + 5, T0 + 9)  # ns, as stored
    assert not any(stats[c] is not None and stats[c].has_min_max for c in ("capture_id", "conn_id"))
    assert connect(store).execute("SELECT count(*) FROM rtt_samples WHERE conn_id = 'Cx'").fetchone()[0] == 2


def test_all_models_run_on_an_empty_store(tmp_path):
    con = connect(Store(tmp_path))
    models = load_models()
    assert {"method_summary", "slowest_requests", "requests_in_range"} <= {m.name for m in models}
    for model in models:
        assert model.doc, f"queries/{model.name}.sql has no header comment"
        con.execute(f"SELECT * FROM {model.name}").fetchall()


def test_model_dependency_errors_are_named(tmp_path):
    (tmp_path / "a.sql").write_text("-- a\n-- depends_on: nope\nSELECT 1")
    with pytest.raises(ValueError, match="unknown view 'nope'"):
        load_models(tmp_path)


def test_interleaved_hours_keep_their_row_order(tmp_path):
    """Rows of several hours mixed in one flush land in their hour's file, in order."""
    store = Store(tmp_path)
    w = store.writer("mix")
    times = [T0 + (HOUR if i % 3 == 1 else 0) + i for i in range(30)]
    w.append("rtt_samples", _rtt_rows("mix", times))
    w.commit(_capture_row("mix"))
    got = sorted(pq.read_table(f).column("ts").cast("int64").to_pylist() for f in store.table_files("rtt_samples"))
    want = sorted([[t for t in times if (t - T0) // HOUR == h] for h in (0, 1)])
    assert got == want


def test_background_write_failure_is_raised_and_nothing_stored(tmp_path):
    store = Store(tmp_path)
    w = store.writer("bad", flush_rows=1)

    def disk_full(table: str, bucket: int):
        raise OSError("no space left on device")

    w._file = disk_full  # type: ignore[method-assign]
    w.append("rtt_samples", _rtt_rows("bad", [T0]))
    with pytest.raises(OSError, match="no space"):
        w.commit(_capture_row("bad"))
    w.abort()
    assert not store.has_capture("bad") and store.table_files("rtt_samples") == []
    assert not (tmp_path / ".staging").exists()


def test_tables_written_by_parallel_threads_keep_their_rows_in_order(tmp_path):
    store = Store(tmp_path)
    w = store.writer("par", flush_rows=2)  # a flush (a job of a write thread) every append
    times = [T0 + i for i in range(20)]
    for i in range(0, 20, 2):
        w.append("rtt_samples", _rtt_rows("par", times[i : i + 2]))
        w.append("tcp_events", table_from_columns("tcp_events", fill_missing=True, columns={
            "capture_id": ["par"] * 2, "conn_id": ["C1"] * 2, "ts": times[i : i + 2],
        }))
    w.commit(_capture_row("par"))
    for table in ("rtt_samples", "tcp_events"):
        files = store.table_files(table)
        assert len(files) == 1  # one file per hour, a row group per flush
        assert pq.read_table(files[0]).column("ts").cast("int64").to_pylist() == times
    assert not (tmp_path / ".staging").exists()
