"""The spool folder and the ingest worker.

Spool layout::

    SPOOL/tailtap-*.pcap[ng]   written by the capture tool; complete once it closed them
    SPOOL/failed/              files that could not be ingested, each with NAME.error
    SPOOL/ingested/            ingested files, with --keep-files (pruned by retention)
    SPOOL/.lock                one daemon per spool (flock)

A completed file is ingested, then deleted (or kept); a file that fails is moved to
failed/ with its error, never silently lost. Files left by an earlier run are complete
(no capture is running yet) and are ingested first. When ingest falls behind by more than
--max-files files, the oldest waiting files are deleted and counted: the spool is a ring
buffer, and the freshest traffic is the most useful.

Files of one capture run are ingested as one chain (telemetry.ingest.IngestChain): a
connection crossing a rotation keeps its HPACK table and open streams, a request crossing
it is one row. A new run (the capture restarted), a gap (a file dropped, failed or missing
from the sequence) and the worker's exit close the chain: what is still open is written
as the chain's closing commit.

The worker thread also runs retention and recomputes the recent-window gauges, so that
every store-heavy task is serialised (two cores shared; DuckDB never reads a partition
that retention is deleting).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import struct
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from telemetry.daemon import retention
from telemetry.daemon.capture import PREFIX
from telemetry.daemon.metrics import DaemonMetrics
from telemetry.ingest import IngestChain, IngestOptions, IngestResult
from telemetry.store.parquet import Store, StoreError

STORE_RETRY_S = 5.0  # how often a store that refused a write is tried again
# errors of the store's file system, whatever file they name
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def _problem_text(exc: BaseException) -> str:
    """What went wrong with the store, in one line (the same text for every retry)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__

log = logging.getLogger("tailtap.daemon")

_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_PCAPNG_PACKET_BLOCKS = {2, 3, 6}  # obsolete packet, simple packet, enhanced packet
_NUM = re.compile(r"(\d+)")


class SpoolBusy(Exception):
    pass


# tcpdump: tailtap-<run>-<time>.pcap[N]; dumpcap: tailtap-<run>_<seq>_<time>.pcapng
_RUN_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)(?:_(\d+)_)?")


def run_of(path: Path) -> tuple[str, int | None] | None:
    """(capture run id, sequence number when the tool writes one) from a spool file's name;
    None for a name the daemon's capture did not write."""
    m = _RUN_NAME.match(path.name)
    if m is None:
        return None
    return m.group(1), int(m.group(2)) if m.group(2) is not None else None


def _natural(path: Path) -> list[object]:
    """tailtap-<run>-<time>.pcapN / tailtap-<run>_<seq>_<time>.pcapng in creation order."""
    return [int(t) if t.isdigit() else t for t in _NUM.split(path.name)]


