"""DuckDB over the Parquet store: a view per table, and the SQL models of queries/ defined
on first use.

The models (telemetry.models.catalogue) are the analysis; this module only decides how each is
computed when a query reads it: as a view, once per connection (``session``), or read
back from what was stored with each capture at ingest (``capture``, see
telemetry.models.stored) when every capture in scope has it and the settings are the
defaults. Parameters are DuckDB variables read in SQL with ``getvariable('name')``;
:func:`connect` sets them. A model is defined only when a query names it (with what it
reads): defining all of them binds every view chain, which costs seconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

try:
    # DuckDB's engine, the C++ extension the `duckdb` package re-exports: the package adds
    # Python modules (its relational API, a version lookup through importlib.metadata)
    # that cost ~0.13 CPU s at every start (a quarter of `tailtap sql`), none of which the
    # store's queries use
    import _duckdb as duckdb
except ImportError:  # a DuckDB whose engine is not a module of its own
    import duckdb

from telemetry.models.catalogue import (
    SCOPE_VARIABLES,
    Model,
    load_models,
    macros_sql,
    settings_of,
    stored_key,
)
from telemetry.store.layout import StoreLayout
from telemetry.store.schema import COLUMNS

if TYPE_CHECKING:
    from duckdb import DuckDBPyRelation

# A store whose tables are smaller is queried on one thread: a second one saves no waiting
# there, only adds its CPU. One thread against two, paired runs of `analyze` (CPU, wall;
# tables' bytes): lab SSE captures of 2.2 MB 0.96 and 0.95, 1.00 and 0.99; realistic 200k
# packets, 4.3 MB: 0.91, 1.02; the same 200k from another seed, 2,000 connections, 4.5 MB:
# 0.95, 1.02; 400k, 8.2 MB: 0.94, 1.06; 1M, 20 MB: 0.96, 1.11
ONE_THREAD_BYTES = 3 << 20

# Defaults for the SQL variables (getvariable) the models read: the one place they are set.
DEFAULT_PARAMS: dict[str, object] = {
    "window_s": None,  # window length; null: chosen from the scope's span (queries/settings.sql)
    "bucket_s": 1.0,  # bucket of the per-connection time view (conn_timeline)
    "spike_factor": 1.4,  # a window's p99 above factor x its method's baseline p99 ...
    "spike_min_delta_ms": 10.0,  # ... and at least this many ms above it
    "baseline_min_requests": 10,  # calm requests a method needs for its p99 to judge by
    "calm_factor": 1.2,  # a window whose p99 is within this of its method's typical p99 is calm (chosen on the sweep's tuning runs)
    "slo_ttft_ms": None,  # user SLOs (null: p99-based)
    "slo_latency_ms": None,
    "slo_gap_ms": None,
    "since_ns": None,
    "until_ns": None,
    "slowest_n": 10,
    "queue_min_ms": 5.0,  # RTT inflation that counts as queueing ...
    "queue_floor_share": 0.25,  # ... and at least this share of the path's RTT floor (chosen on the sweep's tuning runs: 0.5 missed queues on long paths)
    # a 100 ms bucket of a path's RTT samples tells a queue forming (queries/request_metrics.sql's
    # held ACKs) when it holds this many: the most that kept every gain on the tuning runs (40 lost two)
    "queue_onset_min_samples": 20,
    # at a client-side capture point, a queue whose response arrivals came back to back
    # (within 0.1 ms) more often than this is a delay, not a shaper (queries/shaper_evidence.sql)
    "shaper_bunched_max": 0.3,
    "capture_ids": None,  # list of capture ids the report is limited to (null: all)
    # the two periods `tailtap compare` sets (queries/compare_scope.sql)
    "a_since_ns": None, "a_until_ns": None, "a_capture_ids": None,
    "b_since_ns": None, "b_until_ns": None, "b_capture_ids": None,
}


def _sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_sql_literal(v) for v in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# the schema's column types as DuckDB reads them from the Parquet files: the type of a
# column an old store lacks (read as NULL) and of an empty table's columns
_DUCKDB_TYPES = {
    "string": "VARCHAR", "int64": "BIGINT", "int32": "INTEGER", "int8": "TINYINT", "bool": "BOOLEAN",
    "double": "DOUBLE", "timestamp[ns, tz=UTC]": "TIMESTAMPTZ_NS",
}


def _inline(sql: str, params: dict[str, object]) -> str:
    from telemetry.models.catalogue import _GETVARIABLE

    return _GETVARIABLE.sub(lambda m: _sql_literal(params.get(m.group(1))), sql)


class ModelError(RuntimeError):
    """A model's SQL failed: the message names its file; DuckDB's error is the cause."""

    def __init__(self, model: Model, error: duckdb.Error) -> None:
        super().__init__(f"queries/{model.path.name}: {error}")
        self.model = model.name


class Analysis:
    """A DuckDB connection over a store on which every queries/ model can be read by name:
    :meth:`execute` defines the models a query names (and what they read) first. Other
    attributes are the DuckDB connection's."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        store: StoreLayout,
        params: dict[str, object],
        *,
        inline_params: bool = False,
        materialize: bool = True,
        use_stored: bool = True,
    ) -> None:
        self.con = con
        self.store = store
        self.params = params
        self.models = {m.name: m for m in load_models()}
        self._inline = inline_params
        self._materialize = materialize
        self._use_stored = use_stored
        self._defined: set[str] = set()
        self._scope_captures: list[str] | None = None
        # captures in scope whose kept models were computed by another version of the SQL
        # (another key): the models were computed again here, more slowly
        self.stale_captures: set[str] = set()

    def __getattr__(self, name: str) -> object:
        return getattr(self.con, name)

    # -- queries ----------------------------------------------------------------------
    def execute(self, query: str, parameters: Sequence[object] | None = None) -> duckdb.DuckDBPyConnection:
        self.define_for(query)
        return self.con.execute(query, parameters or [])

    def sql(self, query: str) -> DuckDBPyRelation:
        # the relational API (con.sql) is the duckdb package's, not the engine's: importing
        # the package (on first use) gives every connection it
        import duckdb as _package  # noqa: F401

        self.define_for(query)
        return self.con.sql(query)

    def close(self) -> None:
        self.con.close()

    def define_for(self, query: str) -> None:
        """Define the models ``query`` names: every word of it that is a model's name (a
        name that is only a column or in a comment costs a definition, nothing more; a
        parse would not do: DuckDB binds CREATE/INSERT statements to find their tables)."""
        self.define(w for w in set(_WORD.findall(query)) if w in self.models)

    def forget(self, name: str) -> None:
        """Define ``name`` afresh at its next use (its parameters changed)."""
        self._defined.discard(name)

    def define_all(self) -> None:
        self.define(self.models)

    def define(self, names: Iterable[str]) -> None:
        for name in names:
            if name in self.models and name not in self._defined:
                self._define(self.models[name])

    # -- how each model is computed ---------------------------------------------------
    def _define(self, model: Model) -> None:
        if "window_s" in settings_of(self.models, model.name) and model.name != "settings":
            self._resolve_settings()
        stored = self._stored_files(model) if model.materialize == "capture" else None
        if stored is None:
            self.define(model.depends_on)
            sql = _inline(model.sql, self.params) if self._inline else model.sql
            kind = "TEMP TABLE" if self._materialize and model.materialize in ("session", "capture") else "VIEW"
        else:
            sql = _stored_view_sql(stored)
            kind = "VIEW"
        try:
            self.con.execute(f"CREATE OR REPLACE {kind} {model.name} AS {sql}")
        except duckdb.Error as exc:
            raise ModelError(model, exc) from exc
        self._defined.add(model.name)

    def window_s(self) -> float:
        """The window length the analysis uses: given, or chosen from the scope by the
        ``settings`` model (read once)."""
        self._resolve_settings()
        return float(self.params["window_s"])  # type: ignore[arg-type]

    def _resolve_settings(self) -> None:
        """Settings left to the analysis (window_s null: chosen from the scope) are read
        from the ``settings`` model once and set as variables, so every model, and every
        surface, uses the same values."""
        if self.params.get("window_s") is not None or "settings" not in self.models:
            return
        self.define(["settings"])
        (window_s,) = self.con.execute("SELECT window_s FROM settings").fetchone()
        self.params["window_s"] = float(window_s)
        self.con.execute(f"SET VARIABLE window_s = {_sql_literal(float(window_s))}")

    def _stored_files(self, model: Model) -> list[str] | str | None:
        """The stored rows of ``model`` for every capture in scope, or None when it must be
        computed (a capture lacks them, or the settings are not the defaults)."""
        if not self._use_stored:
            return None
        if any(self.params.get(v) != DEFAULT_PARAMS.get(v) for v in settings_of(self.models, model.name)):
            return None
        key = stored_key(self.models, model.name, DEFAULT_PARAMS)
        captures = self._captures_in_scope()
        paths = [self.store.model_file(key, model.name, c) for c in captures]
        missing = [c for c, path in zip(captures, paths, strict=True) if not path.exists()]
        if missing:
            # kept under another key (another version's SQL): recomputed here, and said so
            self.stale_captures.update(c for c in missing if any(self.store.kept_model_files(c, model.name)))
            return None
        files = [str(path) for path in paths]
        if not files:  # nothing in scope: computing it over the empty tables is as quick
            return None
        if self._inline:  # a database file read later: captures stored since count too
            return str(self.store.model_file(key, model.name, "*").resolve())
        return files

    def _captures_in_scope(self) -> list[str]:
        if self._scope_captures is None:
            wanted = self.params.get("capture_ids")
            present = self.store.capture_ids()
            self._scope_captures = [c for c in present if c in set(wanted)] if wanted else present
        return self._scope_captures


