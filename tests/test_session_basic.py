"""AppSession: protocol detection, orientation, HTTP/1.1 (Upgrade, CONNECT, bodies),
resynchronisation after loss and mid-frame starts, garbage input, draining."""

from __future__ import annotations

import random

import pytest
from h2_builders import (
    GRPC_RESPONSE,
    PREFACE,
    Conv,
    Hpack,
    as_run,
    data,
    grpc_msg,
    grpc_request_headers,
    headers,
    ping,
    run_session,
    settings,
    window_update,
)

from parsers.records import TO_CLIENT, TO_SERVER, PayloadChunk
from parsers.session import AppSession, sniff_protocol


def _grpc_conn(conv: Conv, n_calls: int = 1, client_dir: int = 0, t0: float = 0) -> None:
    ch, sh = Hpack(), Hpack()
    c, s = client_dir, 1 - client_dir
    conv.send(c, PREFACE + settings(), t0)
    conv.send(s, settings() + settings(ack=True), t0 + 0.1)
    for k in range(n_calls):
        sid, t = 1 + 2 * k, t0 + 10 * (k + 1)
        conv.send(
            c,
            headers(sid, ch.block(grpc_request_headers())) + data(sid, grpc_msg(b"q"), end=True),
            t,
        )
        conv.send(s, headers(sid, sh.block(GRPC_RESPONSE)) + data(sid, grpc_msg(b"r1")), t + 1)
        conv.send(s, data(sid, grpc_msg(b"r2")), t + 2)
        conv.send(s, headers(sid, sh.block([("grpc-status", "0")]), end_stream=True), t + 3)


def test_sniff_protocol() -> None:
    assert sniff_protocol(PREFACE + settings()) == "h2c"
    assert sniff_protocol(PREFACE[:10]) is None
    assert sniff_protocol(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03") == "tls"
    assert sniff_protocol(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n") == "http1"
    assert sniff_protocol(b"HTTP/1.1 200 OK\r\n") == "http1"
    assert sniff_protocol(b"GE") is None
    assert sniff_protocol(window_update(0, 5) + ping() + settings(ack=True)) == "h2c"
    assert sniff_protocol(b"220 smtp.example.com ESMTP\r\n" * 2000) == "unknown"
    assert sniff_protocol(b"220 smtp ready\r\n", final=True) == "unknown"


def test_preface_from_tcp_server_side_flips() -> None:
    conv = Conv()
    _grpc_conn(conv, client_dir=1)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "h2c" and r.flipped
    (q,) = r.requests
    assert q.path == "/pkg.Svc/Method" and q.response_messages == 2 and q.kind == "server_stream"
    # records use the corrected orientation; offsets stay those of the chunks' direction
    assert {m.direction for m in r.messages if m.size == 2} == {TO_CLIENT}
    assert q.end_offset == conv.offsets[0]
    first_settings = next(e for e in r.h2_events if e.kind == "settings")
    assert first_settings.direction == TO_SERVER  # the preface sender's SETTINGS


def test_take_records_drains_completed_requests_incrementally() -> None:
    conv = Conv()
    _grpc_conn(conv, n_calls=3)
    s = AppSession(1, 1, 2)
    got = []
    for c in conv.chunks:
        s.feed(c)
        reqs, msgs, _evs = s.take_records()
        got.append((len(reqs), len(msgs)))
    assert sum(g[0] for g in got) == 3 and sum(g[1] for g in got) == 9
    r = s.finish(conv.ts(100))
    assert r.requests == [] and r.messages == []


def test_tls_and_unknown_are_not_decoded() -> None:
    conv = Conv()
    conv.send(0, b"\x16\x03\x01\x00\x50\x01" + bytes(80), 0)
    conv.send(1, b"\x16\x03\x03\x00\x50\x02" + bytes(80), 1)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "tls" and not r.flipped and r.requests == []
    conv2 = Conv()
    conv2.send(1, b"\x16\x03\x01\x00\x50\x01" + bytes(80), 0)  # ClientHello from TCP "server"
    assert run_session(conv2.chunks)[1].flipped
    conv3 = Conv()
    conv3.send(1, b"220 smtp ready\r\n", 0)
    conv3.send(0, b"EHLO me\r\n", 1)
    _s, r3 = run_session(conv3.chunks)
    assert r3.protocol == "unknown" and r3.requests == [] and r3.h2_events == []


def test_garbage_never_raises_or_invents_requests() -> None:
    rng = random.Random(7)
    for trial in range(30):
        conv = Conv()
        for k in range(20):
            conv.send(k % 2, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))), k)
        for force in (False, True):
            _s, r = run_session(conv.chunks, force_h2=force)
            assert r.requests == [] or all(not q.headers_known for q in r.requests), trial
            if force:
                assert r.issues or any(e.kind == "resync" for e in r.h2_events) or not r.requests


