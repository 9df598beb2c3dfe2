"""Keep the store and the kept capture files bounded in time.

The store is Hive-partitioned (``<table>/date=YYYY-MM-DD/hour=HH/``), so retention is
deleting whole hour folders whose hour ended before the cut-off: no Parquet is rewritten,
and a reader never sees half a partition's rows change. Only folders that look exactly
like a partition of a known table are touched.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from telemetry.store.schema import TABLES

log = logging.getLogger("tailtap.daemon")

_DATE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_HOUR = re.compile(r"^hour=(\d{2})$")


@dataclass
class RetentionResult:
    removed: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def partition_start(date_dir: str, hour_dir: str) -> float | None:
    """Unix time at which a date=/hour= partition starts, or None if the names are not one."""
    d, h = _DATE.match(date_dir), _HOUR.match(hour_dir)
    if not d or not h or int(h.group(1)) > 23:
        return None
    try:
        day = dt.datetime.strptime(d.group(1), "%Y-%m-%d").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return day.timestamp() + 3600 * int(h.group(1))


def prune_store(root: str | Path, retention_hours: float, now: float | None = None) -> RetentionResult:
    """Delete every table's hour partitions that ended more than retention_hours ago."""
    root = Path(root)
    now = time.time() if now is None else now
    cutoff = now - retention_hours * 3600
    result = RetentionResult()
    for table in TABLES:
        table_dir = root / table
        if not table_dir.is_dir():
            continue
        for date_dir in sorted(p for p in table_dir.iterdir() if p.is_dir() and _DATE.match(p.name)):
            for hour_dir in sorted(p for p in date_dir.iterdir() if p.is_dir()):
                start = partition_start(date_dir.name, hour_dir.name)
                if start is None or start + 3600 > cutoff:
                    continue  # not a partition, or it still holds rows inside the retention
                try:
                    shutil.rmtree(hour_dir)
                    result.removed.append(hour_dir)
                except OSError as exc:
                    result.errors.append(f"{hour_dir}: {exc.strerror or exc}")
            try:
                date_dir.rmdir()  # only when now empty
            except OSError:
                pass
    return result


def prune_files(folder: Path, retention_hours: float, max_files: int, now: float | None = None) -> list[Path]:
    """Delete kept capture files older than the retention, then the oldest beyond max_files."""
    if not folder.is_dir():
        return []
    now = time.time() if now is None else now
    files = sorted((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.stat().st_mtime)
    doomed = [p for p in files if p.stat().st_mtime < now - retention_hours * 3600]
    rest = [p for p in files if p not in doomed]
    if max_files > 0 and len(rest) > max_files:
        doomed += rest[: len(rest) - max_files]
    for p in doomed:
        p.unlink(missing_ok=True)
    return doomed


def store_bytes(root: str | Path) -> int:
    total = 0
    for p in Path(root).rglob("*.parquet"):
        try:
            total += p.stat().st_size
        except OSError:
            pass  # removed meanwhile
    return total
