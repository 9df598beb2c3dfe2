"""LLM streaming semantics, sans-I/O (issue 13): SSE and JSON-lines framing to spec, what
OpenAI / Responses / Anthropic / TGI / Ollama / Triton streams and bodies say, the JSON
top-level scanner, KServe model_name from the protobuf, and the session-level records
(HTTP/1.1 and HTTP/2, with and without the C fast path)."""

from __future__ import annotations

import json
import random

import pytest
from h2_builders import (
    PREFACE,
    Conv,
    Hpack,
    data,
    grpc_msg,
    grpc_request_headers,
    headers,
    run_session,
    settings,
)

from parsers.grpc import proto_string
from parsers.h2 import _conn
from parsers.llm.framing import NdjsonFramer, SseFramer
from parsers.llm.jsonscan import TopLevelJson
from parsers.llm.semantics import (
    CONTENT,
    DATA,
    ERROR,
    FINAL,
    OTHER,
    START,
    LlmStream,
    model_from_path,
)
from parsers.llm.taps import EventSplitter
from parsers.records import TO_CLIENT, message_flags, message_from_row


def frame_all(framer, body: bytes, cuts: list[int]) -> list[tuple]:
    out: list = []
    prev = 0
    for c in [*cuts, len(body)]:
        framer.feed(body[prev:c], 1000 + prev, c, out)
        prev = c
    return out


def every_split(body: bytes, make) -> list[tuple]:
    """Events of ``body`` fed whole; the same (type, data) for every split into two and
    for random splits into many, ending at the same offset (one byte earlier when a
    split falls inside the CRLF that ends it: the CR already ends the line, and the
    event is not held back waiting for the next packet)."""
    whole = frame_all(make(), body, [])
    key = [(e[0], e[1]) for e in whole]

    def same(events: list[tuple], cuts: list[int]) -> None:
        assert [(e[0], e[1]) for e in events] == key, cuts
        for e, w in zip(events, whole, strict=True):
            cr_split = e[4] == w[4] - 1 and e[4] - 1000 in cuts and body[e[4] - 1001 : e[4] - 999] == b"\r\n"
            assert e[4] == w[4] or cr_split, cuts

    for c in range(1, len(body)):
        same(frame_all(make(), body, [c]), [c])
    rnd = random.Random(5)
    for _ in range(50):
        cuts = sorted(rnd.sample(range(1, len(body)), min(len(body) - 1, rnd.randrange(1, 12))))
        same(frame_all(make(), body, cuts), cuts)
    return whole


# -- SSE framing (WHATWG event stream) ------------------------------------------------


def test_sse_fields_comments_line_ends_and_bom() -> None:
    body = (
        b"\xef\xbb\xbfdata: first\n\n"  # BOM dropped
        b": keep-alive comment\n\n"  # a block of comments is no event
        b"event: add\r\ndata: two\r\ndata:  lines\r\n\r\n"  # CRLF; one space dropped only
        b"data:nospace\r\rdata\n\n"  # CR line ends; 'data' without colon = empty value
        b"id: 7\nretry: 10\n\n"  # no data: no event
        b"event: only-type\n\n"
        b"data: {\"a\": 1}\ndata: more\nunknown: x\n\n"
        b"data: unterminated"  # discarded at the end of the body
    )
    events = every_split(body, SseFramer)
    assert [(e[0], e[1]) for e in events] == [
        ("message", "first"),
        ("add", "two\n lines"),
        ("message", "nospace"),
        ("message", ""),
        ("message", '{"a": 1}\nmore'),
    ]
    # sizes cover every body byte up to the last event, each once
    assert sum(e[3] for e in events) == body.index(b"data: unterminated")
    assert events[0][4] == 1000 + len(b"\xef\xbb\xbfdata: first\n\n")


def test_sse_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    f = SseFramer()
    out: list = []
    f.feed(b"data: a\r", 0, 1, out)
    f.feed(b"\n\r", 8, 2, out)  # LF completes the CRLF; the CR is the blank line
    f.feed(b"\ndata: b\n\n", 10, 3, out)
    assert [(e[1], e[2], e[4]) for e in out] == [("a", 2, 10), ("b", 3, 20)]


def test_sse_lost_bytes_skip_the_broken_line() -> None:
    f = SseFramer()
    out: list = []
    f.feed(b'data: {"x": 1}\n\ndata: {"y"', 0, 1, out)
    f.lost()
    f.feed(b'rest of a line"}\n\ndata: ok\n\n', 60, 2, out)
    assert [e[1] for e in out] == ['{"x": 1}', "ok"]


def test_ndjson_lines() -> None:
    body = b'{"a":1}\n\n{"b":2}\r\n   \n{"c":3}\n{"unterminated":4}'
    events = every_split(body, NdjsonFramer)
    assert [e[1] for e in events] == ['{"a":1}', '{"b":2}', '{"c":3}']
    assert events[-1][4] == 1000 + body.index(b'{"unterminated')


# -- what streams say -----------------------------------------------------------------


