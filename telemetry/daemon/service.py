"""The daemon: capture supervision, the ingest worker, the metrics endpoint, signals.

Threads: the main thread supervises the capture tool (restart with backoff, counters)
and handles signals; the worker thread ingests, prunes and refreshes gauges; the HTTP
server threads only render the registry.

Stopping: SIGTERM/SIGINT stop the capture (the tool closes its file), let the worker
finish the file it is ingesting, close its ingest chain (connections still open are
written), and exit 0; files still waiting stay in the spool and are ingested at the next
start, as a new chain. A second signal exits at once (the store's staging
folder makes the interrupted ingest invisible). A bounded run (--duration/--once) ends
by stopping the capture and ingesting every file it wrote before exiting.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from telemetry.daemon.capture import (
    CaptureConfig,
    CaptureError,
    Capturer,
    check_filter,
    check_interface,
    find_tool,
)
from telemetry.daemon.keylogs import KeyLogFollower
from telemetry.daemon.metrics import DaemonMetrics, MetricsServer, parse_addr
from telemetry.daemon.worker import Spool, SpoolBusy, Worker, WorkerSettings
from telemetry.exit_codes import EXIT_INPUT as EXIT_FAILED  # the daemon could not go on
from telemetry.exit_codes import EXIT_OK, EXIT_STORE, EXIT_USAGE
from telemetry.ingest import IngestOptions
from telemetry.store.parquet import Store, StoreError, clean_staging

log = logging.getLogger("tailtap.daemon")

BACKOFF_MIN_S, BACKOFF_MAX_S = 1.0, 60.0
HEALTHY_AFTER_S = 60.0  # a capture that ran this long resets the backoff
STATS_EVERY_S = 5.0  # how often tcpdump is asked for its kernel drop counters
READY_TIMEOUT_S = 15.0


class DaemonError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class DaemonConfig:
    interface: str
    store: Path
    spool: Path
    rotate_seconds: int = 60
    rotate_mb: int = 0
    bpf: str = ""
    snaplen: int = 0
    buffer_mb: int = 0
    capturer: str = "tcpdump"
    metrics_addr: str = "127.0.0.1:9464"
    retention_hours: float = 24.0
    max_files: int = 100
    keep_files: bool = False
    h2_ports: tuple[int, ...] = ()
    capture_side: str = "auto"
    keylogs: tuple[Path, ...] = ()  # TLS key logs, read at start and as they grow
    duration_s: float | None = None  # bounded run; None: until a signal
    metrics_window_s: float = 300.0
    window_s: float = 10.0
    refresh_s: float = 15.0
    extra: dict[str, object] = field(default_factory=dict)


class Daemon:
    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.metrics = DaemonMetrics()
        self.store = Store(config.store)
        self.spool = Spool(config.spool)
        self.capturer: Capturer | None = None
        self.worker: Worker | None = None
        self.server: MetricsServer | None = None
        self._stop = threading.Event()
        self._signals = 0

    # -- setup -------------------------------------------------------------------------

    def _prepare(self) -> None:
        c = self.config
        try:
            host, port = parse_addr(c.metrics_addr)
        except ValueError as exc:
            raise DaemonError(f"--metrics-addr {exc}", EXIT_USAGE) from None
        self.keylogs: KeyLogFollower | None = None
        if c.keylogs:
            self.keylogs = KeyLogFollower(c.keylogs)
            try:
                self.keylogs.read_start()
            except OSError as exc:
                raise DaemonError(f"--keylog {exc.filename}: {exc.strerror or exc}", EXIT_USAGE) from None
        try:
            tool_path = find_tool(c.capturer)
            capture_config = CaptureConfig(
                interface=c.interface, spool=c.spool.resolve(), rotate_seconds=c.rotate_seconds, rotate_mb=c.rotate_mb,
                bpf=c.bpf, snaplen=c.snaplen, buffer_mb=c.buffer_mb, tool=c.capturer,
            )
            check_interface(c.interface)
            check_filter(tool_path, capture_config)
        except CaptureError as exc:
            raise DaemonError(str(exc), exc.exit_code) from None
        try:
            self.store.root.mkdir(parents=True, exist_ok=True)
            if not os.access(self.store.root, os.W_OK):
                raise StoreError(f"store folder {self.store.root} is not writable")
            clean_staging(self.store.root)  # what a killed run left behind
            self.spool.prepare()
        except OSError as exc:
            raise DaemonError(f"store folder {self.store.root}: {exc.strerror or exc}", EXIT_STORE) from None
        except (StoreError, SpoolBusy) as exc:
            raise DaemonError(str(exc), EXIT_STORE) from None
        try:
            self.server = MetricsServer((host, port), self.metrics.registry, healthy=self._healthy)
        except OSError as exc:
            self.spool.release()
            raise DaemonError(f"cannot serve metrics on {c.metrics_addr}: {exc.strerror or exc}", EXIT_USAGE) from None
        self.capturer = Capturer(capture_config, tool_path)

    def _healthy(self) -> bool:
        return self.capturer is not None and self.capturer.alive()

    # -- signals -----------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            log.info("%s: stopping (finishing the current ingest; a second signal exits at once)", name)
            self._stop.set()
            if self.worker is not None:
                self.worker.cancel_drain()  # a bounded run's final drain stops too
            return
        log.warning("%s again: exiting now; the interrupted ingest leaves nothing in the store", name)
        if self.capturer is not None and self.capturer.alive() and self.capturer.pid:
            try:
                os.kill(self.capturer.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(EXIT_FAILED)

    # -- run ---------------------------------------------------------------------------

    def run(self) -> int:
        c = self.config
        self._prepare()
        assert self.capturer is not None and self.server is not None
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        self.server.start()
        host, port = self.server.server_address[:2]
        log.info("metrics on http://%s:%d/metrics", f"[{host}]" if ":" in str(host) else host, port)
        settings = WorkerSettings(
            options=IngestOptions(frozenset(c.h2_ports), c.capture_side, keylog=self.keylogs.keylog if self.keylogs else None),
            retention_hours=c.retention_hours, max_files=c.max_files, keep_files=c.keep_files,
            metrics_window_s=c.metrics_window_s, window_s=c.window_s, refresh_s=c.refresh_s,
        )
        leftover = len(self.spool.files())
        if leftover:
            log.info("%d capture file(s) left by an earlier run: ingesting them first", leftover)
        # the capture is not running yet, so every spool file counts as complete
        capturing = threading.Event()
        self.worker = Worker(
            self.spool, self.store, self.metrics, settings,
            open_files=self.capturer.open_files,
            capturing=lambda: capturing.is_set() or self.capturer.alive(),
            before_ingest=self.keylogs.read_new if self.keylogs else None,
        )
        # files left by an earlier run are complete; mark "capturing" before starting the
        # tool so that the worker never takes the file it is opening for complete
        capturing.set()
        self.worker.start()
        code: int | None = None
        try:
            code = self._supervise(capturing)
        finally:
            # drain only at the end of a bounded run: not after a signal or a failure
            self._shutdown(capturing, drain=code == EXIT_OK and not self._stop.is_set())
            for s, handler in previous.items():
                signal.signal(s, handler)
        if self.worker.failure is not None:
            return EXIT_FAILED
        return EXIT_OK if code is None else code

    def _supervise(self, capturing: threading.Event) -> int:
        c = self.config
        cap = self.capturer
        assert cap is not None and self.worker is not None
        m = self.metrics
        cap.start()
        if not cap.wait_ready(READY_TIMEOUT_S):
            # at start a failure is a configuration problem: say so and exit
            rc = cap.stop(1.0)
            detail = cap.error_tail() or (f"exit status {rc}" if rc is not None else "no 'listening' line")
            raise DaemonError(f"{cap.tool} did not start capturing on {c.interface!r}: {detail}", EXIT_FAILED)
        log.info("capturing on %s with %s (pid %d), a file every %d s into %s", c.interface, cap.tool, cap.pid, c.rotate_seconds, c.spool)
        # a bounded run counts from the moment the tool listens
        deadline = time.monotonic() + c.duration_s if c.duration_s is not None else None
        backoff = BACKOFF_MIN_S
        restart_at: float | None = None
        next_stats = time.monotonic() + STATS_EVERY_S
        while not self._stop.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                log.info("--duration reached: stopping the capture and ingesting what it wrote")
                break
            if not self.worker.is_alive():
                log.error("the ingest worker stopped unexpectedly; exiting")
                return EXIT_FAILED
            if restart_at is None and not cap.alive():
                rc = cap.returncode()
                m.capture_restarts.inc()
                self._take_stats()
                how = f"was killed by {signal.Signals(-rc).name}" if rc is not None and rc < 0 else f"exited with status {rc}"
                log.error("%s (pid %s) %s: %s; restarting in %.0f s", cap.tool, cap.pid, how, cap.error_tail() or "no message", backoff)
                restart_at = now + backoff
                backoff = min(backoff * 2, BACKOFF_MAX_S)
            if restart_at is not None and now >= restart_at:
                restart_at = None
                cap.start()
                if cap.wait_ready(READY_TIMEOUT_S):
                    log.info("%s restarted (pid %d)", cap.tool, cap.pid)
            if cap.alive() and now - cap.started_at >= HEALTHY_AFTER_S:
                backoff = BACKOFF_MIN_S
            if now >= next_stats:
                next_stats = now + STATS_EVERY_S
                cap.request_stats()
            self._take_stats()
            m.capture_up.set(1 if cap.alive() else 0)
            self._stop.wait(0.2)
        return EXIT_OK

    def _take_stats(self) -> None:
        if self.capturer is None:
            return
        packets, drops = self.capturer.take_stats()
        if packets:
            self.metrics.capture_packets.inc(packets)
        if drops:
            self.metrics.kernel_drops.inc(drops)
            log.warning("the kernel dropped %d packet(s) before %s could read them", drops, self.capturer.tool)

    def _shutdown(self, capturing: threading.Event, drain: bool) -> None:
        cap, worker = self.capturer, self.worker
        if cap is not None:
            rc = cap.stop()
            if rc not in (None, 0, -signal.SIGTERM):
                log.info("%s exited with status %s", cap.tool, rc)
            self._take_stats()
            self.metrics.capture_up.set(0)
        capturing.clear()
        if worker is not None and worker.is_alive():
            if drain:
                worker.drain()
            else:
                if worker.current is not None:
                    log.info("finishing the ingest of %s", worker.current.name)
                worker.stop()
            while worker.is_alive():
                worker.join(0.5)  # a timeout keeps the main thread responsive to signals
        left = len(self.spool.files())
        if left:
            log.info("%d capture file(s) left in %s: ingested at the next start", left, self.spool.root)
        if self.server is not None:
            self.server.stop()
        self.spool.release()
        log.info("stopped")


def setup_logging(verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger("tailtap")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False


def run_daemon(config: DaemonConfig) -> int:
    """Run until a signal (or the bounded duration); returns the exit code."""
    daemon = Daemon(config)
    try:
        return daemon.run()
    except DaemonError as exc:
        log.error("%s", exc)
        return exc.exit_code
