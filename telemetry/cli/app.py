"""The `tailtap` command line (the typer app; the entry point is telemetry/cli/main.py).

Exit codes (stable, for scripts; telemetry/exit_codes.py):
  0  success (warnings about the input may have been printed)
  1  an input could not be read at all (not a capture, empty, missing) or a query failed
  2  usage error (unknown option, bad value)
  3  the store cannot be used (not writable, missing for a query)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from telemetry import __version__
from telemetry.cli.analyze import run_analyze
from telemetry.cli.args import (
    REPORT_TOP,
    BadValue,
    CaptureSide,
    Format,
    SqlFormat,
    parse_period,
    report_params,
    window_params,
)
from telemetry.cli.args import parse_duration_ms as _parse_duration_ms
from telemetry.cli.errors import error_line, user_error_text
from telemetry.cli.explain import parse_request, run_explain
from telemetry.cli.report import note_recomputed, run_report
from telemetry.cli.stores import open_store
from telemetry.exit_codes import EXIT_INPUT, EXIT_STORE, EXIT_USAGE
from telemetry.report.render import output_console

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
console = output_console()
err = Console(stderr=True)


T = TypeVar("T")


def _usage_checked(parse: Callable[..., T]) -> Callable[..., T]:
    """``parse`` with its BadValue reported as typer's usage error (exit 2)."""

    def checked(*args):
        try:
            return parse(*args)
        except BadValue as exc:
            raise typer.BadParameter(str(exc)) from None

    checked.__doc__ = parse.__doc__
    return checked


parse_duration_ms = _usage_checked(_parse_duration_ms)
checked_window_params = _usage_checked(window_params)
checked_report_params = _usage_checked(report_params)


def _version(value: bool) -> None:
    if value:
        print(f"tailtap {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    pass


@app.command()
def analyze(
    captures: Annotated[list[Path], typer.Argument(help="Capture files: pcap or pcapng, optionally gzip-compressed.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Store folder (Parquet tables, created if missing).")] = Path("store"),
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = Format.table,
    h2_port: Annotated[list[int] | None, typer.Option("--h2-port", help="Force HTTP/2 decoding on this TCP port (repeatable). Normally detected by itself.")] = None,
    capture_side: Annotated[CaptureSide, typer.Option("--capture-side", help="Where the capture point sits (auto: from the RTT floors).")] = CaptureSide.auto,
    force: Annotated[bool, typer.Option("--force", help="Re-ingest captures already in the store (their rows are replaced).")] = False,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, show_default="one per core; a single file split from 4 cores", help="Processes: several capture files are ingested in parallel; with 2 or more, a single capture of 16 MiB or more is split between two processes by connection (the same rows as one process).")] = None,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Print the report after ingesting.")] = True,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Window length of the spike report (default: chosen from the time span: at most 20 windows).")] = None,
    keylog: Annotated[list[Path] | None, typer.Option("--keylog", help="TLS key log (SSLKEYLOGFILE / NSS format; repeatable): TLS 1.2 and 1.3 connections with their secrets in it are decrypted. Decryption Secrets Blocks in a pcapng are read without it. Without keys, TLS requests are estimated from record times and sizes.")] = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Also write the report (as `tailtap report --html`) for the store.")] = None,
) -> None:
    """Ingest capture files into the store and print per-method latency, TTFT and token-gap percentiles.

    Re-running on the same file does not duplicate rows (the file's content hash is the key).
    """
    if window:
        parse_duration_ms(window)  # a bad window is a usage error before any ingest
    code = run_analyze(captures, out, fmt, h2_port, capture_side, force, jobs, report, window, keylog, html_out)
    if code:
        raise typer.Exit(code)


@app.command()
def sql(
    query: Annotated[str | None, typer.Argument(help="SQL to run; omitted: an interactive DuckDB prompt with the views defined.")] = None,
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    fmt: Annotated[SqlFormat, typer.Option("--format", "-f", help="Output format.")] = SqlFormat.table,
) -> None:
    """Run SQL against the store, with every table and every queries/ model defined as a view."""
    from telemetry.cli.sql import open_analysis, run_sql

    if query is not None:
        code = run_sql(query, store_dir, fmt.value)
        if code:
            raise typer.Exit(code)
        return
    con = open_analysis(store_dir, materialize=False)  # the user may SET VARIABLE in the shell
    if isinstance(con, int):
        raise typer.Exit(con)
    _shell(con)


