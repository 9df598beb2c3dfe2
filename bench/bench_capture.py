"""Micro benchmark of parsers.capture: CaptureDecoder and decode_segments.

Builds an in-memory capture of TCP segments shaped like gRPC streaming traffic (many
pure ACKs and small token-sized messages, some full-size segments; every data segment
carries the usual NOP,NOP,timestamps options, a few SYNs and SACKs), then reports
packets/s of the container decoder (fed in 1 MiB chunks, as the pipeline reads a
file), of decode_segments, and of both together.

    .venv/bin/python bench/bench_capture.py [--packets 1000000] [--format pcap|pcapng|both]
"""

from __future__ import annotations

import argparse
import random
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parsers.capture import CaptureDecoder, decode_segments  # noqa: E402
from parsers.records import DecodeStats, PacketBatch  # noqa: E402

T0 = 1_700_000_000_000_000_000


def _frame(i: int, payload_len: int, rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.001:  # SYN with the full Linux option set
        options = (
            b"\x02\x04\x05\xb4\x04\x02\x08\x0a" + struct.pack("!II", i + 1, 0) + b"\x01\x03\x03\x07"
        )
        flags, payload_len = 0x02, 0
    elif kind < 0.011:  # dup ACK with timestamps and two SACK blocks
        options = b"\x01\x01\x08\x0a" + struct.pack("!II", i + 1, i)
        options += b"\x01\x01\x05\x12" + struct.pack("!IIII", 1000, 2000, 3000, 4000)
        flags, payload_len = 0x10, 0
    else:
        options = b"\x01\x01\x08\x0a" + struct.pack("!II", i + 1, i)
        flags = 0x18 if payload_len else 0x10
    doff = (20 + len(options)) // 4
    sport = 40000 + i % 64
    tcp = struct.pack(
        "!HHIIBBHHH", sport, 50051, (i * 1000) & 0xFFFFFFFF, i * 7, doff << 4, flags, 501, 0, 0
    )
    ip_len = 20 + len(tcp) + len(options) + payload_len
    ip = struct.pack("!BBHHHBBHII", 0x45, 0, ip_len, i & 0xFFFF, 0x4000, 64, 6, 0,
                     0x0A000001, 0x0A000002 + i % 16)  # fmt: skip
    eth = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00"
    return eth + ip + tcp + options + bytes(payload_len)


def build(n: int, fmt: str) -> bytes:
    rng = random.Random(7)
    sizes = rng.choices([0, 120, 1448], weights=[60, 35, 5], k=n)
    parts: list[bytes] = []
    if fmt == "pcap":
        parts.append(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
    else:
        shb_body = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
        parts.append(struct.pack("<II", 0x0A0D0D0A, 28) + shb_body + struct.pack("<I", 28))
        parts.append(struct.pack("<IIHHII", 1, 20, 1, 0, 0, 20))
    for i, size in enumerate(sizes):
        frame = _frame(i, size, rng)
        ts = T0 + i * 20_000
        if fmt == "pcap":
            sec, us = divmod(ts // 1000, 1_000_000)
            parts.append(struct.pack("<IIII", sec, us, len(frame), len(frame)))
            parts.append(frame)
        else:
            pad = -len(frame) % 4
            total = 32 + len(frame) + pad
            units = ts // 1000
            parts.append(struct.pack("<IIIIIII", 6, total, 0, units >> 32, units & 0xFFFFFFFF,
                                     len(frame), len(frame)))  # fmt: skip
            parts.append(frame + bytes(pad) + struct.pack("<I", total))
    return b"".join(parts)


def run_container(data: bytes, chunk: int) -> tuple[float, list[PacketBatch]]:
    t = time.perf_counter()
    dec = CaptureDecoder()
    batches: list[PacketBatch] = []
    view = memoryview(data)
    for i in range(0, len(data), chunk):
        batches += dec.feed(view[i : i + chunk])
    batches += dec.close()
    return time.perf_counter() - t, batches


def run_segments(batches: list[PacketBatch]) -> tuple[float, int]:
    stats = DecodeStats()
    issues: list = []
    t = time.perf_counter()
    n = sum(len(decode_segments(b, stats, issues)) for b in batches)
    return time.perf_counter() - t, n


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--format", choices=["pcap", "pcapng", "both"], default="both")
    ap.add_argument("--chunk", type=int, default=1 << 20, help="feed() size in bytes")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for fmt in ["pcap", "pcapng"] if args.format == "both" else [args.format]:
        t = time.perf_counter()
        data = build(args.packets, fmt)
        print(f"{fmt}: built {args.packets:,} packets, {len(data) / 2**20:.0f} MiB "
              f"in {time.perf_counter() - t:.1f} s")  # fmt: skip
        cont, segs, both = [], [], []
        for _ in range(args.repeat):
            tc, batches = run_container(data, args.chunk)
            ts, nseg = run_segments(batches)
            assert sum(len(b) for b in batches) == args.packets and nseg == args.packets
            del batches
            cont.append(args.packets / tc)
            segs.append(args.packets / ts)
            both.append(args.packets / (tc + ts))
        for name, rates in [("CaptureDecoder", cont), ("decode_segments", segs),
                            ("both", both)]:  # fmt: skip
            print(f"  {name:16s} best {max(rates) / 1e6:5.2f} M pkt/s   "
                  f"median {statistics.median(rates) / 1e6:5.2f} M pkt/s")  # fmt: skip
        mib = len(data) / 2**20
        print(f"  container throughput (best) {mib * max(cont) / args.packets:.0f} MiB/s")


if __name__ == "__main__":
    main()
