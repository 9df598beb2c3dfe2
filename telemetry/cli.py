"""The `tailtap` command line.

Exit codes (stable, for scripts):
  0  success (warnings about the input may have been printed)
  1  an input could not be read at all (not a capture, empty, missing) or a query failed
  2  usage error (unknown option, bad value)
  3  the store cannot be used (not writable, missing for a query)
"""

from __future__ import annotations

import os
import sys

# tailtap does no linear algebra: keep OpenBLAS (loaded with numpy) from starting a thread
# per core at import, which spin on the core the hash and Parquet threads use.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from enum import StrEnum  # noqa: E402
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from telemetry import __version__

if TYPE_CHECKING:
    from rich.progress import Progress

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_STORE = 0, 1, 2, 3

app = typer.Typer(
    name="tailtap",
    help=(
        "Passive tail-latency telemetry for gRPC / HTTP/2 inference traffic.\n\n"
        "Reads packet captures (pcap, pcapng, gzip), reassembles TCP, decodes HTTP/2 and gRPC, "
        "stores per-request, per-message and network tables as Parquet, and tells why p99 went bad.\n\n"
        "Exit codes: 0 ok, 1 unreadable input or failed query, 2 usage error, 3 store unusable."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err = Console(stderr=True)


class Format(StrEnum):
    table = "table"
    json = "json"
    markdown = "markdown"


class SqlFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


class CaptureSide(StrEnum):
    auto = "auto"
    server = "server"
    client = "client"


def _version(value: bool) -> None:
    if value:
        print(f"tailtap {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    pass


def _ingest_one(args: tuple[str, str, tuple[int, ...], str, bool]):
    """Worker for parallel ingest (one capture file per process)."""
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.store import Store

    path, store_dir, ports, side, force = args
    return ingest_file(path, Store(store_dir), IngestOptions(frozenset(ports), side, force))


@app.command()
def analyze(
    captures: Annotated[list[Path], typer.Argument(help="Capture files: pcap or pcapng, optionally gzip-compressed.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Store folder (Parquet tables, created if missing).")] = Path("store"),
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = Format.table,
    h2_port: Annotated[list[int] | None, typer.Option("--h2-port", help="Force HTTP/2 decoding on this TCP port (repeatable). Normally detected by itself.")] = None,
    capture_side: Annotated[CaptureSide, typer.Option("--capture-side", help="Where the capture point sits (auto: from the RTT floors).")] = CaptureSide.auto,
    force: Annotated[bool, typer.Option("--force", help="Re-ingest captures already in the store (their rows are replaced).")] = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Capture files ingested in parallel.")] = 1,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Print the report after ingesting.")] = True,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Window length of the spike report (default: about 15 windows over the capture).")] = None,
) -> None:
    """Ingest capture files into the store and print per-method latency, TTFT and token-gap percentiles.

    Re-running on the same file does not duplicate rows (the file's content hash is the key).
    """
    from telemetry.capture_id import prefetch

    if jobs == 1 or len(captures) == 1:
        prefetch(captures)  # the files' hashes run while the pipeline's modules import
    from telemetry.ingest import IngestOptions, IngestResult, ingest_file
    from telemetry.store import Store, StoreError, clean_staging

    store = Store(out)
    clean_staging(out)
    ports = tuple(h2_port or ())
    results: list[IngestResult] = []
    try:
        if jobs > 1 and len(captures) > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=jobs) as pool:
                args = [(str(p), str(out), ports, capture_side.value, force) for p in captures]
                results = list(pool.map(_ingest_one, args))
        else:
            options = IngestOptions(frozenset(ports), capture_side.value, force)
            total = sum(p.stat().st_size for p in captures if p.is_file())
            with _progress(total) as progress:
                task = progress.add_task("reading", total=total or None, packets=0)
                done = 0
                for path in captures:
                    def tick(pos: int, packets: int, base: int = done) -> None:
                        progress.update(task, completed=base + pos, packets=packets)

                    results.append(ingest_file(path, store, options, tick))
                    done += path.stat().st_size if path.is_file() else 0
    except StoreError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(EXIT_STORE) from None
    except KeyboardInterrupt:
        err.print("[yellow]interrupted:[/yellow] nothing of the unfinished capture was stored")
        raise typer.Exit(130) from None

    failed = 0
    for r in results:
        if r.error:
            failed += 1
            err.print(f"[red]error:[/red] {r.error}")
            continue
        for issue in r.issues:
            where = f"packet {issue.frame_no}" if issue.frame_no else "file"
            if issue.byte_offset >= 0:
                where += f", byte {issue.byte_offset}"
            err.print(f"[yellow]warning:[/yellow] {r.path}: {where}: {issue.message}")
        if r.skipped:
            err.print(f"{r.path}: already in the store (capture {r.capture_id[:12]}), skipped; --force re-ingests")
        else:
            err.print(
                f"{r.path}: {r.packets:,} packets, {r.connections} connections, {r.requests} requests "
                f"in {r.seconds:.2f} s -> {out}"
            )
    if report and failed < len(results):
        from telemetry.report import analyze_report

        window_s = parse_duration_ms(window) / 1000.0 if window else None
        analyze_report(store, fmt.value, console, capture_ids=[r.capture_id for r in results if not r.error], window_s=window_s)
    if failed:
        raise typer.Exit(EXIT_INPUT)


