"""The lab's load generator for the OpenAI-compatible server: the gRPC client's Poisson
load (same arrivals, sizes, retries, windows and ``client.parquet``) sent with httpx's
asyncio client, the HTTP stack of ``openai.AsyncOpenAI``.

All requests run as tasks of one event loop (its own thread); the dispatcher and the retry
timers of :class:`telemetry.lab.client.LoadGenerator` hand them over. (httpx's threaded
client is not used: on a shared HTTP/2 connection its threads take turns reading the
socket, and a token could wait 20 ms in the client for its thread, which the client's
truth would then count as network or server time.)

``protocol: "openai-h2c"``: ``connections`` HTTP/2 connections (prior knowledge), one
``httpx.AsyncClient`` each, requests multiplexed as the gRPC client's calls are; the stream
id is the one httpcore used (``response.extensions["stream_id"]``). ``"openai-http1"``: a
pool of ``http1_connections`` (48) keep-alive connections, one request at a time on each (as
HTTP/1.1 allows); a request takes an idle connection, and its ``stream_id`` is its 0-based
exchange index on that connection (what tailtap calls an HTTP/1.1 exchange's stream id).
The local port comes from the connection itself. Every TCP connection is opened before
the load starts (as the gRPC client connects its channels first) and handed to httpcore
through a network backend, so no request waits for a handshake and none is made only to
open a connection (a burst of such requests just before T0 would be the baseline every
later window is judged against).

Each row of ``client.parquet`` is written as the gRPC client writes it (``client.SCHEMA``):
``start_ns`` when httpcore began sending the request on its connection (its trace
extension: pool waits and request building before it are not on the wire), ``message_ns`` the arrival
of every chunk carrying a token (content), ``first_message_ns`` the first of them (the
client's TTFT), ``end_ns`` after ``[DONE]`` / the end of the body. HTTP statuses map to
the gRPC codes the schema holds: 200 OK, 429 RESOURCE_EXHAUSTED (retried like the gRPC
client's), 503 UNAVAILABLE, other UNKNOWN; a timeout is DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from concurrent.futures import Future
from typing import Any

import anyio
import grpc
import httpcore
import httpx
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSStream
from httpcore._backends.anyio import AnyIOBackend, AnyIOStream

from telemetry.lab.client import Call, Conn, LoadGenerator, prompt_of
from telemetry.lab.openai_server import CHAT, EMBEDDINGS, MODEL
from telemetry.lab.tls import HOSTNAME, client_context

_STATUS = {200: grpc.StatusCode.OK, 429: grpc.StatusCode.RESOURCE_EXHAUSTED, 503: grpc.StatusCode.UNAVAILABLE}


class _Preconnected(httpcore.AsyncNetworkBackend):
    """httpcore network backend whose first connection is one already open."""

    def __init__(self, stream: AnyIOStream) -> None:
        self.stream: AnyIOStream | None = stream

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> AnyIOStream:  # fmt: skip
        stream, self.stream = self.stream, None
        if stream is not None:
            return stream
        return await AnyIOBackend().connect_tcp(host, port, timeout, local_address, socket_options)  # a reconnect

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class _Handshaken(AnyIOStream):
    """A TLS stream whose handshake was made before the load (as the TCP connection was):
    httpcore's own start_tls for an https origin is then a no-op."""

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> AnyIOStream:  # fmt: skip
        return self


