"""One line on standard error for the user: an error, a note, what was written."""

from __future__ import annotations

import sys
from pathlib import Path


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


def user_error_text(exc: Exception, written: Path | None) -> str:
    """What a user error says in its one line: a file that cannot be written (OSError)
    names ``written``; anything else (a model that cannot answer on this store, a request
    not in it) says its first line."""
    if isinstance(exc, OSError):
        return f"cannot write {written}: {exc.strerror or exc}"
    return f"{exc}".splitlines()[0]