class _NoProgress:
    """Stands in for a disabled rich Progress (not a terminal, or a small input): the same
    calls, nothing shown, and rich.progress (~0.06 s of imports) is not loaded."""

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: object, **kwargs: object) -> int:
        return 0

    def update(self, *args: object, **kwargs: object) -> None:
        return None


def _progress(total: int) -> Progress | _NoProgress:
    if not err.is_terminal or total < (8 << 20):
        return _NoProgress()
    # imported here: only analyze shows a progress bar
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[packets]:,} packets"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )


@app.command()
def sql(
    query: Annotated[str | None, typer.Argument(help="SQL to run; omitted: an interactive DuckDB prompt with the views defined.")] = None,
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    fmt: Annotated[SqlFormat, typer.Option("--format", "-f", help="Output format.")] = SqlFormat.table,
) -> None:
    """Run SQL against the store, with every table and every queries/ model defined as a view."""
    from telemetry import render
    from telemetry.db import connect
    from telemetry.store import Store

    if not store_dir.is_dir():
        err.print(f"[red]error:[/red] {store_dir}: no store here (run `tailtap analyze CAPTURE --out {store_dir}` first)")
        raise typer.Exit(EXIT_STORE)
    try:
        con = connect(Store(store_dir))
    except RuntimeError as exc:  # a queries/ model does not bind on this store
        err.print(f"[red]error:[/red] {exc}".splitlines()[0])
        raise typer.Exit(EXIT_INPUT) from None
    if query is None:
        _shell(con)
        return
    try:
        rows = render.rows_of(con, query)
    except Exception as exc:  # DuckDB errors are the user's SQL: one line, no traceback
        err.print(f"[red]error:[/red] {str(exc).splitlines()[0]}")
        raise typer.Exit(EXIT_INPUT) from None
    render.emit(console, fmt.value, {"result": rows})


def _shell(con) -> None:
    from telemetry import render

    err.print("tailtap SQL shell: views " + ", ".join(r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()))
    err.print("End statements with ';'. .quit or Ctrl-D quits.")
    buf = ""
    while True:
        try:
            line = input("tailtap> " if not buf else "    ...> ")
        except EOFError:
            print()
            return
        if not buf and line.strip() in (".quit", ".exit", "quit", "exit"):
            return
        buf += line + "\n"
        if buf.strip().endswith(";"):
            try:
                render.print_tables(console, {"result": render.rows_of(con, buf.strip().rstrip(";"))})
            except Exception as exc:
                err.print(f"[red]error:[/red] {str(exc).splitlines()[0]}")
            buf = ""


