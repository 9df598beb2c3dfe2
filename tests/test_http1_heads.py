"""HTTP/1.1 message heads read in C (parsers/llm/_speedups.c parse_head) as the Python
parse_head (parsers/http1.py) reads them: the same method, target, version, status and
header fields, joined the same way, and None for the same heads, on random heads: start
lines near and off the grammar, line ends of every kind, odd whitespace, repeated and
empty fields, bytes above 127. (The goldens compare whole captures with and without C.)"""

from __future__ import annotations

import random

import pytest

from parsers import http1

c_heads = pytest.importorskip("parsers.llm._speedups", reason="parsers/llm/_speedups.c not built")

_STARTS = [
    b"GET / HTTP/1.1", b"POST /v1/chat/completions HTTP/1.1", b"GET /a?b=c HTTP/1.0", b"PATCH-X_2 /x HTTP/1.1",
    b"GET  /x HTTP/1.1", b"GET /x  HTTP/1.1", b"GET /x HTTP/1.2", b"GET /x HTTP/1.1 ", b"get /x HTTP/1.1",
    b"ABCDEFGHIJKLMNOPQRST /x HTTP/1.1", b"ABCDEFGHIJKLMNOPQRSTU /x HTTP/1.1", b"GET /a\tb HTTP/1.1",
    b"GET /\xe9t\xe9 HTTP/1.1", b"GET HTTP/1.1", b"", b"GET /x HTTP/1.1\x0b", b"1GET /x HTTP/1.1",
    b"HTTP/1.1 200 OK", b"HTTP/1.0 404", b"HTTP/1.1 200", b"HTTP/1.1 2000", b"HTTP/1.1 20", b"HTTP/1.1 200  two  ",
    b"HTTP/1.2 200 OK", b"HTTP/1.1 abc", b"HTTP/1.1  200 OK", b"http/1.1 200 OK", b"HTTP/1.1 200\tOK",
]
_FIELDS = [
    b"Host: llm", b"content-type: text/event-stream", b"Content-Length:  12 ", b"X-Empty:", b": no name",
    b"no colon here", b"  Spaced-Name  :  v  ", b"Set-Cookie: a=1", b"set-cookie: b=2", b"X-Bin: \xff\xfe",
    b"X-Colon: a:b:c", b"\tX-Tab:\tv\t", b"X-Vt:\x0bv\x0c", b"UPPER-CASE: Mixed Value", b" ", b"X-\xc9: \xe9",
]
_ENDS = [b"\r\n", b"\n", b"\r\r\n", b"\r", b"\n\r"]


def _both(raw: bytes, is_request: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    def read(h: http1.Head | None) -> tuple | None:
        return None if h is None else (h.method, h.target, h.version, h.status, h.headers)

    fast = read(http1.parse_head(raw, is_request))
    with monkeypatch.context() as m:
        m.setattr(http1, "_speedups", None)
        slow = read(http1.parse_head(raw, is_request))
    return fast, slow


@pytest.mark.parametrize("seed", range(200))
def test_random_heads_read_in_c_as_in_python(seed: int, monkeypatch: pytest.MonkeyPatch):
    rng = random.Random(seed)
    start = rng.choice(_STARTS)
    lines = [start] + [rng.choice(_FIELDS) for _ in range(rng.randint(0, 8))]
    raw = b"".join(line + rng.choice(_ENDS) for line in lines)
    if rng.random() < 0.5:
        raw = raw.rstrip(b"\r\n")
    fast, slow = _both(raw, start[:5] != b"HTTP/", monkeypatch)
    assert fast == slow, raw


@pytest.mark.parametrize("start", _STARTS)
@pytest.mark.parametrize("is_request", [True, False])
def test_start_lines_read_in_c_as_in_python(start: bytes, is_request: bool, monkeypatch: pytest.MonkeyPatch):
    raw = start + b"\r\nHost: a\r\nhost: b\r\nX: 1"
    fast, slow = _both(raw, is_request, monkeypatch)
    assert fast == slow
    assert (fast is None) == (slow is None)


def test_a_head_as_a_server_sends_it(monkeypatch: pytest.MonkeyPatch):
    raw = (b"HTTP/1.1 200 OK\r\ndate: Sun, 29 Nov 2026 10:00:00 GMT\r\nserver: uvicorn\r\n"
           b"content-type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\nVary: a\r\nvary: b")  # fmt: skip
    fast, slow = _both(raw, False, monkeypatch)
    assert fast == slow == (None, None, "1.1", 200, {
        "date": "Sun, 29 Nov 2026 10:00:00 GMT", "server": "uvicorn",
        "content-type": "text/event-stream; charset=utf-8", "transfer-encoding": "chunked", "vary": "a, b"})  # fmt: skip