def _stored_view_sql(files: list[str] | str) -> str:
    scope = (
        "in_scope(capture_id)"  # (queries/_macros.sql)
        " AND (getvariable('since_ns') IS NULL OR epoch_ns(started_at) >= getvariable('since_ns'))"
        " AND (getvariable('until_ns') IS NULL OR epoch_ns(started_at) < getvariable('until_ns'))"
    )
    return f"SELECT * FROM read_parquet({_sql_literal(files)}) WHERE {scope}"


def connect(
    store: StoreLayout,
    params: dict[str, object] | None = None,
    database: str = ":memory:",
    inline_params: bool = False,
    *,
    materialize: bool = True,
    use_stored: bool = True,
    sized_by_requests: bool = False,
) -> Analysis:
    """A connection with every store table as a view and every model readable by name.

    ``inline_params``: the parameters are written into the views as literals and every
    model is defined now, for a database file other programs open (variables are per
    session). ``materialize``: models marked ``session``/``capture`` are computed once
    per connection (a temporary table) instead of at every read; off for the interactive
    shell, where the user may change a variable. ``use_stored``: read models stored with
    the captures where they serve. ``sized_by_requests``: the caller reads answers per
    request and per window (the report), whose cost grows with the requests, not the
    packets, once the models kept with the captures serve (the default settings): the
    requests table's size alone then decides whether one thread serves.
    """
    con = duckdb.connect(database)
    con.execute("SET TimeZone = 'UTC'")
    small = 0  # bytes of the tables, counted up to ONE_THREAD_BYTES
    files = {table: store.table_files(table) for table in COLUMNS}
    # (the report at 1M packets, 1.3 MB of requests: 0.33 CPU s and 0.32 wall on one
    # thread against 0.36-0.42 and 0.33-0.39 on two; at 10M, 12.8 MB: two save a tenth
    # of its wall)
    kept_serve = use_stored and all((params or {}).get(k, v) == v for k, v in DEFAULT_PARAMS.items()
                                    if k not in SCOPE_VARIABLES)  # fmt: skip
    sized = files["requests"] if sized_by_requests and kept_serve else [p for listed in files.values() for p in listed]
    for p in sized:
        if small >= ONE_THREAD_BYTES:
            break
        try:
            small += p.stat().st_size
        except OSError:  # removed since the listing (the daemon's retention)
            pass
    present, uniform = _present_columns(con, files)
    statements = []
    for table, columns in COLUMNS.items():
        if files[table]:
            glob = [str(p.resolve()) for p in files[table]] if inline_params else store.table_glob(table)
            hive = "true" if isinstance(glob, str) else "false"  # explicit lists may mix layouts
            # files of one schema are read with the first one's; matching every file's
            # columns by name (a store written by several versions) costs ~2 ms more at
            # every read of the view, dozens of which make the analysis
            by_name = "false" if table in uniform else "true"
            source = f"read_parquet({_sql_literal(glob)}, hive_partitioning = {hive}, union_by_name = {by_name})"
            if table not in present:  # a file went (the daemon's retention): ask the glob
                present[table] = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            # columns added after a store was written read as NULL, so old stores keep working
            cols = ", ".join(
                f'"{c.name}"' if c.name in present[table] else f'CAST(NULL AS {_DUCKDB_TYPES[c.type]}) AS "{c.name}"'
                for c in columns
            )
            statements.append(f"CREATE OR REPLACE VIEW {table} AS SELECT {cols} FROM {source}")
        else:  # an empty table of the right types, so every query still runs
            cols = ", ".join(f'CAST(NULL AS {_DUCKDB_TYPES[c.type]}) AS "{c.name}"' for c in columns)
            kind = "TABLE" if inline_params else "VIEW"
            statements.append(f"DROP VIEW IF EXISTS {table}; DROP TABLE IF EXISTS {table}")
            statements.append(f"CREATE {kind} {table} AS SELECT {cols} WHERE false")
    con.execute(";\n".join(statements))
    if small < ONE_THREAD_BYTES and not inline_params:
        # a few thousand rows gain no time from a second thread, only its CPU
        con.execute("SET threads = 1")
    merged = dict(DEFAULT_PARAMS)
    merged.update(params or {})
    con.execute(";\n".join(f"SET VARIABLE {name} = {_sql_literal(value)}" for name, value in merged.items()))
    analysis = Analysis(con, store, merged, inline_params=inline_params,
                        materialize=materialize and not inline_params, use_stored=use_stored)
    macros = macros_sql()
    if inline_params:  # literals: the settings are resolved first, and written in everywhere
        if macros.strip():  # (the settings model's scope reads in_scope)
            con.execute(_inline(macros, merged))
        analysis._resolve_settings()
        analysis.forget("settings")
        if macros.strip():  # again, the window length resolved written in
            con.execute(_inline(macros, merged))
        analysis.define_all()
    elif macros.strip():
        con.execute(macros)
    return analysis


