"""Write a large synthetic capture of gRPC server-streaming (LLM-like) traffic.

Each connection: TCP handshake (MSS, window scale, timestamps), HTTP/2 preface and SETTINGS,
then requests one after another on odd stream ids: client HEADERS + a request message with
END_STREAM, server HEADERS, one DATA frame per token (one packet each), trailers with
grpc-status 0; the client ACKs every second server packet. Connections are interleaved
in time. Packets are Ethernet/IPv4/TCP; the file is pcap with nanosecond timestamps.

Usage: python bench/gen_grpc_capture.py OUT.pcap --packets 1000000 [--connections 8]
"""

from __future__ import annotations

import argparse
import heapq
import struct
from collections.abc import Iterator

import hpack

SERVER_PORT = 50051
MSS = 1448
T0 = 1_760_000_000_000_000_000


def _frame(ftype: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def _grpc(msg: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(msg)) + msg


class _Tcp:
    """One direction's sequence/ack state and packet builder."""

    def __init__(self, src: bytes, dst: bytes, sport: int, dport: int, isn: int) -> None:
        self.src, self.dst, self.sport, self.dport = src, dst, sport, dport
        self.seq = isn
        self.ip_id = 1

    def packet(self, ack: int, flags: int, payload: bytes, ts_val: int, ts_ecr: int) -> bytes:
        opts = b"\x01\x01\x08\x0a" + struct.pack(">II", ts_val & 0xFFFFFFFF, ts_ecr & 0xFFFFFFFF)
        tcp = struct.pack(
            ">HHIIBBHHH", self.sport, self.dport, self.seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
            (5 + len(opts) // 4) << 4, flags, 512, 0, 0,
        ) + opts
        total = 20 + len(tcp) + len(payload)
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, self.ip_id & 0xFFFF, 0x4000, 64, 6, 0, self.src, self.dst)
        self.ip_id += 1
        self.seq += len(payload) + (1 if flags & 0x03 else 0)  # SYN/FIN take one
        return b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + ip + tcp + payload


def connection(index: int, start_ns: int, tokens: int, token_gap_ns: int, rtt_ns: int) -> Iterator[tuple[int, bytes]]:
    """Packets (ts, frame) of one connection, forever (the caller stops it)."""
    cli = _Tcp(bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]), 40000 + index, SERVER_PORT, 1000 + index * 7919)
    srv = _Tcp(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), SERVER_PORT, 40000 + index, 2_000_000 + index * 104729)
    enc_c, enc_s = hpack.Encoder(), hpack.Encoder()
    t = start_ns
    half = rtt_ns // 2

    def ts_opt(now: int) -> int:
        return now // 1_000_000

    yield t, cli.packet(0, 0x02, b"", ts_opt(t), 0)
    t += half
    yield t, srv.packet(cli.seq, 0x12, b"", ts_opt(t), ts_opt(t))
    t += half
    yield t, cli.packet(srv.seq, 0x10, b"", ts_opt(t), ts_opt(t))
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b"")
    yield t, cli.packet(srv.seq, 0x18, preface, ts_opt(t), ts_opt(t))
    t += half
    yield t, srv.packet(cli.seq, 0x18, _frame(4, 0, 0, b"") + _frame(4, 1, 0, b""), ts_opt(t), ts_opt(t))
    stream = 1
    while True:
        t += 2 * rtt_ns
        headers = enc_c.encode([
            (":method", "POST"), (":scheme", "http"), (":path", "/tailtap.bench.LLM/Generate"),
            (":authority", "bench:50051"), ("content-type", "application/grpc"), ("te", "trailers"),
        ])
        req = _frame(1, 0x04, stream, headers) + _frame(0, 0x01, stream, _grpc(b"p" * 64))
        yield t, cli.packet(srv.seq, 0x18, req, ts_opt(t), ts_opt(t))
        t += 30_000
        yield t, srv.packet(cli.seq, 0x10, b"", ts_opt(t), ts_opt(t))
        t += 20 * 1_000_000  # prefill
        resp = enc_s.encode([(":status", "200"), ("content-type", "application/grpc")])
        yield t, srv.packet(cli.seq, 0x18, _frame(1, 0x04, stream, resp), ts_opt(t), ts_opt(t))
        unacked = 1
        for k in range(tokens):
            t += token_gap_ns
            yield t, srv.packet(cli.seq, 0x18, _frame(0, 0, stream, _grpc(b"tok%05d-" % k + b"x" * 24)), ts_opt(t), ts_opt(t))
            unacked += 1
            if unacked >= 2:
                yield t + half, cli.packet(srv.seq, 0x10, b"", ts_opt(t + half), ts_opt(t))
                unacked = 0
        t += token_gap_ns
        trailers = enc_s.encode([("grpc-status", "0"), ("grpc-message", "")])
        yield t, srv.packet(cli.seq, 0x18, _frame(1, 0x05, stream, trailers), ts_opt(t), ts_opt(t))
        yield t + half, cli.packet(srv.seq, 0x10, b"", ts_opt(t + half), ts_opt(t))
        stream += 2


def write_capture(path: str, packets: int, connections: int = 8, tokens: int = 60) -> int:
    gens = [connection(i, T0 + i * 3_000_000, tokens, 15_000_000, 400_000) for i in range(connections)]
    written = 0
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))  # ns pcap, Ethernet
        out = []
        for ts, frame in heapq.merge(*gens, key=lambda p: p[0]):
            out.append(struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000, len(frame), len(frame)))
            out.append(frame)
            written += 1
            if len(out) >= 20000:
                fh.write(b"".join(out))
                out.clear()
            if written >= packets:
                break
        fh.write(b"".join(out))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=60)
    args = ap.parse_args()
    n = write_capture(args.out, args.packets, args.connections, args.tokens)
    print(f"wrote {n} packets to {args.out}")


if __name__ == "__main__":
    main()
