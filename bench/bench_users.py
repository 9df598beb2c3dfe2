"""What users run, timed against tshark in the same run (its gRPC dissection; HTTP/1.1 for SSE).

For each input capture, each command as a whole process (CPU seconds = user + sys of the
process and its children, from wait4; wall; peak RSS), median over ``--runs`` runs:

* ``tailtap analyze FILE --out FRESH`` (the default command: ingest, per-capture
  analysis, the report);
* ``tailtap analyze FILE --out FRESH --no-report`` (the ingest alone);
* ``tailtap report --store S`` and ``tailtap sql --store S "SELECT 1"`` on that store;
* tshark: ``-d tcp.port==50051,http2 -o tcp.reassemble_out_of_order:TRUE -Y grpc -T fields``
  (for the SSE rows, its HTTP/1.1 dissection, ``-d tcp.port==50051,http -Y http``, chunked
  bodies reassembled; over h2c its HTTP/2 one, ``-Y http2``; over TLS the same one inside
  TLS decrypted with the run's key log, which tailtap gets too: ``--keylog``; without the
  key log, tshark's TLS records, ``-d tcp.port==50051,tls -Y tls``).

Inputs: the realistic generator (bench/gen_realistic.py) at 200k, 1M and 10M packets, and
at 1M with 2,000 connections instead of 200 (``--many-connections N``: as many as asked)
and a seed of its own (costs that grow with the connections, not the packets, show there),
the lab's captures (real kernel TCP), an OpenAI-compatible SSE service (the lab's server at
40 requests a second for 30 s, one token event a segment, real kernel TCP) over HTTP/1.1
(uvicorn), over HTTP/2 cleartext (hypercorn), over TLS 1.3 (uvicorn; key log kept) and over
HTTP/2 over TLS 1.3 (hypercorn), and the lab's gRPC service over TLS 1.3 (grpcio, called by
httpx, which writes the key log), the two TLS services' captures also without their key
logs (what a user without the keys runs), each made once with ``tailtap lab run``, which needs root
(``--no-sse`` leaves them out), and
the ideal capture of bench/gen_grpc_capture.py as one row, labelled the best case. The ratios
are tshark CPU / tailtap CPU of the same row.
tailtap's modules are byte-compiled first, as an install has them.

Usage: python bench/bench_users.py [--sizes 200k,1m,10m] [--runs 3] [--cache DIR]
       [--out bench/results/users.md] [--no-lab] [--no-ideal] [--no-many] [--no-sse]
       [--many-connections 2000]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAILTAP = str(Path(sys.executable).parent / "tailtap")
SIZES = {"200k": 200_000, "1m": 1_000_000, "10m": 10_000_000}
LAB = ("loss_burst", "throttle_shaper", "mixed")
# what tailtap warns when a connection's decoder raised (parsers/session.py)
DECODER_FAILED = "decoding of this connection stopped"


@dataclass
class Timing:
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)

    def add(self, cpu: float, wall: float, rss_kib: int) -> None:
        self.cpu.append(cpu)
        self.wall.append(wall)
        self.rss_mib.append(rss_kib / 1024)

    def med(self, what: str) -> float | None:
        values = getattr(self, what)
        return statistics.median(values) if values else None


def run(argv: list[str], timing: Timing, stdout: int = subprocess.DEVNULL) -> None:
    """Run a command to its end; add its CPU, wall time and peak RSS (with its children).
    A run in which a decoder failed (tailtap warns and reads on without that connection)
    did less than the work being timed: it stops the benchmark."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=stdout, stderr=err, env={**os.environ, "COLUMNS": "120"})
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        err.seek(0)
        failed = [line for line in err.read().decode(errors="replace").splitlines() if DECODER_FAILED in line]
    if os.waitstatus_to_exitcode(status) not in (0,):
        raise RuntimeError(f"{' '.join(argv)} exited with {os.waitstatus_to_exitcode(status)}")
    if failed:
        raise RuntimeError(f"{' '.join(argv)}: {len(failed)} connections not decoded ({failed[0]})")
    timing.add(usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss)


