"""The store's folders: where each table's files, a capture's files and the models kept
with each capture are (telemetry.store.parquet writes them). Apart from the writer so that
reading a store (`tailtap sql`, `report`: :class:`StoreLayout`) needs neither pyarrow nor
numpy.

Layout: ``ROOT/<table>/date=YYYY-MM-DD/hour=HH/<capture_id>-<seq>.parquet`` (a capture
split between two processes also has ``<capture_id>-p1-<seq>.parquet`` files); models kept
with a capture: ``ROOT/models/<key>/<model>/<capture_id>.parquet``; a capture being
written: ``ROOT/.staging/<capture_id>/``; the hash the capture ids are of:
``ROOT/capture-id-scheme``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from telemetry.store.capture_id import CURRENT, LEGACY, SCHEMES
from telemetry.store.schema import COLUMNS

STAGING = ".staging"
ID_SCHEME_FILE = "capture-id-scheme"  # its text: the hash of the store's capture ids
MODELS = "models"  # models stored with each capture: MODELS/<key>/<model>/<capture_id>.parquet


class StoreError(Exception):
    """A store problem the user can act on (unwritable folder, not a store...)."""


class StoreLayout:
    """A store's folders and files, to read it (telemetry.store.parquet.Store also writes)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def table_dir(self, table: str) -> Path:
        return self.root / table

    def table_glob(self, table: str) -> str:
        return str(self.root / table / "**" / "*.parquet")

    def table_files(self, table: str) -> list[Path]:
        return sorted(self.table_dir(table).glob("**/*.parquet"))

    def capture_ids(self) -> list[str]:
        """Ids of the captures in the store (from the names of their captures files)."""
        return sorted({p.name.split("-", 1)[0] for p in self.table_dir("captures").glob("**/*.parquet")})

    def model_file(self, key: str, model: str, capture_id: str) -> Path:
        """Where the rows of a model computed for one capture are kept (telemetry.models.catalogue)."""
        return self.root / MODELS / key / model / f"{capture_id}.parquet"

    def kept_model_files(self, capture_id: str, model: str = "*") -> Iterator[Path]:
        """The files of the models kept with a capture (one model's, or all), under any key."""
        return (self.root / MODELS).glob(f"*/{model}/{capture_id}.parquet")

    def capture_id_scheme(self) -> str:
        """The hash this store's capture ids are of (telemetry.store.capture_id): what
        its ID_SCHEME_FILE says; without the file, a store that holds captures was
        written before it was (SHA-256 ids), a new one takes the current hash."""
        path = self.root / ID_SCHEME_FILE
        try:
            scheme = path.read_text(encoding="ascii", errors="replace").strip()
        except FileNotFoundError:
            return LEGACY if self.capture_ids() else CURRENT
        except OSError as exc:
            raise StoreError(f"{path}: cannot read the store's capture id scheme: {exc.strerror}") from exc
        if scheme not in SCHEMES:
            raise StoreError(f"{path}: unknown capture id scheme {scheme[:40]!r} (known: {', '.join(SCHEMES)})")
        return scheme

    def has_capture(self, capture_id: str) -> bool:
        return any(self.table_dir("captures").glob(f"**/{capture_id}-*.parquet"))

    def remove_capture(self, capture_id: str) -> int:
        """Delete every file of a capture in every table; returns how many."""
        removed = 0
        for table in COLUMNS:
            for path in self.table_dir(table).glob(f"**/{capture_id}-*.parquet"):
                path.unlink()
                removed += 1
        for path in list(self.kept_model_files(capture_id)):
            path.unlink()
            removed += 1
        return removed
