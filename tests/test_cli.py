"""The command line as a user runs it: the installed `tailtap` executable, real files.

Bad input gives one clear line naming the file and the place, a documented exit code,
never a traceback; good input gives the report, also as JSON for scripts.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from capture_builders import ether, ipv4, pcap, tcp

from telemetry.exit_codes import EXIT_STORE
from telemetry.ingest.source import GZIP_CHUNK_BYTES

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
TAILTAP = shutil.which("tailtap", path=str(Path(sys.executable).parent)) or "tailtap"
SAMPLES = Path(__file__).resolve().parents[1] / "samples"
T0 = 1_700_000_000_000_000_000


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([TAILTAP, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def assert_no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr


def test_help_explains_commands():
    proc = run("--help")
    assert proc.returncode == 0
    for cmd in ("analyze", "report", "explain", "sql", "schema"):
        assert cmd in proc.stdout
    assert "Exit codes" in proc.stdout


def test_missing_empty_and_not_a_capture(tmp_path):
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    text = tmp_path / "notes.pcap"
    text.write_text("this is not a capture\n" * 10)
    for path, words in ((tmp_path / "missing.pcap", "no such file"), (empty, "empty"), (text, "notes.pcap")):
        proc = run("analyze", str(path), "--out", str(tmp_path / "store"))
        assert proc.returncode == 1, proc.stderr
        assert_no_traceback(proc)
        assert str(path.name) in proc.stderr and words in proc.stderr
    # with --html too: the ingest's exit code and its line, then why there is no page
    proc = run("analyze", str(text), "--out", str(tmp_path / "store"), "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 1, proc.stderr
    assert_no_traceback(proc)
    assert "notes.pcap" in proc.stderr and "no store" in proc.stderr and ": 3" not in proc.stderr, proc.stderr


def _h2_garbage_capture() -> bytes:
    """A TCP connection to port 50051 carrying bytes that are not HTTP/2 at all."""
    c, s = ("10.0.0.2", 40000), ("10.0.0.1", 50051)
    pkts = [
        (T0, ether(ipv4(c[0], s[0], tcp(c[1], s[1], seq=100, flags=0x02)))),
        (T0 + 1000, ether(ipv4(s[0], c[0], tcp(s[1], c[1], seq=900, ack=101, flags=0x12)))),
        (T0 + 2000, ether(ipv4(c[0], s[0], tcp(c[1], s[1], seq=101, ack=901, flags=0x10)))),
    ]
    garbage = bytes((i * 37 + 11) % 256 for i in range(3000))
    seq = 101
    for i in range(0, len(garbage), 1000):
        part = garbage[i : i + 1000]
        pkts.append((T0 + 10_000 + i, ether(ipv4(c[0], s[0], tcp(c[1], s[1], seq=seq, ack=901, payload=part)))))
        seq += len(part)
    return pcap(pkts)


def test_garbage_on_h2_port_is_not_a_traceback(tmp_path):
    path = tmp_path / "garbage.pcap"
    path.write_bytes(_h2_garbage_capture())
    proc = run("analyze", str(path), "--out", str(tmp_path / "store"), "--h2-port", "50051", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert_no_traceback(proc)
    report = json.loads(proc.stdout)
    assert report["methods"] == []  # no invented requests
    assert report["captures"][0]["packets"] == 6


def test_truncated_last_record_warns_and_keeps_the_rest(tmp_path):
    data = _h2_garbage_capture()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[:-300])
    proc = run("analyze", str(path), "--out", str(tmp_path / "store"), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert_no_traceback(proc)
    assert "cut.pcap" in proc.stderr and "packet 6" in proc.stderr
    assert json.loads(proc.stdout)["captures"][0]["packets"] == 5


def test_unknown_link_type_is_reported(tmp_path):
    path = tmp_path / "user0.pcap"
    path.write_bytes(pcap([(T0, b"\x01" * 60), (T0 + 1, b"\x02" * 60)], linktype=147))
    proc = run("analyze", str(path), "--out", str(tmp_path / "store"), "--format", "json")
    assert_no_traceback(proc)
    assert "user0.pcap" in proc.stderr and "147" in proc.stderr


def test_corrupt_or_cut_short_gzip_capture(tmp_path):
    """A gzip capture that cannot be inflated says so (one line, exit 1), never a traceback
    and never "empty input"; one cut short after its first megabytes keeps what came before
    it, with a warning."""
    whole = gzip.compress((SAMPLES / "loss_burst" / "capture.pcap").read_bytes())
    cut = tmp_path / "cut.pcap.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    broken = bytearray(whole)
    broken[30:200] = b"\xff" * 170  # the first deflate blocks: the inflater refuses them
    bad = tmp_path / "bad.pcap.gz"
    bad.write_bytes(bytes(broken))
    for path, why in ((cut, "ended before the end-of-stream marker"), (bad, "Invalid deflate block")):
        proc = run("analyze", str(path), "--out", str(tmp_path / "store"))
        assert proc.returncode == 1, proc.stderr
        assert_no_traceback(proc)
        assert f"error: {path}: cannot decompress this gzip file" in proc.stderr and why in proc.stderr, proc.stderr
        assert "empty" not in proc.stderr, proc.stderr
    # past the first reads: the packets before the cut are kept, with a warning, all but
    # those of the last read (two lab captures' records one after the other: one pcap of
    # 6.4 MB)
    raw = (SAMPLES / "queueing" / "capture.pcap").read_bytes() + (SAMPLES / "mixed" / "capture.pcap").read_bytes()[24:]
    data = gzip.compress(raw, compresslevel=1)
    cut_data = data[: int(len(data) * 0.9)]
    big = tmp_path / "big.pcap.gz"
    big.write_bytes(cut_data)
    proc = run("analyze", str(big), "--out", str(tmp_path / "store2"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert_no_traceback(proc)
    assert "ended before the end-of-stream marker" in proc.stderr, proc.stderr
    kept = re.search(r"big.pcap.gz: ([\d,]+) packets", proc.stderr)
    inflatable = len(zlib.decompressobj(31).decompress(cut_data))
    assert kept and int(kept.group(1).replace(",", "")) >= _pcap_records(raw[: inflatable - GZIP_CHUNK_BYTES]), proc.stderr


def _pcap_records(data: bytes) -> int:
    """Whole records of a little-endian pcap's first bytes."""
    n, at = 0, 24
    while at + 16 <= len(data):
        at += 16 + int.from_bytes(data[at + 8 : at + 12], "little")
        n += at <= len(data)
    return n


