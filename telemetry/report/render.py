"""Rendering query results for people (terminal tables, Markdown) and scripts (JSON, CSV).

Knows nothing of what the rows mean: it formats named sections of rows.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

Rows = list[dict[str, Any]]
FORMATS = ("table", "json", "markdown", "csv")
# the width of tables sent to a file or a pipe with no COLUMNS set: rich's 80 columns cut
# the slowest requests' methods and causes ("loss_bu…"), and a file has no width to fit
PIPED_WIDTH = 160


def output_console() -> Console:
    """The console reports go to (standard output): a terminal's own width, COLUMNS when
    set, else :data:`PIPED_WIDTH`."""
    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(width=PIPED_WIDTH if piped else None)


def rows_of(con, sql: str, params: Sequence[object] | None = None) -> Rows:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 3)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def as_is(text: str) -> Text:
    """Text shown as it is. Paths, model names and other strings from the traffic are
    never read as rich markup: a "[/x]" in a request path raised MarkupError (a traceback
    instead of the report) and a "[b]" vanished, turning the rest bold."""
    return Text(text)


def escaped(value: object) -> str:
    """A value put into a marked-up line, shown as it is (as :func:`as_is`; None as None)."""
    return escape(str(value))


def _cell(value: Any) -> str:
    value = _plain(value)
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.2f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def to_json(sections: dict[str, Any]) -> str:
    return json.dumps(_plain(sections), indent=2, default=str)


def to_markdown(sections: dict[str, Rows | str], title: str | None = None) -> str:
    out = io.StringIO()
    if title:
        out.write(f"# {title}\n\n")
    for name, rows in sections.items():
        out.write(f"## {name.replace('_', ' ')}\n\n")
        if isinstance(rows, str):
            out.write(rows + "\n\n")
            continue
        if not rows:
            out.write("(none)\n\n")
            continue
        cols = list(rows[0])
        out.write("| " + " | ".join(cols) + " |\n")
        out.write("|" + "---|" * len(cols) + "\n")
        for row in rows:
            out.write("| " + " | ".join(_cell(row[c]).replace("|", "\\|") for c in cols) + " |\n")
        out.write("\n")
    return out.getvalue()


def to_csv(rows: Rows) -> str:
    out = io.StringIO()
    if rows:
        w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: _plain(v) for k, v in row.items()})
    return out.getvalue()


def print_tables(console: Console, sections: dict[str, Rows | str], title: str | None = None) -> None:
    if title:
        console.rule(f"[bold]{title}")
    for name, rows in sections.items():
        if isinstance(rows, str):
            console.print(f"[bold]{name.replace('_', ' ')}[/bold]: {escaped(rows)}")
            continue
        label = name.replace("_", " ")
        # at least as wide as its title: a narrow table wrapped it ("resul" over "t")
        table = Table(title=label, title_justify="left", show_lines=False, min_width=len(label))
        if not rows:
            console.print(f"[bold]{name.replace('_', ' ')}[/bold]: (none)")
            continue
        for col in rows[0]:
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*(as_is(_cell(v)) for v in row.values()))
        console.print(table)


def emit(console: Console, fmt: str, sections: dict[str, Rows | str], title: str | None = None) -> None:
    if fmt == "json":
        console.print_json(to_json(sections)) if console.is_terminal else print(to_json(sections))
    elif fmt == "markdown":
        print(to_markdown(sections, title))
    elif fmt == "csv":
        for rows in sections.values():
            if not isinstance(rows, str):
                print(to_csv(rows), end="")
    else:
        print_tables(console, sections, title)
