"""An LLM-like gRPC server (grpcio, no protoc) for the lab.

Service ``tailtap.lab.LLM``, registered with generic method handlers; messages are JSON
(requests) and small JSON token chunks (responses), content-type stays application/grpc:

* ``Generate`` (server streaming): request ``{"id", "prompt", "max_tokens"}``; the server
  "prefills" for ``prefill_base_ms + prefill_per_token_ms * prompt_tokens`` (prompt tokens =
  words of the prompt), then sends one message per token at a steady ``token_interval_ms``
  (each ~20-60 bytes, like a real token chunk: ``{"i":3,"t":" word"}``), then trailers.
  Tokens follow absolute deadlines (first token at end of prefill, then every interval):
  when a send is held up (flow control) generation goes on and the backlog goes out at
  once, as a real server that keeps decoding would.
* ``Embed`` (unary): request ``{"id", "input"}``; ~``embed_base_ms + len/1000`` ms of work,
  answers 256 float32 (1 KiB).

The server's own schedule (``windows`` in the config; offsets from T0, which arrives on
stdin as ``T0 <ns>``):

* ``stall``: requests whose prefill starts in the window prefill ``extra_ms`` longer, and
  tokens due in the window come ``decode_factor`` times slower (a server-side cause
  with a clean network);
* ``resource_exhausted``: a share ``p`` of requests arriving in the window is answered
  RESOURCE_EXHAUSTED after ``after_ms``.

It also runs an optional bulk source (``bulk_port``): to every connection it sends data as
fast as TCP allows until the connection is closed (the competing flow of the queueing
scenario). On SIGTERM it writes ``log`` (JSON): one row per RPC and the periods in which
it was disturbed (a token timer that fired late by more than ``late_threshold_ms``).

Run by the lab runner through ``python -m telemetry.lab.serve CONFIG.json``.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

SERVICE = "tailtap.lab.LLM"
GENERATE = f"/{SERVICE}/Generate"
EMBED = f"/{SERVICE}/Embed"
NS_PER_MS = 1_000_000

WORDS = (
    " the", " model", " token", " stream", " of", " latency", " tail", " packet", " window",
    " and", " a", " queue", " server", " network", " is", " to", " in", " fast", " slow",
    " request", " answer", " capture", " loss", " burst", " order", " time", " data",
)  # fmt: skip


def encode_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def decode_json(data: bytes) -> Any:
    return json.loads(data)


def identity(data: bytes) -> bytes:
    return data


class LLMServer:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.t0_ns: int | None = cfg.get("t0_ns")
        self.rng = random.Random(int(cfg.get("seed", 0)))
        self.rng_lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        self.late: list[tuple[int, int]] = []
        self.late_ns = int(float(cfg.get("late_threshold_ms", 10)) * NS_PER_MS)
        self.stopping = threading.Event()

    # -- schedule -------------------------------------------------------------------------
    def window(self, kind: str, t_ns: int) -> dict[str, Any] | None:
        if self.t0_ns is None:
            return None
        for w in self.cfg.get("windows", []):
            if (
                w["kind"] == kind
                and self.t0_ns + w["start_s"] * 1e9 <= t_ns < self.t0_ns + w["end_s"] * 1e9
            ):
                return w
        return None

    def _sleep_until(self, t_ns: int) -> None:
        now = time.time_ns()
        if t_ns > now:
            time.sleep((t_ns - now) / 1e9)
            late = time.time_ns() - t_ns
            if late > self.late_ns:  # the timer fired late: the process was not scheduled
                self.late.append((t_ns, late))

    # -- RPCs ---------------------------------------------------------------------------------
    def generate(self, req: dict[str, Any], context: grpc.ServicerContext):  # noqa: ANN201
        t_recv = time.time_ns()
        row: dict[str, Any] = {"id": req.get("id"), "method": "Generate", "recv_ns": t_recv}
        self.rows.append(row)
        if self._exhausted(t_recv, row, context):
            return
        prompt_tokens = len(req.get("prompt", "").split())
        prefill_ms = self.cfg["prefill_base_ms"] + self.cfg["prefill_per_token_ms"] * prompt_tokens
        stall = self.window("stall", t_recv)
        if stall:
            prefill_ms += stall.get("extra_ms", 0.0)
            row["stall"] = stall["name"]
        row["prefill_ms"] = prefill_ms
        interval = int(self.cfg["token_interval_ms"] * NS_PER_MS)
        due = t_recv + int(prefill_ms * NS_PER_MS)
        n = int(req.get("max_tokens", 50))
        with self.rng_lock:
            words = [self.rng.choice(WORDS) for _ in range(n)]
        for i in range(n):
            if not context.is_active():
                row["status"] = "cancelled"
                return
            self._sleep_until(due)
            if i == 0:
                row["first_token_ns"] = time.time_ns()
            yield encode_json({"i": i, "t": words[i]})
            slow = self.window("stall", due)
            due += int(interval * slow.get("decode_factor", 1.0)) if slow else interval
        row["tokens"] = n
        row["end_ns"] = time.time_ns()
        row["status"] = "ok"

    def embed(self, req: dict[str, Any], context: grpc.ServicerContext) -> bytes:
        t_recv = time.time_ns()
        row: dict[str, Any] = {"id": req.get("id"), "method": "Embed", "recv_ns": t_recv}
        self.rows.append(row)
        if self._exhausted(t_recv, row, context):
            return b""
        work_ms = self.cfg["embed_base_ms"] + len(req.get("input", "")) / 1000
        stall = self.window("stall", t_recv)
        if stall:
            work_ms += stall.get("extra_ms", 0.0)
            row["stall"] = stall["name"]
        self._sleep_until(t_recv + int(work_ms * NS_PER_MS))
        with self.rng_lock:
            vec = [self.rng.uniform(-1, 1) for _ in range(256)]
        row["end_ns"] = time.time_ns()
        row["status"] = "ok"
        return struct.pack("<256f", *vec)

    def _exhausted(self, t_ns: int, row: dict[str, Any], context: grpc.ServicerContext) -> bool:
        w = self.window("resource_exhausted", t_ns)
        if not w:
            return False
        with self.rng_lock:
            hit = self.rng.random() < w.get("p", 1.0)
        if not hit:
            return False
        self._sleep_until(t_ns + int(w.get("after_ms", 2.0) * NS_PER_MS))
        row["status"] = "resource_exhausted"
        row["window"] = w["name"]
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "lab: server overloaded, retry later")
        return True

    # -- bulk source ------------------------------------------------------------------------
    def bulk_source(self, port: int) -> None:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", port))
        ls.listen(4)
        ls.settimeout(0.2)
        while not self.stopping.is_set():
            try:
                conn, _ = ls.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._blast, args=(conn,), daemon=True).start()

    def _blast(self, conn: socket.socket) -> None:
        chunk = b"\x5a" * 65536
        conn.settimeout(0.5)
        with conn:
            while not self.stopping.is_set():
                try:
                    conn.send(chunk)
                except TimeoutError:
                    continue
                except OSError:
                    return

    def report(self) -> dict[str, Any]:
        from telemetry.lab.bridge import merge_periods

        return {
            "t0_ns": self.t0_ns,
            "late_threshold_ms": self.late_ns / NS_PER_MS,
            "disturbed": merge_periods(self.late, 250 * NS_PER_MS),
            # copies: handler threads of streams not yet torn down may still touch rows
            "rpcs": [dict(r) for r in list(self.rows)],
        }


def serve(cfg: dict[str, Any]) -> None:
    srv = LLMServer(cfg)
    # Hard bound: whatever hangs, the process ends (with every thread's stack in its log).
    faulthandler.dump_traceback_later(float(cfg.get("max_runtime_s", 120)) + 10, exit=True)
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Generate": grpc.unary_stream_rpc_method_handler(
                srv.generate, request_deserializer=decode_json, response_serializer=identity
            ),
            "Embed": grpc.unary_unary_rpc_method_handler(
                srv.embed, request_deserializer=decode_json, response_serializer=identity
            ),
        },
    )
    options = [tuple(o) for o in cfg.get("grpc_options", [])]
    if cfg.get("tls"):
        # the TLS load comes from httpx, whose HTTP/2 opens one stream at a time until the
        # server's SETTINGS name a limit, which grpcio by default leaves out
        options.append(("grpc.max_concurrent_streams", 1000))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=int(cfg.get("max_workers", 128))),
        handlers=[handler],
        options=options,
    )
    address = f"{cfg.get('bind', '0.0.0.0')}:{cfg['port']}"
    if cfg.get("tls"):  # {"cert", "key"}: PEM paths (tailtap lab run --tls)
        pair = (Path(cfg["tls"]["key"]).read_bytes(), Path(cfg["tls"]["cert"]).read_bytes())
        server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
    else:
        server.add_insecure_port(address)
    server.start()
    if cfg.get("bulk_port"):
        threading.Thread(target=srv.bulk_source, args=(cfg["bulk_port"],), daemon=True).start()
    done = threading.Event()
    signalled: list[int] = []

    def _stop(signum: int, frame: Any) -> None:
        # not done.set(): the handler runs in the main thread, which may be inside
        # done.wait() holding the event's lock (a deadlock that cost a sweep run its log)
        signalled.append(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    def _stdin() -> None:
        for line in sys.stdin:
            if line.startswith("T0 "):
                srv.t0_ns = int(line.split()[1])
            elif line.strip() == "STOP":
                done.set()

    threading.Thread(target=_stdin, daemon=True).start()
    gc.freeze()  # startup objects out of the GC's way (shorter pauses under load)
    print("READY", flush=True)
    deadline = time.monotonic() + float(cfg.get("max_runtime_s", 120))
    while not done.is_set() and not signalled and time.monotonic() < deadline:
        done.wait(0.1)
    srv.stopping.set()
    # Report first (every RPC of the run is over by now), then stop grpc: a shutdown that
    # hangs must not cost the log. os._exit: never wait for handler threads at exit.
    code = 1
    try:
        with open(cfg["log"] + ".tmp", "w") as f:
            json.dump(srv.report(), f)
        os.replace(cfg["log"] + ".tmp", cfg["log"])
        code = 0
        server.stop(grace=0.5).wait(2)
    except BaseException:
        traceback.print_exc()  # os._exit below would swallow it
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
