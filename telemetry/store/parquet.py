"""The Parquet store: Hive-partitioned (date=/hour=), zstd (a column the schema marks
incompressible is stored plain), idempotent, atomic.

Its folders are telemetry.store.layout's (``StoreLayout``; ``Store`` adds the writer). The store knows
tables and their schemas (telemetry.store.schema), nothing of protocols.

* Idempotent: every file is named by the capture's content hash; re-ingesting a capture
  first removes that capture's files, so rows are never duplicated.
* Atomic: a capture's files are written into ``ROOT/.staging/<capture_id>/`` (invisible to
  readers, which glob ``<table>/**/*.parquet``; flat, named by their place in the store)
  and moved into place only when the whole capture was ingested; the ``captures`` row is
  moved last and marks the capture complete.
  An interrupted run leaves only the staging folder, removed by the next run.
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow._compute  # noqa: F401 - see below
import pyarrow.parquet as pq

from telemetry.store.layout import ID_SCHEME_FILE, STAGING, StoreLayout
from telemetry.store.layout import MODELS as MODELS
from telemetry.store.layout import StoreError as StoreError
from telemetry.store.schema import COLUMNS, PARTITION_FALLBACK, PARTITION_TIME, TABLES

NS_PER_HOUR = 3_600_000_000_000
WRITE_THREADS = 2  # threads that encode Parquet (tables spread over them), all busy at the commit
# while the parsers run, at most this many writes at once: a core is left to the parsers
STREAMING_WRITES = max(1, min(WRITE_THREADS, (os.cpu_count() or 1) - 1))


class Store(StoreLayout):
    """A store to read and write: :class:`StoreLayout` and a writer per capture."""

    def writer(self, capture_id: str, flush_rows: int = 65_536, part: int = 0) -> CaptureWriter:
        """The capture's writer; ``part`` > 0: another process's share of the same
        capture, written into the same staging folder and committed by part 0's writer."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create store folder {self.root}: {exc.strerror}") from exc
        if not os.access(self.root, os.W_OK):
            raise StoreError(f"store folder {self.root} is not writable")
        return CaptureWriter(self, capture_id, flush_rows, part)

    def keep_capture_id_scheme(self) -> None:
        """Write down the hash of the store's capture ids before its first capture goes
        in (a store written before the file holds SHA-256 ids, and says so from then on)."""
        path = self.root / ID_SCHEME_FILE
        if path.exists():
            return
        scheme = self.capture_id_scheme()
        fresh = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            fresh.write_text(scheme + "\n", encoding="ascii")
            os.replace(fresh, path)  # whole or not at all, for another process reading it
        except OSError as exc:
            raise StoreError(f"cannot write {path}: {exc.strerror}") from exc


def _as_float(column: pa.ChunkedArray) -> np.ndarray:
    """Time column as float64 ns, NaN for nulls (without pyarrow.compute: its import
    alone costs more than a small capture's whole write)."""
    values = column.to_numpy()
    if values.dtype.kind == "M":  # timestamps: nulls come back as NaT
        ints = values.view(np.int64)
        out = ints.astype(np.float64)
        out[ints == np.iinfo(np.int64).min] = np.nan
        return out
    return np.asarray(values, dtype="float64")