def tshark_argv(capture: Path) -> list[str]:
    return ["tshark", "-n", "-r", str(capture), "-d", "tcp.port==50051,http2", "-o", "tcp.reassemble_out_of_order:TRUE",
            "-Y", "grpc", "-T", "fields", "-e", "frame.time_epoch", "-e", "http2.streamid", "-e", "grpc.message_length"]


def tshark_http_argv(capture: Path) -> list[str]:
    return ["tshark", "-n", "-r", str(capture), "-d", "tcp.port==50051,http", "-o", "tcp.reassemble_out_of_order:TRUE",
            "-Y", "http", "-T", "fields", "-e", "frame.time_epoch", "-e", "http.response.code", "-e", "http.content_type"]


def tshark_h2_argv(capture: Path) -> list[str]:
    return ["tshark", "-n", "-r", str(capture), "-d", "tcp.port==50051,http2", "-o", "tcp.reassemble_out_of_order:TRUE",
            "-Y", "http2", "-T", "fields", "-e", "frame.time_epoch", "-e", "http2.streamid", "-e", "http2.type"]


def _in_tls(argv: list[str], capture: Path) -> list[str]:
    """A cleartext dissection's arguments, the capture read as TLS with its key log."""
    at = argv.index("-d")
    return [*argv[:at], "-o", f"tls.keylog_file:{capture.parent / 'keys.txt'}", "-d", "tcp.port==50051,tls", *argv[at + 2 :]]


def tshark_tls_http_argv(capture: Path) -> list[str]:
    return _in_tls(tshark_http_argv(capture), capture)


def tshark_tls_argv(capture: Path) -> list[str]:
    return _in_tls(tshark_argv(capture), capture)


def tshark_tls_h2_argv(capture: Path) -> list[str]:
    return _in_tls(tshark_h2_argv(capture), capture)


def tshark_tls_records_argv(capture: Path) -> list[str]:
    """TLS without its key log: what tshark reads of it then, its records."""
    return ["tshark", "-n", "-r", str(capture), "-d", "tcp.port==50051,tls", "-o", "tcp.reassemble_out_of_order:TRUE",
            "-Y", "tls", "-T", "fields", "-e", "frame.time_epoch", "-e", "tls.record.content_type", "-e",
            "tls.record.length"]  # fmt: skip


def bench_input(label: str, capture: Path, runs: int, tshark: bool,
                peer: Callable[[Path], list[str]] = tshark_argv, options: tuple[str, ...] = ()) -> dict[str, object]:  # fmt: skip
    """``options``: given to ``tailtap analyze`` too (a key log)."""
    timings = {k: Timing() for k in ("analyze", "ingest", "report", "sql", "tshark")}
    packets = None
    with tempfile.TemporaryDirectory(prefix="tailtap-bench-") as tmp:
        for i in range(runs):
            store = Path(tmp) / f"s{i}"
            run([TAILTAP, "analyze", str(capture), "--out", str(store), *options], timings["analyze"])
            shutil.rmtree(store)
            run([TAILTAP, "analyze", str(capture), "--out", str(store), "--no-report", *options], timings["ingest"])
            run([TAILTAP, "report", "--store", str(store)], timings["report"])
            run([TAILTAP, "sql", "--store", str(store), "SELECT 1"], timings["sql"])
            if packets is None:
                out = subprocess.run([TAILTAP, "sql", "--store", str(store), "-f", "csv", "SELECT sum(packets) FROM captures"],
                                     capture_output=True, text=True, check=True).stdout.split()
                packets = int(out[-1])
            shutil.rmtree(store)
            if tshark and (i == 0 or runs <= 3):
                run(peer(capture), timings["tshark"])
    return {"label": label, "capture": str(capture), "packets": packets, "timings": timings}


