"""The lab's OpenAI-compatible streaming server: the same LLM as ``server.py``, over HTTP.

An ASGI app served by a real stack: uvicorn (its httptools HTTP/1.1, keep-alive) for
``protocol: "openai-http1"``, hypercorn (HTTP/2 over cleartext, prior knowledge) for
``"openai-h2c"``. The timing model and the schedule are ``server.LLMServer``'s (same
config keys, same ``windows``, same log):

* ``POST /v1/chat/completions`` (``stream: true``, the ``Generate`` of the gRPC server): the
  request's ``user`` is ``lab-<request id>``, its prompt the user message (prompt tokens =
  words), ``max_tokens`` the tokens to generate. The server sends the role chunk at once,
  "prefills" for ``prefill_base_ms + prefill_per_token_ms * prompt_tokens``, then one
  ``chat.completion.chunk`` per token on absolute deadlines every ``token_interval_ms``,
  a finish chunk, a usage chunk (``stream_options.include_usage``) and ``data: [DONE]``:
  what vLLM and the OpenAI API send;
* ``POST /v1/embeddings`` (``Embed``): ~``embed_base_ms + len/1000`` ms, 256 floats;
  ``GET /v1/models`` lists the one model (the client opens its connections with it);
* ``stall`` windows slow prefill and decoding as in the gRPC server; in
  ``resource_exhausted`` windows a share ``p`` of requests is answered ``429`` with an
  OpenAI-style ``rate_limit_exceeded`` error after ``after_ms`` (what OpenAI-compatible
  servers send where gRPC says RESOURCE_EXHAUSTED).

Run by the lab runner as ``python -m telemetry.lab.serve CONFIG.json`` (the config's
``protocol`` chooses this module); prints READY once listening, takes ``T0 <ns>`` and
``STOP`` on stdin, writes its log like the gRPC server.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from telemetry.lab.server import NS_PER_MS, WORDS, LLMServer

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
MODELS = "/v1/models"
MODEL = "lab-llm"
PROTOCOLS = ("grpc", "openai-http1", "openai-h2c")


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def chat_chunk(rid: str, delta: dict[str, Any] | None, finish: str | None = None,
               usage: dict[str, int] | None = None) -> bytes:  # fmt: skip
    obj: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": MODEL,
                           "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    if usage is not None:
        obj["usage"] = usage
    return sse(obj)


async def asgi_lifespan(receive, send) -> None:
    """An ASGI app's lifespan protocol, with nothing to start or stop."""
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class OpenAIApp:
    """ASGI app; the schedule, rows and lateness bookkeeping are the gRPC server's."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.core = LLMServer(cfg)
        self.cfg = cfg

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] == "lifespan":
            await asgi_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] == "GET" and scope["path"] == MODELS:  # the client's connection warm-up
            await self._json(send, 200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "lab"}]})
            return
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        t_recv = time.time_ns()
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            await self._json(send, 400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        if scope["path"] == CHAT:
            await self.chat(req, t_recv, send)
        elif scope["path"] == EMBEDDINGS:
            await self.embeddings(req, t_recv, send)
        else:
            await self._json(send, 404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    # -- timing -------------------------------------------------------------------------
    async def _sleep_until(self, t_ns: int) -> None:
        now = time.time_ns()
        if t_ns > now:
            await asyncio.sleep((t_ns - now) / 1e9)
            late = time.time_ns() - t_ns
            if late > self.core.late_ns:  # the loop woke late: the process was not scheduled
                self.core.late.append((t_ns, late))

    async def _exhausted(self, t_ns: int, row: dict[str, Any], send) -> bool:
        w = self.core.window("resource_exhausted", t_ns)
        if not w:
            return False
        with self.core.rng_lock:
            hit = self.core.rng.random() < w.get("p", 1.0)
        if not hit:
            return False
        await self._sleep_until(t_ns + int(w.get("after_ms", 2.0) * NS_PER_MS))
        row["status"] = "resource_exhausted"
        row["window"] = w["name"]
        await self._json(send, 429, {"error": {"message": "lab: server overloaded, retry later",
                                               "type": "rate_limit_exceeded", "code": "rate_limit_exceeded"}})  # fmt: skip
        return True

    # -- endpoints ----------------------------------------------------------------------
    async def chat(self, req: dict[str, Any], t_recv: int, send) -> None:
        rid = str(req.get("user", ""))
        row: dict[str, Any] = {"id": _request_id(rid), "method": "Generate", "recv_ns": t_recv}
        self.core.rows.append(row)
        if await self._exhausted(t_recv, row, send):
            return
        prompt = " ".join(str(m.get("content", "")) for m in req.get("messages", []) if isinstance(m, dict))
        prompt_tokens = len(prompt.split())
        cfg = self.cfg
        prefill_ms = cfg["prefill_base_ms"] + cfg["prefill_per_token_ms"] * prompt_tokens
        stall = self.core.window("stall", t_recv)
        if stall:
            prefill_ms += stall.get("extra_ms", 0.0)
            row["stall"] = stall["name"]
        row["prefill_ms"] = prefill_ms
        interval = int(cfg["token_interval_ms"] * NS_PER_MS)
        due = t_recv + int(prefill_ms * NS_PER_MS)
        n = int(req.get("max_tokens", 50))
        with self.core.rng_lock:
            words = [self.core.rng.choice(WORDS) for _ in range(n)]
        cid = f"chatcmpl-{rid}"
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]})  # fmt: skip
            await self._body(send, chat_chunk(cid, {"role": "assistant", "content": ""}))
            for i in range(n):
                await self._sleep_until(due)
                if i == 0:
                    row["first_token_ns"] = time.time_ns()
                await self._body(send, chat_chunk(cid, {"content": words[i]}))
                slow = self.core.window("stall", due)
                due += int(interval * slow.get("decode_factor", 1.0)) if slow else interval
            await self._body(send, chat_chunk(cid, {}, finish="length"))
            if (req.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
                await self._body(send, chat_chunk(cid, None, usage=usage))
            await self._body(send, b"data: [DONE]\n\n")
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (OSError, RuntimeError, asyncio.CancelledError):
            row["status"] = "cancelled"  # the client went away
            return
        row["tokens"] = n
        row["end_ns"] = time.time_ns()
        row["status"] = "ok"

    async def embeddings(self, req: dict[str, Any], t_recv: int, send) -> None:
        row: dict[str, Any] = {"id": _request_id(str(req.get("user", ""))), "method": "Embed", "recv_ns": t_recv}
        self.core.rows.append(row)
        if await self._exhausted(t_recv, row, send):
            return
        work_ms = self.cfg["embed_base_ms"] + len(str(req.get("input", ""))) / 1000
        stall = self.core.window("stall", t_recv)
        if stall:
            work_ms += stall.get("extra_ms", 0.0)
            row["stall"] = stall["name"]
        await self._sleep_until(t_recv + int(work_ms * NS_PER_MS))
        with self.core.rng_lock:
            vec = [round(self.core.rng.uniform(-1, 1), 6) for _ in range(256)]
        await self._json(send, 200, {"object": "list", "model": MODEL,
                                     "data": [{"object": "embedding", "index": 0, "embedding": vec}],
                                     "usage": {"prompt_tokens": 1, "total_tokens": 1}})  # fmt: skip
        row["end_ns"] = time.time_ns()
        row["status"] = "ok"

    @staticmethod
    async def _body(send, data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    @staticmethod
    async def _json(send, status: int, obj: dict[str, Any]) -> None:
        body = json.dumps(obj).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _request_id(user: str) -> int | None:
    return int(user[4:]) if user.startswith("lab-") and user[4:].isdigit() else None


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def serve(cfg: dict[str, Any]) -> None:
    protocol = cfg.get("protocol", "openai-http1")
    app = OpenAIApp(cfg)
    core = app.core
    faulthandler.dump_traceback_later(float(cfg.get("max_runtime_s", 120)) + 10, exit=True)
    if cfg.get("bulk_port"):
        threading.Thread(target=core.bulk_source, args=(cfg["bulk_port"],), daemon=True).start()
    port = int(cfg["port"])
    host = cfg.get("bind", "0.0.0.0")
    tls = cfg.get("tls")  # {"cert": PEM path, "key": PEM path}: HTTPS (h2 by ALPN for openai-h2c)
    loop = asyncio.new_event_loop()
    done = asyncio.Event()

    def stop() -> None:
        loop.call_soon_threadsafe(done.set)

    def _stdin() -> None:
        for line in sys.stdin:
            if line.startswith("T0 "):
                core.t0_ns = int(line.split()[1])
            elif line.strip() == "STOP":
                stop()

    threading.Thread(target=_stdin, daemon=True).start()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop())

    def _ready() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _listening(port):
            time.sleep(0.02)
        print("READY", flush=True)

    threading.Thread(target=_ready, daemon=True).start()

    async def run() -> None:
        if protocol == "openai-h2c":
            from hypercorn.asyncio import serve as hserve
            from hypercorn.config import Config

            hc = Config()
            hc.bind = [f"{host}:{port}"]
            if tls:
                hc.certfile, hc.keyfile = tls["cert"], tls["key"]
                hc.alpn_protocols = ["h2"]
            hc.keep_alive_timeout = 600.0  # connections live for the whole run
            hc.loglevel = "WARNING"
            hc.accesslog = None
            await hserve(app, hc, shutdown_trigger=done.wait)
        else:
            import uvicorn

            uc = uvicorn.Config(app, host=host, port=port, http="httptools", lifespan="on", log_level="warning",
                                access_log=False, timeout_keep_alive=600, backlog=512,
                                ssl_certfile=tls["cert"] if tls else None, ssl_keyfile=tls["key"] if tls else None)  # fmt: skip
            server = uvicorn.Server(uc)
            server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
            task = asyncio.ensure_future(server.serve())
            await done.wait()
            server.should_exit = True
            await asyncio.wait_for(task, 5)

    gc.freeze()
    code = 1
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(asyncio.wait_for(run(), float(cfg.get("max_runtime_s", 120))))
    except TimeoutError:
        pass
    except BaseException:
        traceback.print_exc()
    finally:
        core.stopping.set()
        try:
            with open(cfg["log"] + ".tmp", "w") as f:
                json.dump(core.report(), f)
            os.replace(cfg["log"] + ".tmp", cfg["log"])
            code = 0
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
