"""Entry point of the `tailtap` command.

A plain `tailtap analyze FILE... [options]` command line is parsed here and runs
telemetry/cli/analyze.py directly: building the typer app (typer, click, rich, pydantic
validation) costs ~0.2 s of every run, a tenth of a big capture's whole ingest. Anything
unusual (help, `--`, `--opt=value`, joined short options, repeated options, values typer
would reject or convert) goes to the typer app, so help, errors and exit codes stay typer's
own. tests/test_cli_fast.py checks that both paths hand `analyze` the same values. So
are `tailtap sql --store S QUERY` (telemetry/cli/sql.py), and `tailtap report` and
`tailtap explain --request R` with no option but --store, --format, --window and --html
(telemetry/cli/report.py, explain.py): scripts and users run them over and over, and the
typer app costs a quarter of a report on a small store.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# tailtap does no linear algebra: keep OpenBLAS (loaded with numpy) from starting a thread
# per core at import, which spin on the core the hash and Parquet threads use.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from telemetry.cli.args import (  # noqa: E402
    BadValue,
    CaptureSide,
    Format,
    parse_duration_ms,
    report_params,
    window_params,
)
from telemetry.exit_codes import EXIT_INTERRUPTED, EXIT_OK  # noqa: E402

_ANALYZE_VALUE_OPTS = {
    "--out": "out", "-o": "out", "--format": "fmt", "-f": "fmt", "--h2-port": "h2_port",
    "--capture-side": "capture_side", "--jobs": "jobs", "-j": "jobs", "--window": "window", "-w": "window",
    "--keylog": "keylog", "--html": "html_out",
}
_ANALYZE_FLAGS = {"--force": ("force", True), "--report": ("report", True), "--no-report": ("report", False)}
_DIGITS = frozenset("0123456789")


def _plain_int(text: str) -> int | None:
    """A decimal without sign, spaces or leading zeros, else None (left to typer)."""
    if not text or not set(text) <= _DIGITS or (len(text) > 1 and text[0] == "0"):
        return None
    return int(text)


def fast_analyze_args(argv: list[str]) -> dict[str, object] | None:
    """Keyword arguments of `analyze` (as the typer command takes them) for a plain, valid
    command line, or None when typer should handle it."""
    kw: dict[str, object] = {}
    captures: list[Path] = []
    ports: list[int] = []
    keylogs: list[Path] = []  # --keylog, repeatable like --h2-port
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
            if name == "keylog":
                keylogs.append(Path(text))
                continue
            if name in ("out", "html_out"):
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
            else:  # window: a bad one is typer's error to report
                try:
                    parse_duration_ms(text)
                except BadValue:
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
    if keylogs:
        kw["keylog"] = keylogs
    return kw


_SQL_OPTS = {"--store": "store_dir", "-s": "store_dir", "--format": "fmt", "-f": "fmt"}
_SQL_FORMATS = ("table", "csv", "json")


def fast_sql_args(argv: list[str]) -> dict[str, object] | None:
    """Keyword arguments of `sql` for a plain one-query command line, or None (typer)."""
    kw: dict[str, object] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in _SQL_OPTS and i < len(argv) and _SQL_OPTS[arg] not in kw:
            kw[_SQL_OPTS[arg]] = argv[i]
            i += 1
        elif arg and arg[0] != "-" and "query" not in kw:
            kw["query"] = arg
        else:
            return None
    if "query" not in kw or kw.get("fmt", "table") not in _SQL_FORMATS:
        return None
    kw["store_dir"] = Path(kw.get("store_dir", "store"))  # type: ignore[arg-type]
    return kw


_REPORT_OPTS = {"--store": "store_dir", "-s": "store_dir", "--format": "fmt", "-f": "fmt",
                "--window": "window", "-w": "window", "--html": "html_out"}
_REPORT_FORMATS = ("table", "json", "markdown")


def _option_values(argv: list[str], options: dict[str, str]) -> dict[str, object] | None:
    """``--option value`` pairs alone, each option once (names from ``options``), or None;
    the store folder (default ``store``) and an HTML page as paths."""
    kw: dict[str, object] = {}
    for i in range(0, len(argv), 2):
        name = options.get(argv[i])
        if name is None or name in kw or i + 1 >= len(argv) or not argv[i + 1] or argv[i + 1][0] == "-":
            return None
        kw[name] = argv[i + 1]
    kw["store_dir"] = Path(kw.get("store_dir", "store"))  # type: ignore[arg-type]
    if "html_out" in kw:
        kw["html_out"] = Path(kw["html_out"])  # type: ignore[arg-type]
    return kw


def fast_report_args(argv: list[str]) -> dict[str, object] | None:
    """Keyword arguments of `report` for a command line of --store, --format, --window and
    --html alone (the report with its other settings' defaults: `tailtap analyze` tells
    users to run `tailtap report --window`), or None (typer)."""
    kw = _option_values(argv, _REPORT_OPTS)
    if kw is None or kw.get("fmt", "table") not in _REPORT_FORMATS:
        return None
    try:
        kw["params"] = report_params(window=kw.pop("window", None))  # type: ignore[arg-type]
    except BadValue:
        return None  # typer's usage error to report
    return kw


_EXPLAIN_OPTS = {"--request": "request", "-r": "request", **_REPORT_OPTS}


def fast_explain_args(argv: list[str]) -> dict[str, object] | None:
    """Keyword arguments of `explain` for a command line of --request, --store, --format,
    --window and --html alone, or None (typer)."""
    from telemetry.cli.explain import parse_request

    kw = _option_values(argv, _EXPLAIN_OPTS)
    if kw is None or "request" not in kw or kw.get("fmt", "table") not in _REPORT_FORMATS:
        return None
    try:
        parse_request(kw["request"])  # type: ignore[arg-type]
        kw["params"] = window_params(kw.pop("window", None))  # type: ignore[arg-type]
    except BadValue:
        return None  # typer's usage error to report
    return kw


def run_fast(verb: str, kwargs: dict[str, object]) -> None:
    """Run `analyze`, `sql`, `report` or `explain` as typer's standalone mode would: same
    exit codes and EPIPE handling."""
    import errno

    try:
        if verb == "sql":
            from telemetry.cli.sql import run_sql

            code = run_sql(**kwargs)  # type: ignore[arg-type]
        elif verb == "report":
            from telemetry.cli.report import run_report

            code = run_report(**kwargs)  # type: ignore[arg-type]
        elif verb == "explain":
            from telemetry.cli.explain import run_explain

            code = run_explain(**kwargs)  # type: ignore[arg-type]
        else:
            from telemetry.cli import analyze

            code = analyze.run_analyze(**kwargs)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        from typer._click.utils import PacifyFlushWrapper  # as typer's standalone mode does

        sys.stdout = PacifyFlushWrapper(sys.stdout)
        sys.stderr = PacifyFlushWrapper(sys.stderr)
        sys.exit(1)
    sys.exit(code)


def main() -> None:
    argv = sys.argv[1:]
    fast = None
    verb = argv[0] if argv else None
    if verb == "analyze":
        fast = fast_analyze_args(argv[1:])
    elif verb == "sql":
        fast = fast_sql_args(argv[1:])
    elif verb == "report":
        fast = fast_report_args(argv[1:])
    elif verb == "explain":
        fast = fast_explain_args(argv[1:])
    try:
        if fast is not None:
            run_fast(verb, fast)
        else:
            from telemetry.cli.app import app

            app()
    except BrokenPipeError:  # `tailtap ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_OK)


def entry() -> None:
    """The `tailtap` command (console script, ``python -m telemetry``): :func:`main`, then
    the process ends without tearing the interpreter down. That teardown (full garbage
    collections over everything numpy, pyarrow and DuckDB loaded, then every module's
    objects freed one by one) did nothing a run needs and cost ~0.02 CPU s of every
    command (2.6 % of `analyze` on a 300-packet capture, 20 paired runs). What the normal
    exit does that matters is done first: threads that are not daemons joined, atexit
    handlers run (pyarrow's), output flushed. A traceback (a bug) still exits the normal
    way."""
    try:
        main()
        code: object = EXIT_OK
    except SystemExit as exc:
        code = exc.code
    _quick_exit(code)


def _quick_exit(code: object) -> None:
    import atexit
    import threading

    if code is None:
        code = EXIT_OK
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1, as Python does
        print(code, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():  # (in Python's order: threads, then atexit)
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`) or stream: nothing more to say
            pass
    os._exit(code & 0xFF)


if __name__ == "__main__":
    entry()
