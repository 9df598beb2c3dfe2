"""The lab's gRPC load over TLS (``tailtap lab run ... --tls`` with the gRPC service): the
grpcio server on a TLS port, called by httpx's HTTP/2 client, because grpcio cannot write a
key log and httpx (Python's OpenSSL) can.

Same arrivals, sizes, retries and ``client.parquet`` as the grpcio client (``client.py``),
the connections of the OpenAI client (``openai_client.py``: opened and handshaken before the
load, one ``httpx.AsyncClient`` per HTTP/2 connection, calls multiplexed on it). A call is
a POST of one length-prefixed gRPC message (the lab's JSON request) with ``te: trailers``;
each response message is counted when its last byte arrives. httpcore does not hand over
trailers: a call whose stream ends normally is ``OK``; a trailers-only response (the server
turning the call away: RESOURCE_EXHAUSTED) carries its ``grpc-status`` in the headers.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import grpc
import httpx

from telemetry.lab.client import Call, Conn
from telemetry.lab.openai_client import OpenAILoadGenerator
from telemetry.lab.server import WORDS

SERVICE = "/tailtap.lab.LLM/"
HEADERS = {"content-type": "application/grpc", "te": "trailers", "grpc-accept-encoding": "identity"}


def grpc_frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


class GrpcTlsLoadGenerator(OpenAILoadGenerator):
    async def _call(self, rid: int, lid: int, method: str, conn: Conn, attempt: int,
                    first_start_ns: int | None, size: tuple[int, int]) -> None:  # fmt: skip
        words, max_tokens = size
        if method == "Generate":
            r = random.Random(rid)  # per call: retries never shift the main sequence
            prompt = "".join(r.choice(WORDS) for _ in range(words)).strip()
            req: dict[str, Any] = {"id": rid, "prompt": prompt, "max_tokens": max_tokens}
        else:
            req = {"id": rid, "input": "x" * words}
        body = grpc_frame(json.dumps(req, separators=(",", ":")).encode())
        start = time.time_ns()
        call = Call(rid, lid, attempt, method, conn, -1, words, max_tokens, start, first_start_ns or start,
                    reconnected=conn.reconnected)  # fmt: skip
        with self.calls_lock:
            self.calls.append(call)
        client: httpx.AsyncClient = conn.channel  # type: ignore[assignment]

        async def sending(event: str, info: dict[str, Any]) -> None:
            if event.endswith("send_request_headers.started"):
                call.start_ns = time.time_ns()
                if attempt == 0:
                    call.first_start_ns = call.start_ns

        try:
            async with client.stream("POST", self.base + SERVICE + method, content=body, headers=HEADERS,
                                     extensions={"trace": sending}) as resp:  # fmt: skip
                self._where(conn, call, resp)
                status = resp.headers.get("grpc-status")  # trailers-only: the call turned away
                if resp.status_code != 200:
                    call.status = grpc.StatusCode.UNAVAILABLE if resp.status_code == 503 else grpc.StatusCode.UNKNOWN
                elif status is not None and status != "0":
                    await resp.aread()
                    call.status = grpc.StatusCode(_code(int(status)))
                else:
                    await self._read_messages(call, resp)
                    call.status = grpc.StatusCode.OK
        except httpx.TimeoutException:
            call.status = grpc.StatusCode.DEADLINE_EXCEEDED
        except asyncio.CancelledError:
            call.status = grpc.StatusCode.CANCELLED
        except (httpx.HTTPError, OSError, RuntimeError):
            call.status = grpc.StatusCode.CANCELLED if self.stopping.is_set() else grpc.StatusCode.UNAVAILABLE
        finally:
            call.end_ns = time.time_ns()
            self._finished(call)

    async def _read_messages(self, call: Call, resp: httpx.Response) -> None:
        """Every length-prefixed message, timed at its last byte."""
        pending = b""
        async for chunk in resp.aiter_raw():
            pending += chunk
            now = time.time_ns()
            while len(pending) >= 5 and len(pending) >= 5 + int.from_bytes(pending[1:5], "big"):
                pending = pending[5 + int.from_bytes(pending[1:5], "big") :]
                call.message_ns.append(now)
                w = self.window("slow_reader", now)
                if w:  # the application reads slowly (and/or is frozen by the runner)
                    call.slow_reader = True
                    if w.get("read_delay_ms", 0) > 0:
                        await asyncio.sleep(w["read_delay_ms"] / 1000)


def _code(value: int) -> tuple[int, str]:
    """grpc.StatusCode's value for a numeric status (its members are (code, name) pairs)."""
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code.value
    return grpc.StatusCode.UNKNOWN.value
