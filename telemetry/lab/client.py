"""Load generator for the lab: Poisson arrivals over a few long-lived HTTP/2 connections,
with the client-side truth of every request written to ``client.parquet``.

Connections: one grpc channel per connection (``grpc.use_local_subchannel_pool`` plus a
distinct channel argument, so channels never share a subchannel). Channels are connected
one at a time before the load starts, and each channel's local TCP port is found by
diffing the established sockets to the server in ``/proc/net/tcp`` before and after it
connects (grpcio does not expose it). A channel that reconnects later would change port;
the client watches connectivity and flags such requests (``conn_reconnected``).

HTTP/2 stream ids: grpcio does not expose them either. A client opens streams on a
connection with ids 1, 3, 5, ... in the order the calls start on it (RFC 9113 5.1.1), and
grpc starts a call synchronously in the thread that creates it. So every call on a channel
is started under that channel's lock, which also hands out the next odd id. The lab tests
check the derived ids against the capture with tshark (the request body carries the
request id).

``client.parquet`` columns (one row per gRPC call = one HTTP/2 stream; times are UTC ns
since the epoch, taken with time.time_ns() in the client process):

- ``request_id`` (int64): unique per call; also sent in the request body as ``"id"``.
- ``logical_id`` (int64): the request a retry belongs to (= request_id of its first call).
- ``attempt`` (int32): 0 for the first call, 1.. for retries after RESOURCE_EXHAUSTED.
- ``method`` (str): ``Generate`` or ``Embed``.
- ``conn_index`` (int32): which of the client's connections carried it.
- ``conn_local_port`` (int32): the client's TCP port of that connection.
- ``server_port`` (int32): the server's TCP port.
- ``stream_id`` (int32): HTTP/2 stream id (derived as described above).
- ``conn_reconnected`` (bool): the channel had reconnected before this call; port and
  stream id are then not trustworthy.
- ``prompt_words`` / ``max_tokens`` (int32): request size (Embed: input length / 0).
- ``start_ns``: just before the call was started.
- ``first_message_ns`` / ``last_message_ns``: arrival of the first / last response message
  at the application (null when none).
- ``end_ns``: when the call finished (status received, error raised or cancelled).
- ``message_ns`` (list<int64>): arrival time of every response message.
- ``messages`` (int32): number of response messages.
- ``grpc_status`` (int32): gRPC status code (0 OK, 8 RESOURCE_EXHAUSTED, 4 DEADLINE...).
- ``grpc_status_name`` (str)
- ``ttft_ms`` (float64): start -> first message (null when none).
- ``latency_ms`` (float64): start -> end.
- ``max_gap_ms`` (float64): largest gap between consecutive response messages (null when
  fewer than two; a slow first message shows in ``ttft_ms``).
- ``slow_reader`` (bool): the call read messages during a client slow-reader window.
- ``in_window`` (str): filled in by the runner: the impairment/server/client window whose
  effect interval the call overlaps, or null.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from telemetry.lab.server import EMBED, GENERATE, WORDS, encode_json, identity

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def established_ports(server_ip: str, server_port: int) -> set[int]:
    """Local ports of ESTABLISHED IPv4 TCP sockets to server_ip:server_port (this netns)."""
    want = f"{socket.inet_aton(server_ip)[::-1].hex().upper()}:{server_port:04X}"
    ports = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if parts[2] == want and parts[3] == "01":
                ports.add(int(parts[1].split(":")[1], 16))
    return ports


@dataclass
class Conn:
    index: int
    channel: grpc.Channel
    local_port: int
    generate: Any
    embed: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_stream_id: int = 1
    reconnected: bool = False
    connected_ns: int = 0
    states: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Call:
    request_id: int
    logical_id: int
    attempt: int
    method: str
    conn: Conn
    stream_id: int
    prompt_words: int
    max_tokens: int
    start_ns: int
    first_start_ns: int
    message_ns: list[int] = field(default_factory=list)
    end_ns: int | None = None
    status: grpc.StatusCode | None = None
    reconnected: bool = False
    slow_reader: bool = False


def prompt_of(rid: int, words: int) -> str:
    """A call's prompt, drawn from its own seed: retries never shift the main sequence."""
    r = random.Random(rid)
    return "".join(r.choice(WORDS) for _ in range(words)).strip()


