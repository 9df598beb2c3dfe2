"""The verbs' --store argument: the store in a directory, or one line saying there is none.
One check for every verb that reads a store (`report`, `sql`, `explain`, `compare`...)."""

from __future__ import annotations

from pathlib import Path

from telemetry.cli.errors import error_line


def open_store(store_dir: Path):
    """The store at ``store_dir`` (a StoreLayout), or None when there is none there (said)."""
    from telemetry.store.layout import StoreLayout

    if not (store_dir / "requests").is_dir() and not (store_dir / "captures").is_dir():
        error_line(f"{store_dir}: no store here (run `tailtap analyze CAPTURE --out {store_dir}` first)")
        return None
    return StoreLayout(store_dir)
