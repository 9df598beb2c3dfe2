"""One line on standard error for the user: an error, a note, what was written."""

from __future__ import annotations

import sys


def error_line(text: str, label: str | None = "error") -> None:
    """``label: text`` on standard error, the text shown as it is (paths, messages): red
    label on a terminal (rich, imported only then), one unwrapped line otherwise."""
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.markup import escape

        head = f"[red]{label}:[/red] " if label == "error" else (f"{label}: " if label else "")
        Console(stderr=True).print(head + escape(text))
    else:
        print(f"{label}: {text}" if label else text, file=sys.stderr)
