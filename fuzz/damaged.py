"""`tailtap analyze` over damaged copies of real captures, as a user would run it.

The fuzz targets (fuzz/targets.py) feed the parsers; this feeds the whole command: the
ingest, its tables, the models and the report. Each copy of a classic pcap has one kind
of damage a capture can have (``KINDS``: packets dropped, duplicated, reordered, stamped
with a time that jumped or with 0, bytes flipped in the payload or the headers, packets
cut by the snaplen, the file cut short or holding its packets twice). A copy fails when
`analyze` exits with anything but 0 or 1 (1: nothing could be read, said in one line), prints a
traceback, outgrows ``LIMIT_BYTES`` of address space or ``TIMEOUT_S`` (the first copy
with packets stamped 1970 grew past 18 GB before this bound was there).

Usage: python -m fuzz.damaged OUT.md [--copies N] [--seed S] CAPTURE...
(`make damaged` runs it over the samples and the shared pcap captures).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LIMIT_BYTES = 4 << 30
TIMEOUT_S = 300
_MAGICS = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}
_HEADERS = 54  # Ethernet, IPv4 and TCP without options: bytes past this are payload

Packet = list  # [seconds, fraction, bytes, original length]


def read_pcap(data: bytes) -> tuple[str, bytes, list[Packet]]:
    order = _MAGICS.get(data[:4])
    if order is None:
        raise ValueError("not a classic pcap")
    packets, at = [], 24
    while at + 16 <= len(data):
        sec, frac, caplen, origlen = struct.unpack_from(order + "IIII", data, at)
        packets.append([sec, frac, data[at + 16 : at + 16 + caplen], origlen])
        at += 16 + caplen
    return order, data[:24], packets


def write_pcap(order: str, header: bytes, packets: list[Packet]) -> bytes:
    out = bytearray(header)
    for sec, frac, payload, origlen in packets:
        out += struct.pack(order + "IIII", sec & 0xFFFFFFFF, frac, len(payload), max(origlen, len(payload))) + payload
    return bytes(out)


def drop_one_in(n: int) -> Callable[[list[Packet], random.Random], list[Packet]]:
    """Packets taken out as a capture drops them one at a time: each with chance 1/n."""
    return lambda packets, rng: [p for p in packets if rng.random() >= 1 / n]


def drop_runs(count: int, length: int) -> Callable[[list[Packet], random.Random], list[Packet]]:
    """``count`` runs of ``length`` packets in a row taken out (a capture buffer that overflowed)."""
    def drop(packets: list[Packet], rng: random.Random) -> list[Packet]:
        out = list(packets)
        for _ in range(count):
            at = rng.randrange(max(1, len(out) - length))
            del out[at : at + length]
        return out

    return drop


def _drop(p: list[Packet], rng: random.Random) -> list[Packet]:
    return [x for x in p if rng.random() > 0.05]


def _duplicate(p: list[Packet], rng: random.Random) -> list[Packet]:
    return [y for x in p for y in ([x, list(x)] if rng.random() < 0.05 else [x])]


def _reorder(p: list[Packet], rng: random.Random) -> list[Packet]:
    out = list(p)
    for _ in range(max(1, len(p) // 50)):
        a = rng.randrange(len(p))
        b = min(len(p) - 1, a + rng.randrange(1, 20))
        out[a], out[b] = out[b], out[a]
    return out


def _time_jump(p: list[Packet], rng: random.Random) -> list[Packet]:
    out = [list(x) for x in p]
    a = rng.randrange(len(p))
    jump = rng.choice((-3600, -1, 5, 365 * 86400, -100_000))
    for x in out[a : a + rng.randrange(1, max(2, len(p) // 3))]:
        x[0] = max(0, x[0] + jump)
    return out


def _stamped_zero(p: list[Packet], rng: random.Random) -> list[Packet]:
    return [[0, 0, x[2], x[3]] if rng.random() < 0.03 else x for x in p]


def _flip_payload(p: list[Packet], rng: random.Random) -> list[Packet]:
    out = []
    for x in p:
        if rng.random() < 0.05 and len(x[2]) > _HEADERS:
            b = bytearray(x[2])
            b[rng.randrange(_HEADERS, len(b))] ^= 1 << rng.randrange(8)
            x = [x[0], x[1], bytes(b), x[3]]
        out.append(x)
    return out


def _flip_headers(p: list[Packet], rng: random.Random) -> list[Packet]:
    out = []
    for x in p:
        if rng.random() < 0.02 and len(x[2]) > 20:
            b = bytearray(x[2])
            b[rng.randrange(12, min(_HEADERS, len(b)))] = rng.randrange(256)
            x = [x[0], x[1], bytes(b), x[3]]
        out.append(x)
    return out


def _snaplen(p: list[Packet], rng: random.Random) -> list[Packet]:
    return [[x[0], x[1], x[2][: rng.randrange(14, max(15, len(x[2])))], max(x[3], len(x[2]))]
            if rng.random() < 0.1 else x for x in p]


def _doubled(p: list[Packet], rng: random.Random) -> list[Packet]:  # a second capture point
    return p + [[x[0], (x[1] + 500) % 1_000_000, x[2], x[3]] for x in p]


KINDS: dict[str, Callable[[list[Packet], random.Random], list[Packet]]] = {
    "drop": _drop, "duplicate": _duplicate, "reorder": _reorder, "time_jump": _time_jump,
    "stamped_zero": _stamped_zero, "flip_payload": _flip_payload, "flip_headers": _flip_headers,
    "snaplen": _snaplen, "doubled": _doubled, "cut_short": lambda p, rng: p,  # (cut in bytes below)
}


def damage(data: bytes, kind: str, rng: random.Random) -> bytes:
    order, header, packets = read_pcap(data)
    out = write_pcap(order, header, KINDS[kind](packets, rng))
    if kind == "cut_short":  # mid-record, somewhere
        out = out[: rng.randrange(24, len(out))]
    return out


@dataclass
class Run:
    capture: str
    kind: str
    code: int
    traceback: bool
    seconds: float
    peak_mib: float
    said: str  # analyze's first lines on stderr

    @property
    def failed(self) -> bool:
        return self.code not in (0, 1) or self.traceback


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def analyze(capture: Path, store: Path) -> tuple[int, str, float, float]:
    """`tailtap analyze` in a bounded child: exit code, stderr, seconds, its peak RSS (MiB)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "telemetry", "analyze", str(capture), "--out", str(store)],
            stdout=subprocess.DEVNULL, stderr=err, text=True, preexec_fn=_bounded,
        )
        timer = threading.Timer(TIMEOUT_S, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # (its own rusage: the peak of this child alone)
        timer.cancel()
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        err.seek(0)
        said = err.read()
    if code == -9:
        said = f"killed after {TIMEOUT_S} s\n{said}"
    return code, said, time.perf_counter() - started, usage.ru_maxrss / 1024


def run(captures: list[Path], copies: int, seed: int) -> list[Run]:
    rng = random.Random(seed)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        for capture in captures:
            data = capture.read_bytes()
            if data[:4] not in _MAGICS:
                continue
            for kind in KINDS:
                for copy in range(copies):
                    damaged = Path(tmp) / f"{capture.parent.name}-{capture.stem}-{kind}-{copy}.pcap"
                    damaged.write_bytes(damage(data, kind, rng))
                    store = Path(tmp) / "store"
                    code, err, seconds, peak = analyze(damaged, store)
                    said = " ".join(line for line in err.splitlines()[:3] if not line.startswith(" "))
                    runs.append(Run(f"{capture.parent.name}/{capture.name}", kind, code, "Traceback" in err,
                                    seconds, peak, said[:300]))
                    damaged.unlink()
                    shutil.rmtree(store, ignore_errors=True)
    return runs


def report(runs: list[Run], seed: int) -> str:
    failed = [r for r in runs if r.failed]
    kinds = sorted({r.kind for r in runs})
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                         cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    lines = [
        f"# `tailtap analyze` over damaged captures ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, code of {rev})",
        "",
        f"{len(runs)} damaged copies of {len({r.capture for r in runs})} captures (seed {seed}), "
        f"{len(failed)} failed (an exit code other than 0 or 1, or a traceback); each run bounded at "
        f"{LIMIT_BYTES >> 30} GiB of address space and {TIMEOUT_S} s. Largest peak: "
        f"{max((r.peak_mib for r in runs), default=0):.0f} MiB; longest run: {max((r.seconds for r in runs), default=0):.1f} s.",
        "",
        "| damage | copies | exit 0 | exit 1 | failed | longest s |",
        "|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        of = [r for r in runs if r.kind == kind]
        lines.append(f"| {kind} | {len(of)} | {sum(r.code == 0 for r in of)} | {sum(r.code == 1 for r in of)} | "
                     f"{sum(r.failed for r in of)} | {max(r.seconds for r in of):.1f} |")
    if failed:
        lines += ["", "Failed:", ""] + [f"- {r.capture} {r.kind}: exit {r.code}: {r.said}" for r in failed]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the markdown report to write")
    ap.add_argument("captures", nargs="+", type=Path, help="classic pcap files (others are skipped)")
    ap.add_argument("--copies", type=int, default=2, help="damaged copies per capture and kind")
    ap.add_argument("--seed", type=int, default=55)
    args = ap.parse_args()
    runs = run(args.captures, args.copies, args.seed)
    text = report(runs, args.seed)
    Path(args.out).write_text(text)
    sys.stdout.write(text)
    return 1 if any(r.failed for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