def _shell(con) -> None:
    from telemetry.report import render
    from telemetry.store.schema import TABLES

    err.print("tailtap SQL shell: tables " + ", ".join(TABLES) + "; models " + ", ".join(sorted(con.models)))
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
                error_line(str(exc).splitlines()[0])
            buf = ""


@app.command()
def schema(
    table: Annotated[str | None, typer.Argument(help="Table name; omitted: all tables.")] = None,
) -> None:
    """Print the documented columns of the store's tables."""
    from telemetry.store.schema import TABLES, describe

    names = [table] if table else list(TABLES)
    for name in names:
        if name not in TABLES:
            error_line(f"unknown table {name!r}; tables: {', '.join(TABLES)}")
            raise typer.Exit(EXIT_USAGE)
        console.rule(f"[bold]{name}")
        for col, typ, doc in describe(name):
            console.print(f"  [bold]{col}[/bold] ({escape(str(typ))}): {escape(str(doc))}")


def _open_store(store_dir: Path):
    store = open_store(store_dir)
    if store is None:
        raise typer.Exit(EXIT_STORE)
    return store


@contextmanager
def _user_errors(html_out: Path | None, *not_found: type[Exception]) -> Iterator[None]:
    """A query that cannot answer (or a request not in the store), or an HTML file that
    cannot be written: one line and exit code 1, never a traceback."""
    try:
        yield
    except typer.Exit:  # (click's Exit is a RuntimeError: an exit code chosen inside stays)
        raise
    except (RuntimeError, OSError, *not_found) as exc:
        error_line(user_error_text(exc, html_out))
        raise typer.Exit(EXIT_INPUT) from None


