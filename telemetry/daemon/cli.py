"""`tailtap daemon run`: continuous capture, ingest, Prometheus metrics, bounded store.

Mounted by telemetry/cli/app.py as ``tailtap daemon``; also runnable alone as
``python -m telemetry.daemon run ...``.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

daemon_app = typer.Typer(
    help=(
        "Continuous capture on an interface (a mirror port): ring-buffer capture files are "
        "ingested as they complete, metrics are served for Prometheus, the store is kept bounded."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Capturer(StrEnum):
    tcpdump = "tcpdump"
    dumpcap = "dumpcap"


class CaptureSide(StrEnum):
    auto = "auto"
    server = "server"
    client = "client"


@daemon_app.callback()
def _daemon() -> None:
    """Keep `run` a sub-command even while it is the only one."""


@daemon_app.command()
def run(
    interface: Annotated[str, typer.Option("--interface", "-i", help="Interface to capture on (e.g. the mirror port), or 'any'.")],
    store: Annotated[Path, typer.Option("--store", "-s", help="Store folder (Parquet tables, created if missing).")] = Path("store"),
    spool: Annotated[Path, typer.Option("--spool", help="Folder for the capture files until they are ingested (failed/ keeps those that could not be).")] = Path("spool"),
    rotate_seconds: Annotated[int, typer.Option("--rotate-seconds", min=1, help="Start a new capture file every N seconds (tcpdump: at the first packet after N s).")] = 60,
    rotate_mb: Annotated[int, typer.Option("--rotate-mb", min=0, help="Also start a new file after this many MB (0: time only).")] = 0,
    bpf: Annotated[str, typer.Option("--filter", "-f", help="BPF capture filter, e.g. 'tcp port 50051'.")] = "",
    snaplen: Annotated[int, typer.Option("--snaplen", min=0, help="Bytes kept per packet (0: whole packets; HTTP/2 decoding needs the payload).")] = 0,
    buffer_mb: Annotated[int, typer.Option("--buffer-mb", min=0, help="Kernel capture buffer in MiB (0: the tool's default); raise it when kernel drops show.")] = 0,
    capturer: Annotated[Capturer, typer.Option("--capturer", help="Capture tool. dumpcap rotates on time even with no packets.")] = Capturer.tcpdump,
    metrics_addr: Annotated[str, typer.Option("--metrics-addr", help="HOST:PORT of the Prometheus endpoint (/metrics); ':PORT' listens on all interfaces.")] = "127.0.0.1:9464",
    retention_hours: Annotated[float, typer.Option("--retention-hours", min=0.0, help="Delete store partitions (date=/hour=) older than this.")] = 24.0,
    max_files: Annotated[int, typer.Option("--max-files", min=0, help="Most capture files waiting in the spool; when ingest falls behind, the oldest are deleted (and counted). 0: no limit.")] = 100,
    keep_files: Annotated[bool, typer.Option("--keep-files", help="Keep ingested capture files in SPOOL/ingested (pruned by --retention-hours and --max-files).")] = False,
    h2_port: Annotated[list[int] | None, typer.Option("--h2-port", help="Force HTTP/2 decoding on this TCP port (repeatable).")] = None,
    capture_side: Annotated[CaptureSide, typer.Option("--capture-side", help="Where the capture point sits (auto: from the RTT floors).")] = CaptureSide.auto,
    keylog: Annotated[list[Path] | None, typer.Option("--keylog", help="TLS key log (NSS format; repeatable), read at start and again before each capture file as it grows: TLS connections whose secrets it holds are decrypted, the others estimated from their records.")] = None,
    once: Annotated[bool, typer.Option("--once", help="Capture one file (--rotate-seconds long), ingest it, exit.")] = False,
    duration: Annotated[float | None, typer.Option("--duration", min=0.1, help="Capture for this many seconds, ingest everything, exit.")] = None,
    metrics_window: Annotated[float, typer.Option("--metrics-window-seconds", min=1.0, help="Span of the tailtap_recent_* gauges (per-method p50/p99, spikes, causes).")] = 300.0,
    window: Annotated[float, typer.Option("--window-seconds", min=0.1, help="Window length the spike and slow-request models use.")] = 10.0,
    refresh: Annotated[float, typer.Option("--metrics-refresh-seconds", min=0.1, help="Least time between recomputations of the recent gauges.")] = 15.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Capture continuously, ingest each completed file, serve Prometheus metrics.

    SIGTERM/SIGINT stop cleanly: the capture is stopped, the file being ingested is
    finished, exit status 0; waiting files stay in the spool for the next start.
    Exit codes: 1 capture tool missing or failing, 2 bad interface/filter/address,
    3 store or spool unusable.
    """
    from telemetry.daemon.service import DaemonConfig, run_daemon, setup_logging

    if once and duration is not None:
        raise typer.BadParameter("use --once or --duration, not both", param_hint="--once")
    setup_logging(verbose)
    config = DaemonConfig(
        interface=interface, store=store, spool=spool, rotate_seconds=rotate_seconds, rotate_mb=rotate_mb,
        bpf=bpf, snaplen=snaplen, buffer_mb=buffer_mb, capturer=capturer.value, metrics_addr=metrics_addr,
        retention_hours=retention_hours, max_files=max_files, keep_files=keep_files,
        h2_ports=tuple(h2_port or ()), capture_side=capture_side.value, keylogs=tuple(keylog or ()),
        duration_s=float(rotate_seconds) if once else duration,
        metrics_window_s=metrics_window, window_s=window, refresh_s=refresh,
    )
    code = run_daemon(config)
    if code:
        raise typer.Exit(code)