@app.command()
def schema(
    table: Annotated[str | None, typer.Argument(help="Table name; omitted: all tables.")] = None,
) -> None:
    """Print the documented columns of the store's tables."""
    from telemetry.schema import TABLES, describe

    names = [table] if table else list(TABLES)
    for name in names:
        if name not in TABLES:
            err.print(f"[red]error:[/red] unknown table {name!r}; tables: {', '.join(TABLES)}")
            raise typer.Exit(EXIT_USAGE)
        console.rule(f"[bold]{name}")
        for col, typ, doc in describe(name):
            console.print(f"  [bold]{col}[/bold] ({typ}): {doc}")


_UNITS_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "us": 0.001}


def parse_duration_ms(text: str) -> float:
    """'300ms', '2s', '1.5m', '250' (ms) -> milliseconds."""
    t = text.strip().lower()
    for unit in ("ms", "us", "s", "m"):
        if t.endswith(unit):
            number, factor = t[: -len(unit)], _UNITS_MS[unit]
            break
    else:
        number, factor = t, 1.0
    try:
        value = float(number) * factor
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a duration (examples: 300ms, 2s, 1m)") from None
    if value <= 0:
        raise typer.BadParameter(f"{text!r} must be positive")
    return value


def parse_slo(text: str | None) -> dict[str, float]:
    """'ttft=300ms,latency=2s,gap=100ms' -> {'slo_ttft_ms': 300.0, ...}."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, _, value = part.partition("=")
        name = name.strip().lower()
        if name not in ("ttft", "latency", "gap") or not value:
            raise typer.BadParameter(f"{part!r}: use ttft=DURATION, latency=DURATION or gap=DURATION")
        out[f"slo_{name}_ms"] = parse_duration_ms(value)
    return out


def parse_time_ns(text: str | None) -> int | None:
    """ISO-8601 (UTC if no zone) or epoch seconds -> ns."""
    if text is None:
        return None
    import datetime as dt

    try:
        return int(float(text) * 1e9)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a time (ISO-8601 like 2026-11-22T10:32:00Z, or epoch seconds)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1e9)


def _open_store(store_dir: Path):
    from telemetry.store import Store

    if not (store_dir / "requests").is_dir() and not (store_dir / "captures").is_dir():
        err.print(f"[red]error:[/red] {store_dir}: no store here (run `tailtap analyze CAPTURE --out {store_dir}` first)")
        raise typer.Exit(EXIT_STORE)
    return Store(store_dir)


@app.command()
def report(
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    window: Annotated[str, typer.Option("--window", "-w", help="Window length for the timeline and spikes (e.g. 10s, 500ms).")] = "10s",
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs instead of p99 baselines, e.g. ttft=300ms,latency=2s,gap=100ms.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only requests from this time (ISO-8601 or epoch s).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only requests before this time.")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    top: Annotated[int, typer.Option("--top", min=1, help="Slowest requests listed.")] = 10,
) -> None:
    """Find p99 spikes and say why: timeline, spikes, causes with shares and delays, slowest requests."""
    from telemetry import render
    from telemetry.report import report_sections

    params = {
        "window_s": parse_duration_ms(window) / 1000.0,
        "since_ns": parse_time_ns(since),
        "until_ns": parse_time_ns(until),
        "slowest_n": top,
        **parse_slo(slo),
    }
    try:
        sections = report_sections(_open_store(store_dir), params)
    except RuntimeError as exc:
        err.print(f"[red]error:[/red] {exc}".splitlines()[0])
        raise typer.Exit(EXIT_INPUT) from None
    if fmt == Format.table:
        from telemetry.report import print_report

        print_report(console, sections)
    else:
        render.emit(console, fmt.value, sections, title="tailtap report")


@app.command()
def explain(
    request: Annotated[str, typer.Option("--request", "-r", help="CONN_ID:STREAM_ID, as listed by analyze/report.")],
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    window: Annotated[str, typer.Option("--window", "-w", help="Window length used to judge slowness.")] = "10s",
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs, e.g. ttft=300ms,latency=2s.")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
) -> None:
    """Tell one request's story: its timeline with the network events during it, its causes, and the decomposition of its latency (path RTT, queueing, loss recovery, reordering, flow control, server)."""
    from telemetry import render
    from telemetry.report import RequestNotFound, explain_sections

    conn_id, sep, stream = request.strip().rpartition(":")
    if not sep or not conn_id or not stream.isdigit():
        raise typer.BadParameter(f"{request!r}: expected CONN_ID:STREAM_ID, e.g. C1a2b3c4d5e6f7a8b:3", param_hint="--request")
    params = {"window_s": parse_duration_ms(window) / 1000.0, **parse_slo(slo)}
    try:
        sections = explain_sections(_open_store(store_dir), conn_id, int(stream), params)
    except (RequestNotFound, RuntimeError) as exc:
        err.print(f"[red]error:[/red] {exc}".splitlines()[0])
        raise typer.Exit(EXIT_INPUT) from None
    if fmt == Format.table:
        from telemetry.report import print_explain

        print_explain(console, sections)
    else:
        render.emit(console, fmt.value, sections, title=f"tailtap explain {request}")


