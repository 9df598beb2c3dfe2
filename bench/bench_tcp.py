"""Throughput of parsers.tcp.TcpAnalyzer on synthetic traffic.

Synthesises ~1M TCP segments as SegmentBatches: several long-lived connections
(handshake, small requests, bulk responses of MSS-sized segments with TCP timestamps,
delayed ACKs every two segments), interleaved in time, with a few losses upstream of
the capture point (a hole, dup ACKs with SACK, the retransmission later). Reports
segments/s for feed() + take_events() (+ ack_progress/prune as a pipeline would).

    .venv/bin/python bench/bench_tcp.py [--segments 1000000] [--conns 8] [--batch 65536]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parsers.records import ACK, FIN, PSH, SYN, SegmentBatch  # noqa: E402
from parsers.tcp import TcpAnalyzer  # noqa: E402

MSS = 1448
T0 = 1_700_000_000_000_000_000


def _conn_rows(ci: int, rounds: int, rng: np.random.Generator, loss_every: int) -> dict:
    """Rows of one connection as column lists (client = 10.0.0.x:40000+ci, server :50051)."""
    cols: dict[str, list] = {k: [] for k in ("ts", "dir", "seq", "ack", "flags", "len", "tsv",
                                             "tse", "sack", "win")}  # fmt: skip
    cisn, sisn = int(rng.integers(0, 2**32)), int(rng.integers(0, 2**32))
    t = int(rng.integers(0, 1_000_000))  # ns offset
    ms = lambda t: (t // 1_000_000) & 0xFFFFFFFF  # noqa: E731 - TSval clock in ms

    def add(d, seq, ack, fl, ln, tse=0, sack=None, dt=20_000):
        nonlocal t
        t += dt
        for k, v in zip(("ts", "dir", "seq", "ack", "flags", "len", "tsv", "tse", "sack", "win"),
                        (t, d, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, fl, ln, ms(t) + 1000 * d,
                         tse, sack, 8000), strict=True):  # fmt: skip
            cols[k].append(v)

    add(0, cisn, 0, SYN, 0)
    add(1, sisn, cisn + 1, SYN | ACK, 0)
    add(0, cisn + 1, sisn + 1, ACK, 0)
    cs, ss = cisn + 1, sisn + 1  # next seq of client / server
    sent_ack = ss
    pending_loss = None
    for r in range(rounds):
        if r % 64 == 0:  # a request: 300 bytes from the client
            add(0, cs, ss, ACK | PSH, 300, tse=ms(t) + 1000)
            cs += 300
        a, b = ss, ss + MSS
        lost = loss_every and r % loss_every == loss_every // 2
        if lost:
            pending_loss = (a, r)  # first segment lost before the capture point
        else:
            add(1, a, cs, ACK, MSS, tse=ms(t))
        add(1, b, cs, ACK | PSH, MSS, tse=ms(t))
        ss += 2 * MSS
        if pending_loss is not None:
            la, lr = pending_loss
            if r == lr:  # receiver SACKs the data above the hole
                add(0, cs, la, ACK, 0, tse=ms(t) + 1000, sack=[(b, ss)])
                continue
            if r == lr + 1:
                add(0, cs, la, ACK, 0, tse=ms(t) + 1000, sack=[(la + MSS, ss)])
                add(0, cs, la, ACK, 0, tse=ms(t) + 1000, sack=[(la + MSS, ss)], dt=5_000)
                add(1, la, cs, ACK, MSS, tse=ms(t), dt=300_000)  # the retransmission
                pending_loss = None
                add(0, cs, ss, ACK, 0, tse=ms(t) + 1000)
                sent_ack = ss
                continue
        add(0, cs, ss, ACK, 0, tse=ms(t) + 1000, dt=40_000)
        sent_ack = ss
    del sent_ack
    return cols


def synth(n_segments: int, n_conns: int, seed: int = 7) -> SegmentBatch:
    rng = np.random.default_rng(seed)
    rows_per_round = 3.05
    rounds = int(n_segments / n_conns / rows_per_round)
    parts = []
    for ci in range(n_conns):
        c = _conn_rows(ci, rounds, rng, loss_every=5000)
        n = len(c["ts"])
        d = np.array(c["dir"], dtype=np.int64)
        cli = (0xFFFF << 32) | (10 << 24) | (1 + ci)
        srv = (0xFFFF << 32) | (10 << 24) | (200 << 8) | 1
        parts.append(
            {
                "ts": np.array(c["ts"], dtype=np.int64) + T0,
                "src_lo": np.where(d == 0, cli, srv).astype(np.uint64),
                "dst_lo": np.where(d == 0, srv, cli).astype(np.uint64),
                "sport": np.where(d == 0, 40000 + ci, 50051).astype(np.uint16),
                "dport": np.where(d == 0, 50051, 40000 + ci).astype(np.uint16),
                "seq": np.array(c["seq"], dtype=np.uint32),
                "ack": np.array(c["ack"], dtype=np.uint32),
                "flags": np.array(c["flags"], dtype=np.uint8),
                "len": np.array(c["len"], dtype=np.int32),
                "tsv": np.array(c["tsv"], dtype=np.uint32),
                "tse": np.array(c["tse"], dtype=np.uint32),
                "win": np.array(c["win"], dtype=np.uint16),
                "sack": c["sack"],
                "n": n,
            }
        )
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k not in ("sack", "n")}
    sacks = [s for p in parts for s in p["sack"]]
    order = np.argsort(cat["ts"], kind="stable")
    cat = {k: v[order] for k, v in cat.items()}
    sacks = [sacks[i] for i in order.tolist()]
    n = len(order)
    payload = rng.integers(0, 256, size=64 * 1024, dtype=np.uint8)
    plen = cat["len"]
    off = (np.arange(n, dtype=np.int64) * 977) % (len(payload) - MSS)
    sack = {i: s for i, s in enumerate(sacks) if s}
    return SegmentBatch(
        frame_no=np.arange(1, n + 1, dtype=np.int64),
        ts_ns=cat["ts"],
        ip_version=np.full(n, 4, dtype=np.uint8),
        src_hi=np.zeros(n, dtype=np.uint64),
        src_lo=cat["src_lo"],
        dst_hi=np.zeros(n, dtype=np.uint64),
        dst_lo=cat["dst_lo"],
        sport=cat["sport"],
        dport=cat["dport"],
        seq=cat["seq"],
        ack=cat["ack"],
        flags=cat["flags"],
        window=cat["win"],
        payload_off=off,
        payload_len=plen,
        payload_wire_len=plen.copy(),
        has_ts=np.ones(n, dtype=bool),
        ts_val=cat["tsv"],
        ts_ecr=cat["tse"],
        wscale=np.where(cat["flags"] & SYN, 7, -1).astype(np.int8),
        mss=np.where(cat["flags"] & SYN, 1460, -1).astype(np.int32),
        ip_id=(np.arange(n) & 0xFFFF).astype(np.int32),
        buf=payload,
        sack=sack,
    )


# one short connection: (direction, seq offset, ack offset, flags, payload length)
_SHORT = [
    (0, -1, 0, SYN, 0), (1, -1, 0, SYN | ACK, 0), (0, 0, 0, ACK, 0),
    (0, 0, 0, ACK | PSH, 300), (1, 0, 300, ACK, 1448), (1, 1448, 300, ACK, 1448),
    (0, 300, 2896, ACK, 0), (1, 2896, 300, ACK | PSH, 800), (0, 300, 3696, ACK, 0),
    (0, 300, 3696, ACK | FIN, 0), (1, 3696, 301, ACK | FIN, 0), (0, 301, 3697, ACK, 0),
]  # fmt: skip


def synth_short(n_conns: int, seed: int = 11) -> SegmentBatch:
    """Many short connections (handshake, request, 3 response segments, close), overlapping."""
    rng = np.random.default_rng(seed)
    k = len(_SHORT)
    pat = np.array(_SHORT, dtype=np.int64)
    d = np.tile(pat[:, 0], n_conns)
    ci = np.repeat(np.arange(n_conns), k)
    start = np.repeat(rng.integers(0, n_conns * 20_000, n_conns), k)  # ~50k new conns/s
    ts = T0 + start + np.tile(np.arange(k) * 150_000, n_conns)
    isn = rng.integers(0, 2**32, size=(n_conns, 2))
    my_isn = np.where(d == 0, isn[ci, 0], isn[ci, 1])
    peer_isn = np.where(d == 0, isn[ci, 1], isn[ci, 0])
    seq = (my_isn + 1 + np.tile(pat[:, 1], n_conns)) & 0xFFFFFFFF
    ack = (peer_isn + 1 + np.tile(pat[:, 2], n_conns)) & 0xFFFFFFFF
    flags = np.tile(pat[:, 3], n_conns)
    ln = np.tile(pat[:, 4], n_conns)
    cli = (0xFFFF << 32) | (10 << 24) | (1 + ci // 60000)
    srv = (0xFFFF << 32) | (10 << 24) | (200 << 8) | 1
    cport = 1024 + ci % 60000
    order = np.argsort(ts, kind="stable")
    n = len(order)
    payload = rng.integers(0, 256, size=64 * 1024, dtype=np.uint8)
    col = lambda a, t: np.asarray(a)[order].astype(t)  # noqa: E731
    return SegmentBatch(
        frame_no=np.arange(1, n + 1, dtype=np.int64),
        ts_ns=col(ts, np.int64),
        ip_version=np.full(n, 4, dtype=np.uint8),
        src_hi=np.zeros(n, dtype=np.uint64),
        src_lo=col(np.where(d == 0, cli, srv), np.uint64),
        dst_hi=np.zeros(n, dtype=np.uint64),
        dst_lo=col(np.where(d == 0, srv, cli), np.uint64),
        sport=col(np.where(d == 0, cport, 443), np.uint16),
        dport=col(np.where(d == 0, 443, cport), np.uint16),
        seq=col(seq, np.uint32),
        ack=col(np.where(flags & ACK, ack, 0), np.uint32),
        flags=col(flags, np.uint8),
        window=np.full(n, 8000, dtype=np.uint16),
        payload_off=(np.arange(n, dtype=np.int64) * 977) % (len(payload) - MSS),
        payload_len=col(ln, np.int32),
        payload_wire_len=col(ln, np.int32),
        has_ts=np.zeros(n, dtype=bool),
        ts_val=np.zeros(n, dtype=np.uint32),
        ts_ecr=np.zeros(n, dtype=np.uint32),
        wscale=col(np.where(flags & SYN, 7, -1), np.int8),
        mss=col(np.where(flags & SYN, 1460, -1), np.int32),
        ip_id=(np.arange(n) & 0xFFFF).astype(np.int32),
        buf=payload,
    )


def split(b: SegmentBatch, size: int) -> list[SegmentBatch]:
    out = []
    names = [f for f in SegmentBatch.__dataclass_fields__ if f not in ("buf", "sack")]
    for a in range(0, len(b), size):
        z = min(a + size, len(b))
        cols = {k: getattr(b, k)[a:z] for k in names}
        sack = {i - a: v for i, v in b.sack.items() if a <= i < z}
        out.append(SegmentBatch(**cols, buf=b.buf, sack=sack))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=1_000_000)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--batch", type=int, default=65536)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--short", action="store_true",
                    help="many short connections (--conns of them) instead of long-lived ones")  # fmt: skip
    args = ap.parse_args()
    t = time.perf_counter()
    b = synth_short(args.conns) if args.short else synth(args.segments, args.conns)
    batches = split(b, args.batch)
    print(f"synthesised {len(b):,} segments ({int(b.payload_len.sum()) / 1e9:.2f} GB payload, "
          f"{args.conns} connections) in {time.perf_counter() - t:.1f} s")  # fmt: skip
    best = None
    for _ in range(args.repeat):
        an = TcpAnalyzer()
        n_chunks = n_ev = n_rtt = n_closed = 0
        c0 = time.process_time()
        t0 = time.perf_counter()
        for bb in batches:
            n_chunks += len(an.feed(bb))
            ev, rt = an.take_events()
            n_ev += len(ev)
            n_rtt += len(rt)
            for ck in list(an._by_key):
                for d in (0, 1):
                    ts, off = an.ack_progress(ck, d)
                    if len(off):
                        an.prune_acks(ck, d, int(off[-1]))
            n_closed += len(an.take_closed(idle_ns=10_000_000_000))
        sums = an.finish()
        n_closed += len(sums)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        best = wall if best is None else min(best, wall)
        print(f"wall {wall:.2f} s, cpu {cpu:.2f} s: {len(b) / wall:,.0f} segments/s wall, "
              f"{len(b) / cpu:,.0f} segments/s cpu; chunks {n_chunks:,}, events {n_ev:,}, "
              f"rtt samples {n_rtt:,}, connections {n_closed:,}, stats {an.stats}")  # fmt: skip
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"best {len(b) / best:,.0f} segments/s; max RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
