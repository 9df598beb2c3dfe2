"""What a capture's commit adds besides its rows: the models kept with it (computed from
its written files), the id of a chain's closing commit, and fewer garbage collections
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

# Net new container objects between two runs of the cycle collector while ingesting. A
# run walks every young object and whatever it references: the pipeline's growing lists
# of rows (each run 10-45 ms at 50,000, most freeing nothing). On the realistic 1M capture
# `analyze` cost 5% less CPU at 1,000,000 than at 50,000 (7 pairs).
GC_GEN0_THRESHOLD = 1_000_000


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
def fewer_collections() -> Iterator[None]:
    # The pipeline allocates (and frees by reference counting) a few container objects
    # per packet; the default gen-0 threshold (700) runs the cycle collector every few
    # hundred packets for nothing. Collect less often while ingesting.
    gc_threshold = gc.get_threshold()
    gc.set_threshold(max(gc_threshold[0], GC_GEN0_THRESHOLD), *gc_threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*gc_threshold)
