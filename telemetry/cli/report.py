"""The `tailtap report` verb: the spike report of a store, printed, and written as HTML.

Kept apart from the typer app (telemetry/cli/app.py), like `analyze` and `sql`: a plain
`tailtap report --store S` starts without building the typer app (a quarter of the
command's time on a small store); the typer command parses the other options and runs
the same function.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from telemetry.cli.errors import error_line, user_error_text
from telemetry.cli.stores import open_store
from telemetry.exit_codes import EXIT_INPUT, EXIT_OK, EXIT_STORE

if TYPE_CHECKING:
    from rich.console import Console


def note_recomputed(con) -> None:
    """Say why a query over captures whose kept models another version computed was slow."""
    if con.stale_captures:
        error_line(f"{len(con.stale_captures)} capture(s) keep models computed by another tailtap version: they "
                   "were computed again for this query, more slowly; `tailtap analyze --force FILE` stores them anew",
                   label="note")


def write_report_html(store, params: dict, sections: dict, out: Path, con) -> None:
    """The report (``sections``, from report_sections on ``con``) as one HTML file at
    ``out``: its plots read the same connection's models."""
    from telemetry.report.html import report_html
    from telemetry.report.sections import plot_sections

    page = report_html({**sections, **plot_sections(store, params, con)}, con.window_s())
    out.write_text(page, encoding="utf-8")
    error_line(f"wrote {out}", label=None)


def run_report(store_dir: Path, params: dict[str, object] | None = None, fmt: str = "table",
               html_out: Path | None = None) -> int:
    """Print the report of the store at ``store_dir`` in ``fmt`` (table, json, markdown),
    and write it as HTML to ``html_out``; returns the exit code. A query that cannot answer
    or an HTML file that cannot be written: one line and exit code 1, never a traceback."""
    from telemetry.models.db import connect
    from telemetry.report.sections import print_report, report_sections

    params = dict(params or {})
    store = open_store(store_dir)
    if store is None:
        return EXIT_STORE
    try:
        con = connect(store, params, sized_by_requests=True)
        sections = report_sections(store, params, con)
        if html_out is not None:
            write_report_html(store, params, sections, html_out, con)
    except (RuntimeError, OSError) as exc:  # a queries/ model that cannot answer, the HTML file
        error_line(user_error_text(exc, html_out))
        return EXIT_INPUT
    note_recomputed(con)
    show(sections, fmt, print_report, "tailtap report")
    return EXIT_OK


def show(sections: dict, fmt: str, print_table: Callable[[Console, dict], None], title: str) -> None:
    """A verb's ``sections`` on standard output: as tables (``print_table``) or in ``fmt``
    (json, markdown)."""
    from telemetry.report import render

    console = render.output_console()
    if fmt == "table":
        print_table(console, sections)
    else:
        render.emit(console, fmt, sections, title=title)