def _f(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(rows: list[dict[str, object]]) -> str:
    lines = ["| input | packets | analyze CPU s (wall) | vs tshark | ingest CPU s | pkt/s (ingest CPU) | report CPU s (wall) | sql SELECT 1 wall s | analyze peak MiB | report peak MiB | tshark CPU s (peak MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["timings"]
        a, ing, rep, sql, ts = (t[k] for k in ("analyze", "ingest", "report", "sql", "tshark"))
        ratio = ts.med("cpu") / a.med("cpu") if ts.med("cpu") and a.med("cpu") else None
        pps = r["packets"] / ing.med("cpu") if r["packets"] and ing.med("cpu") else None
        lines.append(
            f"| {r['label']} | {r['packets']:,} | {_f(a.med('cpu'))} ({_f(a.med('wall'))}) | {_f(ratio, 1)}x | "
            f"{_f(ing.med('cpu'))} | {'-' if pps is None else f'{pps / 1000:,.0f}k'} | {_f(rep.med('cpu'))} ({_f(rep.med('wall'))}) | "
            f"{_f(sql.med('wall'))} | {_f(a.med('rss_mib'), 0)} | {_f(rep.med('rss_mib'), 0)} | "
            f"{_f(ts.med('cpu'), 1)} ({_f(ts.med('rss_mib'), 0)}) |")
    return "\n".join(lines)


def growth(rows: list[dict[str, object]]) -> str:
    by = {r["label"]: r for r in rows}
    a, b = by.get("realistic 1M"), by.get("realistic 10M")
    if not a or not b:
        return ""
    out = []
    for cmd in ("analyze", "ingest", "report"):
        ta, tb = a["timings"][cmd], b["timings"][cmd]
        out.append(f"{cmd}: CPU x{tb.med('cpu') / ta.med('cpu'):.1f}, peak memory x{tb.med('rss_mib') / ta.med('rss_mib'):.2f}")
    return "From 1M to 10M packets (x10): " + "; ".join(out) + "."


def generated(cache: Path, name: str, generator: str, *args: str) -> Path:
    """``cache/name``, made by ``bench/generator OUT args`` the first time it is asked for."""
    path = cache / name
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / generator), str(path), *args],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def realistic(cache: Path, size: str) -> Path:
    return generated(cache, f"realistic-{size}.pcap", "gen_realistic.py", "--packets", str(SIZES[size]))


def many_connections(cache: Path, connections: int) -> Path:
    """1M packets over ``connections`` connections, seed 7 (the 200-connection captures use
    the generator's default seed, 1)."""
    return generated(cache, f"realistic-1m-{connections}c-seed7.pcap", "gen_realistic.py",
                     "--packets", "1000000", "--connections", str(connections), "--seed", "7")


# the rows of the lab's services made here (SSE, and gRPC over TLS): (label, folder in the
# cache, `tailtap lab run` protocol options, tshark, whether both get the run's key log)
SSE_RUNS = (
    ("lab SSE over HTTP/1.1 (vs tshark's HTTP)", "lab-openai-http1-40rps-seed3", ("--protocol", "openai-http1"),
     tshark_http_argv, True),
    ("lab SSE over h2c (vs tshark's HTTP/2)", "lab-openai-h2c-40rps-seed3", ("--protocol", "openai-h2c"), tshark_h2_argv,
     True),
    ("lab SSE over TLS, key log (vs tshark's HTTP in TLS)", "lab-openai-http1-tls-40rps-seed3",
     ("--protocol", "openai-http1", "--tls"), tshark_tls_http_argv, True),
    ("lab SSE over HTTP/2 over TLS, key log (vs tshark's HTTP/2 in TLS)", "lab-openai-h2c-tls-40rps-seed3",
     ("--protocol", "openai-h2c", "--tls"), tshark_tls_h2_argv, True),
    ("lab gRPC over TLS, key log (vs tshark's gRPC in TLS)", "lab-grpc-tls-40rps-seed3",
     ("--protocol", "grpc", "--tls"), tshark_tls_argv, True),
    # users without the keys: tailtap estimates from the records, tshark reads the records
    ("lab SSE over TLS, no key log (vs tshark's TLS records)", "lab-openai-http1-tls-40rps-seed3",
     ("--protocol", "openai-http1", "--tls"), tshark_tls_records_argv, False),
    ("lab gRPC over TLS, no key log (vs tshark's TLS records)", "lab-grpc-tls-40rps-seed3",
     ("--protocol", "grpc", "--tls"), tshark_tls_records_argv, False),
)  # fmt: skip