def test_garbage_inside_valid_connection_resyncs() -> None:
    conv = Conv()
    ch, sh = Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE)) + data(1, grpc_msg(b"a")), 2)
    conv.send(1, b"\x00\x00\x05\x03\x00\x00\x00\x00\x01" + b"junk!" * 10, 3)  # bad RST length
    conv.send(1, data(1, grpc_msg(b"b")) + ping() + window_update(0, 9), 4)
    conv.send(1, data(1, grpc_msg(b"c")) + ping(), 5)
    _s, r = run_session(conv.chunks)
    assert any(i.kind == "h2_bad_frame" for i in r.issues)
    assert any(e.kind == "resync" and e.direction == TO_CLIENT for e in r.h2_events)
    (q,) = r.requests
    assert q.path == "/pkg.Svc/Method" and q.end is None


def test_gap_inside_data_frame_keeps_framing() -> None:
    conv = Conv()
    ch, sh = Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    big = data(1, grpc_msg(b"x" * 1000))
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE)) + big[:300], 2)
    conv.send(1, big[500:], 3, gap=200)  # 200 bytes of the frame never captured
    conv.send(1, data(1, grpc_msg(b"after")), 4)
    conv.send(1, headers(1, sh.block([("grpc-status", "0")]), end_stream=True), 5)
    _s, r = run_session(conv.chunks)
    (q,) = r.requests
    assert q.grpc_status == 0 and q.end == conv.ts(5)
    resp = [m for m in r.messages if m.direction == TO_CLIENT]
    # the damaged message is dropped; the splitter probes at the next frame and resumes
    assert [m.size for m in resp] == [5] and resp[0].ts_ns == conv.ts(4)


def test_gap_across_frames_resyncs_and_drops_hpack_context() -> None:
    conv = Conv()
    ch = Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    conv.send(0, headers(1, ch.block(grpc_request_headers("/a.S/One")), end_stream=True), 1)
    # this block (never captured) inserts new dynamic entries the next block refers to
    lost = headers(
        3, ch.block(grpc_request_headers("/a.S/Two") + [("x-new", "1")]), end_stream=True
    )
    nxt = headers(5, ch.block(grpc_request_headers("/a.S/Two") + [("x-new", "1")]), end_stream=True)
    conv.send(0, nxt + ping() + ping(), 3, gap=len(lost))
    _s, r = run_session(conv.chunks)
    ev = [e for e in r.h2_events if e.kind == "resync"]
    assert len(ev) == 1 and ev[0].value == 0 and ev[0].detail == f"gap={len(lost)}"
    reqs = {q.stream_id: q for q in r.requests}
    assert set(reqs) == {1, 5}
    assert reqs[1].path == "/a.S/One" and reqs[1].headers_known
    # never a wrong path from a shifted table: unknown instead
    q5 = reqs[5]
    assert q5.method == "POST" and q5.path is None and not q5.headers_known
    assert any(e.kind == "headers_unknown" and e.stream_id == 5 for e in r.h2_events)


