"""Check a lab run's client truth against its capture with tshark (the reference decoder).

The client derives each call's HTTP/2 stream id (grpcio does not expose it) and records its
connection's local port; the request body carries the request id. Here tshark lists every
stream the client opened (HEADERS towards the server) and the id in its first DATA frame,
and the two are compared.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any


def _decode_as(port: int, protocol: str, keylog: Path | str | None) -> list[str]:
    """tshark's options to read ``port`` as ``protocol``, or as TLS decrypted with
    ``keylog`` (ALPN then picks HTTP/2 or HTTP/1.1)."""
    if keylog is None:
        return ["-d", f"tcp.port=={port},{protocol}"]
    return ["-d", f"tcp.port=={port},tls", "-o", f"tls.keylog_file:{keylog}"]


def capture_streams(
    pcap: Path | str, port: int, keylog: Path | str | None = None
) -> tuple[set[tuple[int, int]], dict[tuple[int, int], int]]:
    """(client port, stream id) of every stream opened towards ``port``, and the request
    id in each stream's request body where tshark decoded it."""
    r = subprocess.run(
        ["tshark", "-r", str(pcap), *_decode_as(port, "http2", keylog),
         "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", f"http2 && tcp.dstport=={port}",
         "-T", "fields", "-e", "tcp.srcport", "-e", "http2.streamid", "-e", "http2.type",
         "-e", "http2.length", "-e", "http2.data.data"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"tshark failed: {r.stderr[-500:]}")
    streams: set[tuple[int, int]] = set()
    body_id: dict[tuple[int, int], int] = {}
    for line in r.stdout.splitlines():
        f = line.split("\t")
        if len(f) < 4 or not f[1]:
            continue
        sport = int(f[0])
        ids, types, lens = f[1].split(","), f[2].split(","), f[3].split(",")
        datas = iter(f[4].split(",")) if len(f) > 4 and f[4] else iter(())
        for sid, typ, ln in zip(ids, types, lens, strict=False):
            key = (sport, int(sid))
            if typ == "1":
                streams.add(key)
            elif typ == "0" and ln.isdigit() and int(ln) > 0:
                raw = bytes.fromhex(next(datas, "").replace(":", ""))
                rid = body_request_id(raw[5:]) if len(raw) > 5 else None
                if rid is None:
                    rid = body_request_id(raw)  # the OpenAI-compatible lab: a JSON body
                if rid is not None:
                    body_id.setdefault(key, rid)
    return streams, body_id


def body_request_id(body: bytes) -> int | None:
    """The lab's request id in a request body: gRPC lab ``{"id": N}``, OpenAI lab
    ``{"user": "lab-N"}``."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("id"), int):
        return obj["id"]
    user = obj.get("user")
    if isinstance(user, str) and user.startswith("lab-") and user[4:].isdigit():
        return int(user[4:])
    return None


def capture_exchanges(
    pcap: Path | str, port: int, keylog: Path | str | None = None
) -> tuple[set[tuple[int, int]], dict[tuple[int, int], int]]:
    """HTTP/1.1: (client port, exchange index on its connection) of every request towards
    ``port``, and the request id in each body (tshark's HTTP dissector)."""
    r = subprocess.run(
        ["tshark", "-r", str(pcap), *_decode_as(port, "http", keylog), "-o", "tcp.reassemble_out_of_order:TRUE",
         "-Y", f"http.request && tcp.dstport=={port}", "-T", "fields", "-e", "tcp.srcport", "-e", "http.file_data"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"tshark failed: {r.stderr[-500:]}")
    exchanges: set[tuple[int, int]] = set()
    body_id: dict[tuple[int, int], int] = {}
    index: dict[int, int] = {}
    for line in r.stdout.splitlines():
        sport, _, body = line.partition("\t")
        if not sport:
            continue
        key = (int(sport), index.get(int(sport), 0))
        index[key[0]] = key[1] + 1
        exchanges.add(key)
        rid = body_request_id(body.encode())
        if rid is not None:
            body_id[key] = rid
    return exchanges, body_id


def check_client_against_capture(
    client_rows: list[dict[str, Any]], pcap: Path | str, port: int, protocol: str = "grpc",
    keylog: Path | str | None = None,
) -> dict[str, Any]:
    """Compare the client's (port, stream id, request id) with the capture (HTTP/1.1:
    the exchange index on the connection stands for the stream id); HTTPS decrypted by
    tshark with the client's ``keylog``."""
    if shutil.which("tshark") is None:
        return {"checked": False, "reason": "tshark not installed"}
    if protocol == "openai-http1":
        streams, body_id = capture_exchanges(pcap, port, keylog)
    else:
        streams, body_id = capture_streams(pcap, port, keylog)
    if protocol != "grpc":
        streams = set(body_id)  # the client's GET /v1/models warm-ups carry no request id
    mine = {(r["conn_local_port"], r["stream_id"]): r["request_id"] for r in client_rows}
    matched = [k for k in mine if k in body_id]
    wrong = [k for k in matched if body_id[k] != mine[k]]
    return {
        "checked": True,
        "client_calls": len(mine),
        "capture_streams": len(streams),
        "client_only": len(set(mine) - streams),
        "capture_only": len(streams - set(mine)),
        "ids_compared": len(matched),
        "ids_mismatched": len(wrong),
        "ok": set(mine) == streams and not wrong and len(matched) > 0.9 * len(mine),
    }
