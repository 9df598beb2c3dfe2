"""Reports: run the queries/ models and render them. No analysis happens here."""

from __future__ import annotations

from rich.console import Console

from telemetry import render
from telemetry.db import connect
from telemetry.store import Store


def analyze_sections(store: Store, capture_ids: list[str] | None = None, params: dict | None = None) -> dict[str, render.Rows | str]:
    """The `tailtap analyze` report: captures, connections, per-method percentiles, errors, slowest."""
    con = connect(store, {**(params or {}), "capture_ids": capture_ids or None})
    return {
        "captures": render.rows_of(con, "SELECT * FROM capture_overview"),
        "connections": render.rows_of(con, "SELECT * FROM connection_overview"),
        "methods": render.rows_of(con, "SELECT * FROM method_summary"),
        "errors": render.rows_of(con, "SELECT * FROM errors_by_status"),
        "slowest_requests": render.rows_of(con, "SELECT * FROM slowest_requests"),
    }


def analyze_report(store: Store, fmt: str, console: Console, capture_ids: list[str] | None = None) -> None:
    render.emit(console, fmt, analyze_sections(store, capture_ids), title="tailtap analyze")
