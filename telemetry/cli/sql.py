"""The `tailtap sql` verb: one query against the store, every model readable by name.

Kept apart from the typer app (telemetry/cli/app.py), like `analyze`: `tailtap sql --store S
QUERY` is what scripts and dashboards' authors run over and over, and building the typer
app costs more than answering a small query.
"""

from __future__ import annotations

from pathlib import Path

from telemetry.cli.errors import error_line
from telemetry.cli.stores import open_store
from telemetry.exit_codes import EXIT_INPUT, EXIT_OK, EXIT_STORE


def open_analysis(store_dir: Path, materialize: bool = True):
    """The store's Analysis connection, or an exit code and a one-line error."""
    from telemetry.models.db import connect

    store = open_store(store_dir)
    if store is None:
        return EXIT_STORE
    try:
        return connect(store, materialize=materialize)
    except RuntimeError as exc:  # a queries/ model does not bind on this store
        error_line(str(exc).splitlines()[0])
        return EXIT_INPUT


def run_sql(query: str, store_dir: Path, fmt: str = "table") -> int:
    """Run ``query`` and print its rows in ``fmt`` (table, csv, json); returns the exit code."""
    from telemetry.report import render

    con = open_analysis(store_dir)
    if isinstance(con, int):
        return con
    try:
        rows = render.rows_of(con, query)
    except Exception as exc:  # DuckDB errors are the user's SQL: one line, no traceback
        error_line(str(exc).splitlines()[0])
        return EXIT_INPUT
    render.emit(render.output_console(), fmt, {"result": rows})
    return EXIT_OK