dashboards_app = typer.Typer(
    help="Grafana dashboards: export the JSON, write the DuckDB file the data source reads, push to Grafana.",
    no_args_is_help=True,
)
app.add_typer(dashboards_app, name="dashboards")


@dashboards_app.command("export")
def dashboards_export(
    folder: Annotated[Path, typer.Option("--out", "-o", help="Folder for the dashboard JSON files.")] = Path("dashboards"),
) -> None:
    """Write the dashboards (defined as code in telemetry/dashboards.py) as Grafana JSON."""
    from telemetry.dashboards import export

    for path in export(folder):
        console.print(f"wrote {path}")


@dashboards_app.command("db")
def dashboards_db(
    out: Annotated[Path, typer.Option("--out", "-o", help="DuckDB file for the Grafana DuckDB data source.")] = Path("tailtap.duckdb"),
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    window: Annotated[str, typer.Option("--window", "-w", help="Window length of the timeline views.")] = "10s",
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs, e.g. ttft=300ms,latency=2s.")] = None,
) -> None:
    """Write a DuckDB file with every table and model as a view over the store (atomically replaced)."""
    from telemetry.db import export_database

    params = {"window_s": parse_duration_ms(window) / 1000.0, **parse_slo(slo)}
    path = export_database(_open_store(store_dir), out, params)
    console.print(f"wrote {path}: point the motherduck-duckdb-datasource (uid tailtap) at it")