def _partition_keys(table: str, data: pa.Table) -> np.ndarray:
    """Hour bucket (ns // 1h) of each row from its partition time column (with fallbacks)."""
    ts = _as_float(data.column(PARTITION_TIME[table]))  # nulls -> nan
    for name in PARTITION_FALLBACK.get(table, ()):
        missing = np.isnan(ts)
        if not missing.any():
            break
        alt = _as_float(data.column(name))
        ts[missing] = alt[missing]
    ts[np.isnan(ts)] = 0  # no time at all: epoch partition, still stored, never dropped
    return (ts // NS_PER_HOUR).astype(np.int64)


def _single_hour(table: str, data: pa.Table) -> int | None:
    """The hour bucket of every row when all have their partition time and share one hour
    (nearly always): :func:`_partition_keys`'s bucket of the least and the greatest time,
    equal, says so without a bucket per row (the float conversion and the division keep
    the order). None otherwise."""
    values = data.column(PARTITION_TIME[table]).to_numpy()
    if values.dtype.kind != "M":
        return None
    ints = values.view(np.int64)
    ends = np.array([ints.min(), ints.max()], dtype=np.int64)
    if ends[0] == np.iinfo(np.int64).min:  # a null time: the fallback columns decide
        return None
    first, last = (ends.astype(np.float64) // NS_PER_HOUR).astype(np.int64).tolist()
    return first if first == last else None


# the form the writer takes text columns in: codes into their distinct values
TEXT = pa.dictionary(pa.int32(), pa.string())


def _text_as_codes(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its text columns as dictionary arrays: the form the writer takes rows
    in. Ids, directions and kinds repeat on every row: given as codes into their distinct
    values, the Parquet writer writes the codes (its dictionary pages) without hashing
    every row's text. The files hold plain text columns, read back as the schema says."""
    return pa.schema([pa.field(f.name, TEXT) if pa.types.is_string(f.type) else f for f in schema])


WRITE_SCHEMAS = {table: _text_as_codes(schema) for table, schema in TABLES.items()}
# The Parquet writer looks up Arrow compute functions (the statistics of a dictionary
# column: "unique"). Arrow registers the bulk of them when pyarrow._compute is first
# imported (by any cast, e.g.): done then in one thread while a write runs in another,
# the lookup failed now and then ("No function registered with name: unique"). Imported
# above, before any write thread starts (9 ms).

# integer and time columns delta-encoded (DELTA_BINARY_PACKED), without zstd: times and
# sequence numbers grow a little from row to row, so the differences pack into a few bits
# each, where PLAIN wrote 8 bytes a value for zstd to shrink. Paired runs of `tailtap
# analyze` (the writes and every model's reads): CPU 0.974 on the realistic 1M capture,
# 0.980 on the 200k one; its store 4 % bigger than with zstd
_DELTA = {
    table: {f.name: "DELTA_BINARY_PACKED" for f in fields if pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type)}
    for table, fields in TABLES.items()
}
# each table's other columns: zstd, or none where the schema says zstd barely shrinks them
_COMPRESSION = {
    table: {c.name: "none" if c.name in _DELTA[table] or not c.compress else "zstd" for c in cols}
    for table, cols in COLUMNS.items()
}


# min/max statistics of the times and numbers only: Arrow takes a dictionary column's from
# every value, not from its few distinct ones (a quarter of the writes' CPU on the
# realistic 1M capture), and no query narrows its reading by a text column's range
_STATISTICS = {table: [f.name for f in fields if not pa.types.is_string(f.type)] for table, fields in TABLES.items()}


def _partition_path(hour_bucket: int) -> str:
    day = np.datetime64(int(hour_bucket) * NS_PER_HOUR, "ns").astype("datetime64[h]")
    text = str(day)  # 'YYYY-MM-DDTHH'
    return f"date={text[:10]}/hour={text[11:13]}"


class _WriteThread:
    """A thread that runs Parquet writes (Arrow encodes and compresses without the GIL)
    beside the parsers. Jobs run in submission order; the queue is short, so at most a
    few flushes' tables wait (bounded memory). The first failure is raised to the caller
    at its next submit or drain; later jobs are skipped."""

    def __init__(self, depth: int = 3) -> None:
        self._jobs: queue.Queue[tuple[Callable[..., None], tuple] | None] = queue.Queue(depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tailtap-parquet", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                if self._error is None:
                    job[0](*job[1])
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self._error = exc
            finally:
                self._jobs.task_done()
        self._jobs.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc

    def submit(self, fn: Callable[..., None], *args: object) -> None:
        self._raise()
        self._jobs.put((fn, args))

    def drain(self) -> None:
        """Wait until every job ran; raise the first failure."""
        self._jobs.join()
        self._raise()

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join()


class CaptureWriter:
    """Buffers a capture's rows per table and writes them into the staging folder (the
    Parquet encoding in background threads; :meth:`commit` waits for them)."""

    def __init__(self, store: Store, capture_id: str, flush_rows: int, part: int = 0) -> None:
        self.store = store
        self.capture_id = capture_id
        self.flush_rows = flush_rows
        self.staging = store.root / STAGING / capture_id
        self._name = capture_id if part == 0 else f"{capture_id}-p{part}"
        if part == 0:
            shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir(parents=True, exist_ok=part > 0)
        self._buffers: dict[str, list[pa.Table]] = {t: [] for t in TABLES}
        self._buffered: dict[str, int] = dict.fromkeys(TABLES, 0)
        self._seq: dict[str, int] = dict.fromkeys(TABLES, 0)  # files opened per table
        self._files: dict[tuple[str, int], pq.ParquetWriter] = {}  # (table, hour) -> open file
        self._staged: dict[Path, Path] = {}  # staging file -> its place in the store
        self.rows_written: dict[str, int] = dict.fromkeys(TABLES, 0)
        # write threads, started as the first tables are flushed (starting one later, at
        # the commit, waits for the GIL behind the others); a table keeps its thread, so
        # its flushes are written in order
        self._lanes: list[_WriteThread] = []
        self._lane_of: dict[str, _WriteThread] = {}
        self._slots = threading.Semaphore(STREAMING_WRITES)  # writes running at once

    def append(self, table: str, data: pa.Table) -> None:
        if data.num_rows == 0:
            return
        if data.schema != WRITE_SCHEMAS[table]:
            data = data.select(TABLES[table].names).cast(WRITE_SCHEMAS[table])
        self._buffers[table].append(data)
        self._buffered[table] += data.num_rows
        if self._buffered[table] >= self.flush_rows:
            self._flush(table)

    def flush(self) -> None:
        """Hand every buffered row to the write threads now: they encode them while the
        caller goes on (e.g. closes the last connections) instead of after."""
        for table in TABLES:
            self._flush(table)

    def _flush(self, table: str) -> None:
        parts = self._buffers[table]
        if not parts:
            return
        self._buffers[table] = []
        self._buffered[table] = 0
        lane = self._lane_of.get(table)
        if lane is None:
            if len(self._lanes) < WRITE_THREADS:
                self._lanes.append(_WriteThread())
            lane = self._lane_of[table] = self._lanes[len(self._lane_of) % WRITE_THREADS]
        lane.submit(self._write, table, parts)

    def _write(self, table: str, parts: list[pa.Table]) -> None:
        """Write buffered tables into their hours' files (in a write thread)."""
        with self._slots:
            # one dictionary per text column: the Parquet writer writes codes only while
            # a row group's dictionary stays the same (else it decodes them all)
            self._write_hours(table, pa.concat_tables(parts).unify_dictionaries())

    def _write_hours(self, table: str, data: pa.Table) -> None:
        """Write a table's rows into the files of their hours."""
        hour = _single_hour(table, data)  # one hour, nearly always (never an empty table)
        if hour is None:
            keys = _partition_keys(table, data)
            if (keys == keys[0]).all():
                hour = int(keys[0])
        if hour is not None:
            hours = [(hour, data)]
        else:
            # each hour's rows, in their order, from the stretches of equal keys: slices,
            # no pyarrow.compute filter (whose import costs more than a small write)
            cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
            starts = np.concatenate(([0], cuts)).tolist()
            stops = np.concatenate((cuts, [len(keys)])).tolist()
            pieces: dict[int, list[pa.Table]] = {}
            for a, z in zip(starts, stops, strict=True):
                pieces.setdefault(int(keys[a]), []).append(data.slice(a, z - a))
            hours = [(b, p[0] if len(p) == 1 else pa.concat_tables(p)) for b, p in sorted(pieces.items())]
        for bucket, rows in hours:
            self._file(table, bucket).write_table(rows)
            self.rows_written[table] += rows.num_rows

    def wait(self) -> None:
        """Wait until the rows flushed so far are in the staging files (writes run in the
        background); raises a write failure."""
        for lane in self._lanes:
            lane.drain()

    def _finish_writes(self) -> None:
        """Wait for every write and stop the threads; raises the first failure."""
        lanes, self._lanes, self._lane_of = self._lanes, [], {}
        error: BaseException | None = None
        for lane in lanes:
            try:
                lane.drain()
            except BaseException as exc:  # noqa: BLE001 - raised once every thread stopped
                error = error or exc
            finally:
                lane.stop()
        if error is not None:
            raise error

    def _file(self, table: str, bucket: int) -> pq.ParquetWriter:
        """The open staging file of a table's hour: each flush adds a row group to it, so
        buffers stay small without a file per flush (staging is invisible to readers)."""
        out = self._files.get((table, bucket))
        if out is None:
            self._seq[table] += 1  # (only this table's thread opens its files)
            place = Path(table, _partition_path(bucket), f"{self._name}-{self._seq[table]:05d}.parquet")
            # no folders in staging: fewer file system operations for a commit
            path = self.staging / "~".join(place.parts)
            self._staged[path] = place
            # dictionary-encode the text columns only (ids, kinds, directions): trying it on
            # times and counters costs most of the write and makes the files bigger
            text = [f.name for f in TABLES[table] if pa.types.is_string(f.type)]
            # no Arrow schema in the file: it would say "dictionary" where readers are to
            # see the text the Parquet columns are
            out = pq.ParquetWriter(path, WRITE_SCHEMAS[table], compression=_COMPRESSION[table], use_dictionary=text,
                                   column_encoding=_DELTA[table], store_schema=False,
                                   write_statistics=_STATISTICS[table])
            self._files[(table, bucket)] = out
        return out

    def _close_files(self) -> None:
        files, self._files = self._files, {}
        for out in files.values():
            out.close()

    def _write_out(self) -> None:
        """Write every buffered row, wait for the writes and close the files."""
        self.flush()
        if WRITE_THREADS > STREAMING_WRITES:  # the caller only waits now: all threads write
            self._slots.release(WRITE_THREADS - STREAMING_WRITES)
        self._finish_writes()
        self._close_files()

    def close_part(self) -> dict[Path, Path]:
        """Another process's share of the capture (``part`` > 0) is complete: its files
        are written and closed in the staging folder. Returns them (staging file -> place
        in the store) for part 0's writer to :meth:`adopt`."""
        self._write_out()
        return dict(self._staged)

    def adopt(self, staged: dict[Path, Path]) -> None:
        """Commit another part's staged files (:meth:`close_part`) with this capture's."""
        self._staged.update(staged)

    def staged_files(self) -> dict[str, list[Path]]:
        """The written staging files of each table (after :meth:`close_part` / in
        :meth:`commit`'s ``derive``)."""
        out: dict[str, list[Path]] = {}
        for path, place in self._staged.items():
            out.setdefault(place.parts[0], []).append(path)
        return out

    def stage_path(self, place: Path) -> Path:
        """A staging file for ``place`` (a path inside the store) that the commit moves
        there; the caller writes it and hands it back (:meth:`commit`'s ``derive``)."""
        return self.staging / "~".join(place.parts)

    def commit(self, capture_row: pa.Table, derive: Callable[[CaptureWriter], dict[Path, Path]] | None = None) -> None:
        """Flush everything, then move the capture's files into the store, captures last.
        ``derive``: computes further files from the written ones (the models kept with
        the capture) into staging; they are committed with the rest."""
        self.append("captures", capture_row)
        self._write_out()
        if derive is not None:
            self._staged.update(derive(self))
        self.store.keep_capture_id_scheme()
        self.store.remove_capture(self.capture_id)  # replace an earlier ingest of the same file
        for src, place in sorted(self._staged.items(), key=lambda item: item[1].parts[0] == "captures"):
            dst = self.store.root / place
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        shutil.rmtree(self.staging, ignore_errors=True)
        _remove_empty_dirs(self.store.root / STAGING)

    def abort(self) -> None:
        try:
            self._finish_writes()
        except Exception:  # noqa: BLE001 - the files are thrown away anyway
            pass
        files, self._files = self._files, {}
        for out in files.values():
            _close_discarded(out)
        shutil.rmtree(self.staging, ignore_errors=True)
        _remove_empty_dirs(self.store.root / STAGING)


def _close_discarded(out: pq.ParquetWriter) -> None:
    """Close a staging file that is thrown away, even when its last write fails (a full
    disk): a writer whose close raises keeps its file open, and a deleted file still open
    keeps its space and the file system busy (no remount read-only) until the next GC."""
    try:
        out.close()
    except Exception:  # noqa: BLE001 - the file is thrown away anyway
        out.is_open = False
        if out.file_handle is not None:
            try:
                out.file_handle.close()
            except Exception:  # noqa: BLE001 - its buffered bytes are not wanted
                pass


def _remove_empty_dirs(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def clean_staging(root: str | os.PathLike[str]) -> None:
    """Remove what an interrupted run left behind."""
    shutil.rmtree(Path(root) / STAGING, ignore_errors=True)


def table_from_columns(table: str, columns: dict[str, Iterable[object]], *, fill_missing: bool = False) -> pa.Table:
    """Build a table of the given schema from column lists or arrays. A column the schema
    does not have is an error, and so is one it has but ``columns`` lacks (unless
    ``fill_missing``: then it is null), so that a writer and telemetry/store/schema.py cannot
    drift apart silently."""
    schema = WRITE_SCHEMAS[table]  # text as dictionary arrays: as the writer takes it
    unknown = set(columns) - set(schema.names)
    missing = [] if fill_missing else [name for name in schema.names if name not in columns]
    if unknown or missing:
        raise ValueError(f"{table}: columns not in telemetry/store/schema.py {sorted(unknown)}, missing {missing}")
    n = None
    arrays = []
    for f in schema:
        values = columns.get(f.name)
        if values is None:
            arrays.append(None)
            continue
        if not isinstance(values, pa.Array):
            arr = pa.array(values, type=f.type)
        else:
            arr = values if values.type == f.type else values.cast(f.type)
        n = len(arr)
        arrays.append(arr)
    n = n or 0
    arrays = [a if a is not None else pa.nulls(n, type=f.type) for a, f in zip(arrays, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)