def test_http1_keepalive_content_length_and_chunked() -> None:
    conv = Conv()
    conv.send(
        0,
        b"POST /api HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhel",
        0,
    )
    conv.send(0, b"lo", 1)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", 2)
    conv.send(1, b"okay", 3)
    conv.send(0, b"GET /stream HTTP/1.1\r\nHost: h\r\n\r\n", 4)
    conv.send(1, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n", 5)
    conv.send(1, b"3;x=1\r\nfgh\r\n0\r\n\r\n", 6)
    conv.send(0, b"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n", 7)
    conv.send(1, b"HTTP/1.1 204 No Content\r\nContent-Length: 99\r\n\r\n", 8)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "http1" and not r.flipped
    a, b, c = sorted(r.requests, key=lambda q: q.stream_id)
    assert (a.protocol, a.stream_id, a.method, a.path, a.http_status) == (
        "http1",
        0,
        "POST",
        "/api",
        200,
    )
    assert a.request_start == conv.ts(0) and a.request_end == conv.ts(1)
    assert (
        a.response_headers == conv.ts(2) and a.first_message == conv.ts(3) and a.end == conv.ts(3)
    )
    assert (
        a.request_bytes == 5
        and a.response_bytes == 4
        and a.end_offset
        == conv.offsets[1]
        - (len(conv.chunks[5].data) + len(conv.chunks[6].data) + len(conv.chunks[8].data))
    )
    assert (
        b.path == "/stream"
        and b.response_bytes == 8
        and b.first_message == conv.ts(5)
        and b.end == conv.ts(6)
    )
    assert c.method == "HEAD" and c.http_status == 204 and c.end == conv.ts(8)


def test_http1_upgrade_h2c_then_implicit_stream_1() -> None:
    conv = Conv()
    sh, ch = Hpack(), Hpack()
    conv.send(
        0,
        b"GET /robots.txt HTTP/1.1\r\nHost: example\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
        0,
    )
    conv.send(
        1,
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
        + settings(),
        100,
    )
    conv.send(0, PREFACE + settings() + settings(ack=True), 101)
    conv.send(
        1,
        headers(1, sh.block([(":status", "200"), ("content-type", "text/plain")]))
        + data(1, b"User-agent: *", end=True),
        200,
    )
    conv.send(
        0,
        headers(
            3,
            ch.block(
                [
                    (":method", "GET"),
                    (":scheme", "http"),
                    (":path", "/humans.txt"),
                    (":authority", "example"),
                ]
            ),
            end_stream=True,
        ),
        201,
    )
    conv.send(1, headers(3, sh.block([(":status", "404")]), end_stream=True), 300)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "h2c" and not r.flipped
    q1, q3 = sorted(r.requests, key=lambda q: q.stream_id)
    assert (q1.stream_id, q1.method, q1.path, q1.authority, q1.protocol) == (
        1,
        "GET",
        "/robots.txt",
        "example",
        "h2",
    )
    assert q1.request_start == conv.ts(0) and q1.http_status == 200 and q1.end == conv.ts(200)
    assert q1.response_headers == conv.ts(200) and q1.response_messages == 1
    assert q3.path == "/humans.txt" and q3.http_status == 404
    st = [e for e in r.h2_events if e.kind == "settings"]
    assert any("MAX_CONCURRENT_STREAMS=100" in (e.detail or "") for e in st)  # from HTTP2-Settings


def test_http1_connect_tunnel_then_h2() -> None:
    conv = Conv()
    ch, sh = Hpack(), Hpack()
    conv.send(0, b"CONNECT 127.0.0.1:6233 HTTP/1.1\r\nHost: 127.0.0.1:6233\r\n\r\n", 0)
    conv.send(1, b"HTTP/1.1 200 Connection established\r\n\r\n", 1)
    conv.send(
        0,
        PREFACE
        + settings()
        + headers(1, ch.block(grpc_request_headers()))
        + data(1, grpc_msg(b"q"), end=True),
        2,
    )
    conv.send(1, settings() + headers(1, sh.block(GRPC_RESPONSE)) + data(1, grpc_msg(b"r")), 3)
    conv.send(1, headers(1, sh.block([("grpc-status", "0")]), end_stream=True), 4)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "h2c"
    call, connect = sorted(r.requests, key=lambda q: q.protocol)
    assert (connect.protocol, connect.method, connect.http_status, connect.end) == (
        "http1",
        "CONNECT",
        200,
        conv.ts(1),
    )
    assert call.protocol == "h2" and call.path == "/pkg.Svc/Method" and call.kind == "unary"


def test_http1_refused_upgrade_continues_as_http1() -> None:
    conv = Conv()
    conv.send(0, b"GET /a HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", 0)
    conv.send(0, b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n", 1)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", 2)
    conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", 3)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "http1" and [q.path for q in r.requests] == ["/a", "/b"]


def test_sse_over_h2() -> None:
    conv = Conv()
    ch, sh = Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    conv.send(
        0,
        headers(
            1,
            ch.block(
                [
                    (":method", "POST"),
                    (":scheme", "http"),
                    (":path", "/v1/chat"),
                    (":authority", "llm"),
                ]
            ),
            end_stream=True,
        ),
        1,
    )
    conv.send(
        1, headers(1, sh.block([(":status", "200"), ("content-type", "text/event-stream")])), 2
    )
    conv.send(1, data(1, b'data: {"t":"Hel"}\n\ndata: {"t":"lo"}\n'), 3)
    conv.send(1, data(1, b"\ndata: [DONE]\n\n", end=True), 4)
    _s, r = run_session(conv.chunks)
    (q,) = r.requests
    # data: [DONE] ends the stream and is no message (issue 13)
    assert q.kind == "sse" and q.response_messages == 2
    assert q.first_message == conv.ts(3) and q.last_message == conv.ts(4)
    assert [m.ts_ns for m in r.messages] == [conv.ts(3), conv.ts(4)]


def test_mid_connection_orientation_from_status_headers() -> None:
    """No preface, first bytes from the TCP 'client' are server frames: flipped."""
    ch, sh = Hpack(), Hpack()
    conv = Conv()
    conv.send(
        0,
        window_update(0, 100)
        + ping()
        + headers(1, sh.block(GRPC_RESPONSE))
        + data(1, grpc_msg(b"a")),
        0,
    )
    conv.send(
        1, headers(3, ch.block(grpc_request_headers())) + data(3, grpc_msg(b"q"), end=True), 1
    )
    conv.send(0, headers(1, sh.block([("grpc-status", "0")]), end_stream=True), 2)
    s = AppSession(1, 1, 2)
    for c in conv.chunks[:1]:
        s.feed(c)
    # orientation unknown yet? (the :status block already tells) - records may flow
    for c in conv.chunks[1:]:
        s.feed(c)
    r = s.finish(conv.ts(3))
    assert r.protocol == "h2c" and r.flipped
    q1 = next(q for q in r.requests if q.stream_id == 1)
    assert q1.http_status == 200 and q1.response_messages == 1 and q1.end == conv.ts(2)
    assert q1.request_start is None and not q1.headers_known
    assert all(m.direction == TO_CLIENT for m in r.messages if m.stream_id == 1)


def test_mid_frame_start_resync_event() -> None:
    """The capture begins inside a big DATA frame: skip to the first chained headers."""
    body = data(2, b"b" * 9000)
    conv = Conv()
    conv.send(1, body[3000:6000], 0)
    conv.send(1, body[6000:] + data(2, b"c" * 100) + data(2, b"", end=True), 1)
    conv.send(0, window_update(0, 9000) + window_update(2, 9000), 2)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "h2c"
    ev = [e for e in r.h2_events if e.kind == "resync"]
    assert len(ev) == 1 and ev[0].value == len(body) - 3000 and ev[0].direction == TO_CLIENT
    (q,) = r.requests
    assert q.stream_id == 2 and not q.headers_known and q.response_messages == 1
    assert q.end == conv.ts(1) and q.last_message == conv.ts(1)


def test_fuzz_corrupted_rechunked_connections_never_break() -> None:
    """Random byte corruption, random packet boundaries and capture gaps over a valid
    gRPC connection: never an exception, never a stream id that was not on the wire
    when the framing was intact."""
    rng = random.Random(11)
    clean = 0
    for _trial in range(40):
        conv, ch, sh = Conv(), Hpack(), Hpack()
        conv.send(0, PREFACE + settings({4: 3000}), 0)
        conv.send(1, settings({3: 5}) + settings(ack=True), 0)
        for sid in range(1, 20, 2):
            req = headers(
                sid, ch.block(grpc_request_headers(f"/s/M{sid}")), pad=rng.choice([None, 3])
            )
            conv.send(0, req + data(sid, grpc_msg(b"q" * rng.randrange(50)), end=True), sid)
            body = grpc_msg(b"a" * rng.randrange(3000)) + grpc_msg(b"b")
            conv.send(
                1,
                headers(sid, sh.block(GRPC_RESPONSE))
                + data(sid, body, pad=rng.choice([None, 0, 5])),
                sid + 0.5,
            )
            conv.send(1, headers(sid, sh.block([("grpc-status", "0")]), end_stream=True), sid + 0.7)
        wire = [b"".join(c.data for c in conv.chunks if c.direction == d) for d in (0, 1)]
        corrupt = rng.random() < 0.5
        for d in (0, 1):
            b = bytearray(wire[d])
            for _ in range(rng.randrange(0, 3) if corrupt else 0):
                b[rng.randrange(len(b))] = rng.randrange(256)
            wire[d] = bytes(b)
        chunks, pos, t = [], [0, 0], conv.t0
        while pos[0] < len(wire[0]) or pos[1] < len(wire[1]):
            d = rng.randrange(2)
            if pos[d] >= len(wire[d]):
                d = 1 - d
            gap = rng.randrange(1, 400) if rng.random() < 0.03 else 0
            pos[d] += gap
            piece = wire[d][pos[d] : pos[d] + rng.randrange(1, 2500)]
            if not piece:
                break
            t += 1000
            chunks.append(PayloadChunk(1, d, piece, t, len(chunks) + 1, pos[d], gap))
            pos[d] += len(piece)
        s = AppSession(1, 1, 2)
        taken_r, taken_m = [], []
        for c in chunks:
            s.feed(c)
            if rng.random() < 0.1:
                tr, tm, _te = s.take_records()
                taken_r += tr
                taken_m += tm
        r = s.finish(t)
        r.requests[:0] = taken_r
        messages = taken_m + r.messages
        assert not [i for i in r.issues if i.kind == "h2_internal_error"]
        if not corrupt:
            assert all(q.stream_id % 2 == 1 and q.stream_id < 20 for q in r.requests)
            if not any(c.gap_before for c in chunks):
                clean += 1
                assert len(r.requests) == 10 and all(q.grpc_status == 0 for q in r.requests)
                assert sum(m.direction == TO_CLIENT for m in messages) == 20
    assert clean >= 5


def test_first_chunk_after_a_hole_is_scanned_not_trusted() -> None:
    """The pipeline may start a direction with gap_before > 0 (capture began mid-stream):
    those bytes are not at a frame boundary even though the other side sent the preface."""
    conv, ch = Conv(), Hpack()
    conv.send(0, PREFACE + settings() + headers(1, ch.block(grpc_request_headers())), 0)
    tail = data(1, grpc_msg(b"x" * 500))[200:]  # inside a DATA frame
    conv.send(1, tail + data(1, grpc_msg(b"ok")) + ping() + ping(), 1, gap=1000)
    _s, r = run_session(conv.chunks)
    ev = [e for e in r.h2_events if e.kind == "resync"]
    assert len(ev) == 1 and ev[0].value == len(tail) and ev[0].detail == "gap=1000"
    assert [m.size for m in r.messages] == [2]
    assert not [i for i in r.issues if i.kind == "h2_bad_frame"]


def test_http1_sse_chunked_and_read_until_close() -> None:
    conv = Conv()
    conv.send(0, b"POST /v1/completions HTTP/1.1\r\nHost: llm\r\nContent-Length: 2\r\n\r\n{}", 0)
    conv.send(
        1,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        1,
    )
    conv.send(1, b"e\r\ndata: hello\n\n\r\n", 2)
    conv.send(1, b"f\r\ndata: [DONE]\n\n\r\n0\r\n\r\n", 3)
    conv.send(0, b"GET /old HTTP/1.0\r\n\r\n", 4)
    conv.send(1, b"HTTP/1.0 200 OK\r\n\r\nbody until close", 5)
    _s, r = run_session(conv.chunks, end_ns=conv.ts(9))
    sse, old = sorted(r.requests, key=lambda q: q.stream_id)
    # data: [DONE] ends the stream and is no message (issue 13)
    assert sse.kind == "sse" and sse.response_messages == 1
    assert sse.first_message == conv.ts(2) and sse.end == conv.ts(3)
    assert [(m.stream_id, m.direction, m.ts_ns) for m in r.messages] == [(0, TO_CLIENT, conv.ts(2))]
    assert old.path == "/old" and old.response_bytes == 16 and old.end == conv.ts(5)


def test_sniff_resumes_the_frame_scan_of_a_growing_prefix():
    """The incremental sniff (resume offset kept between chunks) decides exactly like a
    fresh sniff of the whole prefix after every chunk."""
    import random

    from parsers.session import _sniff, _sniff_from

    rng = random.Random(7)
    frame = bytes([0, 0, 4, 8, 0, 0, 0, 0, 0]) + b"\x00\x00\x10\x00"  # WINDOW_UPDATE
    for trial in range(60):
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3000)))
        tail = frame * rng.randrange(0, 4) + bytes([0, 0, 9, 0, 0, 0, 0, 0, 1])[: rng.randrange(10)]
        data = (b"\x00" if trial % 3 == 0 else b"") + noise + tail
        buf, start = bytearray(), 0
        i = 0
        while i < len(data):
            step = rng.randrange(1, 200)
            buf += data[i : i + step]
            i += step
            kind, start = _sniff_from(buf, False, start)
            assert kind == _sniff(buf), (trial, len(buf))
            if kind is not None:
                break