@dashboards_app.command("push")
def dashboards_push(
    url: Annotated[str, typer.Option("--url", help="Grafana URL, e.g. http://grafana:3000 (user:password@ allowed).")],
    token: Annotated[str | None, typer.Option("--token", envvar="GRAFANA_TOKEN", help="Service account token (or GRAFANA_TOKEN).")] = None,
    folder_uid: Annotated[str | None, typer.Option("--folder-uid", help="Folder to put the dashboards in.")] = None,
) -> None:
    """Create or update the dashboards on a Grafana server through its HTTP API (grafana-client)."""
    from telemetry.dashboards import push

    try:
        urls = push(url, token, folder_uid)
    except Exception as exc:  # network and HTTP errors: one line, no traceback
        err.print(f"[red]error:[/red] pushing to {url}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        raise typer.Exit(EXIT_INPUT) from None
    for u in urls:
        console.print(f"pushed {u}")


def _mount_optional() -> None:
    """Sub-commands whose modules may be absent in a trimmed install."""
    try:
        from telemetry.daemon.cli import daemon_app
    except ImportError:
        pass
    else:
        app.add_typer(
            daemon_app,
            name="daemon",
            help="Continuous capture on an interface (mirror port): ingest each capture file as it completes, "
            "serve Prometheus metrics, keep the store bounded (needs root and tcpdump or dumpcap).",
        )
    try:
        from telemetry.lab.cli import lab_app
    except ImportError:
        return
    app.add_typer(lab_app, name="lab", help="The impairment lab: labelled captures from real gRPC traffic (needs root).")


_mount_optional()


_ANALYZE_VALUE_OPTS = {
    "--out": "out", "-o": "out", "--format": "fmt", "-f": "fmt", "--h2-port": "h2_port",
    "--capture-side": "capture_side", "--jobs": "jobs", "-j": "jobs", "--window": "window", "-w": "window",
}
_ANALYZE_FLAGS = {"--force": ("force", True), "--report": ("report", True), "--no-report": ("report", False)}
_DIGITS = frozenset("0123456789")


def _plain_int(text: str) -> int | None:
    """A decimal without sign, spaces or leading zeros, else None (left to typer)."""
    if not text or not set(text) <= _DIGITS or (len(text) > 1 and text[0] == "0"):
        return None
    return int(text)


def _fast_analyze_args(argv: list[str]) -> dict[str, object] | None:
    """Keyword arguments of `analyze` for a plain, valid command line, or None.

    Building the typer app validates through pydantic (~0.15-0.2 s of every run); the common
    `tailtap analyze FILE... [options]` skips it. Anything unusual (help, `--`, `--opt=value`,
    joined short options, repeated options, values that typer would reject or convert) returns
    None and goes through typer, so errors, help and exit codes stay typer's own.
    """
    kw: dict[str, object] = {}
    captures: list[Path] = []
    ports: list[int] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg:
            return None
        if arg[0] != "-":
            captures.append(Path(arg))
            continue
        if arg in _ANALYZE_FLAGS:
            name, value = _ANALYZE_FLAGS[arg]
        elif arg in _ANALYZE_VALUE_OPTS:
            if i >= len(argv) or not argv[i] or argv[i][0] == "-":
                return None
            name, text = _ANALYZE_VALUE_OPTS[arg], argv[i]
            i += 1
            if name == "h2_port":
                port = _plain_int(text)
                if port is None:
                    return None
                ports.append(port)
                continue
            if name == "out":
                value = Path(text)
            elif name == "fmt":
                if text not in Format.__members__:
                    return None
                value = Format(text)
            elif name == "capture_side":
                if text not in CaptureSide.__members__:
                    return None
                value = CaptureSide(text)
            elif name == "jobs":
                value = _plain_int(text)
                if not value:
                    return None
            else:  # window: parsed after ingesting; a bad one is typer's error to report
                try:
                    parse_duration_ms(text)
                except typer.BadParameter:
                    return None
                value = text
        else:
            return None
        if name in kw:
            return None
        kw[name] = value
    if not captures:
        return None
    kw["captures"] = captures
    if ports:
        kw["h2_port"] = ports
    return kw


def _run_fast(kwargs: dict[str, object]) -> None:
    """Run `analyze` as typer's standalone mode would: same exit codes and EPIPE handling."""
    import errno

    try:
        analyze(**kwargs)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        from typer._click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)
        sys.stderr = PacifyFlushWrapper(sys.stderr)
        sys.exit(1)


def main() -> None:
    argv = sys.argv[1:]
    fast = _fast_analyze_args(argv[1:]) if argv and argv[0] == "analyze" else None
    try:
        if fast is not None:
            _run_fast(fast)
        else:
            app()
    except BrokenPipeError:  # `tailtap ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_OK)


if __name__ == "__main__":
    main()
