"""The fast `analyze` command line (telemetry/cli/main.py: no typer app, no pydantic) parses
exactly as typer does, and hands anything unusual to typer so help, errors and exit codes
stay typer's own."""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.main import get_command

from telemetry.cli import analyze, main
from telemetry.cli import app as cli
from telemetry.cli.args import report_params, window_params
from telemetry.exit_codes import EXIT_INPUT, EXIT_STORE

TAILTAP = shutil.which("tailtap", path=str(Path(sys.executable).parent)) or "tailtap"

PLAIN = [
    ["a.pcap"],
    ["a.pcap", "b.pcapng.gz", "--out", "st"],
    ["--no-report", "--force", "x.pcap", "-o", "/tmp/s"],
    ["a.pcap", "--format", "json", "--h2-port", "50051", "--h2-port", "8080"],
    ["a.pcap", "-f", "markdown", "--capture-side", "client", "-j", "2", "--report"],
    ["a.pcap", "--window", "300ms", "b.pcap"],
    ["-w", "1.5m", "a.pcap", "--h2-port", "0"],
    ["a.pcap", "--capture-side", "server", "--jobs", "12", "--force"],
    ["a.pcap", "--keylog", "keys.txt"],
    ["--keylog", "a.keys", "a.pcap", "--keylog", "/tmp/b keys.log", "-o", "st"],
    ["a.pcap", "--keylog", "keys.txt", "--html", "r.html"],
]

UNUSUAL = [
    [],
    ["--help"],
    ["a.pcap", "-h"],
    ["a.pcap", "--out=st"],
    ["a.pcap", "-j2"],
    ["a.pcap", "--", "-b.pcap"],
    ["-"],
    [""],
    ["a.pcap", "--out"],
    ["a.pcap", "--out", "a", "--out", "b"],
    ["a.pcap", "--format", "JSON"],
    ["a.pcap", "--format", "xml"],
    ["a.pcap", "--capture-side", "middle"],
    ["a.pcap", "--jobs", "0"],
    ["a.pcap", "--jobs", "+2"],
    ["a.pcap", "--jobs", "02"],
    ["a.pcap", "--h2-port", "-1"],
    ["a.pcap", "--h2-port", "x"],
    ["a.pcap", "--window", "soon"],
    ["a.pcap", "--window", "-5s"],
    ["a.pcap", "--force", "--force"],
    ["a.pcap", "--report", "--no-report"],
    ["a.pcap", "--verbose"],
    ["a.pcap", "--keylog"],
    ["a.pcap", "--keylog", "-"],
    ["a.pcap", "--keylog=keys.txt"],
    ["a.pcap", "--html", "-"],
    ["a.pcap", "--html", "a.html", "--html", "b.html"],
]


def _typer_params(argv: list[str]) -> dict[str, object]:
    """The arguments typer hands `analyze` (a recorder with its signature, same converters)."""
    seen: dict[str, object] = {}

    @functools.wraps(cli.analyze)
    def recorder(**kw: object) -> None:
        seen.update(kw)

    app = typer.Typer()
    app.command("analyze")(recorder)
    app.command("other")(lambda: None)  # two commands: `analyze` stays a sub-command
    get_command(app).main(["analyze", *argv], standalone_mode=False)
    return seen


