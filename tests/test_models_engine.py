"""How the SQL models are computed (telemetry.models.db, telemetry.models.catalogue, telemetry.models.stored):
defined on first use, computed once per capture at ingest and read back, and always the
same answer as computing them from the tables."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.catalogue import load_models, stored_key
from telemetry.models.db import DEFAULT_PARAMS, connect
from telemetry.store.parquet import MODELS, Store

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
CAPTURE_MODELS = [m.name for m in load_models() if m.materialize == "capture"]
needs_samples = pytest.mark.skipif(not (SAMPLES / "loss_burst" / "capture.pcap").exists(), reason="lab samples missing")


def _canon(value: object) -> object:
    # DuckDB sums doubles in parallel, in no fixed order: the last bits may differ
    return float(f"{value:.9g}") if isinstance(value, float) else value


def _rows(con, name: str) -> list[tuple]:
    return sorted((tuple(_canon(v) for v in row) for row in con.execute(f"SELECT * FROM {name}").fetchall()), key=repr)


@pytest.fixture(scope="module")
def lossy_store(tmp_path_factory) -> Store:
    store = Store(tmp_path_factory.mktemp("store"))
    assert ingest_file(SAMPLES / "loss_burst" / "capture.pcap", store, IngestOptions()).error is None
    return store


@needs_samples
def test_capture_models_are_stored_with_the_capture(lossy_store):
    (capture_id,) = lossy_store.capture_ids()
    models = {m.name: m for m in load_models()}
    assert CAPTURE_MODELS, "some models are kept per capture"
    for name in CAPTURE_MODELS:
        path = lossy_store.model_file(stored_key(models, name, DEFAULT_PARAMS), name, capture_id)
        assert path.exists(), name


@needs_samples
def test_path_rtt_buckets_are_their_samples_figures(lossy_store):
    """Each path_rtt bucket's count, minimum, quartiles and maximum are those of its RTT
    samples (numpy's linearly interpolated percentiles as the reference)."""
    import numpy as np

    con = connect(lossy_store, use_stored=False)
    samples: dict[tuple, list[float]] = {}
    for *key, rtt_ms in con.execute(
        "SELECT c.client_addr, c.server_addr, s.direction, epoch_ns(s.ts) // 100000000, s.rtt_ms "
        "FROM rtt_samples AS s JOIN connections AS c USING (conn_id) "
        "WHERE NOT (c.capture_side = 'server' AND s.direction = 'to_server') "
        "AND NOT (c.capture_side = 'client' AND s.direction = 'to_client')"
    ).fetchall():
        samples.setdefault(tuple(key), []).append(rtt_ms)
    got = {tuple(row[:4]): row[4:] for row in con.execute(
        "SELECT client_addr, server_addr, direction, bucket, samples, rtt_min_ms, rtt_p25_ms, rtt_p50_ms, rtt_max_ms "
        "FROM path_rtt").fetchall()}
    assert len(got) > 100 and got.keys() == samples.keys()
    for key, values in samples.items():
        p25, p50 = np.percentile(values, [25, 50])
        want = (len(values), min(values), p25, p50, max(values))
        assert got[key] == pytest.approx(want, rel=1e-12), key


@needs_samples
def test_a_requests_client_side_token_gap_is_its_largest_between_next_indices(lossy_store, tmp_path):
    """request_metrics' gap_eff_ms: the largest wait from one token message's read time to
    the next index's (none across a missing index; from the later copy of a message that
    shows twice), else the capture point's max_gap_ms. On the lab's loss_burst capture with
    one response message dropped and another shown twice, two seconds later."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    edited = Store(tmp_path / "edited")
    shutil.copytree(lossy_store.root, edited.root)
    shutil.rmtree(edited.root / MODELS)
    (path,) = edited.table_files("messages")
    messages = pq.read_table(path)
    response = pc.equal(messages["direction"], "response")
    rows = [i for i, r in enumerate(response.to_pylist()) if r and messages["index"][i].as_py() >= 3]
    dropped, shown_twice = rows[0], rows[len(rows) // 2]
    copy = messages.slice(shown_twice, 1)
    later = pc.add(copy["ts"], pa.scalar(2_000_000_000, pa.duration("ns")))
    copy = copy.set_column(copy.schema.get_field_index("ts"), "ts", later.cast(copy.schema.field("ts").type))
    keep = [i for i in range(messages.num_rows) if i != dropped]
    pq.write_table(pa.concat_tables([messages.take(keep), copy]), path)

    con = connect(edited, use_stored=False)
    reads: dict[tuple, dict[int, list[int]]] = {}
    for conn_id, stream_id, token_index, t in con.execute(
        "SELECT conn_id, stream_id, token_index, epoch_ns(coalesce(read_ts, ts)) FROM client_read WHERE token_index IS NOT NULL"
    ).fetchall():
        reads.setdefault((conn_id, stream_id), {}).setdefault(token_index, []).append(t)
    assert any(len(ts) == 2 for by_index in reads.values() for ts in by_index.values())
    assert any(set(by_index) != set(range(len(by_index))) for by_index in reads.values())
    want = {}
    for key, by_index in reads.items():
        gaps = [min(by_index[i + 1]) - max(ts) for i, ts in by_index.items() if i + 1 in by_index]
        if gaps:
            want[key] = max(gaps) / 1e6
    got = con.execute("SELECT conn_id, stream_id, gap_eff_ms, max_gap_ms FROM request_metrics").fetchall()
    assert len(want) > 100
    for conn_id, stream_id, gap_eff_ms, max_gap_ms in got:
        assert gap_eff_ms == want.get((conn_id, stream_id), max_gap_ms), (conn_id, stream_id)


def test_the_queue_direction_is_where_the_path_inflated_most_toward_the_client_on_a_tie(tmp_path):
    """request_evidence's queue_direction: the direction whose path RTT inflation over the
    request's 100 ms buckets (the 25th percentile of path_rtt's inflation_p25_ms) is the
    larger; as large both ways, toward the client, in every run (it was either, at random,
    before). On a small capture of the realistic benchmark's generator, where hundreds of
    requests see the same inflation both ways."""
    import sys

    import numpy as np

    sys.path.insert(0, str(SAMPLES.parent / "bench"))
    from gen_realistic import generate

    capture = tmp_path / "realistic.pcap"
    generate(str(capture), 60_000, connections=200, seed=1)
    store = Store(tmp_path / "store")
    assert ingest_file(capture, store, IngestOptions()).error is None
    con = connect(store, use_stored=False)
    inflation: dict[tuple, list[float]] = {}
    for client, server, direction, bucket, value in con.execute(
        "SELECT client_addr, server_addr, direction, bucket, inflation_p25_ms FROM path_rtt WHERE inflation_p25_ms IS NOT NULL"
    ).fetchall():
        inflation[(client, server, bucket)] = inflation.get((client, server, bucket), []) + [(direction, value)]
    ties = 0
    got = dict(((c, s), d) for c, s, d in con.execute("SELECT conn_id, stream_id, queue_direction FROM request_evidence").fetchall())
    for conn_id, stream_id, client, server, first, last in con.execute(
        "SELECT conn_id, stream_id, client_addr, server_addr, epoch_ns(started_at) // 100000000, epoch_ns(finished_at) // 100000000 "
        "FROM request_metrics WHERE client_addr IS NOT NULL AND server_addr IS NOT NULL AND finished_at >= started_at"
    ).fetchall():
        by_direction: dict[str, list[float]] = {}
        for bucket in range(first, last + 1):
            for direction, value in inflation.get((client, server, bucket), []):
                by_direction.setdefault(direction, []).append(value)
        typical = {d: float(np.percentile(v, 25)) for d, v in by_direction.items()}
        if len(typical) == 2 and typical["to_client"] == typical["to_server"]:
            ties += 1
            assert got[(conn_id, stream_id)] == "to_client", (conn_id, stream_id)
        elif len(typical) == 2 and abs(typical["to_client"] - typical["to_server"]) <= 1e-9 * max(typical.values()):
            continue  # the last bits of an interpolation decide: either
        else:
            want = max(typical, key=typical.get) if typical else None
            assert got[(conn_id, stream_id)] == want, (conn_id, stream_id, typical)
    assert ties >= 50


@needs_samples
def test_stored_models_answer_as_computing_them_does(lossy_store):
    stored = connect(lossy_store)
    live = connect(lossy_store, use_stored=False)
    for name in CAPTURE_MODELS + ["request_cause", "latency_decomposition", "spikes", "spike_attribution"]:
        got, want = _rows(stored, name), _rows(live, name)
        assert got == want, name
        assert got or name in ("shaper_evidence", "policer_evidence"), f"{name} has rows on a lossy capture"
    # the stored rows were really read: the view is over the stored files
    (sql,) = stored.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'request_evidence'").fetchone()
    assert f"/{MODELS}/" in sql


@needs_samples
def test_other_settings_compute_the_model_afresh(lossy_store):
    default = connect(lossy_store)
    other = connect(lossy_store, {"queue_min_ms": 1000.0})
    other.execute("SELECT count(*) FROM policer_evidence").fetchone()
    assert other.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'policer_evidence'").fetchone()[0] == 0
    default.execute("SELECT count(*) FROM policer_evidence").fetchone()
    assert default.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'policer_evidence'").fetchone()[0] == 1


@needs_samples
def test_models_are_defined_on_first_use(lossy_store):
    con = connect(lossy_store)
    defined = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert "request_cause" not in defined and "requests" in defined
    con.execute("SELECT count(*) FROM request_cause").fetchone()
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal UNION ALL "
                                        "SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
    assert {"request_cause", "slow_requests"} <= names


@needs_samples
def test_reingest_replaces_the_stored_models(tmp_path):
    store = Store(tmp_path / "s")
    capture = SAMPLES / "loss_burst" / "capture.pcap"
    ingest_file(capture, store, IngestOptions())
    before = sorted(p.relative_to(store.root) for p in (store.root / MODELS).rglob("*.parquet"))
    ingest_file(capture, store, IngestOptions(force=True))
    after = sorted(p.relative_to(store.root) for p in (store.root / MODELS).rglob("*.parquet"))
    assert before == after and len(after) == len(CAPTURE_MODELS)
    assert connect(store).execute("SELECT count(*) = count(DISTINCT (conn_id, stream_id)) FROM request_evidence").fetchone()[0]


@needs_samples
def test_a_capture_without_stored_models_is_computed_when_read(tmp_path, lossy_store):
    """An older store (or one whose models could not be stored) still answers, the same."""
    old = Store(tmp_path / "old")
    shutil.copytree(lossy_store.root, old.root)
    shutil.rmtree(old.root / MODELS)
    assert _rows(connect(old), "request_cause") == _rows(connect(lossy_store), "request_cause")


@needs_samples
def test_a_small_store_is_queried_on_one_thread(lossy_store, monkeypatch):
    """A lab capture's tables (~0.5 MiB) gain no time from a second DuckDB thread, only its
    CPU; a store past ONE_THREAD_BYTES keeps DuckDB's default, and the answers are the same."""
    import duckdb

    from telemetry.models import db

    small = connect(lossy_store)
    assert small.execute("SELECT current_setting('threads')").fetchone()[0] == 1
    monkeypatch.setattr(db, "ONE_THREAD_BYTES", 1)
    large = connect(lossy_store)
    default = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
    assert large.execute("SELECT current_setting('threads')").fetchone()[0] == default
    assert _rows(small, "request_metrics") == _rows(large, "request_metrics")