class OpenAILoadGenerator(LoadGenerator):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.h2 = cfg.get("protocol", "grpc") in ("openai-h2c", "grpc")  # gRPC: grpc_tls_client.py
        keylog = cfg.get("tls_keylog")  # HTTPS: the session secrets go to this key log
        self.tls = client_context(keylog, ["h2"] if self.h2 else ["http/1.1"]) if keylog else None
        self.base = f"{'https' if self.tls else 'http'}://{cfg['server_ip']}:{int(cfg['server_port'])}"
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.idle: asyncio.Queue[Conn] | None = None

    # -- connections ----------------------------------------------------------------------
    def connect(self) -> None:
        self.loop_thread.start()
        n = int(self.cfg.get("connections", 3) if self.h2 else self.cfg.get("http1_connections", 48))
        timeout = httpx.Timeout(float(self.cfg.get("deadline_s", 20)), connect=5.0)

        async def make(i: int) -> Conn:
            # connected before the load starts, as the gRPC client's channels are: the TCP
            # connection is opened here and handed to httpcore, which speaks HTTP on it
            # from the first request on (no request is made for it)
            tcp = await anyio.connect_tcp(self.cfg["server_ip"], int(self.cfg["server_port"]))
            local_port = tcp.extra(SocketAttribute.local_port)
            stream = AnyIOStream(tcp)
            if self.tls is not None:  # the handshake too, before the load
                tls = await TLSStream.wrap(tcp, hostname=HOSTNAME, ssl_context=self.tls, standard_compatible=False)
                stream = _Handshaken(tls)
            transport = httpx.AsyncHTTPTransport(http1=not self.h2, http2=self.h2)
            transport._pool = httpcore.AsyncConnectionPool(  # (httpx takes no network backend)
                http1=not self.h2, http2=self.h2, max_connections=1, max_keepalive_connections=1,
                keepalive_expiry=600, network_backend=_Preconnected(stream), ssl_context=self.tls,
            )  # fmt: skip
            client = httpx.AsyncClient(transport=transport, timeout=timeout)
            conn = Conn(i, client, local_port, None, None,  # type: ignore[arg-type]
                        connected_ns=time.time_ns())  # fmt: skip
            conn.next_stream_id = 0  # HTTP/1.1: the next exchange index on the connection
            return conn

        async def make_all() -> None:
            self.idle = asyncio.Queue()
            # all at once: the load starts at T0, a few seconds after the client does
            for conn in await asyncio.gather(*(make(i) for i in range(n))):
                self.conns.append(conn)
                self.idle.put_nowait(conn)

        asyncio.run_coroutine_threadsafe(make_all(), self.loop).result(60)

    def dispatch_conns(self) -> int:
        # as many as the gRPC client's channels: the same seeded arrivals and sizes (an
        # HTTP/1.1 request then takes whichever pool connection is idle)
        return int(self.cfg.get("connections", 3))

    # -- calls ------------------------------------------------------------------------------
    def start_call(self, method: str, conn: Conn, logical_id: int | None, attempt: int,
                   first_start_ns: int | None, size: tuple[int, int]) -> None:  # fmt: skip
        with self.calls_lock:  # (the task's _finished waits for it: inflight is set first)
            rid = self.next_id
            self.next_id += 1
            lid = rid if logical_id is None else logical_id
            fut: Future = asyncio.run_coroutine_threadsafe(
                self._call(rid, lid, method, conn, attempt, first_start_ns, size), self.loop)
            self.inflight[rid] = fut  # cancel() ends it at the end of the run

    async def _call(self, rid: int, lid: int, method: str, conn: Conn, attempt: int,
                    first_start_ns: int | None, size: tuple[int, int]) -> None:  # fmt: skip
        if not self.h2:
            assert self.idle is not None
            conn = await self.idle.get()  # HTTP/1.1: one request at a time per connection
        words, max_tokens = size
        url, request = self._request(rid, method, words, max_tokens)
        start = time.time_ns()
        call = Call(rid, lid, attempt, method, conn, -1, words, max_tokens, start, first_start_ns or start,
                    reconnected=conn.reconnected)  # fmt: skip
        with self.calls_lock:
            self.calls.append(call)
        client: httpx.AsyncClient = conn.channel  # type: ignore[assignment]

        async def sending(event: str, info: dict[str, Any]) -> None:
            # httpcore's trace: the client's own record of when the request went out
            if event.endswith("send_request_headers.started"):
                call.start_ns = time.time_ns()
                if attempt == 0:
                    call.first_start_ns = call.start_ns

        try:
            async with client.stream("POST", url, extensions={"trace": sending}, **request) as resp:
                self._where(conn, call, resp)
                call.status = await self._response(call, resp)
        except httpx.TimeoutException:
            call.status = grpc.StatusCode.DEADLINE_EXCEEDED
        except asyncio.CancelledError:
            call.status = grpc.StatusCode.CANCELLED
        except (httpx.HTTPError, OSError, RuntimeError):
            call.status = grpc.StatusCode.CANCELLED if self.stopping.is_set() else grpc.StatusCode.UNAVAILABLE
        finally:
            call.end_ns = time.time_ns()
            if not self.h2:
                self.idle.put_nowait(conn)  # type: ignore[union-attr]
            self._finished(call)

    def _request(self, rid: int, method: str, words: int, max_tokens: int) -> tuple[str, dict[str, Any]]:
        """The call's URL and httpx request arguments."""
        if method == "Generate":
            prompt = prompt_of(rid, words)
            body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                    "stream": True, "stream_options": {"include_usage": True}, "user": f"lab-{rid}"}  # fmt: skip
            return self.base + CHAT, {"json": body}
        return self.base + EMBEDDINGS, {"json": {"model": MODEL, "input": "x" * words, "user": f"lab-{rid}"}}

    async def _response(self, call: Call, resp: httpx.Response) -> grpc.StatusCode:
        """Read the response (timing its messages); its status in gRPC's terms."""
        if call.method == "Generate" and resp.status_code == 200:
            await self._read_stream(call, resp)
        else:
            await resp.aread()
            if resp.status_code == 200:
                call.message_ns.append(time.time_ns())
        return _STATUS.get(resp.status_code, grpc.StatusCode.UNKNOWN)

    def _where(self, conn: Conn, call: Call, resp: httpx.Response) -> None:
        """The call's connection port and stream id, from the connection itself."""
        ext = resp.extensions
        stream = ext.get("network_stream")
        port = stream.get_extra_info("client_addr")[1] if stream is not None else 0
        if conn.local_port and port != conn.local_port:
            conn.reconnected = True  # a new TCP connection: numbering starts again
            conn.next_stream_id = 0
        conn.local_port = port
        if self.h2:
            call.stream_id = int(ext.get("stream_id", -1))
        else:
            call.stream_id = conn.next_stream_id
            conn.next_stream_id += 1

    async def _read_stream(self, call: Call, resp: httpx.Response) -> None:
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.time_ns()
            obj = json.loads(line[6:])
            choices = obj.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                await self._message(call, now)

    async def _message(self, call: Call, now: int) -> None:
        """A response message reached the application at ``now``."""
        call.message_ns.append(now)
        w = self.window("slow_reader", now)
        if w:  # the application reads slowly (and/or is frozen by the runner)
            call.slow_reader = True
            if w.get("read_delay_ms", 0) > 0:
                await asyncio.sleep(w["read_delay_ms"] / 1000)

    def close(self) -> None:
        async def close_all() -> None:
            for c in self.conns:
                await c.channel.aclose()  # type: ignore[attr-defined]

        try:
            asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(5)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