def sse_lab(cache: Path, folder: str, protocol: tuple[str, ...]) -> Path:
    """The lab's OpenAI-compatible SSE service (``protocol``: its ``tailtap lab run``
    options), 40 requests a second for 30 s, seed 3, captured at the server: made once
    (root: network namespaces)."""
    out = cache / folder
    if not (out / "capture.pcap").exists():
        subprocess.run([TAILTAP, "lab", "run", "baseline", *protocol, "--seed", "3", "--rate", "40",
                        "--duration", "30", "--out", str(out)], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    return out / "capture.pcap"


def ideal(cache: Path) -> Path:
    return generated(cache, "ideal-1m.pcap", "gen_grpc_capture.py", "--packets", "1000000")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="200k,1m,10m")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "tailtap-bench-captures")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "users.md")
    ap.add_argument("--no-lab", action="store_true")
    ap.add_argument("--no-ideal", action="store_true")
    ap.add_argument("--no-many", action="store_true", help="leave out the many-connection capture")
    ap.add_argument("--no-sse", action="store_true", help="leave out the lab service rows (SSE, gRPC over TLS: made with root)")
    ap.add_argument("--many-connections", type=int, default=2000, metavar="N",
                    help="connections of the many-connection capture (1M packets)")
    args = ap.parse_args()
    if shutil.which("tshark") is None:
        sys.exit("tshark is needed as the peer (apt-get install tshark)")
    # the sources' bytecode, as an install has it: a module edited since `make venv` is
    # compiled again at every start where PYTHONDONTWRITEBYTECODE is set (~0.1 s a command)
    for package in ("parsers", "telemetry"):
        compileall.compile_dir(str(ROOT / package), quiet=1)
    rows = []
    for size in filter(None, args.sizes.split(",")):
        runs = 1 if SIZES[size] >= 10_000_000 else args.runs
        rows.append(bench_input(f"realistic {size.upper()}", realistic(args.cache, size), runs, tshark=True))
        print(table(rows[-1:]), flush=True)
    if not args.no_many:
        many = many_connections(args.cache, args.many_connections)
        rows.append(bench_input(f"realistic 1M, {args.many_connections:,} connections", many, args.runs, tshark=True))
        print(table(rows[-1:]), flush=True)
    if not args.no_lab:
        for name in LAB:
            rows.append(bench_input(f"lab {name}", ROOT / "samples" / name / "capture.pcap", args.runs, tshark=True))
            print(table(rows[-1:]), flush=True)
    for label, folder, protocol, peer, with_keys in () if args.no_sse else SSE_RUNS:
        if os.geteuid() != 0 and not (args.cache / folder / "capture.pcap").exists():
            print(f"{label} needs root once, to make its capture in network namespaces: left out", flush=True)
            continue
        capture = sse_lab(args.cache, folder, protocol)
        keys = capture.parent / "keys.txt"
        rows.append(bench_input(label, capture, args.runs, tshark=True, peer=peer,
                                options=("--keylog", str(keys)) if with_keys and keys.exists() else ()))  # fmt: skip
        print(table(rows[-1:]), flush=True)
    if not args.no_ideal:
        rows.append(bench_input("ideal 1M (best case)", ideal(args.cache), args.runs, tshark=True))
        print(table(rows[-1:]), flush=True)
    load = os.getloadavg()
    text = "\n".join([
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores "
        f"(load average {load[0]:.1f} at the end; medians of {args.runs} runs, 1 for 10M packets).", "",
        table(rows), "", growth(rows), ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