@needs_samples
def test_the_report_is_sized_by_its_requests_when_the_kept_models_serve(lossy_store, monkeypatch):
    """The report reads answers per request and window, which the models kept with the
    captures give: with the default settings the requests table alone decides one thread
    (a store whose packets' tables are past the bound, its requests not: one thread);
    with other settings the models are computed from the packets, and every table counts."""
    import duckdb

    from telemetry.models import db

    requests = sum(p.stat().st_size for p in lossy_store.table_files("requests"))
    every = sum(p.stat().st_size for t in db.COLUMNS for p in lossy_store.table_files(t))
    assert requests < every // 3
    monkeypatch.setattr(db, "ONE_THREAD_BYTES", requests + 1)
    default = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]

    def threads(params: dict, **kw) -> int:
        return connect(lossy_store, params, **kw).execute("SELECT current_setting('threads')").fetchone()[0]

    assert threads({"window_s": None}, sized_by_requests=True) == 1
    assert threads({"window_s": None}) == default
    assert threads({"window_s": 2.0}, sized_by_requests=True) == default  # computed afresh
    assert threads({"window_s": None}, sized_by_requests=True, use_stored=False) == default


@needs_samples
def test_sums_of_durations_do_not_depend_on_row_order(lossy_store):
    """request_evidence sums stalls and waits with sum_ms: as whole ns, so the order in
    which DuckDB's threads hand a group's rows over cannot move the last bits (a plain
    sum of doubles gave loss_stall_ms a unit in the last place apart run to run)."""
    con = connect(lossy_store).con
    con.execute("SET threads = 1")  # rows summed in the order given
    values = [0.1, 0.2, 0.3, 127.257087, 58.728181, 1e-6]
    sums = set()
    for order in (values, values[::-1], sorted(values), values[2:] + values[:2]):
        rows = ", ".join(f"({i}, {v!r})" for i, v in enumerate(order))
        sums.add(con.execute(f"SELECT sum_ms(x) FROM (SELECT * FROM (VALUES {rows}) AS t(i, x) ORDER BY i)").fetchone()[0])
    assert sums == {186.585269}
    # rows left out are NULL; none at all: NULL, as sum gives
    assert con.execute("SELECT sum_ms(CASE WHEN x > 1 THEN x END), sum_ms(CASE WHEN x > 9 THEN x END) "
                       "FROM (VALUES (0.5), (2.25)) AS t(x)").fetchone() == (2.25, None)


