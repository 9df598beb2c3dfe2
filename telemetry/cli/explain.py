"""The `tailtap explain` verb: one request's story, printed, and written as HTML.

Kept apart from the typer app (telemetry/cli/app.py), like `report`: users run it again
and again while they look into slow requests, and a plain `tailtap explain --store S
--request R` starts without building the typer app (~0.2 s, a quarter of the command on a
small store); the typer command parses the other options and runs the same function.
"""

from __future__ import annotations

from pathlib import Path

from telemetry.cli.args import BadValue
from telemetry.cli.errors import error_line, user_error_text
from telemetry.cli.report import note_recomputed, show
from telemetry.cli.stores import open_store
from telemetry.exit_codes import EXIT_INPUT, EXIT_OK, EXIT_STORE


def parse_request(text: str) -> tuple[str, int]:
    """'CONN_ID:STREAM_ID' (as analyze and report list requests) -> (conn_id, stream id)."""
    conn_id, sep, stream = text.strip().rpartition(":")
    if not sep or not conn_id or not stream.isdigit():
        raise BadValue(f"{text!r}: expected CONN_ID:STREAM_ID, e.g. C1a2b3c4d5e6f7a8b:3")
    return conn_id, int(stream)


def run_explain(store_dir: Path, request: str, params: dict[str, object] | None = None, fmt: str = "table",
                html_out: Path | None = None) -> int:
    """Print the story of ``request`` (CONN_ID:STREAM_ID, checked by :func:`parse_request`)
    in ``fmt`` (table, json, markdown), and write it as HTML to ``html_out``; returns the
    exit code. A request not in the store, a query that cannot answer or an HTML file that
    cannot be written: one line and exit code 1, never a traceback."""
    from telemetry.models.db import connect
    from telemetry.report.sections import RequestNotFound, explain_sections, print_explain

    conn_id, stream_id = parse_request(request)
    params = dict(params or {})
    store = open_store(store_dir)
    if store is None:
        return EXIT_STORE
    try:
        con = connect(store, params)
        sections = explain_sections(store, conn_id, stream_id, params, con)
        if html_out is not None:
            from telemetry.report.html import explain_html

            html_out.write_text(explain_html(sections, f"tailtap explain {request}"), encoding="utf-8")
            error_line(f"wrote {html_out}", label=None)
    except (RuntimeError, OSError, RequestNotFound) as exc:
        error_line(user_error_text(exc, html_out))
        return EXIT_INPUT
    note_recomputed(con)
    show(sections, fmt, print_explain, f"tailtap explain {request}")
    return EXIT_OK
