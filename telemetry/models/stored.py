"""The models kept with each capture (``-- materialize: capture``, telemetry.models.catalogue),
computed when the capture is committed: the per-request evidence, causes' inputs and
client-side metrics are derived once, not by every query that reads them.

They are computed from the capture's own rows and from the captures already in the store
that overlap its time span (a connection that went on across rotated files, the path's
trailing RTT floor), with the default settings, exactly as the SQL models compute them
over the whole store; the files are staged with the capture's tables and committed (and
replaced) with them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from telemetry.store.parquet import CaptureWriter, Store
from telemetry.store.schema import TABLES

if TYPE_CHECKING:
    from telemetry.models.db import Analysis

LOOKBACK_NS = 60_000_000_000  # the longest trailing window a model looks back over (rtt_floor)
# DuckDB's share while a capture's models are computed: it spills beyond, except the state of
# an aggregate that keeps every value of a group (quantile_cont: path_rtt's RTT samples took
# 256-384 MB at 10M packets); a model that does not fit is computed again within twice as
# much, up to GROWN_BOUNDS times, then without a bound
DERIVE_MEMORY_MB = 512
GROWN_BOUNDS = 3


class FileStore(Store):
    """A store seen through explicit files per table (staged and committed ones)."""

    def __init__(self, root: Path, files: dict[str, list[Path]]) -> None:
        super().__init__(root)
        self._files = files

    def table_files(self, table: str) -> list[Path]:
        return self._files.get(table, [])

    def table_glob(self, table: str):  # type: ignore[override]
        return [str(p) for p in self.table_files(table)]


def _overlapping_captures(store: Store, capture_id: str, staged: dict[str, list[Path]]) -> list[str]:
    """Committed captures whose time span overlaps what the new capture's requests look at."""
    from telemetry.models.db import duckdb

    committed = store.table_files("captures")
    if not committed or not staged.get("captures"):
        return []
    con = duckdb.connect()
    try:
        files = [str(p) for p in staged["captures"]]
        lo, hi = con.execute(
            f"SELECT min(epoch_ns(first_ts)), max(epoch_ns(last_ts)) FROM read_parquet({files!r})"
        ).fetchone()
        if staged.get("requests"):
            req = [str(p) for p in staged["requests"]]
            first_request = con.execute(
                f"SELECT min(epoch_ns(coalesce(request_start, response_headers, first_message, \"end\"))) FROM read_parquet({req!r})"
            ).fetchone()[0]
            if first_request is not None and (lo is None or first_request < lo):
                lo = first_request
        if lo is None or hi is None:
            return []
        rows = con.execute(
            f"SELECT DISTINCT capture_id FROM read_parquet({[str(p) for p in committed]!r}) "
            "WHERE capture_id <> ? AND epoch_ns(last_ts) >= ? AND epoch_ns(first_ts) <= ?",
            [capture_id, lo - LOOKBACK_NS, hi],
        ).fetchall()
    finally:
        con.close()
    return [r[0] for r in rows]


def _exact_select(con, name: str) -> str:
    """SELECT of a model whose values read back as they were: Parquet has no 128-bit
    integers (DuckDB's sums of BIGINTs), which would come back as doubles; they are sums of
    counts and fit a BIGINT."""
    cols = con.execute(f"DESCRIBE SELECT * FROM {name}").fetchall()
    return "SELECT " + ", ".join(
        f'CAST("{c[0]}" AS BIGINT) AS "{c[0]}"' if c[1] in ("HUGEINT", "UHUGEINT") else f'"{c[0]}"' for c in cols
    ) + f" FROM {name}"


def store_capture_models(writer: CaptureWriter, outgrown: list[str] | None = None) -> dict[Path, Path]:
    """Compute the capture-kept models for the capture ``writer`` is about to commit (its
    files written and closed) into its staging folder; returns staging file -> place.
    ``outgrown`` gets what needed more than DERIVE_MEMORY_MB (see :func:`_store_within`)."""
    from telemetry.models.catalogue import stored_key
    from telemetry.models.db import DEFAULT_PARAMS, connect

    store, capture_id = writer.store, writer.capture_id
    staged = writer.staged_files()
    files = {t: list(staged.get(t, [])) for t in TABLES}
    for other in _overlapping_captures(store, capture_id, staged):
        for table in TABLES:
            files[table] += store.table_dir(table).glob(f"**/{other}-*.parquet")
    analysis = connect(FileStore(store.root, files), {"capture_ids": [capture_id]}, use_stored=False)
    # bounded memory whatever the capture's size: DuckDB spills what does not fit
    spill = writer.stage_path(Path("duckdb-spill"))
    # the models read the capture's few files again and again: their Parquet footers once
    # (DuckDB checks a file did not change; the cache goes with this short-lived connection)
    # (the bound is set once: setting it makes DuckDB trim the memory it freed back to the
    # system, which the next model then faults in again: before every model, the realistic
    # 1M capture's models took ~98,000 page faults and 0.27 s of system time, set once
    # ~67,000 and 0.18 s, for a peak 13 MiB higher at 1M, 26 at 200k, the same at 10M)
    analysis.con.execute(f"SET temp_directory = '{spill}'; SET memory_limit = '{DERIVE_MEMORY_MB}MB'; "
                         "SET preserve_insertion_order = false; SET parquet_metadata_cache = true")
    out: dict[Path, Path] = {}
    try:
        for model in analysis.models.values():
            if model.materialize != "capture":
                continue
            key = stored_key(analysis.models, model.name, DEFAULT_PARAMS)
            place = store.model_file(key, model.name, capture_id).relative_to(store.root)
            path = writer.stage_path(place)
            grown = _store_within(analysis, model.name, path)
            if grown and outgrown is not None:
                outgrown.append(grown)
            out[path] = place
    finally:
        analysis.close()
        shutil.rmtree(spill, ignore_errors=True)
    return out


def _store_within(analysis: Analysis, name: str, path: Path) -> str | None:
    """Define model ``name`` (and what it reads) and write its rows to ``path``, within
    DERIVE_MEMORY_MB; where DuckDB runs out of it, again within twice as much, and so on,
    at last without a bound (left unstored, the model would be computed by every later
    query, unbounded). Returns, when the bound grew, the model that ran out (or whose
    writing did) and the bound it was computed within."""
    from telemetry.models.db import ModelError, duckdb

    ran_out = None
    limit_mb: int | None = DERIVE_MEMORY_MB  # what store_capture_models set
    try:
        while True:
            try:
                analysis.define([name])  # (again after a failed write: already defined, nothing done)
                analysis.con.execute(f"COPY ({_exact_select(analysis.con, name)}) TO '{path}' (FORMAT parquet, COMPRESSION zstd)")
                break
            except (ModelError, duckdb.OutOfMemoryException) as exc:
                model = exc.model if isinstance(exc, ModelError) else name
                cause = exc.__cause__ if isinstance(exc, ModelError) else exc
                if limit_mb is None or not isinstance(cause, duckdb.OutOfMemoryException):
                    raise
                ran_out = ran_out or model
                grown = 2 * limit_mb
                limit_mb = grown if grown <= DERIVE_MEMORY_MB << GROWN_BOUNDS else None
                analysis.con.execute(f"SET memory_limit = '{limit_mb}MB'" if limit_mb else "RESET memory_limit")
    finally:
        if limit_mb != DERIVE_MEMORY_MB:
            analysis.con.execute(f"SET memory_limit = '{DERIVE_MEMORY_MB}MB'")
    if ran_out is None:
        return None
    return f"{ran_out}: within {limit_mb} MB" if limit_mb else f"{ran_out}: without a bound"