def _fast_params(argv: list[str]) -> dict[str, object]:
    kw = main.fast_analyze_args(argv)
    assert kw is not None, argv
    defaults = {n: p.default for n, p in inspect.signature(cli.analyze).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return {**defaults, **kw}


@pytest.mark.parametrize("argv", PLAIN)
def test_fast_path_parses_like_typer(argv):
    fast, slow = _fast_params(argv), _typer_params(argv)
    assert fast == slow
    assert {k: type(v) for k, v in fast.items()} == {k: type(v) for k, v in slow.items()}


@pytest.mark.parametrize("argv", UNUSUAL)
def test_unusual_command_lines_go_to_typer(argv):
    assert main.fast_analyze_args(argv) is None


def test_fast_path_exit_codes(tmp_path, monkeypatch):
    monkeypatch.setattr(analyze, "run_analyze", lambda **kw: EXIT_STORE)
    with pytest.raises(SystemExit) as exc:
        main.run_fast("analyze", {"captures": [tmp_path / "a.pcap"]})
    assert exc.value.code == EXIT_STORE

    def interrupted(**kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(analyze, "run_analyze", interrupted)
    with pytest.raises(SystemExit) as exc:
        main.run_fast("analyze", {"captures": [tmp_path / "a.pcap"]})
    assert exc.value.code == 130


def test_fast_and_typer_paths_agree_on_a_missing_file(tmp_path):
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    missing = str(tmp_path / "missing.pcap")
    fast = subprocess.run([TAILTAP, "analyze", missing, "--out", str(tmp_path / "s1")],
                          capture_output=True, text=True, timeout=120, env=env)
    slow = subprocess.run([TAILTAP, "analyze", missing, f"--out={tmp_path / 's1'}"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert fast.returncode == slow.returncode == EXIT_INPUT
    assert fast.stdout == slow.stdout and fast.stderr == slow.stderr


def test_fast_and_typer_paths_agree_on_a_missing_key_log(tmp_path):
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    capture = Path(__file__).resolve().parents[1] / "samples" / "sweep" / "tls_probe" / "capture.pcap"
    keys = str(tmp_path / "no-such-keys.txt")
    fast = subprocess.run([TAILTAP, "analyze", str(capture), "--keylog", keys, "--out", str(tmp_path / "s1")],
                          capture_output=True, text=True, timeout=120, env=env)
    slow = subprocess.run([TAILTAP, "analyze", str(capture), f"--keylog={keys}", "--out", str(tmp_path / "s2")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert fast.returncode == slow.returncode == EXIT_INPUT, (fast.stderr, slow.stderr)
    assert "no-such-keys.txt: cannot read the key log" in fast.stderr
    assert fast.stdout == slow.stdout and fast.stderr == slow.stderr


SQL_PLAIN = [["SELECT 1"], ["--store", "st", "SELECT 1"], ["-s", "st", "-f", "csv", "SELECT 2"], ["SELECT 3", "--format", "json"]]
SQL_UNUSUAL = [[], ["--help"], ["--store=st", "SELECT 1"], ["SELECT 1", "SELECT 2"], ["-f", "xml", "SELECT 1"],
               ["-s", "a", "-s", "b", "SELECT 1"], ["SELECT 1", "--store"]]


@pytest.mark.parametrize("argv", SQL_PLAIN)
def test_fast_sql_command_lines(argv):
    kw = main.fast_sql_args(argv)
    assert kw is not None and kw["query"].startswith("SELECT") and isinstance(kw["store_dir"], Path)


@pytest.mark.parametrize("argv", SQL_UNUSUAL)
def test_unusual_sql_command_lines_go_to_typer(argv):
    assert main.fast_sql_args(argv) is None


ENV = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}


def _sample_store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    sample = Path(__file__).resolve().parents[1] / "samples" / "loss_burst" / "capture.pcap"
    subprocess.run([TAILTAP, "analyze", str(sample), "--out", str(store), "--no-report"], check=True,
                   capture_output=True, timeout=300, env=ENV)
    return store


def _both_paths(verb: str, store: Path, args: list[str], code: int) -> subprocess.CompletedProcess:
    """Run ``tailtap VERB --store STORE ARGS`` (the fast path) and the same with
    ``--store=STORE`` (typer's); both must answer alike, with exit code ``code``."""
    fast = subprocess.run([TAILTAP, verb, "--store", str(store), *args], capture_output=True, text=True,
                          timeout=120, env=ENV)
    slow = subprocess.run([TAILTAP, verb, f"--store={store}", *args], capture_output=True, text=True,
                          timeout=120, env=ENV)
    assert fast.returncode == slow.returncode == code, (fast.stderr, slow.stderr)
    assert fast.stdout == slow.stdout and fast.stderr == slow.stderr
    return fast


def test_fast_and_typer_sql_agree(tmp_path):
    """The same answers, errors and exit codes whichever path runs `tailtap sql`."""
    store = _sample_store(tmp_path)
    for query, code in (("SELECT count(*) AS n FROM request_cause", 0), ("SELEC 1", EXIT_INPUT)):
        _both_paths("sql", store, ["-f", "csv", query], code)
    missing = subprocess.run([TAILTAP, "sql", "--store", str(tmp_path / "none"), "SELECT 1"],
                             capture_output=True, text=True, timeout=120, env=ENV)
    assert missing.returncode == EXIT_STORE and "no store here" in missing.stderr


@pytest.mark.parametrize("command", [["sql", "SELECT count(*) FROM requests"], ["report"], ["report", "--format", "json"]])
def test_reading_a_store_imports_neither_pyarrow_numpy_nor_the_duckdb_package(tmp_path, command):
    """`sql` and `report` read the store through DuckDB: the schema's column names and
    types and the store's folders are all they take from tailtap's store, so they start
    without pyarrow and numpy (~0.1 s, a third of `sql SELECT 1`), and with DuckDB's engine
    alone, not the Python package around it (its relational API and version lookup, ~0.13
    CPU s more)."""
    capture = Path(__file__).resolve().parents[1] / "samples" / "loss_burst" / "capture.pcap"
    store = tmp_path / "store"
    subprocess.run([TAILTAP, "analyze", str(capture), "--out", str(store), "--no-report"], check=True,
                   capture_output=True, timeout=120)
    probe = (
        "import sys; from telemetry.cli.main import main; sys.argv = ['tailtap', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('loaded:', sorted(m for m in ('numpy', 'pyarrow', 'duckdb') if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", probe, *command, "--store", str(store)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()  # it did answer
    assert "loaded: []" in proc.stderr, proc.stderr


REPORT_PLAIN = [[], ["--store", "st"], ["-s", "st", "-f", "json"], ["--format", "markdown", "--store", "st"],
                ["--window", "10s"], ["-s", "st", "-w", "250ms", "-f", "json"], ["--html", "r.html", "-s", "st"]]
REPORT_UNUSUAL = [["--help"], ["--store=st"], ["--store"], ["-s", "a", "-s", "b"], ["--format", "csv"],
                  ["--top", "3"], ["--html", "-"], ["extra"], ["--window", "soon"], ["--window", "-5s"],
                  ["--window", "0"], ["-w", "1s", "--window", "2s"], ["--window=10s"], ["--window", "10s", "--top", "3"]]


@pytest.mark.parametrize("argv", REPORT_PLAIN)
def test_fast_report_command_lines(argv):
    kw = main.fast_report_args(argv)
    assert kw is not None and isinstance(kw["store_dir"], Path)
    assert kw.get("fmt", "table") in ("table", "json", "markdown")
    window = dict(zip(argv[::2], argv[1::2], strict=True)).get("--window") or dict(zip(argv[::2], argv[1::2], strict=True)).get("-w")
    assert kw["params"] == report_params(window=window)  # as the typer command builds them


@pytest.mark.parametrize("argv", REPORT_UNUSUAL)
def test_unusual_report_command_lines_go_to_typer(argv):
    assert main.fast_report_args(argv) is None


def test_fast_and_typer_report_agree(tmp_path):
    """The same report, errors and exit codes whichever path runs `tailtap report`."""
    store = _sample_store(tmp_path)
    for target, fmt, code in ((store, "table", 0), (store, "json", 0), (tmp_path / "none", "table", EXIT_STORE)):
        assert main.fast_report_args(["--store", str(target), "-f", fmt]) is not None
        out = _both_paths("report", target, ["-f", fmt], code)
        assert ("spike" in out.stdout) if code == 0 else ("no store here" in out.stderr)
    # the window `tailtap analyze` tells users to change: the same report either way, and
    # not the default window's
    out = _both_paths("report", store, ["--window", "2s", "-f", "json"], 0)
    starts = [dt.datetime.fromisoformat(w["window_start"]) for w in json.loads(out.stdout)["timeline"]]
    assert len(starts) > 2 and {b - a for a, b in itertools.pairwise(starts)} == {dt.timedelta(seconds=2)}
    # the report to attach to a ticket: the same file either way, and one error line for
    # a file that cannot be written
    page = tmp_path / "report.html"
    pages = []
    for store_args in (["--store", str(store)], [f"--store={store}"]):
        proc = subprocess.run([TAILTAP, "report", *store_args, "--html", str(page)], capture_output=True, text=True,
                              timeout=120, env=ENV)
        assert proc.returncode == 0 and f"wrote {page}" in proc.stderr, proc.stderr
        pages.append(page.read_bytes())
    assert pages[0] == pages[1] and b"<html" in pages[0]
    _both_paths("report", store, ["--html", str(tmp_path / "no-such-dir" / "r.html")], EXIT_INPUT)


EXPLAIN_PLAIN = [["--request", "C1a2:3"], ["-r", "C1a2:3", "--store", "st"], ["-s", "st", "-r", "C9:0", "-f", "json", "-w", "2s"],
                 ["-r", "C1a2:3", "--html", "story.html"],
                 ["--store", "st", "--request", "C1a2:11", "--format", "markdown", "--window", "500ms"]]
EXPLAIN_UNUSUAL = [[], ["--help"], ["--store", "st"], ["--request", "garbage"], ["--request", "C1:x"], ["--request", ":3"],
                   ["--request=C1:3"], ["-r", "C1:3", "-r", "C1:4"], ["-r", "C1:3", "--slo", "ttft=1s"],
                   ["-r", "C1:3", "--html", "x.html", "--html", "y.html"], ["-r", "C1:3", "--window", "soon"],
                   ["-r", "C1:3", "-f", "csv"],
                   ["-r", "C1:3", "extra"], ["-r"]]


@pytest.mark.parametrize("argv", EXPLAIN_PLAIN)
def test_fast_explain_command_lines(argv):
    kw = main.fast_explain_args(argv)
    assert kw is not None and isinstance(kw["store_dir"], Path) and kw["request"] in argv
    given = dict(zip(argv[::2], argv[1::2], strict=True))
    assert kw["params"] == window_params(given.get("--window") or given.get("-w"))  # as the typer command builds them


@pytest.mark.parametrize("argv", EXPLAIN_UNUSUAL)
def test_unusual_explain_command_lines_go_to_typer(argv):
    assert main.fast_explain_args(argv) is None


def test_fast_and_typer_explain_agree(tmp_path):
    """The same story, errors and exit codes whichever path runs `tailtap explain`."""
    store = _sample_store(tmp_path)
    listed = subprocess.run([TAILTAP, "sql", "--store", str(store), "-f", "csv",
                             "SELECT conn_id || ':' || stream_id FROM requests ORDER BY conn_id, stream_id LIMIT 1"],
                            capture_output=True, text=True, timeout=120, env=ENV, check=True)
    request = listed.stdout.splitlines()[-1]
    for args, code in ((["--request", request], 0), (["--request", request, "-f", "json", "-w", "2s"], 0),
                       (["--request", "C0000000000000000:1"], EXIT_INPUT)):
        out = _both_paths("explain", store, args, code)
        if code == 0:
            assert request.split(":")[0] in out.stdout
        else:
            assert "no request C0000000000000000:1 in the store" in out.stderr
    _both_paths("explain", tmp_path / "none", ["--request", request], EXIT_STORE)



def test_fast_and_typer_analyze_write_the_same_html(tmp_path):
    """`analyze FILE --html F` on either path: the same page, the same lines."""
    sample = Path(__file__).resolve().parents[1] / "samples" / "loss_burst" / "capture.pcap"
    pages, errs = [], []
    for name, out_arg in (("fast", ["--out", str(tmp_path / "fast")]), ("typer", [f"--out={tmp_path / 'typer'}"])):
        page = tmp_path / f"{name}.html"
        proc = subprocess.run([TAILTAP, "analyze", str(sample), *out_arg, "--no-report", "--html", str(page)],
                              capture_output=True, text=True, timeout=300, env=ENV)
        assert proc.returncode == 0, proc.stderr
        pages.append(page.read_bytes())
        errs.append(proc.stderr.replace(str(tmp_path / name), "OUT").split(" in ")[0] + proc.stderr.splitlines()[-1]
                    .replace(str(page), "PAGE"))
    assert pages[0] == pages[1] and b"<html" in pages[0]
    assert errs[0] == errs[1] and errs[0].endswith("wrote PAGE"), errs


def test_the_command_ends_without_interpreter_teardown_yet_loses_nothing(tmp_path):
    """`tailtap` (main.entry) ends with os._exit after the command: what a normal exit does
    that matters still happens. Output to a file (block-buffered) is whole, atexit handlers
    run, threads that are not daemons finish, and exit codes are the command's own."""
    store = _sample_store(tmp_path)
    out = tmp_path / "rows.csv"
    with out.open("w") as fh:
        done = subprocess.run([TAILTAP, "sql", "--store", str(store), "-f", "csv", "SELECT range AS i FROM range(200000)"],
                              stdout=fh, stderr=subprocess.PIPE, text=True, timeout=120, env=ENV)
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "i" and len(lines) == 200_001 and lines[-1] == "199999"

    script = (
        "import atexit, sys, threading, time\n"
        "from telemetry.cli import main\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread finished'))).start()\n"
        f"sys.argv = ['tailtap', 'sql', '--store', {str(store)!r}, 'SELECT 42 AS answer']\n"
        "main.entry()\n"
        "print('never here')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "42" in proc.stdout and "atexit ran" in proc.stdout and "thread finished" in proc.stdout
    assert "never here" not in proc.stdout

    missing = subprocess.run([sys.executable, "-m", "telemetry", "sql", "--store", str(tmp_path / "none"), "SELECT 1"],
                             capture_output=True, text=True, timeout=120, env=ENV)
    assert missing.returncode == EXIT_STORE and "no store here" in missing.stderr
    usage = subprocess.run([TAILTAP, "analyze", "--no-such-option", "a.pcap"], capture_output=True, text=True,
                           timeout=120, env=ENV)
    assert usage.returncode == 2 and "No such option" in usage.stderr
