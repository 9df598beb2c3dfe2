"""Seed inputs for the fuzz targets, from real captures: the shared captures (small ones,
whole) for ``capture``; each connection's first chunks of both directions for ``session``
(HTTP/2, gRPC, HTTP/1.1, TLS) and ``tls``; header blocks from them for ``hpack``."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from fuzz.targets import encode_chunks
from parsers.capture import CaptureDecoder, decode_segments
from parsers.records import DecodeStats
from parsers.tcp import TcpAnalyzer

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TAILTAP_SHARED_CAPTURES") or ROOT.parent / "shared" / "captures")


def _captures() -> list[Path]:
    found = sorted(SHARED.glob("*.pcap*")) + [ROOT / "samples" / "baseline" / "capture.pcap"]
    return [p for p in found if p.is_file()]


def _connections(path: Path, budget: int = 8192) -> list[list[tuple[int, bytes]]]:
    dec, tcp, per = CaptureDecoder(), TcpAnalyzer(), {}
    for batch in dec.feed(path.read_bytes()) + dec.close():
        for item in tcp.feed_runs(decode_segments(batch, DecodeStats(), [])):
            for c in item.chunks() if hasattr(item, "chunks") else [item]:
                got = per.setdefault(c.conn_key, [])
                if sum(len(b) for _d, b in got) < budget:
                    got.append((c.direction, bytes(c.data[:4096])))
    return list(per.values())[:4]


def write_seeds(folder: Path) -> None:
    def put(target: str, data: bytes) -> None:
        d = folder / target
        d.mkdir(parents=True, exist_ok=True)
        (d / hashlib.sha256(data).hexdigest()[:16]).write_bytes(data)

    for path in _captures():
        if path.stat().st_size <= 200_000:
            put("capture", path.read_bytes())
        for conn in _connections(path):
            put("session", encode_chunks(conn))
            if conn and conn[0][1][:1] == b"\x16":
                put("tls", encode_chunks(conn))
            for _d, b in conn[:6]:
                if len(b) > 9 and b[3] == 1:  # an HTTP/2 HEADERS frame: its block
                    put("hpack", b"\x01" + bytes([min(len(b) - 9, 255) - 1]) + b[9 : 9 + 255])
    put("hpack", b"\x00\x03\x82\x86\x84")
    # a bare TLS 1.2 ClientHello record each way, so the tls target has a start without captures
    hello = b"\x16\x03\x01\x00\x2f\x01\x00\x00\x2b\x03\x03" + bytes(32) + b"\x00\x00\x02\x00\x2f\x01\x00"
    put("tls", encode_chunks([(0, hello), (1, hello)]))
    put("session", encode_chunks([(0, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), (1, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")]))
    for seed in sse_seeds():
        put("sse_rows", seed)
    for seed in llm_shape_seeds():
        put("llm_shapes", seed)
    for seed in h2_event_seeds():
        put("h2_events", seed)
    for seed in json_top_seeds():
        put("json_top", seed)


def llm_shape_seeds() -> list[bytes]:
    """OpenAI-style chat streams (``llm_shapes``: event texts between blank lines): a role
    chunk, content chunks of plain, escaped and non-ASCII text, a finish chunk, a usage
    chunk and [DONE]; the same compact and spaced, with logprobs, with a running usage
    count, with two choices, with the content's text written twice, with a tool call."""
    def chunk(delta: str, rest: str = "", sep: str = ",") -> str:
        return ('{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
                f'"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}]{rest}}}').replace(",", sep)  # fmt: skip

    # plain, JSON-escaped (a quote, non-ASCII, a line feed, a backslash), empty, raw
    # non-ASCII, and a raw quote (not JSON)
    contents = ["Hel", "lo", r" wor\"ld", r"\u00e9t\u00e9", "caf\u00e9", r"\n", "", "a b", r"\\", "é中", 'x"y']
    usual = [chunk('{"role":"assistant","content":""}')] + [chunk(f'{{"content":"{c}"}}') for c in contents]
    usual += [chunk("{}").replace('"finish_reason":null', '"finish_reason":"stop"'),
              '{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}', "[DONE]", chunk('{"content":"x"}')]
    spaced = [e.replace(",", ", ").replace(":", ": ") for e in usual]
    logprobs = [chunk(f'{{"content":"{c}"}}').replace('"logprobs":null', '"logprobs":{"content":[{"token":"t"}]}')
                for c in contents]
    running = [chunk(f'{{"content":"{c}"}}', f',"usage":{{"prompt_tokens":3,"completion_tokens":{k}}}')
               for k, c in enumerate(contents)]
    two = [chunk(f'{{"content":"{c}"}}').replace('"finish_reason":null}]', f'"finish_reason":null}},{{"index":1,"delta":{{"content":"{c}"}}}}]')
           for c in contents]
    twice = [chunk(f'{{"content":"{c}"}}', f',"x":{{"content":"{c}"}}') for c in contents]
    tools = [chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}],"content":"a"}'), chunk('{"content":"b"}')]
    streams = (usual, spaced, logprobs, running, two, twice, tools, usual + running + usual)
    return ["\n\n".join(events).encode() for events in streams]


