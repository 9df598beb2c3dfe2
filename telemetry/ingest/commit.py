"""What a capture's commit adds besides its rows: the models kept with it (computed from
its written files), the id of a chain's closing commit, and no cycle collection
while the rows are built."""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from parsers.records import DecodeIssue
from telemetry.ingest.options import IngestOptions, IngestResult
from telemetry.store.parquet import CaptureWriter


def deriver(options: IngestOptions, result: IngestResult) -> Callable[[CaptureWriter], dict[Path, Path]] | None:
    """What the commit computes from the written files: the models kept with the capture."""
    return (lambda w: derive(w, result)) if options.store_models else None


def derive(writer: CaptureWriter, result: IngestResult) -> dict[Path, Path]:
    """The models kept with the capture, computed from its written files (imported here:
    DuckDB is not loaded until the capture's rows are written). If they cannot be computed
    the capture is stored without them, with a warning: queries then compute them when read."""
    from telemetry.models.stored import DERIVE_MEMORY_MB, store_capture_models

    outgrown: list[str] = []
    try:
        stored = store_capture_models(writer, outgrown)
    except Exception as exc:  # noqa: BLE001 - the rows are good; only the stored analysis is missing
        result.issues.append(DecodeIssue("analysis_not_stored", 0, f"analysis not stored with the capture ({str(exc).splitlines()[0]}); queries compute it when read"))
        return {}
    if outgrown:
        result.issues.append(DecodeIssue(
            "analysis_memory", 0, f"the analysis needed more than its {DERIVE_MEMORY_MB} MB of memory ({'; '.join(outgrown)})"))
    return stored


CLOSING_SUFFIX = "#close"  # path of the captures row of a chain's closing commit


def closing_id(capture_id: str) -> str:
    """capture_id of the closing commit after the file ``capture_id``: derived, so that
    closing the same chain again replaces it (idempotent) and never names a file."""
    return hashlib.blake2b(f"{capture_id}{CLOSING_SUFFIX}".encode(), digest_size=16).hexdigest()


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """No automatic cycle collection while a file is ingested (restored after).

    The ingest frees what it allocates by reference counting and makes no reference
    cycles (tests/test_ingest_gc.py holds it to that), so a collector run finds nothing to
    free; but each run walks every young container, and an open connection holds ~150 of
    them (its TCP, HTTP/2 and HPACK state): at 10,000 open connections a run took 0.5-0.8
    s and freed ~300 objects. A gen-0 threshold of 1,000,000 (the rule before) still ran
    it twice on that capture. Should a cycle appear after all, it waits for the first
    collection after the file, not for ever.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