def grpc_request(rid: int, method: str, words: int, max_tokens: int) -> dict[str, Any]:
    """The lab's gRPC request message (JSON) of a call."""
    if method == "Generate":
        return {"id": rid, "prompt": prompt_of(rid, words), "max_tokens": max_tokens}
    return {"id": rid, "input": "x" * words}


class LoadGenerator:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.rng = random.Random(int(cfg.get("seed", 0)))
        self.calls: list[Call] = []
        self.calls_lock = threading.Lock()
        self.pool = futures.ThreadPoolExecutor(max_workers=int(cfg.get("max_inflight", 200)))
        self.inflight: dict[int, Any] = {}  # request_id -> grpc call (for cancel at the end)
        self.next_id = 0
        self.dispatch_late: list[tuple[int, int]] = []
        self.conns: list[Conn] = []
        self.stopping = threading.Event()

    # -- connections ----------------------------------------------------------------------
    def connect(self) -> None:
        ip, port = self.cfg["server_ip"], int(self.cfg["server_port"])
        for i in range(int(self.cfg.get("connections", 3))):
            before = established_ports(ip, port)
            opts = [
                ("grpc.use_local_subchannel_pool", 1),
                ("tailtap.lab.conn", i),  # distinct args: never share a subchannel
                *[tuple(o) for o in self.cfg.get("channel_options", [])],
            ]
            ch = grpc.insecure_channel(f"{ip}:{port}", options=opts)
            grpc.channel_ready_future(ch).result(timeout=10)
            new: set[int] = set()
            for _ in range(100):
                new = established_ports(ip, port) - before
                if new:
                    break
                time.sleep(0.01)
            if len(new) != 1:
                raise RuntimeError(f"channel {i}: cannot identify its TCP connection ({new})")
            conn = Conn(
                i,
                ch,
                new.pop(),
                ch.unary_stream(
                    GENERATE, request_serializer=encode_json, response_deserializer=identity
                ),
                ch.unary_unary(
                    EMBED, request_serializer=encode_json, response_deserializer=identity
                ),
                connected_ns=time.time_ns(),
            )
            ch.subscribe(lambda st, c=conn: self._state(c, st), try_to_connect=False)
            self.conns.append(conn)

    def _state(self, conn: Conn, st: grpc.ChannelConnectivity) -> None:
        conn.states.append((time.time_ns(), st.name))
        if st in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.IDLE,
                  grpc.ChannelConnectivity.SHUTDOWN) and not self.stopping.is_set():  # fmt: skip
            conn.reconnected = True

    # -- windows ----------------------------------------------------------------------------
    def window(self, kind: str, t_ns: int) -> dict[str, Any] | None:
        t0 = int(self.cfg["start_ns"])
        for w in self.cfg.get("windows", []):
            if w["kind"] == kind and t0 + w["start_s"] * 1e9 <= t_ns < t0 + w["end_s"] * 1e9:
                return w
        return None

    # -- calls ------------------------------------------------------------------------------
    def start_call(self, method: str, conn: Conn, logical_id: int | None, attempt: int,
                   first_start_ns: int | None, size: tuple[int, int]) -> None:  # fmt: skip
        with self.calls_lock:
            rid = self.next_id
            self.next_id += 1
        lid = rid if logical_id is None else logical_id
        words, max_tokens = size
        deadline = float(self.cfg.get("deadline_s", 20))
        with conn.lock:  # start order on the channel = stream id order
            sid = conn.next_stream_id
            conn.next_stream_id += 2
            start = time.time_ns()
            call = Call(rid, lid, attempt, method, conn, sid, words, max_tokens, start,
                        first_start_ns or start, reconnected=conn.reconnected)  # fmt: skip
            req = grpc_request(rid, method, words, max_tokens)
            if method == "Generate":
                it = conn.generate(req, timeout=deadline)
            else:
                it = conn.embed.future(req, timeout=deadline)
        with self.calls_lock:
            self.calls.append(call)
            self.inflight[rid] = it
        if method == "Generate":
            self.pool.submit(self._consume_stream, call, it)
        else:
            it.add_done_callback(lambda f, c=call: self._unary_done(c, f))

    def _consume_stream(self, call: Call, it: Any) -> None:
        try:
            for _msg in it:
                now = time.time_ns()
                call.message_ns.append(now)
                w = self.window("slow_reader", now)
                if w:  # the application reads slowly (and/or is frozen by the runner)
                    call.slow_reader = True
                    if w.get("read_delay_ms", 0) > 0:
                        time.sleep(w["read_delay_ms"] / 1000)
            call.status = it.code()
        except grpc.RpcError as e:
            call.status = e.code()
        except Exception:  # noqa: BLE001 - a lab client must not die on one call
            call.status = grpc.StatusCode.UNKNOWN
        call.end_ns = time.time_ns()
        self._finished(call)

    def _unary_done(self, call: Call, fut: Any) -> None:
        now = time.time_ns()
        try:
            fut.result()
            call.message_ns.append(now)
            call.status = grpc.StatusCode.OK
        except grpc.RpcError as e:
            call.status = e.code()
        except futures.CancelledError:
            call.status = grpc.StatusCode.CANCELLED
        call.end_ns = now
        self._finished(call)

    def _finished(self, call: Call) -> None:
        with self.calls_lock:
            self.inflight.pop(call.request_id, None)
        retry = self.cfg.get("retry", {})
        if (
            call.status == grpc.StatusCode.RESOURCE_EXHAUSTED
            and call.attempt < int(retry.get("max_attempts", 3)) - 1
            and not self.stopping.is_set()
        ):
            backoff = retry.get("backoff_ms", 50.0) * (2**call.attempt)
            with self.calls_lock:
                backoff *= self.rng.uniform(0.8, 1.2)
            timer = threading.Timer(
                backoff / 1000,
                self._retry,
                args=(call,),
            )
            timer.daemon = True
            timer.start()

    def _retry(self, call: Call) -> None:
        if self.stopping.is_set():
            return
        self.start_call(call.method, call.conn, call.logical_id, call.attempt + 1,
                        call.first_start_ns, (call.prompt_words, call.max_tokens))  # fmt: skip

    # -- load -------------------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        start, end = int(cfg["start_ns"]), int(cfg["end_ns"])
        rate = float(cfg.get("rate", 12))
        bulk = cfg.get("bulk")
        if bulk:
            threading.Thread(target=self._bulk, args=(bulk,), daemon=True).start()
        t = start
        lo_w, hi_w = cfg.get("prompt_words", [16, 256])
        lo_t, hi_t = cfg.get("max_tokens", [30, 80])
        embed_share = float(cfg.get("embed_share", 0.15))
        while True:
            t += int(self.rng.expovariate(rate) * NS_PER_S)
            if t >= end:
                break
            now = time.time_ns()
            if t > now:
                time.sleep((t - now) / 1e9)
            late = time.time_ns() - t
            if late > 20 * NS_PER_MS:
                self.dispatch_late.append((t, late))
            conn = self.conns[self.rng.randrange(self.dispatch_conns())]
            if self.rng.random() < embed_share:
                lo_e, hi_e = cfg.get("embed_chars", [64, 4096])
                self.start_call("Embed", conn, None, 0, None, (self.rng.randint(lo_e, hi_e), 0))
            else:
                size = (self.rng.randint(lo_w, hi_w), self.rng.randint(lo_t, hi_t))
                self.start_call("Generate", conn, None, 0, None, size)
        self._drain(end + int(float(cfg.get("drain_s", 8)) * NS_PER_S))

    def _drain(self, until_ns: int) -> None:
        while time.time_ns() < until_ns:
            with self.calls_lock:
                if not self.inflight:
                    break
            time.sleep(0.05)
        self.stopping.set()
        with self.calls_lock:
            left = list(self.inflight.values())
        for it in left:
            it.cancel()
        self.pool.shutdown(wait=True, cancel_futures=False)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            with self.calls_lock:
                if all(c.end_ns is not None for c in self.calls):
                    break
            time.sleep(0.02)

    def dispatch_conns(self) -> int:
        """How many connections the dispatcher draws one from (the draw is part of the
        seeded sequence: the same count keeps the same arrivals and sizes)."""
        return len(self.conns)

    def close(self) -> None:
        for c in self.conns:
            c.channel.close()

    def _bulk(self, bulk: dict[str, Any]) -> None:
        """Competing bulk download during each bulk window: connect, read until the window
        ends, then reset the connection (no flush of the sender's buffer after it)."""
        t0 = int(self.cfg["start_ns"])
        for w in bulk["windows"]:
            t_open, t_close = t0 + int(w["start_s"] * 1e9), t0 + int(w["end_s"] * 1e9)
            now = time.time_ns()
            if t_open > now:
                time.sleep((t_open - now) / 1e9)
            s = socket.create_connection((self.cfg["server_ip"], int(bulk["port"])), timeout=5)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.settimeout(0.1)
            buf = bytearray(65536)
            while time.time_ns() < t_close:
                try:
                    if s.recv_into(buf) == 0:
                        break
                except TimeoutError:
                    continue
            s.close()

    # -- output -----------------------------------------------------------------------------
    def write(self, path: str, meta_path: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = sorted(self.calls, key=lambda c: c.request_id)

        def ms(a: int | None, b: int | None) -> float | None:
            return None if a is None or b is None else (b - a) / NS_PER_MS

        cols: dict[str, list[Any]] = {k: [] for k in SCHEMA.names}
        for c in rows:
            msgs = c.message_ns
            gaps = [b - a for a, b in zip(msgs[:-1], msgs[1:], strict=True)]
            status = c.status if c.status is not None else grpc.StatusCode.UNKNOWN
            vals = {
                "request_id": c.request_id,
                "logical_id": c.logical_id,
                "attempt": c.attempt,
                "method": c.method,
                "conn_index": c.conn.index,
                "conn_local_port": c.conn.local_port,
                "server_port": int(self.cfg["server_port"]),
                "stream_id": c.stream_id,
                "conn_reconnected": c.reconnected,
                "prompt_words": c.prompt_words,
                "max_tokens": c.max_tokens,
                "start_ns": c.start_ns,
                "first_message_ns": msgs[0] if msgs else None,
                "last_message_ns": msgs[-1] if msgs else None,
                "end_ns": c.end_ns,
                "message_ns": msgs,
                "messages": len(msgs),
                "grpc_status": status.value[0],
                "grpc_status_name": status.name,
                "ttft_ms": ms(c.start_ns, msgs[0]) if msgs else None,
                "latency_ms": ms(c.start_ns, c.end_ns),
                "max_gap_ms": max(gaps) / NS_PER_MS if gaps else None,
                "slow_reader": c.slow_reader,
                "in_window": None,
            }
            for k, v in vals.items():
                cols[k].append(v)
        pq.write_table(pa.table(cols, schema=SCHEMA), path, compression="zstd")
        meta = {
            "connections": [
                {
                    "index": c.index,
                    "local_port": c.local_port,
                    "connected_ns": c.connected_ns,
                    "streams_started": (c.next_stream_id - 1) // 2,
                    "reconnected": c.reconnected,
                    "states": c.states,
                }  # fmt: skip
                for c in self.conns
            ],
            "dispatch_late": self.dispatch_late,
            "calls": len(rows),
        }
        with open(meta_path, "w") as f:
            json.dump(meta, f)


def _schema() -> Any:
    import pyarrow as pa

    i32, i64, f64 = pa.int32(), pa.int64(), pa.float64()
    return pa.schema(
        [
            ("request_id", i64),
            ("logical_id", i64),
            ("attempt", i32),
            ("method", pa.string()),
            ("conn_index", i32),
            ("conn_local_port", i32),
            ("server_port", i32),
            ("stream_id", i32),
            ("conn_reconnected", pa.bool_()),
            ("prompt_words", i32),
            ("max_tokens", i32),
            ("start_ns", i64),
            ("first_message_ns", i64),
            ("last_message_ns", i64),
            ("end_ns", i64),
            ("message_ns", pa.list_(i64)),
            ("messages", i32),
            ("grpc_status", i32),
            ("grpc_status_name", pa.string()),
            ("ttft_ms", f64),
            ("latency_ms", f64),
            ("max_gap_ms", f64),
            ("slow_reader", pa.bool_()),
            ("in_window", pa.string()),
        ]
    )


SCHEMA = _schema()