def has_packets(path: Path) -> bool:
    """False for a capture file holding only its headers (a rotation with no traffic).
    Unknown contents count as packets: ingest then reports what is wrong with them."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            if not head:
                return False
            if head in _PCAP_MAGICS:
                return os.fstat(fh.fileno()).st_size != 24  # shorter: a broken header, for ingest to report
            if head != _PCAPNG_SHB:
                return True
            fh.seek(0)
            pos, size = 0, os.fstat(fh.fileno()).st_size
            order = "<"
            while pos + 12 <= size:
                fh.seek(pos)
                hdr = fh.read(12)
                if hdr[:4] == _PCAPNG_SHB:
                    order = "<" if hdr[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
                btype, blen = struct.unpack(order + "II", hdr[:8])
                if btype in _PCAPNG_PACKET_BLOCKS:
                    return True
                if blen < 12:
                    return True  # corrupt: let ingest say so
                pos += blen
            return False
    except OSError:
        return True


class Spool:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.failed_dir = self.root / "failed"
        self.kept_dir = self.root / "ingested"
        self._lock_fh = None

    def prepare(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.failed_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create spool folder {self.root}: {exc.strerror}") from exc
        if not os.access(self.root, os.W_OK):
            raise StoreError(f"spool folder {self.root} is not writable")
        fh = open(self.root / ".lock", "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            owner = fh.read().strip() or "?"
            fh.close()
            raise SpoolBusy(f"spool {self.root} is in use by another tailtap daemon (pid {owner})") from None
        fh.truncate(0)
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._lock_fh = fh

    def release(self) -> None:
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None

    def files(self) -> list[Path]:
        try:
            entries = [p for p in self.root.iterdir() if p.name.startswith(PREFIX) and p.is_file()]
        except FileNotFoundError:
            return []
        return sorted(entries, key=_natural)

    def completed(self, open_files: set[Path] | None, capturing: bool) -> list[Path]:
        files = self.files()  # list before asking what is open: a file closed in between is complete
        if not capturing:
            return files
        if open_files is None:  # no /proc: the newest file is the one being written
            return files[:-1]
        open_resolved = {p.resolve() for p in open_files}
        return [p for p in files if p.resolve() not in open_resolved]

    def fail(self, path: Path, message: str) -> Path:
        dest = self.failed_dir / path.name
        os.replace(path, dest)
        (self.failed_dir / f"{path.name}.error").write_text(message.rstrip() + "\n")
        return dest

    def keep(self, path: Path) -> Path:
        self.kept_dir.mkdir(exist_ok=True)
        dest = self.kept_dir / path.name
        os.replace(path, dest)
        return dest

    def failed_count(self) -> int:
        try:
            return sum(1 for p in self.failed_dir.iterdir() if p.is_file() and not p.name.endswith(".error"))
        except FileNotFoundError:
            return 0


@dataclass
class WorkerSettings:
    options: IngestOptions
    retention_hours: float = 24.0
    max_files: int = 100
    keep_files: bool = False
    metrics_window_s: float = 300.0
    window_s: float = 10.0  # the models' window (spikes, baselines)
    refresh_s: float = 15.0
    retention_every_s: float = 60.0
    poll_s: float = 0.25


class Worker(threading.Thread):
    """Ingests completed spool files one at a time until told to stop or to drain."""

    def __init__(
        self,
        spool: Spool,
        store: Store,
        metrics: DaemonMetrics,
        settings: WorkerSettings,
        open_files: Callable[[], set[Path] | None],
        capturing: Callable[[], bool],
        before_ingest: Callable[[], object] | None = None,
    ) -> None:
        super().__init__(name="ingest-worker", daemon=True)
        self.spool = spool
        self.store = store
        self.metrics = metrics
        self.settings = settings
        self._open_files = open_files
        self._capturing = capturing
        self._before_ingest = before_ingest  # e.g. read the key logs' new lines
        self._halt = threading.Event()  # finish the current file, then exit
        self._drain = threading.Event()  # ingest every completed file, then exit
        self.failure: BaseException | None = None
        self.current: Path | None = None
        self.store_broken = False
        self._store_problem: str | None = None
        self._next_retention = 0.0
        self._next_refresh = 0.0
        self._dirty = True  # something was ingested since the last refresh
        # one parser state across the files of a capture run
        self._chain = IngestChain(store, settings.options)
        self._chain_run: tuple[str, int | None] | None = None  # run and sequence of its last file

    def stop(self) -> None:
        self._halt.set()

    def drain(self) -> None:
        self._drain.set()
        self._halt.set()  # wakes the idle wait

    def cancel_drain(self) -> None:
        self._drain.clear()
        self._halt.set()

    def run(self) -> None:
        try:
            self._loop()
            self.close_chain()
        except BaseException as exc:  # a bug: the service reports it and exits non-zero
            self.failure = exc
            log.error("ingest worker crashed: %s", "".join(traceback.format_exception(exc)).rstrip())

    def _loop(self) -> None:
        while True:
            capturing = self._capturing()
            pending = self.spool.completed(self._open_files(), capturing)
            pending = self._bound(pending)
            self._spool_gauges(pending)
            draining = self._drain.is_set()
            if self._halt.is_set() and not draining:
                return
            if not pending and draining and not capturing:
                self.close_chain()  # before the final refresh: it counts the closing rows
                self._housekeeping(final=True)
                return
            self._housekeeping()  # time-gated: also runs when ingest never idles
            if pending:
                self.ingest(pending[0])
                if self.store_broken and self._halt.is_set():
                    return  # stopping: the files wait in the spool for the next start
            elif draining:
                time.sleep(self.settings.poll_s)  # _stop is already set: wait() would spin
            else:
                self._halt.wait(self.settings.poll_s)

    def _bound(self, pending: list[Path]) -> list[Path]:
        extra = len(pending) - self.settings.max_files
        if self.settings.max_files <= 0 or extra <= 0:
            return pending
        self.close_chain()  # the dropped files are a gap in the run
        for path in pending[:extra]:
            path.unlink(missing_ok=True)
            self.metrics.spool_dropped.inc()
        log.warning(
            "ingest is behind: %d capture file(s) waiting, more than --max-files %d; deleted the %d oldest unread (%s ...)",
            len(pending), self.settings.max_files, extra, pending[0].name,
        )
        return pending[extra:]

    def _spool_gauges(self, pending: list[Path]) -> None:
        m = self.metrics
        m.spool_pending.set(len(pending))
        age = 0.0
        if pending:
            try:
                age = max(0.0, time.time() - min(p.stat().st_mtime for p in pending))
            except OSError:
                pass
        m.spool_oldest_age.set(age)
        m.spool_failed.set(self.spool.failed_count())

    def ingest(self, path: Path) -> None:
        m = self.metrics
        self.current = path
        try:
            self._follow_run(path)
            if not has_packets(path):
                path.unlink(missing_ok=True)
                m.spool_empty.inc()
                log.debug("%s: no packets, deleted", path.name)
                return
            if self._before_ingest is not None:
                self._before_ingest()
            try:
                result = self._chain.ingest(path)
            except (StoreError, OSError) as exc:
                if isinstance(exc, OSError) and not self._is_store_error(exc):
                    raise
                # the file is fine, the store is not (full, read-only, gone): keep the file,
                # retry every few seconds; the chain starts afresh with it (ingest aborted it)
                m.store_errors.inc()
                message = _problem_text(exc)
                if message != self._store_problem:  # once per problem, not once per retry
                    log.error("store %s: %s; capture files stay in the spool (%s first), retried every %g s",
                              self.store.root, message, path.name, STORE_RETRY_S)  # fmt: skip
                self._store_problem = message
                self.store_broken = True
                self._halt.wait(STORE_RETRY_S)
                return
            except Exception as exc:  # a parser bug must not lose the file or stop the daemon
                m.ingest_errors.inc()
                self.close_chain()  # the file is missing from the run
                detail = "".join(traceback.format_exception(exc))
                dest = self.spool.fail(path, f"ingest crashed:\n{detail}")
                log.error("%s: ingest crashed (%s: %s); moved to %s", path.name, type(exc).__name__, exc, dest)
                return
            if self.store_broken:
                log.info("store %s: writable again, ingest resumed", self.store.root)
            self.store_broken = False
            self._store_problem = None
            if result.error:
                m.ingest_errors.inc()
                self.close_chain()  # the file is missing from the run
                dest = self.spool.fail(path, result.error)
                log.error("%s: %s; moved to %s", path.name, result.error, dest)
                return
            if result.skipped:
                log.info("%s: already in the store (capture %s), not ingested again", path.name, result.capture_id[:12])
            else:
                self._account(result)
            if self.settings.keep_files:
                self.spool.keep(path)
            else:
                path.unlink(missing_ok=True)
        finally:
            self.current = None

    def _is_store_error(self, exc: OSError) -> bool:
        """A write the store refused (full, read-only, quota, permissions), not a file
        the parsers could not read."""
        if exc.errno in _STORAGE_ERRNOS:
            return True
        if exc.errno in (errno.EACCES, errno.EPERM):
            name = exc.filename if isinstance(exc.filename, str) else ""
            return not name or Path(name).resolve().is_relative_to(self.store.root.resolve())
        return False

    def _follow_run(self, path: Path) -> None:
        """Close the chain unless ``path`` is the next file of its run."""
        run = run_of(path)
        last = self._chain_run
        if last is not None and (
            run is None
            or run[0] != last[0]  # the capture restarted (or files of an earlier run)
            # a file is missing (the same number again: a file retried after a store error)
            or (run[1] is not None and last[1] is not None and run[1] not in (last[1], last[1] + 1))
        ):
            self.close_chain()
        self._chain_run = run

    def close_chain(self) -> None:
        """Write what the chain still holds open (connections, requests) and start afresh."""
        self._chain_run = None
        try:
            result = self._chain.close()
        except Exception as exc:  # noqa: BLE001 - the open rows are lost, the files are stored
            self.metrics.ingest_errors.inc()
            log.error("closing the ingest chain failed (%s: %s); its open connections are not stored", type(exc).__name__, exc)
            return
        if result is not None:
            self._account(result, closing=True)

    def _account(self, result: IngestResult, closing: bool = False) -> None:
        m = self.metrics
        if not closing:  # a closing commit reads no file
            m.captures_ingested.inc()
            m.packets.inc(result.packets)
            m.bytes.inc(result.bytes)
        m.connections.inc(result.connections)
        m.ingest_seconds.inc(result.seconds)
        now = time.time()
        m.last_ingest.set(now)
        try:
            last_ts, _drops = m.observe_capture(self.store, result.capture_id)
        except Exception as exc:  # the rows are stored; only the counters missed them
            m.refresh_errors.inc()
            log.warning("%s: request metrics not updated: %s", Path(result.path).name, exc)
            last_ts = None
        if last_ts is not None and not closing:
            m.ingest_lag.set(max(0.0, now - last_ts))
        self._dirty = True
        issues = ""
        if result.issues:
            issues = f"; {len(result.issues)} decode issue(s), first: {result.issues[0].message}"
        if closing:
            log.info(
                "%s: end of the ingest chain: %d connections, %d requests still open written%s",
                Path(result.path).name, result.connections, result.requests, issues,
            )
            return
        log.info(
            "%s: %d packets, %d connections, %d requests in %.2f s%s",
            Path(result.path).name, result.packets, result.connections, result.requests, result.seconds, issues,
        )

    def _housekeeping(self, final: bool = False) -> None:
        now = time.monotonic()
        s = self.settings
        if now >= self._next_retention or final:
            self._next_retention = now + s.retention_every_s
            self.run_retention()
        if (self._dirty and now >= self._next_refresh) or now >= self._next_refresh + 4 * s.refresh_s or final:
            # after ingests at most every refresh_s; otherwise now and then (the window moves)
            self._next_refresh = now + s.refresh_s
            self._dirty = False
            self.metrics.refresh_recent(self.store, s.metrics_window_s, s.window_s)

    def run_retention(self) -> None:
        s = self.settings
        result = retention.prune_store(self.store.root, s.retention_hours)
        if result.removed:
            self.metrics.retention_removed.inc(len(result.removed))
            log.info("retention: removed %d partition(s) older than %g h", len(result.removed), s.retention_hours)
        for error in result.errors:
            log.warning("retention: %s", error)
        if s.keep_files:
            retention.prune_files(self.spool.kept_dir, s.retention_hours, s.max_files)
        self.metrics.store_bytes.set(retention.store_bytes(self.store.root))
