"""The `tailtap analyze` verb: ingest capture files into the store, then print the report.

Kept apart from the typer app (telemetry/cli/app.py) so that a plain `tailtap analyze ...`
command line (telemetry/cli/main.py) runs without importing typer, pydantic or rich: on a
big capture every tenth of a second of start-up is a few percent of the run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from telemetry.cli.args import CaptureSide, Format, parse_duration_ms, window_params
from telemetry.exit_codes import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_STORE

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

PROGRESS_MIN_BYTES = 8 << 20  # smaller inputs take a moment: no bar
_LABEL_STYLES = {"error": "red", "warning": "yellow", "interrupted": "yellow"}


class StatusLines:
    """One-line messages on stderr. On a terminal through rich ('error:' in red, and the
    progress bar shares its console); otherwise plain lines, unwrapped, for scripts and
    logs, without importing rich."""

    def __init__(self) -> None:
        self.is_terminal = sys.stderr.isatty()
        self._console: Console | None = None

    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return self._console

    def say(self, text: str, label: str | None = None) -> None:
        if not self.is_terminal:
            print(f"{label}: {text}" if label else text, file=sys.stderr, flush=True)
            return
        from rich.markup import escape

        prefix = f"[{_LABEL_STYLES[label]}]{label}:[/] " if label else ""
        self.console().print(prefix + escape(text))


SPLIT_MIN_CORES = 4


def _processes(jobs: int | None) -> tuple[int, int]:
    """(files ingested at once, processes for one big file) for ``--jobs``.

    By default files go one per core, and a single file is split only with 4 cores or more:
    one process already keeps about 1.4 cores busy (its Parquet write threads), so on 2
    cores a split only adds its overhead (measured: no faster, 1.7x the memory)."""
    if jobs is not None:
        return jobs, min(jobs, 2)
    cores = len(os.sched_getaffinity(0))
    return cores, 2 if cores >= SPLIT_MIN_CORES else 1


def _ingest_one(args: tuple):
    """Worker for parallel ingest (one capture file per process)."""
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.store.parquet import Store

    path, store_dir, ports, side, force, keylog = args
    return ingest_file(path, Store(store_dir), IngestOptions(frozenset(ports), side, force, keylog=keylog))


def load_keylogs(paths: list[Path], status: StatusLines):
    """The TLS key logs (NSS format) of ``paths`` as one KeyLog; a line it cannot read is
    a warning naming the file and line; a file it cannot read at all is an error (None)."""
    from parsers.tls import KeyLog

    keylog = KeyLog()
    for path in paths:
        try:
            text = path.read_text(encoding="ascii", errors="replace")
        except OSError as exc:
            status.say(f"{path}: cannot read the key log: {exc.strerror or exc}", "error")
            return None
        before = keylog.lines
        keylog.add_text(text, str(path))
        if keylog.lines == before:
            status.say(f"{path}: no TLS secrets in this file (NSS key log lines such as CLIENT_RANDOM ...)", "warning")
    for problem in keylog.problems[:20]:
        status.say(problem, "warning")
    if len(keylog.problems) > 20:
        status.say(f"... and {len(keylog.problems) - 20} more key log lines not read", "warning")
    return keylog


def run_analyze(
    captures: list[Path],
    out: Path = Path("store"),
    fmt: Format = Format.table,
    h2_port: list[int] | None = None,
    capture_side: CaptureSide = CaptureSide.auto,
    force: bool = False,
    jobs: int | None = None,
    report: bool = True,
    window: str | None = None,
    keylog: list[Path] | None = None,
    html_out: Path | None = None,
) -> int:
    """Ingest ``captures`` into the store ``out``, print what was read and (``report``)
    the per-method report, and write the store's report as HTML to ``html_out``; returns
    the exit code. ``jobs``: processes; several files are ingested in parallel, a single
    big one is split by connection between two (None: see :func:`_processes`). ``window``
    must already be valid (see :func:`telemetry.cli.args.parse_duration_ms`)."""
    code = _ingest_and_report(captures, out, fmt, h2_port, capture_side, force, jobs, report, window, keylog)
    if html_out is not None and code != EXIT_STORE:
        html_code = _write_html(out, window, html_out)  # (also after a failed file: says why no page)
        code = code or html_code
    return code


def _write_html(out: Path, window: str | None, html_out: Path) -> int:
    """`analyze --html`: the store's report as one HTML file, as `tailtap report --html`."""
    from telemetry.cli.errors import error_line, user_error_text
    from telemetry.cli.report import write_report_html
    from telemetry.cli.stores import open_store
    from telemetry.models.db import connect
    from telemetry.report.sections import report_sections

    params = window_params(window)
    store = open_store(out)
    if store is None:  # (it said why)
        return EXIT_STORE
    try:
        con = connect(store, params, sized_by_requests=True)
        write_report_html(store, params, report_sections(store, params, con), html_out, con)
    except (RuntimeError, OSError) as exc:
        error_line(user_error_text(exc, html_out))
        return EXIT_INPUT
    return EXIT_OK


