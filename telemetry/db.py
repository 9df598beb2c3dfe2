"""DuckDB over the Parquet store: base views per table, then the SQL models in queries/.

Each file ``queries/<name>.sql`` is one model: a header comment saying what question it
answers, an optional ``-- depends_on: a, b`` line naming the views it reads, and one
SELECT. It becomes the view ``<name>``. Parameters are DuckDB variables read in SQL with
``getvariable('name')``; :func:`connect` sets them. Python only loads, parameterises and
renders: the analysis lives in the SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from telemetry.schema import TABLES
from telemetry.store import Store

QUERIES_DIR = Path(__file__).resolve().parent.parent / "queries"
_DEPENDS = re.compile(r"^--\s*depends_on:\s*(.*)$", re.MULTILINE)

# Defaults for the SQL variables (getvariable) the models read.
DEFAULT_PARAMS: dict[str, object] = {
    "window_s": 10.0,
    "bucket_s": 1.0,  # bucket of the per-connection time view (conn_timeline)  # window length for timelines and spikes
    "baseline_windows": 6,  # trailing windows forming a spike's baseline
    "spike_factor": 1.4,  # p99 above factor x baseline p99 ...
    "spike_min_delta_ms": 10.0,  # ... and at least this many ms above it
    "min_window_requests": 5,  # windows with fewer requests do not make spikes
    "slo_ttft_ms": None,  # user SLOs (null: p99-based)
    "slo_latency_ms": None,
    "slo_gap_ms": None,
    "since_ns": None,
    "until_ns": None,
    "slowest_n": 10,
    "queue_min_ms": 5.0,  # RTT inflation that counts as queueing (and >= half the floor)
    "capture_ids": None,  # list of capture ids the report is limited to (null: all)
}


@dataclass(frozen=True)
class Model:
    name: str
    path: Path
    sql: str
    depends_on: tuple[str, ...]
    doc: str


def load_models(folder: Path = QUERIES_DIR) -> list[Model]:
    """All SQL models, in dependency order."""
    models: dict[str, Model] = {}
    for path in sorted(folder.glob("*.sql")):
        text = path.read_text()
        deps: list[str] = []
        for m in _DEPENDS.finditer(text):
            deps += [d.strip() for d in m.group(1).split(",") if d.strip()]
        doc_lines = []
        for line in text.splitlines():
            if not line.startswith("--"):
                break
            if not _DEPENDS.match(line):
                doc_lines.append(line[2:].strip())
        body = text.strip().rstrip(";")
        models[path.stem] = Model(path.stem, path, body, tuple(deps), " ".join(doc_lines).strip())
    ordered: list[Model] = []
    seen: set[str] = set()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in seen or name in TABLES:
            return
        if name in stack:
            raise ValueError(f"queries: dependency cycle {' -> '.join(stack + (name,))}")
        model = models.get(name)
        if model is None:
            raise ValueError(f"queries: {stack[-1]}.sql depends on unknown view {name!r}")
        for dep in model.depends_on:
            visit(dep, stack + (name,))
        seen.add(name)
        ordered.append(model)

    for name in models:
        visit(name, ())
    return ordered


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


_DUCKDB_TYPES = {
    "string": "VARCHAR", "int64": "BIGINT", "int32": "INTEGER", "int8": "TINYINT", "bool": "BOOLEAN",
    "double": "DOUBLE", "timestamp[ns, tz=UTC]": "TIMESTAMPTZ",
}
_GETVARIABLE = re.compile(r"getvariable\('(\w+)'\)")


def connect(
    store: Store,
    params: dict[str, object] | None = None,
    database: str = ":memory:",
    inline_params: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every store table and every model defined as a view.

    With ``inline_params`` the parameters are written into the views as literals, for a
    database file other programs open (variables are per session).
    """
    con = duckdb.connect(database)
    con.execute("SET TimeZone = 'UTC'")
    for table, schema in TABLES.items():
        if store.table_files(table):
            glob = str(Path(store.table_glob(table)).resolve()) if inline_params else store.table_glob(table)
            source = f"read_parquet({_sql_literal(glob)}, hive_partitioning = true, union_by_name = true)"
            present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            # columns added after a store was written read as NULL, so old stores keep working
            cols = ", ".join(
                f'"{f.name}"' if f.name in present else f'CAST(NULL AS {_DUCKDB_TYPES.get(str(f.type), "VARCHAR")}) AS "{f.name}"'
                for f in schema
            )
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT {cols} FROM {source}")
        else:  # an empty table of the right types, so every query still runs
            con.register(f"_empty_{table}", schema.empty_table())
            kind = "TABLE" if inline_params else "VIEW"
            con.execute(f"DROP VIEW IF EXISTS {table}; DROP TABLE IF EXISTS {table}")
            con.execute(f"CREATE {kind} {table} AS SELECT * FROM _empty_{table}")
    merged = dict(DEFAULT_PARAMS)
    merged.update(params or {})
    for name, value in merged.items():
        con.execute(f"SET VARIABLE {name} = {_sql_literal(value)}")
    for model in load_models():
        sql = model.sql
        if inline_params:
            sql = _GETVARIABLE.sub(lambda m: _sql_literal(merged.get(m.group(1))), sql)
        try:
            con.execute(f"CREATE OR REPLACE VIEW {model.name} AS {sql}")
        except duckdb.Error as exc:
            raise RuntimeError(f"queries/{model.path.name}: {exc}") from exc
    return con


def export_database(store: Store, path: Path, params: dict[str, object] | None = None) -> Path:
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