@needs_samples
def test_columns_a_store_lacks_read_as_null(tmp_path, lossy_store):
    """A table's columns are read from its files' footers in one query at connect: a column
    added after the store was written (here: requests written without ``model``) reads as
    NULL, the others as before; when a listed file is gone by then (the daemon's
    retention) each table is asked through its glob instead."""
    import duckdb
    import pyarrow.parquet as pq

    from telemetry.models import db
    from telemetry.store.schema import COLUMNS

    old = Store(tmp_path / "old")
    shutil.copytree(lossy_store.root, old.root)
    for path in old.table_files("requests"):
        pq.write_table(pq.read_table(path).drop_columns(["model"]), path)
    query = "SELECT conn_id, stream_id, latency_ms, model FROM requests ORDER BY ALL"
    want = [(*row[:3], None) for row in connect(lossy_store).execute(query).fetchall()]
    assert want and connect(old).execute(query).fetchall() == want
    files = {table: old.table_files(table) for table in COLUMNS}
    present, uniform = db._present_columns(duckdb.connect(), files)
    assert "model" not in present["requests"] and "latency_ms" in present["requests"]
    assert present["requests"] == {c.name for c in COLUMNS["requests"]} - {"model"}
    assert "requests" in uniform  # every file lacks it alike
    gone = {**files, "requests": [*files["requests"], old.root / "requests" / "gone.parquet"]}
    assert db._present_columns(duckdb.connect(), gone) == ({}, set())
    # nested columns are one column each, whatever they hold
    con, nested = duckdb.connect(), tmp_path / "nested.parquet"
    con.execute(f"COPY (SELECT 1 AS a, {{'x': 1, 'y': [{{'z': 2}}]}} AS s, [3] AS l, 4 AS b) TO '{nested}'")
    assert db._present_columns(con, {"t": [nested]}) == ({"t": {"a", "s", "l", "b"}}, {"t"})


