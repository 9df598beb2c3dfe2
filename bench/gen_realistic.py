"""Write a realistic synthetic capture of gRPC inference traffic, as a server-side mirror
port would see it (the ideal capture of bench/gen_grpc_capture.py is the best case; this is
what users have).

Each TCP connection is simulated event by event (its own clock, merged with the others in
time order):

* hundreds of connections from a few dozen client hosts (one RTT floor each, log-uniform
  from 0.2 to 40 ms) to one server (10.0.0.1:50051); some open before the capture starts
  (no handshake, no preface, HPACK context missing) and most are still open at its end;
* per connection, Poisson request arrivals with several streams in flight at once: unary
  ``/tailtap.lab.LLM/Embed`` (~10 ms, 1-16 KB answer) and streaming
  ``/tailtap.lab.LLM/Generate`` (prefill 50-250 ms, then one gRPC message per token every
  15-30 ms), a few calls failing with a grpc-status;
* the server writes each frame as it is produced; writes within 0.3 ms go out together, so
  frames of concurrent streams share segments and large messages are split over several
  MSS-sized segments (frames split across segments);
* the client ACKs every second segment or after 40 ms (delayed ACK), at once and with SACK
  blocks when a segment is missing; 0.5 % of the server's segments are lost after the
  capture point and recovered by fast retransmit (three duplicate ACKs) or by RTO; 0.2 %
  arrive late at the client (reordering downstream: duplicate ACKs, then a jump);
* TCP timestamps on every segment; Ethernet/IPv4; pcap with nanosecond timestamps.

A JSON sidecar (OUT.json) gives what was generated: connections, requests per method,
messages, retransmissions, lost and reordered segments, the time span.

Usage: python bench/gen_realistic.py OUT.pcap --packets 1000000 [--connections 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import hpack

SERVER_IP = bytes([10, 0, 0, 1])
SERVER_PORT = 50051
MSS = 1448
MAX_FRAME = 16_384
T0 = 1_770_000_000_000_000_000  # capture start
MS = 1_000_000
EMBED, GENERATE = "/tailtap.lab.LLM/Embed", "/tailtap.lab.LLM/Generate"
_ETH = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00"
_ETH_REV = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00"


def _frame(ftype: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def _data_frames(stream: int, payload: bytes) -> bytes:
    """DATA frames of at most 16,384 bytes (SETTINGS_MAX_FRAME_SIZE's default): a larger
    one is a FRAME_SIZE_ERROR, and a decoder rightly loses frame sync on it."""
    return b"".join(_frame(0, 0, stream, payload[i:i + MAX_FRAME]) for i in range(0, len(payload), MAX_FRAME))


def _grpc(msg: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(msg)) + msg


@dataclass
class Stats:
    connections: int = 0
    connections_mid_capture: int = 0
    requests: dict[str, int] = field(default_factory=lambda: {EMBED: 0, GENERATE: 0})
    errors: int = 0
    response_messages: int = 0
    lost_segments: int = 0
    reordered_segments: int = 0
    retransmissions: int = 0
    rto_retransmissions: int = 0


class _Dir:
    """One direction of a connection: addresses, sequence number, IP id, packet builder."""

    def __init__(self, src: bytes, dst: bytes, sport: int, dport: int, isn: int, eth: bytes) -> None:
        self.src, self.dst, self.sport, self.dport, self.eth = src, dst, sport, dport, eth
        self.seq = isn
        self.ip_id = (isn >> 8) & 0xFFFF

    def packet(self, seq: int, ack: int, flags: int, payload: bytes, ts_val: int, ts_ecr: int,
               sack: list[tuple[int, int]] | None = None) -> bytes:
        opts = b"\x01\x01\x08\x0a" + struct.pack(">II", ts_val & 0xFFFFFFFF, ts_ecr & 0xFFFFFFFF)
        if flags & 0x02:  # SYN: MSS, SACK permitted, window scale 7
            opts = b"\x02\x04\x05\xb4\x04\x02" + opts[2:] + b"\x01\x03\x03\x07"
        if sack:
            blocks = sack[:3]
            opts += b"\x01\x01" + bytes([5, 2 + 8 * len(blocks)]) + b"".join(
                struct.pack(">II", a & 0xFFFFFFFF, b & 0xFFFFFFFF) for a, b in blocks)
        tcp = struct.pack(">HHIIBBHHH", self.sport, self.dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                          (5 + len(opts) // 4) << 4, flags, 2048, 0, 0) + opts
        total = 20 + len(tcp) + len(payload)
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, self.ip_id, 0x4000, 64, 6, 0, self.src, self.dst)
        self.ip_id = (self.ip_id + 1) & 0xFFFF
        return self.eth + ip + tcp + payload


class Connection:
    """Simulates one connection; :meth:`packets` yields (capture time, frame) in order."""

    def __init__(self, index: int, client_ip: bytes, rtt_ns: int, start_ns: int, rng: random.Random,
                 stats: Stats, rate: float, concurrency: int) -> None:
        self.rng, self.stats = rng, stats
        self.owd = rtt_ns // 2
        self.start = start_ns
        port = 20000 + index
        self.cli = _Dir(client_ip, SERVER_IP, port, SERVER_PORT, rng.getrandbits(31), _ETH)
        self.srv = _Dir(SERVER_IP, client_ip, SERVER_PORT, port, rng.getrandbits(31), _ETH_REV)
        self.enc_c, self.enc_s = hpack.Encoder(), hpack.Encoder()
        self.rate, self.concurrency = rate, concurrency
        self.events: list[tuple[int, int, str, object]] = []
        self._n = 0
        self.next_stream = 1
        self.in_flight = 0
        self.waiting = 0
        # server -> client data in flight: seq -> (length, payload, last send time, lost, retransmitted)
        self.segs: dict[int, list] = {}
        self.snd_una = self.srv.seq
        self.srv_rcv = self.cli.seq  # client bytes the server has (what its packets ACK)
        self.sendbuf = bytearray()
        self.flush_at: int | None = None
        self.dupacks = 0
        self.rto_at: int | None = None
        # client receive state
        self.rcv_nxt = self.srv.seq
        self.ooo: dict[int, int] = {}  # seq -> end of segments held out of order
        self.unacked = 0
        self.delack_at: int | None = None

    # -- events -------------------------------------------------------------------------
    def at(self, t: int, kind: str, data: object = None) -> None:
        self._n += 1
        heapq.heappush(self.events, (t, self._n, kind, data))

    def emit(self, t: int, frame: bytes, client_seq_end: int | None = None) -> None:
        """A packet passes the capture point (next to the server) at ``t``; a client one
        with data: the server has the client's bytes up to ``client_seq_end`` from then on."""
        self.at(t, "out", frame if client_seq_end is None else (frame, client_seq_end))

    @staticmethod
    def ts(t: int) -> int:
        return (t // MS) & 0xFFFFFFFF

    def packets(self) -> Iterator[tuple[int, bytes]]:
        t = self.start
        self.stats.connections += 1
        c, s = self.cli, self.srv
        if t >= T0:  # opened during the capture: handshake, preface, SETTINGS
            self.emit(t + self.owd, c.packet(c.seq, 0, 0x02, b"", self.ts(t), 0))
            c.seq += 1
            self.emit(t + self.owd, s.packet(s.seq, c.seq, 0x12, b"", self.ts(t + self.owd), self.ts(t)))
            s.seq += 1
            self.srv_rcv = c.seq
            self.snd_una = self.rcv_nxt = s.seq
            t += 2 * self.owd
            self.emit(t + self.owd, c.packet(c.seq, s.seq, 0x10, b"", self.ts(t), self.ts(t)))
            preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b"") + _frame(8, 0, 0, struct.pack(">I", 1 << 20))
            self.emit(t + self.owd, c.packet(c.seq, s.seq, 0x18, preface, self.ts(t), self.ts(t)), c.seq + len(preface))
            c.seq += len(preface)
            self.server_write(t + self.owd, _frame(4, 0, 0, b"") + _frame(4, 1, 0, b""))
        else:  # opened before the capture: HPACK tables already hold headers the capture never saw
            self.stats.connections_mid_capture += 1
            self.enc_c.encode([(":authority", "inference.internal:50051"), ("user-agent", "grpc-python/1.60")])
            self.enc_s.encode([("content-type", "application/grpc"), ("server", "tailtap-lab")])
        self.at(t + self._gap(), "request")
        handlers = {k: getattr(self, "_" + k) for k in (
            "request", "request_now", "client_segment", "delack", "ack_at_server", "server_ack", "embed", "token",
            "flush", "rto")}
        events = self.events
        while events:
            t, _n, kind, data = heapq.heappop(events)
            if kind == "out":
                if type(data) is tuple:
                    data, self.srv_rcv = data
                yield t, data  # type: ignore[misc]
            else:
                handlers[kind](t, data)

    def _gap(self) -> int:
        return int(self.rng.expovariate(self.rate) * 1e9)

    # -- client (event times are the client's; its packets pass the capture one-way later) ---
    def _request(self, t: int, _data: object) -> None:
        self.at(t + self._gap(), "request")
        if self.in_flight >= self.concurrency:
            self.waiting += 1
            return
        self._request_now(t, None)

    def _request_now(self, t: int, _data: object) -> None:
        self.in_flight += 1
        stream = self.next_stream
        self.next_stream += 2
        method = EMBED if self.rng.random() < 0.3 else GENERATE
        self.stats.requests[method] += 1
        headers = self.enc_c.encode([
            (":method", "POST"), (":scheme", "http"), (":path", method), (":authority", "inference.internal:50051"),
            ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", "grpc-python/1.60"),
        ])
        body = _grpc(b"{\"prompt\": \"" + b"w " * self.rng.randint(8, 1500) + b"\"}")
        payload = _frame(1, 0x04, stream, headers) + _frame(0, 0x01, stream, body)
        c = self.cli
        arrive = t + self.owd
        for i in range(0, len(payload), MSS):  # a long prompt takes several segments
            chunk = payload[i:i + MSS]
            self.emit(arrive, c.packet(c.seq, self.rcv_nxt, 0x18, chunk, self.ts(t), 0), c.seq + len(chunk))
            c.seq += len(chunk)
            arrive += 12_000
        self.at(arrive + 50_000, "server_ack")
        if method == EMBED:
            self.at(arrive + int(self.rng.uniform(6, 14) * MS), "embed", stream)
        else:
            self.at(arrive + int(self.rng.uniform(50, 250) * MS), "token",
                    (stream, 0, self.rng.randint(20, 120), self.rng.uniform(15, 30)))

    def _client_segment(self, t: int, data: object) -> None:
        """A server segment reaches the client."""
        seq, length = data  # type: ignore[misc]
        end = seq + length
        if end <= self.rcv_nxt:  # a duplicate (spurious retransmission): ACK at once
            self._client_ack(t, [])
            return
        if seq > self.rcv_nxt:  # a hole before it: duplicate ACK with SACK, at once
            self.ooo[seq] = max(self.ooo.get(seq, 0), end)
            self._client_ack(t, self._sack_blocks())
            return
        self.rcv_nxt = end
        moved = True
        while moved:
            moved = False
            for s in [q for q in self.ooo if q <= self.rcv_nxt]:
                self.rcv_nxt = max(self.rcv_nxt, self.ooo.pop(s))
                moved = True
        if self.ooo:
            self._client_ack(t, self._sack_blocks())
            return
        self.unacked += 1
        if self.unacked >= 2:
            self._client_ack(t, [])
        elif self.delack_at is None:
            self.delack_at = t + 40 * MS
            self.at(self.delack_at, "delack")

    def _delack(self, t: int, _data: object) -> None:
        if self.delack_at == t and self.unacked:
            self._client_ack(t, [])

    def _sack_blocks(self) -> list[tuple[int, int]]:
        blocks: list[tuple[int, int]] = []
        for s in sorted(self.ooo):
            e = self.ooo[s]
            if blocks and s <= blocks[-1][1]:
                blocks[-1] = (blocks[-1][0], max(blocks[-1][1], e))
            else:
                blocks.append((s, e))
        return blocks[::-1]

    def _client_ack(self, t: int, sack: list[tuple[int, int]]) -> None:
        self.unacked = 0
        self.delack_at = None
        c = self.cli
        self.emit(t + self.owd, c.packet(c.seq, self.rcv_nxt, 0x10, b"", self.ts(t), self.ts(t - self.owd), sack))
        self.at(t + self.owd, "ack_at_server", (self.rcv_nxt, bool(sack)))

    # -- server (event times are the capture point's) ----------------------------------------
    def _server_ack(self, t: int, _data: object) -> None:
        if not self.sendbuf and self.flush_at is None:
            s = self.srv
            self.emit(t, s.packet(s.seq, self.srv_rcv, 0x10, b"", self.ts(t), self.ts(t)))

    def _embed(self, t: int, stream: object) -> None:
        stream = int(stream)  # type: ignore[arg-type]
        if self.rng.random() < 0.01:
            self.stats.errors += 1
            block = self.enc_s.encode([(":status", "200"), ("content-type", "application/grpc"),
                                       ("grpc-status", "8"), ("grpc-message", "overloaded")])
            self.server_write(t, _frame(1, 0x05, stream, block))
        else:
            head = self.enc_s.encode([(":status", "200"), ("content-type", "application/grpc")])
            msg = _grpc(bytes(self.rng.randint(1024, 16384)))
            trailers = self.enc_s.encode([("grpc-status", "0")])
            self.stats.response_messages += 1
            self.server_write(t, _frame(1, 0x04, stream, head) + _data_frames(stream, msg) + _frame(1, 0x05, stream, trailers))
        self._done(t)

    def _token(self, t: int, data: object) -> None:
        stream, k, n, gap_ms = data  # type: ignore[misc]
        out = b""
        if k == 0:
            out += _frame(1, 0x04, stream, self.enc_s.encode([(":status", "200"), ("content-type", "application/grpc")]))
        out += _frame(0, 0, stream, _grpc(b'{"i":%d,"t":" tok%04d"}' % (k, k)))
        self.stats.response_messages += 1
        if k + 1 >= n:
            status = "0" if self.rng.random() > 0.005 else "13"
            self.stats.errors += status != "0"
            out += _frame(1, 0x05, stream, self.enc_s.encode([("grpc-status", status)]))
            self.server_write(t, out)
            self._done(t)
            return
        self.server_write(t, out)
        self.at(t + int(gap_ms * MS * self.rng.uniform(0.6, 1.4)), "token", (stream, k + 1, n, gap_ms))

    def _done(self, t: int) -> None:
        self.in_flight -= 1
        if self.waiting:  # a queued call goes out when the client sees this one end
            self.waiting -= 1
            self.at(t + self.owd, "request_now", "queued")

    def server_write(self, t: int, data: bytes) -> None:
        self.sendbuf += data
        if self.flush_at is None:
            self.flush_at = t + 300_000  # writes within 0.3 ms go out together
            self.at(self.flush_at, "flush")

    def _flush(self, t: int, _data: object) -> None:
        self.flush_at = None
        buf = bytes(self.sendbuf)
        self.sendbuf.clear()
        for i in range(0, len(buf), MSS):
            chunk = buf[i:i + MSS]
            self._send_segment(t, self.srv.seq, chunk, first=True)
            self.srv.seq += len(chunk)
            t += 12_000  # serialisation at ~1 Gbit/s

    def _send_segment(self, t: int, seq: int, payload: bytes, first: bool) -> None:
        self.emit(t, self.srv.packet(seq, self.srv_rcv, 0x18, payload, self.ts(t), self.ts(t)))
        r = self.rng.random()
        if first:
            self.segs[seq] = [len(payload), payload]
        if r < 0.005:  # lost after the capture point
            self.stats.lost_segments += 1
        else:
            late = 0
            if r > 0.998:  # held up after the capture point: later segments overtake it
                self.stats.reordered_segments += 1
                late = int(self.rng.uniform(1, 6) * MS)
            self.at(t + self.owd + late, "client_segment", (seq, len(payload)))
        if self.rto_at is None:
            self._arm_rto(t)

    def _arm_rto(self, t: int, backoff: int = 1) -> None:
        self.rto_at = t + backoff * max(200 * MS, 4 * self.owd + 200 * MS)
        self.at(self.rto_at, "rto", backoff)

    def _ack_at_server(self, t: int, data: object) -> None:
        ack, sacked = data  # type: ignore[misc]
        if ack > self.snd_una:
            for seq in [q for q, v in self.segs.items() if q + v[0] <= ack]:
                del self.segs[seq]
            self.snd_una = ack
            self.dupacks = 0
            self.rto_at = None
            if self.segs:
                self._arm_rto(t)
            return
        if sacked and ack == self.snd_una and ack in self.segs:
            self.dupacks += 1
            if self.dupacks == 3:  # fast retransmit of the hole
                self.stats.retransmissions += 1
                self._send_segment(t, ack, self.segs[ack][1], first=False)

    def _rto(self, t: int, backoff: object) -> None:
        if self.rto_at != t or not self.segs:
            return
        seq = min(self.segs)
        self.stats.retransmissions += 1
        self.stats.rto_retransmissions += 1
        self.rto_at = None
        self._send_segment(t, seq, self.segs[seq][1], first=False)
        self._arm_rto(t, min(2 * int(backoff), 64))  # type: ignore[call-overload]


def generate(path: str, packets: int, connections: int = 200, seed: int = 1) -> dict[str, object]:
    rng = random.Random(seed)
    stats = Stats()
    hosts = max(1, connections // 8)
    rtts = [int(math.exp(rng.uniform(math.log(0.2), math.log(40))) * MS) for _ in range(hosts)]
    gens = []
    for i in range(connections):
        host = i % hosts
        ip = bytes([10, 1, host // 250, host % 250 + 1])
        start = T0 - int(rng.uniform(0, 5) * 1e9) if rng.random() < 0.2 else T0 + int(rng.uniform(0, 2) * 1e9)
        conn = Connection(i, ip, rtts[host], start, random.Random(f"{seed}:{i}"), stats,
                          rate=rng.uniform(0.5, 3.0), concurrency=rng.randint(2, 6))
        gens.append(conn.packets())
    written = 0
    first = last = None
    rec = struct.Struct("<IIII")
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))  # ns pcap, Ethernet
        out: list[bytes] = []
        for ts, frame in heapq.merge(*gens, key=lambda p: p[0]):
            if ts < T0:
                continue  # before the capture started
            first = first if first is not None else ts
            last = ts
            out.append(rec.pack(ts // 1_000_000_000, ts % 1_000_000_000, len(frame), len(frame)))
            out.append(frame)
            written += 1
            if len(out) >= 40000:
                fh.write(b"".join(out))
                out.clear()
            if written >= packets:
                break
        fh.write(b"".join(out))
    summary = {
        "packets": written, "seed": seed, "connections": stats.connections,
        "connections_open_before_capture": stats.connections_mid_capture, "client_hosts": hosts,
        "rtt_floor_ms": [round(r / MS, 3) for r in rtts],
        "requests_started": stats.requests, "errors": stats.errors, "response_messages": stats.response_messages,
        "lost_segments": stats.lost_segments, "reordered_segments": stats.reordered_segments,
        "retransmissions": stats.retransmissions, "rto_retransmissions": stats.rto_retransmissions,
        "span_s": round(((last or 0) - (first or 0)) / 1e9, 3),
        "note": "counts cover the simulation up to the last packet written, including the part before the capture",
    }
    with open(path + ".json", "w") as fh:
        json.dump(summary, fh, indent=1)
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    summary = generate(args.out, args.packets, args.connections, args.seed)
    print(json.dumps({k: v for k, v in summary.items() if k != "rtt_floor_ms"}))


if __name__ == "__main__":
    main()