def run_events(events: list[tuple[str, str]]) -> tuple[LlmStream, list]:
    s = LlmStream()
    return s, [s.event(t, d) for t, d in events]


def chat(delta: dict, finish: str | None = None, usage: dict | None = None, model: str = "m-1", **kw) -> str:
    obj = {"id": "c1", "object": "chat.completion.chunk", "model": model,
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **kw}]}  # fmt: skip
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj)


def test_openai_chat_stream_as_in_the_issue() -> None:
    """Role chunk, content chunks, a finish chunk, a usage chunk, [DONE]: the role chunk is
    no token, [DONE] no message, and the usage gives the counts."""
    s, said = run_events([
        ("message", chat({"role": "assistant", "content": ""})),
        ("message", chat({"content": "Hel"})),
        ("message", chat({"content": "lo"})),
        ("message", chat({}, finish="stop")),
        ("message", json.dumps({"object": "chat.completion.chunk", "model": "m-1", "choices": [],
                                "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}})),
        ("message", "[DONE]"),
        ("message", chat({"content": "after done"})),
    ])  # fmt: skip
    assert said == [(START, None), (CONTENT, None), (CONTENT, None), (FINAL, None), (FINAL, None), None, None]
    assert s.summary() == ("m-1", "stop", 11, 2)


def test_openai_tool_calls_reasoning_and_counts_from_the_stream() -> None:
    s, said = run_events([
        ("message", chat({"role": "assistant"}, usage={"prompt_tokens": 5, "completion_tokens": 0})),
        ("message", chat({"reasoning_content": "think"}, usage={"prompt_tokens": 5, "completion_tokens": 3})),
        ("message", chat({"tool_calls": [{"index": 0, "id": "t", "type": "function",
                                          "function": {"name": "get", "arguments": ""}}]},
                         usage={"prompt_tokens": 5, "completion_tokens": 5})),
        ("message", chat({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]},
                         usage={"prompt_tokens": 5, "completion_tokens": 9})),
        ("message", chat({}, finish="tool_calls", usage={"prompt_tokens": 5, "completion_tokens": 9})),
    ])  # fmt: skip
    # continuous usage (every chunk carries the running count): each chunk's growth
    assert said == [(START, 0), (CONTENT, 3), (CONTENT, 2), (CONTENT, 4), (FINAL, 0)]
    assert s.summary() == ("m-1", "tool_calls", 5, 9)
    # logprobs: one entry per token
    s, said = run_events([("message", chat({"content": "ab"}, logprobs={"content": [{"token": "a"}, {"token": "b"}]}))])
    assert said == [(CONTENT, 2)]
    # usage only at the end (include_usage): no per-chunk counts are made up
    s, said = run_events([
        ("message", chat({"content": "a"})),
        ("message", json.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 7}})),
    ])  # fmt: skip
    assert said == [(CONTENT, None), (FINAL, None)] and s.summary()[3] == 7