@needs_samples
def test_a_table_whose_files_differ_is_read_by_column_name(tmp_path, lossy_store):
    """Files of one table written by different versions (here: one without ``model``, its
    columns in another order) are matched by column name; files that all share one schema
    are read with the first one's, which is quicker, with the same answer."""
    import duckdb
    import pyarrow.parquet as pq

    from telemetry.models import db
    from telemetry.store.schema import COLUMNS

    mixed = Store(tmp_path / "mixed")
    shutil.copytree(lossy_store.root, mixed.root)
    shutil.rmtree(mixed.root / MODELS)
    (path,) = mixed.table_files("requests")
    table = pq.read_table(path)
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), path)
    older = table.slice(half).drop_columns(["model"])
    pq.write_table(older.select(older.column_names[::-1]), path.with_name("older-00001.parquet"))
    present, uniform = db._present_columns(duckdb.connect(), {t: mixed.table_files(t) for t in COLUMNS})
    assert "requests" not in uniform and "messages" in uniform and "model" in present["requests"]
    # (the lab's requests name no model: every column read is as it was)
    query = "SELECT conn_id, stream_id, method, request_start, latency_ms, model FROM requests ORDER BY ALL"
    whole = connect(lossy_store).execute(query).fetchall()
    assert len(whole) > 100 and connect(mixed).execute(query).fetchall() == whole
    assert _rows(connect(mixed), "request_metrics") == _rows(connect(lossy_store), "request_metrics")