def _present_columns(
    con: duckdb.DuckDBPyConnection, files: dict[str, list[Path]]
) -> tuple[dict[str, set[str]], set[str]]:
    """The columns each table's files hold (any of them), and the tables whose files all
    have one schema (the same columns, types and order), read from their footers in one
    query; a table some file of which went since the listing is in neither."""
    table_of = {str(p): table for table, listed in files.items() for p in listed}
    if not table_of:
        return {}, set()
    try:
        rows = con.execute(
            "SELECT file_name, name, num_children, duckdb_type, repetition_type FROM parquet_schema(?)", [list(table_of)]
        ).fetchall()
    except duckdb.IOException:  # removed since the listing (the daemon's retention)
        return {}, set()
    schemas: dict[str, list[tuple]] = {}  # each file's schema nodes (name, children, type...), in order
    for file_name, *node in rows:
        schemas.setdefault(file_name, []).append(tuple(node))
    by_table: dict[str, set[str]] = {}
    schemas_of: dict[str, set[tuple]] = {}
    for file_name, nodes in schemas.items():
        if file_name not in table_of:  # named otherwise than listed: ask the globs
            return {}, set()
        by_table.setdefault(table_of[file_name], set()).update(_top_level([n[:2] for n in nodes]))
        schemas_of.setdefault(table_of[file_name], set()).add(tuple(nodes[1:]))  # the root's name varies
    return by_table, {table for table, kinds in schemas_of.items() if len(kinds) == 1}


def _top_level(nodes: list[tuple[str, int | None]]) -> list[str]:
    """The columns of a Parquet schema given as its nodes in depth-first order, the root
    first: the root's children, without the nodes under a nested column."""
    names: list[str] = []
    skip: list[int] = []  # nodes still to pass under each nested column being skipped
    for name, children in nodes[1:]:
        if skip:
            skip[-1] -= 1
        else:
            names.append(name)
        if children:
            skip.append(children)
        while skip and skip[-1] == 0:
            skip.pop()
    return names


def export_database(store: StoreLayout, path: Path, params: dict[str, object] | None = None) -> Path:
    """Write a DuckDB file with every table and model as a view over the store (for Grafana).

    Written beside the target and renamed into place, so a reader never sees half a file.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    con = connect(store, params, database=str(tmp), inline_params=True)
    con.close()
    tmp.replace(path)
    return path