def test_openai_completions_and_errors() -> None:
    s, said = run_events([
        ("message", json.dumps({"object": "text_completion", "model": "gpt-3.5-turbo-instruct",
                                "choices": [{"index": 0, "text": "Hi", "finish_reason": None,
                                             "logprobs": {"tokens": ["H", "i"]}}]})),
        ("message", json.dumps({"object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]})),
        ("message", json.dumps({"error": {"message": "overloaded"}})),
        ("message", "not json"),
    ])  # fmt: skip
    assert said == [(CONTENT, 2), (FINAL, None), (ERROR, None), (DATA, None)]
    # no usage, but every content event said its tokens: their sum
    assert s.summary() == ("gpt-3.5-turbo-instruct", "length", None, 2)


def test_responses_api() -> None:
    resp = {"id": "r", "object": "response", "model": "gpt-4.1", "status": "in_progress"}
    done = {**resp, "status": "completed", "usage": {"input_tokens": 9, "output_tokens": 4}}
    s, said = run_events([
        ("response.created", json.dumps({"type": "response.created", "response": resp})),
        ("response.output_item.added", json.dumps({"type": "response.output_item.added"})),
        ("response.output_text.delta", json.dumps({"type": "response.output_text.delta", "delta": "Hi"})),
        ("response.function_call_arguments.delta", json.dumps({"type": "response.function_call_arguments.delta", "delta": "{"})),
        ("response.output_text.delta", json.dumps({"type": "response.output_text.delta", "delta": ""})),
        ("response.completed", json.dumps({"type": "response.completed", "response": done})),
    ])  # fmt: skip
    assert said == [(START, None), (OTHER, None), (CONTENT, None), (CONTENT, None), (OTHER, None), (FINAL, None)]
    assert s.summary() == ("gpt-4.1", "completed", 9, 4)
    inc = {**done, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    s, _ = run_events([("response.incomplete", json.dumps({"type": "response.incomplete", "response": inc}))])
    assert s.finish_reason == "max_output_tokens"


def test_anthropic_typed_events() -> None:
    ev = [
        ("message_start", {"type": "message_start", "message": {"id": "m", "model": "claude-x",
                                                                "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1,
                                 "content_block": {"type": "tool_use", "id": "t", "name": "get", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "input_json_delta", "partial_json": "{\"a\""}}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 15}}),
        ("message_stop", {"type": "message_stop"}),
        ("error", {"type": "error", "error": {"type": "overloaded_error"}}),
    ]  # fmt: skip
    s, said = run_events([(t, json.dumps(d)) for t, d in ev])
    assert [k for k, _ in said] == [START, START, OTHER, CONTENT, OTHER, CONTENT, CONTENT, FINAL, FINAL, ERROR]
    assert s.summary() == ("claude-x", "tool_use", 25, 15)


def test_tgi_ollama_and_triton() -> None:
    tok = lambda i, text, special=False, **kw: json.dumps(  # noqa: E731
        {"index": i, "token": {"id": i, "text": text, "logprob": -0.1, "special": special}, "generated_text": None, "details": None, **kw})
    s, said = run_events([
        ("message", tok(1, "He")),
        ("message", tok(2, "llo")),
        ("message", tok(3, "</s>", special=True, generated_text="Hello",
                        details={"finish_reason": "eos_token", "generated_tokens": 3, "seed": None})),
    ])  # fmt: skip
    # a special token with text is still a generated token
    assert said == [(CONTENT, 1), (CONTENT, 1), (CONTENT, 1)] and s.summary() == (None, "eos_token", None, 3)
    s, said = run_events([
        ("", json.dumps({"model": "llama3.2", "created_at": "t", "message": {"role": "assistant", "content": "Hi"}, "done": False})),
        ("", json.dumps({"model": "llama3.2", "created_at": "t", "message": {"role": "assistant", "content": ""}, "done": True,
                         "done_reason": "stop", "prompt_eval_count": 26, "eval_count": 298, "eval_duration": 1})),
    ])  # fmt: skip
    assert said == [(CONTENT, None), (FINAL, None)] and s.summary() == ("llama3.2", "stop", 26, 298)
    s, said = run_events([("message", json.dumps({"model_name": "ensemble", "model_version": "1", "text_output": "x"}))])
    assert said == [(CONTENT, None)] and s.model == "ensemble"


def test_json_scan_and_bodies() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": 'a "model": "no" }{ \\'}],
                       "tools": [{"model": "nested"}], "stream": True, "model": "gpt-4o"}).encode()  # fmt: skip
    for cut in range(1, len(body), 7):
        t = TopLevelJson(frozenset((b"model",)))
        t.feed(body[:cut])
        t.feed(body[cut:])
        assert t.values == {b"model": b'"gpt-4o"'} and t.done
    t = TopLevelJson(frozenset((b"model",)))
    t.feed(b"[1, 2]")
    assert t.done and not t.values
    assert model_from_path("/v2/models/resnet%2050/versions/3/infer") == "resnet 50"
    assert model_from_path("/v2/models/llm/generate_stream") == "llm"
    assert model_from_path("/v1/chat/completions") is None



def test_json_scan_passes_nested_values_over() -> None:
    """Keys after long nested values (an embeddings response's arrays of numbers, objects
    with their own "model" and colons in strings) are read, at any cut, as json reads them."""
    rnd = random.Random(4)
    doc = {"object": "list", "data": [{"object": "embedding", "index": k, "embedding": [rnd.uniform(-1, 1) for _ in range(300)],
                                       "meta": {"model": "inner", "note": "a: b, [c] {d}"}} for k in range(3)],
           "model": "embed-1", "usage": {"prompt_tokens": 8, "total_tokens": 8}}  # fmt: skip
    body = json.dumps(doc).encode()
    keys = frozenset((b"model", b"usage", b"object"))
    for _ in range(40):
        cuts = sorted(rnd.sample(range(1, len(body)), rnd.randrange(1, 30)))
        t = TopLevelJson(keys)
        for a, z in zip([0, *cuts], [*cuts, len(body)], strict=True):
            t.feed(body[a:z])
        assert t.done
        assert {k.decode(): json.loads(v) for k, v in t.values.items()} == {
            "model": "embed-1", "usage": doc["usage"], "object": "list"}, cuts

def pb_varint(v: int) -> bytes:
    """A protobuf varint, written from the encoding's specification."""
    out = b""
    while True:
        out += bytes([(v & 0x7F) | (0x80 if v > 0x7F else 0)])
        v >>= 7
        if not v:
            return out


def pb_field(no: int, wire: int, payload: bytes) -> bytes:
    return pb_varint(no << 3 | wire) + payload


def test_protobuf_model_name() -> None:
    varint, field = pb_varint, pb_field
    name = "llama-3-8b"
    msg = (field(3, 2, varint(2) + b"id") + field(2, 2, varint(1) + b"1")
           + field(7, 0, varint(300)) + field(1, 2, varint(len(name)) + name.encode()))  # fmt: skip
    assert proto_string(msg, 1) == name
    assert proto_string(msg[:-3], 1) is None  # truncated
    assert proto_string(field(1, 3, b""), 1) is None  # a group: not walkable


# -- sessions -------------------------------------------------------------------------

ROLE = b'data: {"object":"chat.completion.chunk","model":"m-7","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'


def tok(text: str) -> bytes:
    return b"data: " + chat({"content": text}, model="m-7").encode() + b"\n\n"


USAGE = b'data: {"object":"chat.completion.chunk","model":"m-7","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}\n\n'
FINISH = b"data: " + chat({}, finish="stop", model="m-7").encode() + b"\n\n"


def chunked(b: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(b), b)


REQ_BODY = json.dumps({"messages": [{"role": "user", "content": "x" * 3000}], "model": "asked-model", "stream": True}).encode()


def test_http1_openai_stream_ttft_at_first_content_and_no_done() -> None:
    conv = Conv()
    conv.send(0, b"POST /v1/chat/completions HTTP/1.1\r\nHost: llm\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(REQ_BODY) + REQ_BODY[:1000], 0)  # fmt: skip
    conv.send(0, REQ_BODY[1000:], 1)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n", 4)
    conv.send(1, chunked(ROLE), 5)
    for k, text in enumerate(("Hel", "lo", " you")):
        conv.send(1, chunked(tok(text)), 80 + 10 * k)
    conv.send(1, chunked(FINISH) + chunked(USAGE), 120)
    conv.send(1, chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n", 121)
    _s, r = run_session(conv.chunks)
    (q,) = r.requests
    assert (q.kind, q.response_messages, q.model, q.finish_reason, q.prompt_tokens, q.completion_tokens) == (
        "sse", 6, "m-7", "stop", 12, 3)
    assert q.first_byte == conv.ts(5) and q.first_message == conv.ts(80) and q.end == conv.ts(121)
    assert q.first_message_end_offset is not None and q.first_message_end_offset < conv.offsets[1]
    events = [(m.ts_ns, m.event, m.tokens) for m in r.messages]
    assert events == [(conv.ts(5), START, None), (conv.ts(80), CONTENT, None), (conv.ts(90), CONTENT, None),
                      (conv.ts(100), CONTENT, None), (conv.ts(120), FINAL, None), (conv.ts(120), FINAL, None)]  # fmt: skip


def test_http1_request_model_when_the_response_names_none() -> None:
    conv = Conv()
    conv.send(0, b"POST /generate_stream HTTP/1.1\r\nHost: tgi\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(REQ_BODY), REQ_BODY), 0)  # fmt: skip
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", 1)
    conv.send(1, b'data:{"index":1,"token":{"id":5,"text":"a","logprob":0,"special":false},"generated_text":null,"details":null}\n\n', 2)
    _s, r = run_session(conv.chunks, end_ns=conv.ts(3))
    (q,) = r.requests
    assert q.model == "asked-model" and q.completion_tokens == 1 and q.end == conv.ts(2)
    assert [(m.event, m.tokens) for m in r.messages] == [(CONTENT, 1)]


def test_http1_ndjson_and_json_bodies() -> None:
    conv = Conv()
    conv.send(0, b'POST /api/chat HTTP/1.1\r\nHost: o\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{"model":"llama3.2"}', 0)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n", 1)
    conv.send(1, chunked(b'{"model":"llama3.2","message":{"role":"assistant","content":"Hi"},"done":false}\n'), 2)
    conv.send(1, chunked(b'{"model":"llama3.2","message":{"role":"assistant","content":""},"done":true,'
                         b'"done_reason":"stop","prompt_eval_count":8,"eval_count":1}\n') + b"0\r\n\r\n", 3)  # fmt: skip
    body = json.dumps({"id": "x", "object": "chat.completion", "model": "gpt-4o-mini",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 4, "completion_tokens": 1}}).encode()  # fmt: skip
    conv.send(0, b"POST /v1/chat/completions HTTP/1.1\r\nHost: o\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 4)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body), 5)
    _s, r = run_session(conv.chunks)
    nd, js = sorted(r.requests, key=lambda q: q.stream_id)
    assert (nd.kind, nd.response_messages, nd.first_message) == ("ndjson", 2, conv.ts(2))
    assert (nd.model, nd.finish_reason, nd.prompt_tokens, nd.completion_tokens) == ("llama3.2", "stop", 8, 1)
    assert (js.kind, js.model, js.finish_reason, js.prompt_tokens, js.completion_tokens) == ("http", "gpt-4o-mini", "length", 4, 1)


def test_http1_capture_begins_inside_a_stream_and_bytes_lost() -> None:
    """The server side starts inside an SSE body (its request never seen), then a request
    and its response; later bytes of a response are lost: parsing resumes at the next head."""
    conv = Conv()
    conv.send(1, chunked(tok("mid")) * 3000, 0)  # > 32 KiB before the client says anything
    conv.send(1, chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n", 1)
    conv.send(0, b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", 2)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(tok("x")), 3)
    conv.send(1, chunked(tok("y")), 4)
    conv.send(1, chunked(tok("lost")), 5, gap=500)  # a hole before these bytes
    conv.send(1, chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n", 6)
    conv.send(0, b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n", 7)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 8)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "http1" and not r.flipped
    a, b = sorted(r.requests, key=lambda q: q.stream_id)
    assert (a.path, a.response_messages, a.first_message, a.end) == ("/a", 2, conv.ts(3), None)
    assert (b.path, b.http_status, b.end) == ("/b", 200, conv.ts(8))
    assert {i.kind for i in r.issues} >= {"http1_resync", "http1_gap"}


def test_http1_pipelined_and_connection_close() -> None:
    conv = Conv()
    conv.send(0, b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\nGET /3 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 0)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 1)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: a\n\n", 2)
    conv.send(1, b"data: b\n\n", 3)
    _s, r = run_session(conv.chunks, end_ns=conv.ts(9))
    got = [(q.path, q.http_status, q.kind, q.response_messages, q.end) for q in sorted(r.requests, key=lambda q: q.stream_id)]
    assert got == [("/1", 200, "http", 1, conv.ts(1)), ("/2", 404, "http", 0, conv.ts(1)), ("/3", 200, "sse", 2, conv.ts(3))]


@pytest.mark.parametrize("pure", [False, True])
def test_h2_sse_json_request_and_kserve_model(monkeypatch, pure) -> None:
    """SSE over h2c reads like over HTTP/1.1; the JSON request body's model is read for a
    stream the C path opened; a KServe ModelInfer request names its model."""
    if pure:
        monkeypatch.setattr(_conn, "_speedups", None)
    conv, ch, sh = Conv(), Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    req = [(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "llm"),
           ("content-type", "application/json")]  # fmt: skip
    body = json.dumps({"messages": [], "model": "asked"}).encode()
    for sid, t in ((1, 1), (3, 200)):  # the second request's HEADERS block is cached: C path
        conv.send(0, headers(sid, ch.block(req)), t)
        conv.send(0, data(sid, body, end=True), t + 1)
        conv.send(1, headers(sid, sh.block([(":status", "200"), ("content-type", "text/event-stream")])), t + 2)
        conv.send(1, data(sid, ROLE), t + 3)
        conv.send(1, data(sid, tok("a")[:40]), t + 50)
        conv.send(1, data(sid, tok("a")[40:] + FINISH + USAGE), t + 51)
        conv.send(1, data(sid, b"data: [DONE]\n\n", end=True), t + 52)
    name = b"triton-model"
    infer = b"\x0a" + bytes([len(name)]) + name + b"\x12\x011"
    kreq = grpc_request_headers("/inference.GRPCInferenceService/ModelInfer")
    for sid, t in ((5, 400), (7, 500)):
        conv.send(0, headers(sid, ch.block(kreq)), t)
        conv.send(0, data(sid, grpc_msg(infer), end=True), t + 1)
        conv.send(1, headers(sid, sh.block([(":status", "200"), ("content-type", "application/grpc")])), t + 2)
        conv.send(1, data(sid, grpc_msg(b"\x0a\x01x")), t + 3)
        conv.send(1, headers(sid, sh.block([("grpc-status", "0")]), end_stream=True), t + 4)
    _s, r = run_session(conv.chunks)
    reqs = sorted(r.requests, key=lambda q: q.stream_id)
    for q, t in zip(reqs[:2], (1, 200), strict=True):
        assert (q.kind, q.response_messages, q.model, q.finish_reason, q.prompt_tokens, q.completion_tokens) == (
            "sse", 4, "m-7", "stop", 12, 3)
        assert q.first_byte == conv.ts(t + 3) and q.first_message == conv.ts(t + 51)
    assert [q.model for q in reqs[2:]] == ["triton-model"] * 2
    kinds = [(m.stream_id, m.event) for m in r.messages if m.direction == TO_CLIENT and m.stream_id == 3]
    assert kinds == [(3, START), (3, CONTENT), (3, FINAL), (3, FINAL)]


def test_message_flags_round_trip() -> None:
    for comp, ev, tokens in ((False, 0, None), (True, 0, None), (False, CONTENT, 0), (False, DATA, 12345)):
        m = message_from_row(9, (1, 1, 0, 5, 6, message_flags(comp, ev, tokens), 7))
        assert (m.compressed, m.event, m.tokens) == (comp, ev, tokens)


def test_event_splitter_first_token_is_content_not_role() -> None:
    sp = EventSplitter()
    out: list = []
    sp.feed(ROLE + tok("x"), 0, len(ROLE + tok("x")), 0, 7, out)
    assert len(out) == 2 and sp.first_off == len(ROLE + tok("x")) and sp.first_ts == 7


def test_http1_other_methods_still_parse() -> None:
    """A method outside the common ones (WebDAV) on a keep-alive connection is a request
    head, not a reason to resynchronise."""
    conv = Conv()
    conv.send(0, b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", 0)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 1)
    conv.send(0, b"PROPFIND /d HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", 2)
    conv.send(1, b"HTTP/1.1 207 Multi-Status\r\nContent-Length: 0\r\n\r\n", 3)
    _s, r = run_session(conv.chunks)
    assert [(q.method, q.http_status) for q in sorted(r.requests, key=lambda q: q.stream_id)] == [("GET", 200), ("PROPFIND", 207)]
    assert not r.issues


# -- the per-event shortcuts read as the general loops do ---------------------------------

# events of every shape: those the SSE framer takes at once (one ``data:`` line and its blank
# line, nothing half-read before them) among those it reads line by line
MIXED_EVENTS = (
    b"\xef\xbb\xbfdata: first\n\n",  # a BOM: the first line, read line by line
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n',
    b"data:nospace\n\n",
    b"data:\n\n",  # an empty value
    b"data: \n\n",
    b"data:  two spaces\n\n",  # one space dropped only
    b"data: \xff\xfe not utf-8\n\n",
    b": comment\ndata: after a comment\n\n",
    b"event: add\ndata: typed\n\n",
    b"data: a\ndata: b\n\n",  # two data lines
    b"data: crlf\r\n\r\n",
    b"data: cr\r\r",
    b"event: only-type\n\n",  # no data: no event, but a type held...
    b"data: typed by nothing\n\n",  # ...and dropped at the blank line
    b"data: [DONE]\n\n",
)


def test_sse_framer_shortcut_reads_events_as_the_line_loop_does() -> None:
    """Events fed one a packet, and the same bytes cut at random, give the same events,
    offsets and sizes, and leave the framer in the same state, with the whole-event
    shortcut as through the line loop alone; the shortcut is taken for most of them."""
    from parsers.llm import framing

    class LineLoopOnly(SseFramer):
        __slots__ = ()

        def feed(self, b: bytes, off: int, ts: int, out: list) -> None:
            framing._Lines.feed(self, b, off, ts, out)

    class Counted(SseFramer):
        __slots__ = ("looped",)

        def __init__(self) -> None:
            super().__init__()
            self.looped = 0

        def _line_done(self, *a) -> None:
            self.looped += 1
            super()._line_done(*a)

    def state(framer: SseFramer) -> tuple:
        slots = ("_line", "_cr", "_pos", "_start", "_skip", "_first", "_data", "_type")
        return tuple(bytes(v) if isinstance(v, bytearray) else v for v in (getattr(framer, s) for s in slots))

    rnd = random.Random(11)
    events = [MIXED_EVENTS[0], *(rnd.choice(MIXED_EVENTS) for _ in range(400))]
    body = b"".join(events)
    cuts = sorted(rnd.sample(range(1, len(body)), 300))
    for pieces in (events, [body[a:z] for a, z in zip([0, *cuts], [*cuts, len(body)], strict=True)]):
        tested, reference = Counted(), LineLoopOnly()
        off = 500
        for ts, piece in enumerate(pieces):
            got, want = [], []
            tested.feed(piece, off, ts, got)
            reference.feed(piece, off, ts, want)
            assert got == want, piece
            assert state(tested) == state(reference), piece
            off += len(piece)
    # lines read one by one: each event that took the shortcut saved two
    tested, loop_only = Counted(), type("CountedLoopOnly", (Counted,), {"feed": LineLoopOnly.feed})()
    for ts, event in enumerate(events):
        tested.feed(event, 0, ts, [])
        loop_only.feed(event, 0, ts, [])
    assert loop_only.looped - tested.looped >= len(events) // 2


def test_http1_chunked_events_read_alike_in_packets_and_byte_by_byte() -> None:
    """A chunked SSE response (chunk extensions, a bare-LF chunk end, trailers) fed a
    chunk a packet, several chunks a packet and byte by byte: the same requests and
    messages (the chunk-size and chunk-end shortcuts apply to the whole ones only)."""
    from parsers.http1 import Http1Conn

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    rnd = random.Random(3)
    body = [chunked(e) for e in (ROLE, *(tok(f"t{k}") for k in range(30)), FINISH, USAGE)]
    body[3] = b"%x;ext=1\r\n%s\r\n" % (len(tok("t2")), tok("t2"))  # a chunk extension
    body[5] = body[5][:-2] + b"\n"  # a chunk ended by a bare LF
    body.append(b"0\r\nx-trailer: 1\r\n\r\n")
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

    def run(packets: list[bytes]) -> tuple[list, list]:
        h1 = Http1Conn(1)
        h1.feed(0, request, 1, 0)
        off = 0
        for ts, p in enumerate(packets):
            h1.feed(1, p, 1000 + ts, off)
            off += len(p)
        r, m = h1.drain()
        return [(q.stream_id, q.kind, q.response_messages, q.first_message, q.end, q.end_offset,
                 q.finish_reason, q.completion_tokens) for q in r], m  # fmt: skip

    # byte by byte, each byte stamped with the time of the packet it came in
    packets = [head, *body]
    stamped = [(p[k : k + 1], ts) for ts, p in enumerate(packets) for k in range(len(p))]
    h1 = Http1Conn(1)
    h1.feed(0, request, 1, 0)
    off = 0
    for b, ts in stamped:
        h1.feed(1, b, 1000 + ts, off)
        off += 1
    r, m = h1.drain()
    want = ([(q.stream_id, q.kind, q.response_messages, q.first_message, q.end, q.end_offset,
              q.finish_reason, q.completion_tokens) for q in r], m)  # fmt: skip
    assert want[0][0][2] == 33 and want[0][0][6] == "stop"
    assert run(packets) == want
    # several chunks a packet: the messages of a packet all take its time
    cuts = sorted(rnd.sample(range(1, len(body)), 8))
    grouped = [head, *(b"".join(body[a:z]) for a, z in zip([0, *cuts], [*cuts, len(body)], strict=True))]
    last_of = {}
    for ts, (a, z) in enumerate(zip([0, *cuts], [*cuts, len(body)], strict=True), start=1):
        for j in range(a, z):
            last_of[j] = ts
    stamped = [(p[k : k + 1], last_of[j]) for j, p in enumerate(body) for k in range(len(p))]
    h1 = Http1Conn(1)
    h1.feed(0, request, 1, 0)
    h1.feed(1, head, 1000, 0)
    off = len(head)
    for b, ts in stamped:
        h1.feed(1, b, 1000 + ts, off)
        off += 1
    r, m = h1.drain()
    assert run(grouped) == ([(q.stream_id, q.kind, q.response_messages, q.first_message, q.end, q.end_offset,
                              q.finish_reason, q.completion_tokens) for q in r], m)  # fmt: skip


def test_stream_events_that_are_not_one_json_value_are_data() -> None:
    """What json.loads refuses (nothing, half a value, a value and more) is a DATA event;
    what it takes after the event's whitespace is stripped is read."""
    for text in ("{", '{"a": 1} {"b": 2}', '{"a": 1}x', "[1, 2", '{"a": }', "{}}"):
        assert LlmStream().event("message", text) == (DATA, None), text
    s = LlmStream()
    assert s.event("message", ' {"choices": [{"delta": {"content": "x"}}], "model": "m"}\u00a0\n') == (CONTENT, None)
    assert s.model == "m" and s.api == "openai"
    assert LlmStream().event("message", "[1, 2]") == (DATA, None)  # a value, not an object
    # any JSON value where a name is looked for (the llm_shapes fuzz target found a list
    # as "object" raising: a list is no member of a set)
    for text in ('{"object": []}', '{"object": {"a": 1}}', '{"type": []}', '{"type": {}}', '{"object": [], "type": [1]}'):
        assert LlmStream().event("message", text) == (DATA, None), text


def test_loads_json_reads_every_text_as_json_does() -> None:
    """orjson where it agrees, json where not: the same value (type, sign of zero, key
    order, last of duplicate keys) or the same refusal as json.loads, on odd documents and
    on thousands of random ones and their random mutilations."""
    from parsers.llm.semantics import loads_json

    def outcome(fn, text: str) -> str:
        try:
            return repr(fn(text))
        except ValueError:
            return "ValueError"

    odd = ['{"a":1,"b":2,"a":3}', '{"a":1e400}', '{"a":-1e400}', '{"a":NaN}', '[Infinity, -Infinity]',
           '{"a":123456789012345678901234567890}', '{"a":-9223372036854775809}', '{"a":18446744073709551616}',
           '{"a":9223372036854775807}', '{"a":1234567890123456789.5}', '{"a":"\\ud800"}', '{"a":"\\udc00x"}',
           '{"a":-0.0}', '{"a":-0}', '{"a":1E2}', '{"a":2.2250738585072014e-308}', '{"a":5e-324}', '{"a":1e-400}',
           '{"a":"x\ty"}', '{"a":01}', '{"a":1.}', '{"a":.5}', '{"a":+1}', '{"a":"\\x"}', '{"a":1,}', '[1,]',
           '{"a":true,"b":false,"c":null}', '{"a":tru}', '{"\\u00e9":"\\u0000"}', '{"a":"\u2028"}', '{} {}', '{}x',
           '{"a":[[[[[]]]]]}', "{'a': 1}", '{"a":1}\u00a0', '{"a" : 1 , "b" : [ 1 , 2 ] }']  # fmt: skip
    for text in odd:
        assert outcome(loads_json, text) == outcome(json.loads, text), text
    rnd = random.Random(8)
    alphabet = '{}[]":,.-+eE0123456789 \\u/nrtbfx\u00e9\ud83d\ude00'

    def value(depth: int) -> object:
        k = rnd.randrange(9 if depth < 4 else 6)
        if k == 0:
            return rnd.randrange(-10**25, 10**25) if rnd.random() < 0.2 else rnd.randrange(-1000, 1000)
        if k == 1:
            return rnd.choice([rnd.uniform(-1e6, 1e6), float(f"{rnd.random()}e{rnd.randrange(-330, 320)}"), -0.0, 0.1])
        if k == 2:
            return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(8)))
        if k in (3, 4, 5):
            return rnd.choice([True, False, None])
        if k == 6:
            return [value(depth + 1) for _ in range(rnd.randrange(4))]
        return {"".join(rnd.choice("abc") for _ in range(2)): value(depth + 1) for _ in range(rnd.randrange(5))}

    for _ in range(3000):
        text = json.dumps(value(0), ensure_ascii=rnd.random() < 0.5, separators=rnd.choice([(",", ":"), (", ", ": ")]))
        assert outcome(loads_json, text) == outcome(json.loads, text), text
        cut = list(text)
        for _ in range(rnd.randrange(1, 4)):
            at = rnd.randrange(len(cut) + 1)
            op = rnd.randrange(3)
            if op == 0 and cut:
                del cut[min(at, len(cut) - 1)]
            elif op == 1:
                cut.insert(at, rnd.choice(alphabet))
            elif cut:
                cut[min(at, len(cut) - 1)] = rnd.choice(alphabet)
        text = "".join(cut)
        assert outcome(loads_json, text) == outcome(json.loads, text), text


def test_events_of_the_last_content_events_shape_read_as_in_full() -> None:
    """A chat stream's content events differ in their delta's content alone: one that is
    the last content event read in full with other plain, non-empty content is taken
    without reading it again. The same kinds, tokens and facts as reading every event
    whole, on hand-made streams (escaped, quoted and empty content, usage and logprobs that
    count tokens, two choices, the content written twice, a tool call, a new id or model,
    [DONE]) and on thousands of random ones and their random mutilations."""
    from fuzz.seeds import llm_shape_seeds
    from fuzz.targets import llm_events, read_llm_events

    for seed in llm_shape_seeds():
        texts = llm_events(seed)
        assert read_llm_events(texts, True) == read_llm_events(texts, False), texts
    # the usual stream takes the shortcut: its content events after the first are not
    # read as JSON again
    stream = LlmStream()
    texts = [chat({"role": "assistant", "content": ""})] + [chat({"content": f"tok{i} x"}) for i in range(5)]
    assert [stream.event("message", t) for t in texts] == [(START, None)] + [(CONTENT, None)] * 5
    before, after = stream._shape
    assert before.endswith('"content": "') and after.startswith('"}') and stream.model == "m-1"
    # what does not fit the shape is read whole: a quote, a backslash, a control
    # character or nothing where the content was; another id; usage
    for odd in ('a"b', "a\\\\b", "a\\nb", ""):
        text = texts[1].replace('"content": "tok0 x"', f'"content": "{odd}"')
        assert text != texts[1]
        assert stream.event("message", text) == LlmStream().event("message", text), text
    rnd = random.Random(13)
    alphabet = ['a', ' ', 'é', '中', '"', '\\', '\n', '\x01', '\\n', '\\"', '\\u00e9', '\\\\', '}', ',', 'content']

    def content() -> str:  # mostly plain words, now and then what is not plain
        if rnd.random() < 0.7:
            return "".join(rnd.choice("ab é中") for _ in range(rnd.randrange(1, 6)))
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(4)))

    def event(seq: int, style: dict) -> str:
        # mostly the stream's style with other content; now and then something else
        def odd(p: float) -> bool:
            return rnd.random() < p

        delta: dict = {"role": "assistant", "content": ""} if odd(0.05) else {"content": content()}
        if odd(0.03):
            delta["tool_calls"] = [{"index": 0, "function": {"arguments": content()}}]
        choice: dict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        if odd(0.03):
            choice["logprobs"] = {"content": [{"token": "t"}] * rnd.randrange(3)}
        if odd(0.03):
            choice["finish_reason"] = rnd.choice(["stop", ""])
        obj: dict = {"id": style["id"] if not odd(0.03) else f"c{seq}", "object": "chat.completion.chunk",
                     "model": style["model"] if not odd(0.03) else rnd.choice(["n", ""]), "choices": [choice]}  # fmt: skip
        if odd(0.03):
            obj["choices"].append({"index": 1, "delta": {"content": content()}})
        if style["usage"] or odd(0.03):
            obj["usage"] = {"prompt_tokens": 2, "completion_tokens": seq}
        if style["x"]:
            obj["x"] = {"content": delta.get("content", "") if odd(0.5) else content()}
        text = json.dumps(obj, ensure_ascii=style["ascii"], separators=style["separators"])
        # the content as written: JSON's escapes, or raw text that may break it
        written = json.dumps(delta.get("content", ""), ensure_ascii=style["ascii"])
        if odd(0.2) and written in text:
            text = text.replace(written, f'"{content()}"', 1)
        if odd(0.03):
            at = rnd.randrange(len(text) + 1)
            text = text[:at] + rnd.choice(alphabet) + text[at + 1 :]
        return rnd.choice(["[DONE]", "not json", " " + text]) if odd(0.02) else text

    for _ in range(2000):
        style = {"id": f"c{rnd.randrange(3)}", "model": rnd.choice(["m", "m-2"]), "usage": rnd.random() < 0.1,
                 "x": rnd.random() < 0.1, "ascii": rnd.random() < 0.3,
                 "separators": rnd.choice([(",", ":"), (", ", ": "), (" , ", " : ")])}  # fmt: skip
        texts = [event(seq, style) for seq in range(rnd.randrange(1, 20))]
        assert read_llm_events(texts, True) == read_llm_events(texts, False), texts