def _ingest_and_report(
    captures: list[Path], out: Path, fmt: Format, h2_port: list[int] | None, capture_side: CaptureSide,
    force: bool, jobs: int | None, report: bool, window: str | None, keylog: list[Path] | None,
) -> int:
    from telemetry.store.capture_id import prefetch
    from telemetry.store.layout import StoreError, StoreLayout

    status = StatusLines()
    keys = None
    if keylog:
        keys = load_keylogs(keylog, status)
        if keys is None:
            return EXIT_INPUT
    jobs, split = _processes(jobs)
    if jobs == 1 or len(captures) == 1:
        try:  # the files' hashes run while the pipeline's modules import
            prefetch(captures, StoreLayout(out).capture_id_scheme())
        except StoreError:
            pass  # said below, where the store is written
    from telemetry.ingest import IngestOptions, IngestResult, ingest_file
    from telemetry.store.parquet import Store, clean_staging

    store = Store(out)
    clean_staging(out)
    ports = tuple(h2_port or ())
    results: list[IngestResult] = []
    try:
        if jobs > 1 and len(captures) > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=jobs) as pool:
                args = [(str(p), str(out), ports, capture_side.value, force, keys) for p in captures]
                results = list(pool.map(_ingest_one, args))
        else:
            options = IngestOptions(frozenset(ports), capture_side.value, force, processes=split, keylog=keys)
            total = sum(p.stat().st_size for p in captures if p.is_file())
            with _progress(status, total) as progress:
                task = progress.add_task("reading", total=total or None, packets=0)
                done = 0
                for path in captures:
                    def tick(pos: int, packets: int, base: int = done) -> None:
                        progress.update(task, completed=base + pos, packets=packets)

                    def stage(name: str) -> None:  # what follows the reading (seconds on a big file)
                        progress.update(task, description=name, refresh=True)

                    progress.update(task, description="reading")  # after the last file's stages
                    results.append(ingest_file(path, store, options, tick, stage))
                    done += path.stat().st_size if path.is_file() else 0
    except StoreError as exc:
        status.say(str(exc), "error")
        return EXIT_STORE
    except KeyboardInterrupt:
        status.say("nothing of the unfinished capture was stored", "interrupted")
        return EXIT_INTERRUPTED

    failed = 0
    for r in results:
        if r.error:
            failed += 1
            status.say(r.error, "error")
            continue
        for issue in r.issues:
            where = f"packet {issue.frame_no}" if issue.frame_no else "file"
            if issue.byte_offset >= 0:
                where += f", byte {issue.byte_offset}"
            status.say(f"{r.path}: {where}: {issue.message}", "warning")
        if r.skipped:
            status.say(f"{r.path}: already in the store (capture {r.capture_id[:12]}), skipped; --force re-ingests")
        else:
            status.say(
                f"{r.path}: {r.packets:,} packets, {r.connections} connections, {r.requests} requests "
                f"in {r.seconds:.2f} s -> {out}"
            )
    if report and failed < len(results):
        from telemetry.report.render import output_console
        from telemetry.report.sections import analyze_report

        window_s = parse_duration_ms(window) / 1000.0 if window else None
        analyze_report(store, fmt.value, output_console(), capture_ids=[r.capture_id for r in results if not r.error], window_s=window_s)
    return EXIT_INPUT if failed else EXIT_OK


class _NoProgress:
    """Stands in for a disabled rich Progress (not a terminal, or a small input): the same
    calls, nothing shown, and rich.progress is not loaded."""

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: object, **kwargs: object) -> int:
        return 0

    def update(self, *args: object, **kwargs: object) -> None:
        return None


def _progress(status: StatusLines, total: int) -> Progress | _NoProgress:
    if not status.is_terminal or total < PROGRESS_MIN_BYTES:
        return _NoProgress()
    # imported here: only analyze shows a progress bar
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[packets]:,} packets"),
        TimeRemainingColumn(),
        console=status.console(),
        transient=True,
    )