@pytest.mark.skipif(not CAPTURES.is_dir(), reason="shared captures not found")
def test_analyze_report_json_rerun_and_gzip(tmp_path):
    src = CAPTURES / "grpc-go_server_streaming.pcapng"
    gz = tmp_path / "stream.pcapng.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    store = tmp_path / "store"
    proc = run("analyze", str(gz), "--out", str(store), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    method = report["methods"][0]
    assert method["method"] == "/greet.GreetService/GreetManyTimes"
    assert method["requests"] == 1 and method["errors"] == 0
    assert report["slowest_requests"][0]["conn_id"].startswith("C")
    # the same file again: skipped, rows not duplicated
    again = run("analyze", str(gz), "--out", str(store), "--format", "json")
    assert again.returncode == 0 and "already in the store" in again.stderr
    count = run("sql", "--store", str(store), "--format", "csv", "SELECT count(*) AS n FROM requests")
    assert count.stdout.splitlines() == ["n", "1"]
    # no query: a shell on stdin, statements end with ';', .quit leaves it
    shell = subprocess.run([TAILTAP, "sql", "--store", str(store)], input="SELECT count(*)\n AS n FROM requests;\n.quit\nSELECT 42;\n",
                           capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    assert shell.returncode == 0 and "requests" in shell.stderr, shell.stderr
    assert " 1 " in shell.stdout and "42" not in shell.stdout, shell.stdout
    # explain the request listed
    row = report["slowest_requests"][0]
    proc = run("explain", "--store", str(store), "--request", f"{row['conn_id']}:{row['stream_id']}", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    story = json.loads(proc.stdout)
    events = [e["event"] for e in story["timeline"]]
    assert events[0] == "request headers" and events.count("response message #0") == 1


def test_unwritable_html_is_one_line_the_same_from_every_verb(tmp_path):
    """An HTML page that cannot be written: one unwrapped line on standard error (however
    long the path), saying the same from analyze --html as from report --html, exit 1."""
    store = tmp_path / "store"
    page = tmp_path / ("a-folder-that-is-not-there-" * 3) / "report.html"
    lines = []
    for args in (["analyze", str(SAMPLES / "mixed" / "capture.pcap"), "--out", str(store), "--no-report"],
                 ["report", "--store", str(store)]):
        proc = run(*args, "--html", str(page))
        assert proc.returncode == 1, proc.stderr
        assert_no_traceback(proc)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, proc.stderr
        lines.append(errors[0])
    assert lines[0] == lines[1] == f"error: cannot write {page}: No such file or directory", lines


def test_bad_sql_and_missing_store(tmp_path):
    proc = run("sql", "--store", str(tmp_path / "nope"), "SELECT 1")
    assert proc.returncode == 3 and "no store" in proc.stderr
    # every verb that reads a store: exit code 3 and the one line (the report verbs said
    # "error: 3" after it and exited 1: their query-error handler caught the exit itself)
    for verb in (["report"], ["explain", "--request", "C1:1"], ["compare", "--a", "1h", "--b", "2h"]):
        proc = run(verb[0], "--store", str(tmp_path / "nope"), *verb[1:])
        assert proc.returncode == 3, (verb, proc.returncode, proc.stderr)
        assert "no store" in proc.stderr and "error: 3" not in proc.stderr, proc.stderr
        assert_no_traceback(proc)
    (tmp_path / "s" / "requests").mkdir(parents=True)
    proc = run("sql", "--store", str(tmp_path / "s"), "SELEC nonsense")
    assert proc.returncode == 1
    assert_no_traceback(proc)
    proc = run("explain", "--store", str(tmp_path / "s"), "--request", "garbage")
    assert proc.returncode == 2


def test_report_timeline_whole_in_80_columns(tmp_path):
    """Piped output is 80 columns wide: each window's time and its spike mark stay whole
    on the window's line (they were cut to "07:25:…", the mark wrapped onto a line of its
    own), as the JSON report of the same store gives them."""
    capture = Path(__file__).resolve().parents[1] / "samples" / "loss_burst" / "capture.pcap"
    store = tmp_path / "store"
    assert run("analyze", str(capture), "--out", str(store), "--no-report").returncode == 0
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    text = subprocess.run([TAILTAP, "report", "--store", str(store)], capture_output=True, text=True,
                          timeout=120, env=env, check=True).stdout
    data = json.loads(run("report", "--store", str(store), "--format", "json").stdout)
    spiked = {s["window_start"] for s in data["spikes"]}
    assert spiked, "the loss_burst sample has spikes"
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    for w in data["timeline"]:
        hhmmss = w["window_start"][11:19]
        mark = " *" if w["window_start"] in spiked else ""
        row = [line for line in lines if line.lstrip().startswith(hhmmss)]
        assert len(row) == 1, (hhmmss, text)
        assert row[0].lstrip().startswith(hhmmss + mark + " "), row[0]
        assert f"{w['requests']}" in row[0].split()


def test_piped_report_cuts_nothing(tmp_path):
    """Sent to a pipe or a file with no COLUMNS set, the report is not fitted to rich's
    default 80 columns: the slowest requests' methods and causes were cut there
    ("/tailt…", "loss_bu…"). Each slowest request's line holds its id, whole method and
    causes, as the JSON report gives them."""
    capture = Path(__file__).resolve().parents[1] / "samples" / "loss_burst" / "capture.pcap"
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"NO_COLOR": "1"}
    analyzed = subprocess.run([TAILTAP, "analyze", str(capture), "--out", str(store)], capture_output=True,
                              text=True, timeout=120, env=env, check=True).stdout
    text = subprocess.run([TAILTAP, "report", "--store", str(store)], capture_output=True, text=True,
                          timeout=120, env=env, check=True).stdout
    assert "…" not in analyzed and "…" not in text
    slowest = json.loads(run("report", "--store", str(store), "--format", "json").stdout)["slowest_requests"]
    assert slowest
    for r in slowest:
        (line,) = [x for x in text.splitlines() if x.split()[:1] == [f"{r['conn_id']}:{r['stream_id']}"]]
        assert r["method"] in line.split() and (r["causes"] or "-") in line, line


def _grpc_capture(paths: list[str]) -> bytes:
    """An h2c connection to port 50051 with one unary gRPC call per path (frames and
    HPACK blocks as a peer writes them), each answered with a message and grpc-status 0."""
    from h2_builders import (
        GRPC_RESPONSE,
        PREFACE,
        Hpack,
        data,
        grpc_msg,
        grpc_request_headers,
        headers,
        settings,
    )

    c, s = ("10.0.0.2", 40000), ("10.0.0.1", 50051)
    seq = {c: 101, s: 901}
    t = [T0]
    pkts = [
        (T0, ether(ipv4(c[0], s[0], tcp(c[1], s[1], seq=100, flags=0x02)))),
        (T0 + 1000, ether(ipv4(s[0], c[0], tcp(s[1], c[1], seq=900, ack=101, flags=0x12)))),
        (T0 + 2000, ether(ipv4(c[0], s[0], tcp(c[1], s[1], seq=101, ack=901, flags=0x10)))),
    ]

    def send(src, dst, payload: bytes) -> None:
        t[0] += 2_000_000
        pkts.append((t[0], ether(ipv4(src[0], dst[0], tcp(src[1], dst[1], seq=seq[src], ack=seq[dst],
                                                          flags=0x18, payload=payload)))))
        seq[src] += len(payload)
        t[0] += 100_000
        pkts.append((t[0], ether(ipv4(dst[0], src[0], tcp(dst[1], src[1], seq=seq[dst], ack=seq[src], flags=0x10)))))

    up, down = Hpack(), Hpack()
    send(c, s, PREFACE + settings())
    send(s, c, settings() + settings(ack=True))
    for i, path in enumerate(paths):
        sid = 1 + 2 * i
        send(c, s, headers(sid, up.block(grpc_request_headers(path))) + data(sid, grpc_msg(b"question"), end=True))
        send(s, c, headers(sid, down.block(GRPC_RESPONSE)) + data(sid, grpc_msg(b"answer"))
             + headers(sid, down.block([("grpc-status", "0")]), end_stream=True))
    return pcap(pkts)


def test_bracketed_paths_print_as_they_are(tmp_path):
    """Request paths come from the traffic: the terminal report prints them as they are.
    Square brackets in them were read as rich markup: "[/v2]" raised a MarkupError (a
    traceback instead of the report), "[b]" turned the rest bold and vanished."""
    paths = ["/api[/v2]/Svc/Call", "/shop.Items[b]/Get"]
    capture = tmp_path / "brackets.pcap"
    capture.write_bytes(_grpc_capture(paths))
    store = tmp_path / "store"
    proc = run("analyze", str(capture), "--out", str(store), "--h2-port", "50051")
    assert proc.returncode == 0, proc.stderr
    assert_no_traceback(proc)
    sql = run("sql", "--store", str(store), "--format", "json", "SELECT DISTINCT method FROM request_metrics")
    assert {r["method"] for r in json.loads(sql.stdout)["result"]} == set(paths), sql.stdout
    for path in paths:
        assert path in proc.stdout, proc.stdout
    report = run("report", "--store", str(store))
    assert report.returncode == 0, report.stderr
    assert_no_traceback(report)
    for path in paths:
        assert path in report.stdout, report.stdout


def test_report_says_when_kept_models_are_another_versions(tmp_path):
    """Models kept with the captures by another tailtap version (another key: their SQL
    changed) are not used: the report computes them again, gives the same answer, and
    says on stderr how many captures that was, why it was slower and how to store them
    anew."""
    samples = Path(__file__).resolve().parents[1] / "samples"
    store = tmp_path / "store"
    for name in ("loss_burst", "throttle_shaper"):
        assert run("analyze", str(samples / name / "capture.pcap"), "--out", str(store), "--no-report").returncode == 0
    fresh = run("report", "--store", str(store), "--format", "json")
    assert fresh.returncode == 0 and "another tailtap version" not in fresh.stderr
    keys = [p for p in (store / "models").iterdir() if p.is_dir()]
    assert keys
    for i, key in enumerate(keys):  # what an older version left: the same models under other keys
        key.rename(key.with_name(f"older{i}"))
    stale = run("report", "--store", str(store), "--format", "json")
    assert stale.returncode == 0, stale.stderr
    assert "2 capture(s) keep models computed by another tailtap version" in stale.stderr
    assert json.loads(stale.stdout) == json.loads(fresh.stdout)
    request = json.loads(fresh.stdout)["slowest_requests"][0]
    story = run("explain", "--store", str(store), "--request", f"{request['conn_id']}:{request['stream_id']}")
    assert story.returncode == 0 and "another tailtap version" in story.stderr


def test_every_verb_says_the_same_of_a_directory_that_holds_no_store(tmp_path):
    """`sql` answered SELECT 1 from an empty directory (exit 0) where `report` said there
    was no store: one check now, the same line and exit code from each verb, and the
    directory is left as it was."""
    empty = tmp_path / "empty"
    empty.mkdir()
    said = set()
    for verb in (["sql", "SELECT 1"], ["report"], ["sql", "-f", "csv", "SELECT 1"]):
        proc = run(verb[0], "--store", str(empty), *verb[1:])
        assert proc.returncode == EXIT_STORE, (verb, proc.stdout, proc.stderr)
        assert_no_traceback(proc)
        said.add(proc.stderr.strip())
    assert said == {f"error: {empty}: no store here (run `tailtap analyze CAPTURE --out {empty}` first)"}
    assert list(empty.iterdir()) == []


def test_a_table_narrower_than_its_title_keeps_the_title_on_one_line(tmp_path):
    store = tmp_path / "store"
    assert run("analyze", str(SAMPLES / "mixed" / "capture.pcap"), "--out", str(store), "--no-report").returncode == 0
    proc = run("sql", "--store", str(store), "SELECT 1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].strip() == "result", proc.stdout


def test_on_a_terminal_the_bar_says_what_follows_the_reading(tmp_path):
    """On a terminal the progress bar follows the reading, then names what the seconds
    after it go to (finishing the connections, analysing), before the report. The bar is
    drawn from 8 MiB of input: here from the first byte, on a lab capture."""
    import pty
    import select

    code = ("import sys, telemetry.cli.analyze as a; a.PROGRESS_MIN_BYTES = 0; "
            "from telemetry.cli.main import main; sys.argv[0] = 'tailtap'; main()")
    capture = SAMPLES / "loss_burst" / "capture.pcap"
    master, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code, "analyze", str(capture), "--out", str(tmp_path / "s")],
                            stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True,
                            env={**os.environ, "COLUMNS": "150", "TERM": "xterm"})
    os.close(terminal)
    shown = b""
    try:
        while select.select([master], [], [], 120)[0]:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the terminal closed with the command's end
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert proc.wait(timeout=60) == 0
    text = shown.decode(errors="replace")
    assert "Traceback" not in text
    assert text.index("reading") < text.index("finishing") < text.index("analysing") < text.index("why p99 went bad"), text
