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

import time
from typing import Any

import grpc
import httpx

from telemetry.lab.client import Call, grpc_request
from telemetry.lab.openai_client import OpenAILoadGenerator
from telemetry.lab.server import encode_json

SERVICE = "/tailtap.lab.LLM/"
HEADERS = {"content-type": "application/grpc", "te": "trailers", "grpc-accept-encoding": "identity"}


def grpc_frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


class GrpcTlsLoadGenerator(OpenAILoadGenerator):
    """The OpenAI client's connections and calls, speaking gRPC."""

    def _request(self, rid: int, method: str, words: int, max_tokens: int) -> tuple[str, dict[str, Any]]:
        body = grpc_frame(encode_json(grpc_request(rid, method, words, max_tokens)))
        return self.base + SERVICE + method, {"content": body, "headers": HEADERS}

    async def _response(self, call: Call, resp: httpx.Response) -> grpc.StatusCode:
        status = resp.headers.get("grpc-status")  # trailers-only: the call turned away
        if resp.status_code != 200:
            await resp.aread()
            return grpc.StatusCode.UNAVAILABLE if resp.status_code == 503 else grpc.StatusCode.UNKNOWN
        if status is not None and status != "0":
            await resp.aread()
            return grpc.StatusCode(_code(int(status)))
        await self._read_messages(call, resp)
        return grpc.StatusCode.OK

    async def _read_messages(self, call: Call, resp: httpx.Response) -> None:
        """Every length-prefixed message, timed at its last byte."""
        pending = b""
        async for chunk in resp.aiter_raw():
            pending += chunk
            now = time.time_ns()
            while len(pending) >= 5 and len(pending) >= 5 + int.from_bytes(pending[1:5], "big"):
                pending = pending[5 + int.from_bytes(pending[1:5], "big") :]
                await self._message(call, now)


def _code(value: int) -> tuple[int, str]:
    """grpc.StatusCode's value for a numeric status (its members are (code, name) pairs)."""
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code.value
    return grpc.StatusCode.UNKNOWN.value