@needs_samples
def test_a_model_past_the_memory_bound_is_stored_all_the_same(tmp_path, lossy_store, monkeypatch):
    """DuckDB spills what does not fit in DERIVE_MEMORY_MB, but not every operator can (a
    quantile keeps every value of its group): a model that runs out of it is computed again
    within twice as much, and so on, and stored, the same rows, and the user is told. (A
    4 MB bound makes the lab capture's client_read run out, as 512 MB would path_rtt's
    quantiles past some 15M packets.)"""
    from telemetry.models import stored

    monkeypatch.setattr(stored, "DERIVE_MEMORY_MB", 4)
    # room to grow to 1 GB: how much more than 4 MB client_read needs is DuckDB's to say
    # (16-32 MB on this machine, past 32 MB in one CI run), not this test's
    monkeypatch.setattr(stored, "GROWN_BOUNDS", 8)
    store = Store(tmp_path / "store")
    result = ingest_file(SAMPLES / "loss_burst" / "capture.pcap", store, IngestOptions())
    assert result.error is None
    (issue,) = [i for i in result.issues if i.kind == "analysis_memory"]
    assert "its 4 MB" in issue.message
    grown = re.search(r"client_read: within (\d+) MB", issue.message)
    assert grown and int(grown.group(1)) in [4 << k for k in range(1, 9)], issue.message
    assert not [i for i in result.issues if i.kind == "analysis_not_stored"]
    (capture_id,) = store.capture_ids()
    for name in CAPTURE_MODELS:
        assert list(store.kept_model_files(capture_id, name)), name
        assert _rows(connect(store), name) == _rows(connect(lossy_store), name)
    # past the last grown bound: without one
    monkeypatch.setattr(stored, "GROWN_BOUNDS", 0)
    result = ingest_file(SAMPLES / "loss_burst" / "capture.pcap", Store(tmp_path / "again"), IngestOptions())
    (issue,) = [i for i in result.issues if i.kind == "analysis_memory"]
    assert "client_read: without a bound" in issue.message
