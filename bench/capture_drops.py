"""Does a capture that dropped packets get the verdict of the complete one?

Each capture is analyzed as it is and with packets taken out of the file as a capture
drops them (``DROPS``: one at a time, or runs of 50 when its buffer overflows), with
`tailtap analyze` as a user runs it. A copy keeps the verdict when it names the same
causes for its spikes (the cause behind most slow requests of each spike window) as the
complete capture, or is calm when that one is. The causes of the windows are compared as
a set, not window by window: a drop moves a spike's edges.

Usage: python bench/capture_drops.py OUT.md [--tree DIR] CAPTURE...
(``--tree``: the tailtap sources to run, for a comparison with another version; a
pcapng is cut as the classic pcap Wireshark's editcap makes of it; `make capture-drops`
runs it over the samples and the lab sweep's samples.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fuzz.damaged import drop_one_in, drop_runs, read_pcap, write_pcap  # noqa: E402

DROPS = {"1 in 200": drop_one_in(200), "1 in 50": drop_one_in(50), "5 runs of 50": drop_runs(5, 50)}


def _classic(capture: Path) -> bytes:
    """The capture as a classic pcap (a pcapng converted by Wireshark's editcap)."""
    data = capture.read_bytes()
    if data[:4] != b"\x0a\x0d\x0d\x0a":
        return data
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "classic.pcap"
        subprocess.run(["editcap", "-F", "nsecpcap", str(capture), str(out)], check=True, capture_output=True)
        return out.read_bytes()


def verdict(capture: Path, tree: Path, work: Path, keylog: Path | None) -> tuple[str, frozenset[str]]:
    """The verdict of `tailtap analyze` (from ``tree``) on ``capture`` and its spikes' causes."""
    args = [sys.executable, "-m", "telemetry", "analyze", str(capture), "--out", str(work / "store"), "--format", "json"]
    if keylog:
        args += ["--keylog", str(keylog)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tree, env=env)
    if run.returncode != 0:
        return f"exit {run.returncode}", frozenset()
    text = json.loads(run.stdout)["report_verdict"]
    return text, frozenset(re.findall(r"\d\d:\d\d:\d\d: ([a-z_]+(?: \([a-z_0-9]+\))?)", text))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("captures", nargs="+", type=Path)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    rev = subprocess.run(["git", "-C", str(a.tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows, kept, total = [], 0, 0
    for capture in a.captures:
        name = f"{capture.parent.parent.name}/{capture.parent.name}" if capture.parent.parent.name == "sweep" else capture.parent.name
        keylog = capture.parent / "keys.txt" if (capture.parent / "keys.txt").exists() else None
        try:
            order, header, packets = read_pcap(_classic(capture))
        except (ValueError, OSError, subprocess.CalledProcessError) as exc:
            print(f"{capture}: left out ({exc})", flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            full_text, full = verdict(capture, a.tree, Path(tmp), keylog)
        cells = []
        for drop in DROPS.values():
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp) / "dropped.pcap"
                copy.write_bytes(write_pcap(order, header, drop(packets, random.Random(a.seed))))
                text, causes = verdict(copy, a.tree, Path(tmp), keylog)
            same = causes == full and (not full) == text.startswith("no p99 spike")
            kept += same
            total += 1
            cells.append("same" if same else "**" + (", ".join(sorted(causes)) or text.split(":")[0]) + "**")
        rows.append(f"| {name} | {', '.join(sorted(full)) or full_text.split(':')[0]} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    lines = [
        f"# Verdicts of captures that dropped packets ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, code of {rev})",
        "",
        f"{kept} of {total} copies keep the complete capture's verdict (the causes of its spikes, or calm). "
        f"Packets taken out of the file with seed {a.seed}; a cell names the causes a copy gave instead.",
        "",
        "| capture | complete capture | " + " | ".join(DROPS) + " |",
        "|---|---|" + "---|" * len(DROPS),
        *rows,
        "",
    ]
    a.out.write_text("\n".join(lines))
    print(f"{kept} of {total} keep the verdict -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
