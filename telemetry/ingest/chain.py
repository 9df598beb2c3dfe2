"""Files of one capture run ingested with one parser state (IngestChain), and a single
file on its own (ingest_file): each file its own capture id, captures row and atomic commit."""

from __future__ import annotations

import os
import time
from pathlib import Path

from telemetry.ingest.commit import CLOSING_SUFFIX, closing_id, deriver, no_cycle_collection
from telemetry.ingest.options import (
    ANALYSING,
    FINISHING,
    IngestOptions,
    IngestResult,
    ProgressFn,
    StageFn,
)
from telemetry.ingest.pipeline import CapturePipeline
from telemetry.ingest.source import stream, unreadable
from telemetry.ingest.split import ingest_split, worth_splitting
from telemetry.store.capture_id import capture_id_of
from telemetry.store.parquet import Store


def ingest_file(
    path: str | os.PathLike[str],
    store: Store,
    options: IngestOptions | None = None,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
) -> IngestResult:
    """Ingest one capture file on its own: a chain of one file, finished inside its commit."""
    return IngestChain(store, options).ingest(path, progress, final=True, stage=stage)


class IngestChain:
    """Ingests consecutive files of one capture run (a rotated capture) with ONE parser
    state, so that a connection crossing a rotation keeps its HPACK table and open streams.

    Each file still has its own capture_id (content hash), ``captures`` row and atomic
    commit: rows resolved while reading a file go to that file's writer; connections and
    requests still open at its end continue in the next file (a request straddling a
    rotation is one row, written with the file in which it ends). :meth:`close` finishes
    what is left (open connections, unanswered requests) as a small commit of its own,
    capture_id ``closing_id(last file's id)``, with a ``captures`` row of no packets: the
    files' commits are never held back, so a file is in the store as soon as it was read
    (the daemon deletes it then).

    A file already in the store (without ``force``) breaks the chain: the state so far is
    closed, the file skipped, and the next file starts a fresh state (no row twice). A file
    that fails after some of its packets went through the parsers drops the state (its
    rows were thrown away with its writer); one that fails before keeps it.
    """

    def __init__(self, store: Store, options: IngestOptions | None = None) -> None:
        self.store = store
        self.options = options or IngestOptions()
        self._pipeline: CapturePipeline | None = None
        self._last: IngestResult | None = None  # the chain's last committed file

    @property
    def open(self) -> bool:
        """Whether parser state carries over to the next file."""
        return self._pipeline is not None

    def ingest(
        self, path: str | os.PathLike[str], progress: ProgressFn | None = None, final: bool = False,
        stage: StageFn | None = None,
    ) -> IngestResult:
        """Ingest the next file of the run. ``final``: it is the last one, finish
        everything inside its own commit (what :func:`ingest_file` does). ``stage`` is
        told what follows the reading (FINISHING, ANALYSING) as it begins."""
        say = stage or _quiet
        path = Path(path)
        result = IngestResult(path=str(path))
        started = time.perf_counter()
        result.error = unreadable(path)
        if result.error:
            return result
        result.capture_id = capture_id_of(path, self.store.capture_id_scheme())
        if self.store.has_capture(result.capture_id) and not self.options.force:
            self.close()
            result.skipped = True
            return result
        writer = self.store.writer(result.capture_id)
        if final and self._pipeline is None and worth_splitting(path, self.options):
            with no_cycle_collection():
                ingest_split(path, writer, result, self.options, progress, say)
            self._last = None if result.error else result
            result.seconds = time.perf_counter() - started
            return result
        carried = self._pipeline
        pipeline = carried
        if pipeline is None:
            pipeline = CapturePipeline(result.capture_id, writer, self.options)
        else:
            pipeline.begin_file(result.capture_id, writer)
        self._pipeline = None  # only a file read to its end hands its state on
        with no_cycle_collection():
            try:
                stream(path, pipeline, result, progress)
                if result.error:
                    writer.abort()
                    if carried is not None and pipeline.decoder.packets_read == 0:
                        self._pipeline = carried  # not a packet of it was used: the state is intact
                    else:
                        self._last = None
                    return result
                writer.flush()  # the rows so far are written while the last ones are built
                say(FINISHING)
                if final:
                    pipeline.finish()
                else:
                    pipeline.end_file()
                pipeline.fill_result(result)
                say(ANALYSING)
                writer.commit(pipeline.capture_row(path, result), derive=deriver(self.options, result))
            except BaseException:
                writer.abort()
                self._last = None
                raise
        if not final:
            self._pipeline = pipeline
        self._last = result
        result.seconds = time.perf_counter() - started
        return result

    def close(self) -> IngestResult | None:
        """Finish the state carried over (TCP finish, sessions finish) and commit it;
        None when there was none."""
        pipeline, last = self._pipeline, self._last
        self._pipeline = self._last = None
        if pipeline is None or last is None:
            return None
        started = time.perf_counter()
        result = IngestResult(path=last.path, capture_id=closing_id(last.capture_id))
        writer = self.store.writer(result.capture_id)
        pipeline.begin_file(result.capture_id, writer)
        with no_cycle_collection():
            try:
                pipeline.finish()
                pipeline.fill_result(result)
                writer.commit(pipeline.capture_row(Path(f"{last.path}{CLOSING_SUFFIX}"), result), derive=deriver(self.options, result))
            except BaseException:
                writer.abort()
                raise
        result.seconds = time.perf_counter() - started
        return result


def _quiet(_stage: str) -> None:
    return None