@app.command()
def report(
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    window: Annotated[str | None, typer.Option("--window", "-w", help="Window length for the timeline and spikes (e.g. 10s, 500ms); default: chosen from the time span (at most 20 windows), as everywhere else.")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs instead of p99 baselines, e.g. ttft=300ms,latency=2s,gap=100ms.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only requests from this time (ISO-8601 or epoch s).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only requests before this time.")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    top: Annotated[int, typer.Option("--top", min=1, help="Slowest requests listed.")] = REPORT_TOP,
    html_out: Annotated[Path | None, typer.Option("--html", help="Also write the report as one self-contained HTML file (plots and tables; opens offline).")] = None,
) -> None:
    """Find p99 spikes and say why: timeline, spikes, causes with shares and delays, slowest requests."""
    params = checked_report_params(window, slo, since, until, top)
    code = run_report(store_dir, params, fmt.value, html_out)
    if code:
        raise typer.Exit(code)


def _connect(store, params: dict):
    from telemetry.models.db import connect

    return connect(store, params)


@app.command()
def explain(
    request: Annotated[str, typer.Option("--request", "-r", help="CONN_ID:STREAM_ID, as listed by analyze/report.")],
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    window: Annotated[str | None, typer.Option("--window", "-w", help="Window length of the spikes (default: chosen from the time span).")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs, e.g. ttft=300ms,latency=2s.")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    html_out: Annotated[Path | None, typer.Option("--html", help="Also write the request's story as one self-contained HTML file (waterfall, decomposition).")] = None,
) -> None:
    """Tell one request's story: its timeline with the network events during it, its causes, and the decomposition of its latency (path RTT, queueing, loss recovery, reordering, flow control, server)."""
    try:
        parse_request(request)
    except BadValue as exc:
        raise typer.BadParameter(str(exc), param_hint="--request") from None
    params = checked_window_params(window, slo)
    code = run_explain(store_dir, request, params, fmt.value, html_out)
    if code:
        raise typer.Exit(code)


@app.command()
def compare(
    a: Annotated[str, typer.Option("--a", help="Period a: T1..T2 (ISO-8601, epoch seconds, or HH:MM[:SS] on the store's first day; an end may be left open) or a capture id.")],
    b: Annotated[str, typer.Option("--b", help="Period b, the same way.")],
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    window: Annotated[str | None, typer.Option("--window", "-w", help="Window length of the baselines and spikes (default: chosen from the time span).")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs, e.g. ttft=300ms,latency=2s.")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    html_out: Annotated[Path | None, typer.Option("--html", help="Also write the comparison as one self-contained HTML file.")] = None,
) -> None:
    """Compare two periods: per method p50/p99 of latency, TTFT and token gap in each and the change, the cause mix of slow requests in each, the network in each; what changed most first."""
    from telemetry.report import render
    from telemetry.report.sections import compare_sections

    store = _open_store(store_dir)
    day_ns = _first_capture_ns(store)
    params = checked_window_params(window, slo)
    for name, text in (("a", a), ("b", b)):
        try:
            since, until, capture = parse_period(text, day_ns)
        except BadValue as exc:
            raise typer.BadParameter(str(exc), param_hint=f"--{name}") from None
        ids = _capture_ids(store, capture) if capture else None
        if capture and not ids:
            raise typer.BadParameter(f"no capture {capture!r} in {store_dir} (tailtap sql \"SELECT capture_id FROM captures\")", param_hint=f"--{name}")
        params.update({f"{name}_since_ns": since, f"{name}_until_ns": until, f"{name}_capture_ids": ids})
    with _user_errors(html_out):
        con = _connect(store, params)
        sections = compare_sections(store, params, con)
        if html_out is not None:
            from telemetry.report.html import compare_html

            html_out.write_text(compare_html(sections, f"tailtap compare {a} vs {b}"), encoding="utf-8")
            error_line(f"wrote {html_out}", label=None)
    note_recomputed(con)
    if fmt == Format.table:
        from telemetry.report.sections import print_compare

        print_compare(console, sections)
    else:
        render.emit(console, fmt.value, sections, title=f"tailtap compare {a} vs {b}")


def _first_capture_ns(store) -> int | None:
    from telemetry.models.db import connect

    row = connect(store).execute("SELECT epoch_ns(min(first_ts)) FROM captures").fetchone()
    return row[0] if row else None


def _capture_ids(store, prefix: str) -> list[str]:
    from telemetry.models.db import connect

    rows = connect(store).execute("SELECT DISTINCT capture_id FROM captures WHERE starts_with(capture_id, ?)", [prefix]).fetchall()
    return [r[0] for r in rows]


dashboards_app = typer.Typer(
    help="Grafana dashboards: export the JSON, write the DuckDB file the data source reads, push to Grafana.",
    no_args_is_help=True,
)
app.add_typer(dashboards_app, name="dashboards")


@dashboards_app.command("export")
def dashboards_export(
    folder: Annotated[Path, typer.Option("--out", "-o", help="Folder for the dashboard JSON files.")] = Path("dashboards"),
) -> None:
    """Write the dashboards (defined as code in telemetry/dashboards/grafana.py) as Grafana JSON."""
    from telemetry.dashboards.grafana import export

    for path in export(folder):
        console.print(escape(f"wrote {path}"))


@dashboards_app.command("db")
def dashboards_db(
    out: Annotated[Path, typer.Option("--out", "-o", help="DuckDB file for the Grafana DuckDB data source.")] = Path("tailtap.duckdb"),
    store_dir: Annotated[Path, typer.Option("--store", "-s", help="Store folder.")] = Path("store"),
    window: Annotated[str | None, typer.Option("--window", "-w", help="Window length of the timeline views (default: chosen from the time span, written into the file).")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs, e.g. ttft=300ms,latency=2s.")] = None,
) -> None:
    """Write a DuckDB file with every table and model as a view over the store (atomically replaced)."""
    from telemetry.models.db import export_database

    params = checked_window_params(window, slo)
    path = export_database(_open_store(store_dir), out, params)
    console.print(escape(f"wrote {path}: point the motherduck-duckdb-datasource (uid tailtap) at it"))


@dashboards_app.command("push")
def dashboards_push(
    url: Annotated[str, typer.Option("--url", help="Grafana URL, e.g. http://grafana:3000 (user:password@ allowed).")],
    token: Annotated[str | None, typer.Option("--token", envvar="GRAFANA_TOKEN", help="Service account token (or GRAFANA_TOKEN).")] = None,
    folder_uid: Annotated[str | None, typer.Option("--folder-uid", help="Folder to put the dashboards in.")] = None,
) -> None:
    """Create or update the dashboards on a Grafana server through its HTTP API (grafana-client)."""
    from telemetry.dashboards.grafana import push

    try:
        urls = push(url, token, folder_uid)
    except Exception as exc:  # network and HTTP errors: one line, no traceback
        error_line(f"pushing to {url}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        raise typer.Exit(EXIT_INPUT) from None
    for u in urls:
        console.print(escape(f"pushed {u}"))


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