def json_top_seeds() -> list[bytes]:
    """JSON bodies (``json_top``: a byte that says where to cut, then the body): a chat
    request whose prompt has escapes and brackets in its strings, an embedding response
    (nested numbers), a chat response with its usage, a completion whose model comes after a
    long prompt, and a body that is no object."""
    bodies = [
        json.dumps({"messages": [{"role": "system", "content": 'be "brief" \\ {ok} [no]'},
                                 {"role": "user", "content": "caf\u00e9\n" * 20}], "model": "m", "stream": True}),
        json.dumps({"object": "list", "model": "e", "data": [{"object": "embedding", "embedding": [0.5, -1e-3] * 50}],
                    "usage": {"prompt_tokens": 4, "total_tokens": 4}}),
        json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [{"message": {"content": "}]"},
                    "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}, indent=1),
        json.dumps({"prompt": "long " * 200, "model": "m2", "max_tokens": 5}),
        "[1, 2, 3]",
    ]  # fmt: skip
    return [bytes([cut]) + body.encode() for body in bodies for cut in (0, 100, 201)]


def _chunk(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(body), body)


def sse_seeds() -> list[bytes]:
    """Event-stream bodies after the ``sse_rows`` target's response head: one event a
    chunk a row (what uvicorn sends), several a row, a chunk split between rows, the
    events the C reader leaves to Python (comments, ``event:`` lines, CRLF, multi-line
    data), ``[DONE]`` and the last chunk, then a second exchange."""
    token = [b'data: {"choices":[{"delta":{"content":" t%d"}}],"model":"m"}\n\n' % i for i in range(6)]
    usual = [(1, _chunk(t)) for t in token] + [(1, _chunk(b"data: [DONE]\n\n")), (1, b"0\r\n\r\n")]
    packed = [(1, b"".join(_chunk(t) for t in token[:3])), (1, b"".join(_chunk(t) for t in token[3:]) + b"0\r\n\r\n")]
    whole = _chunk(token[0]) + _chunk(token[1])
    split = [(1, whole[:7]), (1, whole[7:30]), (1, whole[30:])] + usual[2:]
    odd = [(1, _chunk(b": ping\n\n")), (1, _chunk(b"event: delta\ndata: {}\n\n")), (1, _chunk(b"data: a\r\n\r\n")),
           (1, _chunk(b"data: a\ndata: b\n\n")), (1, b"1A\r\n" + token[0][:26] + b"\r\n"), (1, _chunk(b"data:x\n\n"))]
    again = usual + [(0, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
                     (1, b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")] + usual
    return [encode_chunks(items) for items in (usual, packed, split, odd, again)]


def h2_event_seeds() -> list[bytes]:
    """Event streams over HTTP/2 after the ``h2_events`` target's response head: one event
    a DATA frame (what hypercorn sends), several a frame, an event over two frames, the
    events C leaves to Python, raw frames (padded DATA, a PING, DATA of another stream),
    WINDOW_UPDATEs; with the small initial window and the closing empty frame or not."""
    token = [b'data: {"choices":[{"delta":{"content":" t%d"}}],"model":"m"}\n\n' % i for i in range(6)]
    usual = [(1, t) for t in token] + [(1, b"data: [DONE]\n\n")]
    packed = [(1, token[0] + token[1]), (1, token[2][:20]), (1, token[2][20:])] + usual[3:]
    odd = [(1, b": ping\n\n"), (1, b"event: delta\n" + token[0]), (1, token[1].replace(b"\n", b"\r\n")),
           (1, b"data: a\ndata: b\n\n"), (1, b"data:\n\n"), (1, b"data: \xff\n\n")] + usual[2:]
    raw = [(1, token[0]), (0x41, b"\x00\x00\x10\x00\x08\x00\x00\x00\x01\x02" + token[1][:13] + b"\0\0"),
           (0x41, b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + bytes(8)), (1, token[2])]
    windows = [(1, t) for t in token] + [(0, b"w" * 300)] + [(1, t) for t in token]
    items = (usual, packed, odd, raw, windows)
    return [_events(chunks, flags) for chunks in items for flags in (0, 1, 2, 3)]


def _events(chunks: list[tuple[int, bytes]], flags: int) -> bytes:
    """An ``h2_events`` input: (head, bytes) with head 0 (client), 1 (server) or 0x41
    (server, raw bytes: the gap bit marks them)."""
    out = bytearray([flags])
    for head, part in chunks:
        out += bytes([(head & 1) << 7 | (0x40 if head & 0x40 else 0)]) + len(part).to_bytes(2, "big") + part
    return bytes(out)


if __name__ == "__main__":
    write_seeds(Path(__file__).resolve().parent / "seeds")