def test_status_digits_that_int_refuses_are_no_status() -> None:
    """':status: ²' or 'grpc-status: ³' (str.isdigit() accepts them, int() does not) is a
    garbage value, not a crash: the request is kept without a status."""
    conv = Conv()
    ch, sh = Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings() + settings(ack=True), 0.1)
    conv.send(0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1)
    conv.send(1, headers(1, sh.block([(":status", "²"), ("content-type", "application/grpc")])), 2)
    conv.send(1, headers(1, sh.block([("grpc-status", "³")]), end_stream=True), 3)
    s, r = run_session(conv.chunks)
    (req,) = r.requests
    assert req.http_status is None and req.grpc_status is None
    assert req.end == conv.ts(3)


@pytest.mark.parametrize("size", [b"-5", b"+5", b"0x5", b"5_0", b" "])
def test_http1_chunk_sizes_that_are_not_hex_digits_are_bad_chunks(size: bytes) -> None:
    """RFC 9112's chunk-size is 1*HEXDIG; int(..., 16) also takes a sign, 0x and _ (a
    negative size once moved the reader backwards: it looped, or crashed, as in the sse_rows fuzz
    target's crash in fuzz/regressions/sse_rows/)."""
    conv = Conv()
    conv.send(0, b"GET /s HTTP/1.1\r\nHost: h\r\n\r\n", 0)
    conv.send(1, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\nabcde\r\n0\r\n\r\n", 1)
    _s, r = run_session(conv.chunks)
    assert [i.kind for i in r.issues] == ["http1_bad_chunk"]
    (req,) = r.requests
    assert req.http_status == 200


def _fed(chunks: list[PayloadChunk], as_runs: bool, keylog=None) -> tuple:
    """What a session says of ``chunks``, fed one by one or in gap-free runs of up to 5
    (the later ones begin after the protocol is known)."""
    s = AppSession(chunks[0].conn_key, 40000, 50051, keylog=keylog)
    run: list[PayloadChunk] = []
    for c in [*chunks, None]:
        if as_runs and c is not None and not c.gap_before and len(run) < 5:
            run.append(c)
            continue
        if run:
            s.feed_run(as_run(run))
            run = []
        if c is not None:
            s.feed(c)
    r = s.finish(chunks[-1].ts_ns + 1)
    return (r.protocol, r.flipped, repr(r.requests), repr(r.message_rows), repr(r.h2_events), repr(r.issues), r.tls)


def test_http1_and_tls_runs_read_as_chunk_by_chunk() -> None:
    """HTTP/1.1 and TLS take a run's rows straight (no PayloadChunk each) until the
    connection changes hands: keep-alive SSE exchanges, then an Upgrade to h2c in the
    same run; a lost stretch; and a real TLS 1.2 capture with its key log."""
    from h2_builders import read_capture
    from shared_paths import CAPTURES

    from parsers.tls import KeyLog

    conv, sh = Conv(), Hpack()
    for k in range(3):
        conv.send(0, b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 2\r\n\r\n{}", 10 * k)  # fmt: skip
        conv.send(1, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", 10 * k + 1)
        for j in range(5):
            ev = b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % j
            conv.send(1, b"%x\r\n%s\r\n" % (len(ev), ev), 10 * k + 2 + j, gap=7 if (k, j) == (1, 3) else 0)
        conv.send(1, b"0\r\n\r\n", 10 * k + 8)
    conv.send(0, b"GET /robots.txt HTTP/1.1\r\nHost: example\r\nConnection: Upgrade, HTTP2-Settings\r\n"
              b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", 40)  # fmt: skip
    conv.send(1, b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n" + settings(), 41)
    conv.send(0, PREFACE + settings() + settings(ack=True), 42)
    conv.send(1, headers(1, sh.block([(":status", "200"), ("content-type", "text/plain")])) + data(1, b"ok", end=True), 43)
    whole = _fed(conv.chunks, as_runs=False)
    assert whole[0] == "h2c" and "http1_gap" in whole[5]
    assert _fed(conv.chunks, as_runs=True) == whole
    keylog = KeyLog()
    keylog.add_text((CAPTURES / "http2-16-ssl.keylog").read_text(), "http2-16-ssl.keylog")
    decrypted = 0
    for conn in read_capture(CAPTURES / "http2-16-ssl.pcapng"):
        if conn.chunks:
            whole = _fed(conn.chunks, as_runs=False, keylog=keylog)
            decrypted += bool(whole[6] and whole[6].get("tls_decrypted"))
            assert _fed(conn.chunks, as_runs=True, keylog=keylog) == whole
    assert decrypted
