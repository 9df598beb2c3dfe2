"""The daemon under what production does to it: a full disk and a read-only store (real
tmpfs mounts), kill -9 in the middle of an ingest and a restart, a soak under continuous
gRPC load with its memory sampled, and a capture that runs without root.

Needs root (mount, capture on lo) and tcpdump; under CI a missing tool fails (conftest).
The soak lasts TAILTAP_SOAK_SECONDS (60 in `make test`; `make soak` runs 300 and writes
bench/results/soak.json).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_daemon import (
    _daemon,
    _free_port,
    _get,
    _GrpcLoad,
    _kill,
    _log,
    _total,
    _wait_for,
    needs_capture,
)

from telemetry.daemon import worker as worker_module
from telemetry.daemon.capture import CAPTURE_USER, _unprivileged_user
from telemetry.daemon.metrics import DaemonMetrics
from telemetry.daemon.worker import Spool, Worker, WorkerSettings
from telemetry.exit_codes import EXIT_STORE
from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import STAGING, Store

REPO = Path(__file__).resolve().parent.parent
SAMPLES = [REPO / "samples" / name / "capture.pcap" for name in ("loss_burst", "reorder", "server_stall", "baseline")]
MOUNT = shutil.which("mount")
needs_mount = pytest.mark.skipif(os.geteuid() != 0 or MOUNT is None, reason="needs root and mount(8) for a tmpfs store")


@contextmanager
def _tmpfs(where: Path, size: str):
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _remount(where: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(where)], check=True)


def _worker(tmp_path: Path, store: Store) -> tuple[Worker, Spool, DaemonMetrics]:
    spool = Spool(tmp_path / "spool")
    spool.prepare()
    metrics = DaemonMetrics()
    worker = Worker(spool, store, metrics, WorkerSettings(IngestOptions()), open_files=lambda: set(), capturing=lambda: True)
    return worker, spool, metrics


@needs_mount
def test_full_disk_then_read_only_store_keep_the_file_count_and_resume(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(worker_module, "STORE_RETRY_S", 0.01)
    caplog.set_level(logging.INFO, logger="tailtap.daemon")
    with _tmpfs(tmp_path / "fs", "96k") as fs:
        store = Store(fs / "store")
        worker, spool, metrics = _worker(tmp_path, store)
        capture = spool.root / "tailtap-1-20200101T000000.pcap"
        shutil.copy(SAMPLES[0], capture)

        # the disk is full: the file stays, nothing half-written is left, one error line
        for _ in range(2):
            worker.ingest(capture)
        assert capture.exists() and not list(spool.failed_dir.iterdir())
        assert metrics.value("tailtap_store_write_errors_total") == 2
        assert metrics.value("tailtap_captures_ingested_total") == 0
        assert not [p for p in fs.rglob("*") if p.is_file()], "a failed write left files in the store"
        full = [r for r in caplog.records if "No space left on device" in r.getMessage()]
        assert len(full) == 1 and capture.name in full[0].getMessage(), [r.getMessage() for r in caplog.records]

        # room again, but read-only now: another problem, said once more
        _remount(fs, "size=64m,ro")
        worker.ingest(capture)
        assert capture.exists() and metrics.value("tailtap_store_write_errors_total") == 3
        assert any("not writable" in r.getMessage() or "Read-only" in r.getMessage() for r in caplog.records)

        # writable: ingested, and the log says so
        _remount(fs, "rw")
        worker.ingest(capture)
        assert not capture.exists()
        assert metrics.value("tailtap_captures_ingested_total") == 1
        assert any("writable again" in r.getMessage() for r in caplog.records)
        assert connect(store).execute("SELECT count(*) FROM captures").fetchone()[0] == 1
        assert "Traceback" not in caplog.text


@needs_mount
def test_daemon_refuses_a_read_only_store_in_one_line(tmp_path):
    with _tmpfs(tmp_path / "fs", "1m") as fs:
        (fs / "store").mkdir()
        _remount(fs, "ro")
        proc = subprocess.run(
            [sys.executable, "-m", "telemetry.daemon", "run", "-i", "lo", "--store", str(fs / "store"), "--spool", str(tmp_path / "spool"),
             "--metrics-addr", f"127.0.0.1:{_free_port()}", "--duration", "1"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )
    assert proc.returncode == EXIT_STORE, proc.stderr
    assert "not writable" in proc.stderr and str(fs / "store") in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def _staged(store_root: Path) -> bool:
    return any(p.is_file() for p in (store_root / STAGING).rglob("*"))


@needs_capture
def test_kill_9_during_ingest_then_restart_loses_no_file_and_doubles_no_row(tmp_path):
    # the reference: each file ingested on its own
    reference = Store(tmp_path / "reference")
    want = 0
    for sample in SAMPLES:
        want += ingest_file(sample, reference).requests
    spool = tmp_path / "spool"
    spool.mkdir()
    # files of four earlier capture runs, left in the spool
    for k, sample in enumerate(SAMPLES, start=1):
        shutil.copy(sample, spool / f"tailtap-{k}-20200101T00000{k}.pcap")
    store = tmp_path / "store"
    port = _free_port()  # nothing listens: the live capture sees nothing
    daemon = _daemon(tmp_path, port, _free_port(), "--retention-hours", "100000")
    try:
        _wait_for("an ingest in progress (staged rows)", 60, lambda: _staged(store) or None)
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(10)
    finally:
        if daemon.poll() is None:
            _kill(daemon.pid)
    done_before = len(Store(store).capture_ids())
    assert done_before < len(SAMPLES), "the kill came after every file was ingested"

    restarted = _daemon(tmp_path, port, _free_port(), "--retention-hours", "100000", "--duration", "3")
    try:
        assert restarted.wait(120) == 0, _log(tmp_path)
    finally:
        if restarted.poll() is None:
            _kill(restarted.pid)
    assert not list(spool.glob("tailtap-*-2020*.pcap")), "a file was left unread"
    assert not list((spool / "failed").iterdir())
    assert not _staged(store)
    con = connect(Store(store))
    captures, distinct = con.execute("SELECT count(*), count(DISTINCT capture_id) FROM captures").fetchone()
    assert distinct >= len(SAMPLES) and captures == distinct, (captures, distinct)
    # a file of a run is committed as soon as it is read; the requests still open at its
    # end go into the run's closing commit: count over the store (the live capture saw
    # nothing, nothing listens on its port)
    got = con.execute("SELECT count(*), count(DISTINCT (conn_id, stream_id)) FROM requests").fetchone()
    assert got == (want, want), (got, want)


SOAK_S = float(os.environ.get("TAILTAP_SOAK_SECONDS", "60"))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])  # effective
    raise AssertionError(f"no Uid for {pid}")


def _lower_quartile(values: list[float]) -> float:
    return statistics.quantiles(values, n=4)[0]


@needs_capture
def test_soak_memory_stays_flat_and_capture_runs_unprivileged(tmp_path):
    from test_daemon import _children

    # pytest's folders are closed to other users: the spool goes where tcpdump's user can
    # reach it (under pytest's, it would stay root and say why)
    assert _unprivileged_user(tmp_path / "spool")[0] == "root"
    spool = Path(tempfile.mkdtemp(prefix="tailtap-soak-spool-"))
    spool.chmod(0o755)
    assert _unprivileged_user(spool / "spool") == (CAPTURE_USER, "")
    load = _GrpcLoad(one_channel=False).start()
    metrics_port = _free_port()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    daemon = _daemon(tmp_path, load.port, metrics_port, "--metrics-window-seconds", "60", "--spool", str(spool / "spool"))
    samples: list[tuple[float, float]] = []
    try:
        _wait_for("the capture to be up", 20, lambda: _total(_get(url), "tailtap_capture_up") == 1)
        # tcpdump opened lo as root, then dropped to its own user
        tools = [pid for pid, comm in _children(daemon.pid).items() if comm == "tcpdump"]
        assert tools and all(_uid(pid) != 0 for pid in tools), [(pid, _uid(pid)) for pid in tools]
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < SOAK_S:
            samples.append((elapsed, _rss_mib(daemon.pid)))
            time.sleep(1.0)
        text = _get(url)
        ingested = _total(text, "tailtap_captures_ingested_total")
        errors = _total(text, "tailtap_ingest_errors_total") + _total(text, "tailtap_store_write_errors_total")
        requests = _total(text, "tailtap_requests_total")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0, _log(tmp_path)
    finally:
        if daemon.poll() is None:
            _kill(daemon.pid)
        load.stop()
        shutil.rmtree(spool, ignore_errors=True)
    assert ingested >= SOAK_S / 2 and requests > 0 and errors == 0, (ingested, requests, errors)
    assert not load.errors, load.errors
    # flat: after the first third (imports, DuckDB, caches warm), the last third's floor
    # (lower quartile) RSS is within 15% (+16 MiB) of the middle third's. Once the metrics
    # window fills, each refresh's queries raise RSS by up to ~75 MiB for a few seconds
    # and it falls back (seen on both allocators): a median can land on those peaks, the
    # floor does not; a leak raises the floor.
    third = len(samples) // 3
    middle = _lower_quartile([r for _, r in samples[third : 2 * third]])
    last = _lower_quartile([r for _, r in samples[2 * third :]])
    summary = {
        "seconds": SOAK_S, "files_ingested": ingested, "requests": requests, "calls": load.calls,
        "rss_mib_middle_third_floor": round(middle, 1), "rss_mib_last_third_floor": round(last, 1),
        "rss_mib_max": round(max(r for _, r in samples), 1),
        "rss_mib_series": [(round(t), round(r, 1)) for t, r in samples[:: max(1, len(samples) // 60)]],
    }
    if report := os.environ.get("TAILTAP_SOAK_REPORT"):
        Path(report).write_text(json.dumps(summary, indent=1) + "\n")
    assert last <= middle * 1.15 + 16, summary
