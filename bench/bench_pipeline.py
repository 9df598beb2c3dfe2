"""Benchmark: tailtap's packet rate and peak memory next to tshark's, on the same file, in
the same run.

It generates a large synthetic gRPC token-streaming capture (bench/gen_grpc_capture.py),
then runs, each as its own process so peak RSS is its own:
  * tailtap analyze FILE --no-report  (full pipeline: decode, TCP, HTTP/2, gRPC, Parquet;
    the default: one process below 4 cores)
  * tailtap analyze FILE --no-report -j 2  (the file split between two processes)
  * tshark -d tcp.port==50051,http2 -Y grpc -T fields ...   (the reference decoder)
and tailtap again on a quarter of the file, to show memory does not grow with the file.
Each tailtap command runs ``--repeat`` times (default 3) and its median time is reported,
with every run's time. Memory: ``peak_rss_mib`` is the largest process's peak (wait4);
``tree_rss_mib`` the peak of the sum over the process and its children, sampled every 10 ms.
Prints a table and writes bench/out/bench_pipeline.json. Speed goals are ratios.

Usage: python bench/bench_pipeline.py [--packets 1000000] [--repeat 3] [--skip-tshark]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_grpc_capture import SERVER_PORT, write_capture  # noqa: E402


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants (KiB), from /proc."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                total += next((int(line.split()[1]) for line in fh if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return total


def run_measured(cmd: list[str]) -> dict[str, float]:
    """Run a command; return wall seconds, the peak RSS of its largest process (MiB, via
    wait4) and the peak of its process tree's summed RSS (sampled every 10 ms)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tree_peak = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        tree_peak = max(tree_peak, _tree_rss_kib(proc.pid))
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{stderr[-2000:]}")
    return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024, "tree_rss_mib": max(tree_peak, usage.ru_maxrss) / 1024}


def run_repeated(cmd: list[str], times: int) -> dict[str, float]:
    """:func:`run_measured` ``times`` times: the median time (a one-second run is easily
    disturbed, tshark's 25 s one is not), the highest memory, and every time."""
    runs = [run_measured(cmd) for _ in range(times)]
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "runs_s": [round(r["seconds"], 3) for r in runs],
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "tree_rss_mib": max(r["tree_rss_mib"] for r in runs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--skip-tshark", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tailtap command (the median is reported)")
    ap.add_argument("--keep", action="store_true", help="keep the generated captures")
    args = ap.parse_args()
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tailtap-bench-"))
    try:
        big, small = work / "grpc_big.pcap", work / "grpc_quarter.pcap"
        t = time.perf_counter()
        n_big = write_capture(str(big), args.packets)
        n_small = write_capture(str(small), args.packets // 4)
        print(f"generated {n_big:,} + {n_small:,} packets in {time.perf_counter() - t:.1f} s")
        # bytecode as an installed package has it (PYTHONDONTWRITEBYTECODE would otherwise
        # make every run compile tailtap's modules: ~0.1 s)
        for package in ("parsers", "telemetry"):
            compileall.compile_dir(str(HERE.parent / package), quiet=1)
        tailtap = [sys.executable, "-m", "telemetry", "analyze", "--no-report", "--force"]
        results: dict[str, dict[str, float]] = {}
        results["tailtap"] = run_repeated(tailtap + [str(big), "--out", str(work / "store")], args.repeat)
        results["tailtap_split"] = run_repeated(tailtap + [str(big), "--out", str(work / "store2"), "-j", "2"], args.repeat)
        results["tailtap_quarter"] = run_repeated(tailtap + [str(small), "--out", str(work / "store_q")], args.repeat)
        if not args.skip_tshark and shutil.which("tshark"):
            results["tshark"] = run_measured([
                "tshark", "-r", str(big), "-d", f"tcp.port=={SERVER_PORT},http2", "-Y", "grpc",
                "-T", "fields", "-e", "frame.number", "-e", "http2.streamid", "-e", "grpc.message_length",
            ])
        for name, r in results.items():
            packets = n_small if name == "tailtap_quarter" else n_big
            r["packets"] = packets
            r["packets_per_s"] = packets / r["seconds"]
        summary = {
            "packets": n_big,
            "results": results,
            "memory_growth_full_over_quarter": results["tailtap"]["tree_rss_mib"] / results["tailtap_quarter"]["tree_rss_mib"],
        }
        if "tshark" in results:
            tshark = results["tshark"]
            summary["speed_ratio_vs_tshark"] = results["tailtap"]["packets_per_s"] / tshark["packets_per_s"]
            summary["speed_ratio_vs_tshark_split"] = results["tailtap_split"]["packets_per_s"] / tshark["packets_per_s"]
            summary["memory_ratio_vs_tshark"] = results["tailtap"]["tree_rss_mib"] / tshark["tree_rss_mib"]
        print(f"{'tool':18} {'packets':>10} {'seconds':>8} {'pkt/s':>10} {'peak MiB':>9} {'tree MiB':>9}")
        for name, r in results.items():
            runs = f"  runs {r['runs_s']}" if "runs_s" in r else ""
            print(f"{name:18} {r['packets']:>10,} {r['seconds']:>8.2f} {r['packets_per_s']:>10,.0f} "
                  f"{r['peak_rss_mib']:>9.0f} {r['tree_rss_mib']:>9.0f}{runs}")
        for key in ("speed_ratio_vs_tshark", "speed_ratio_vs_tshark_split", "memory_ratio_vs_tshark",
                    "memory_growth_full_over_quarter"):
            if key in summary:
                print(f"{key}: {summary[key]:.2f}")
        (out_dir / "bench_pipeline.json").write_text(json.dumps(summary, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
