"""HTTP/2 framing through AppSession with hand-built byte sequences: every frame type,
padding, priority, CONTINUATION, PUSH_PROMISE, control frames, unknown types."""

from __future__ import annotations

from h2_builders import (
    GRPC_RESPONSE,
    PREFACE,
    Conv,
    Hpack,
    continuation,
    data,
    frame,
    goaway,
    grpc_msg,
    grpc_request_headers,
    headers,
    ping,
    priority,
    push_promise,
    rst,
    run_session,
    settings,
    window_update,
)

from parsers.h2._frames import NEED_MORE, NOT_FOUND, header_plausible, scan_for_frames
from parsers.records import TO_CLIENT, TO_SERVER


def _simple_get(conv: Conv, ch: Hpack, sh: Hpack, sid: int = 1, t: float = 0.0) -> None:
    conv.send(
        0,
        headers(
            sid,
            ch.block(
                [(":method", "GET"), (":scheme", "http"), (":path", "/x"), (":authority", "a")]
            ),
            end_stream=True,
        ),
        t + 1,
    )
    conv.send(1, headers(sid, sh.block([(":status", "200"), ("content-type", "text/html")])), t + 2)
    conv.send(1, data(sid, b"hello"), t + 3)
    conv.send(1, data(sid, b"world", end=True), t + 4)


def test_plain_get_timings_and_http_kind() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    conv.send(0, PREFACE + settings({3: 100, 4: 65535}), 0)
    conv.send(1, settings({3: 128}) + settings(ack=True), 0.5)
    _simple_get(conv, ch, sh)
    s, r = run_session(conv.chunks)
    assert r.protocol == "h2c" and not r.flipped
    (q,) = r.requests
    assert (q.method, q.path, q.authority, q.http_status, q.kind) == ("GET", "/x", "a", 200, "http")
    assert q.request_start == conv.ts(1) and q.request_end == conv.ts(1)
    assert q.response_headers == conv.ts(2)
    assert q.first_message == conv.ts(3) and q.last_message == conv.ts(4) and q.end == conv.ts(4)
    assert q.response_messages == 2 and q.response_bytes == 10
    assert q.end_offset == conv.offsets[1]
    # non-gRPC bodies emit no MessageRecords
    assert r.messages == []
    kinds = [e.kind for e in r.h2_events]
    assert kinds.count("settings") == 2  # ACKs are not events
    st = [e for e in r.h2_events if e.kind == "settings"][0]
    assert "MAX_CONCURRENT_STREAMS=100" in st.detail and st.direction == TO_SERVER


def test_padding_priority_and_continuation() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    block = ch.block(grpc_request_headers("/a.B/C") + [("x-big", "v" * 300)])
    part1, part2, part3 = block[:40], block[40:100], block[100:]
    # HEADERS padded + priority, then two CONTINUATIONs, split across packets
    hf = headers(1, part1, end_headers=False, pad=7, priority=(0, 200))
    conv.send(0, hf + continuation(1, part2, end_headers=False)[:20], 1)
    conv.send(0, continuation(1, part2, end_headers=False)[20:] + continuation(1, part3), 2)
    conv.send(0, data(1, grpc_msg(b"req"), end=True, pad=3), 3)
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE), pad=2), 4)
    conv.send(1, data(1, grpc_msg(b"resp1"), pad=10), 5)
    conv.send(1, headers(1, sh.block([("grpc-status", "0")]), end_stream=True), 6)
    _s, r = run_session(conv.chunks)
    (q,) = r.requests
    assert q.path == "/a.B/C" and q.headers_known and q.content_type == "application/grpc"
    assert q.request_start == conv.ts(1)  # time of the HEADERS frame, not the CONTINUATION
    assert q.request_messages == 1 and q.response_messages == 1
    assert q.request_bytes == 8 and q.response_bytes == 10  # padding removed
    assert q.grpc_status == 0 and q.kind == "unary" and q.end == conv.ts(6)
    assert [(m.direction, m.size) for m in r.messages] == [(TO_SERVER, 3), (TO_CLIENT, 5)]
    assert not r.issues


def test_control_frames_become_events() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    conv.send(0, PREFACE + settings({1: 8192, 2: 0}) + ping(b"abcdefgh"), 0)
    conv.send(1, settings(ack=True) + ping(b"abcdefgh", ack=True) + window_update(0, 1000), 1)
    conv.send(0, priority(3, 0, 200) + priority(5, 3), 2)
    _simple_get(conv, ch, sh, sid=7, t=2)
    conv.send(
        0,
        headers(
            9,
            ch.block(
                [(":method", "GET"), (":path", "/y"), (":scheme", "http"), (":authority", "a")]
            ),
            end_stream=True,
        ),
        10,
    )
    conv.send(1, rst(9, 8), 11)
    conv.send(1, frame(0xBB, 0x3, 0, b"unknown-ext") + goaway(9, 2, b"bye"), 12)
    _s, r = run_session(conv.chunks)
    ev = {e.kind: e for e in r.h2_events}
    assert ev["ping"].detail == b"abcdefgh".hex()
    assert [e.value for e in r.h2_events if e.kind == "ping"] == [0, 1]
    assert ev["window_update"].value == 1000 and ev["window_update"].stream_id == 0
    assert ev["window_update"].direction == TO_CLIENT
    assert ev["rst_stream"].value == 8 and ev["rst_stream"].stream_id == 9
    assert ev["goaway"].value == 2 and ev["goaway"].detail.startswith("9")
    assert ev["priority"].stream_id in (3, 5)
    # PRIORITY-only anchors 3 and 5 are not requests; 7 and 9 are
    sids = sorted(q.stream_id for q in r.requests)
    assert sids == [7, 9]
    q9 = next(q for q in r.requests if q.stream_id == 9)
    assert q9.reset_code == 8 and q9.end == conv.ts(11) and q9.http_status is None
    assert not [i for i in r.issues if i.kind != "h2_resync"]


def test_push_promise_creates_promised_request() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    conv.send(
        0,
        headers(
            1,
            ch.block(
                [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "h")]
            ),
            end_stream=True,
        ),
        1,
    )
    pp = push_promise(
        1,
        2,
        sh.block(
            [(":method", "GET"), (":scheme", "http"), (":path", "/style.css"), (":authority", "h")]
        ),
    )
    conv.send(1, pp + headers(1, sh.block([(":status", "200")])), 2)
    conv.send(
        1,
        headers(2, sh.block([(":status", "200"), ("content-type", "text/css")]))
        + data(2, b"body{}", end=True),
        3,
    )
    conv.send(1, data(1, b"<html>", end=True), 4)
    _s, r = run_session(conv.chunks)
    reqs = {q.stream_id: q for q in r.requests}
    assert reqs[2].path == "/style.css" and reqs[2].request_start == conv.ts(2)
    assert (
        reqs[2].http_status == 200 and reqs[2].end == conv.ts(3) and reqs[2].response_messages == 1
    )
    assert reqs[1].path == "/" and reqs[1].end == conv.ts(4)
    assert any(e.kind == "push_promise" and e.value == 2 for e in r.h2_events)


def test_headers_frames_split_one_byte_at_a_time() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    wire0 = (
        PREFACE
        + settings()
        + headers(1, ch.block(grpc_request_headers()))
        + data(1, grpc_msg(b"x" * 40), end=True)
    )
    for k in range(len(wire0)):
        conv.send(0, wire0[k : k + 1], k * 0.001)
    conv.send(1, settings() + headers(1, sh.block(GRPC_RESPONSE)) + data(1, grpc_msg(b"y")), 5)
    conv.send(1, headers(1, sh.block([("grpc-status", "0")]), end_stream=True), 6)
    _s, r = run_session(conv.chunks)
    (q,) = r.requests
    assert q.path == "/pkg.Svc/Method" and q.request_messages == 1
    assert q.request_end == conv.ts((len(wire0) - 1) * 0.001)
    assert [m.size for m in r.messages] == [40, 1]


def test_header_plausibility_and_scan() -> None:
    assert header_plausible(4, 8, 0, 0)  # connection WINDOW_UPDATE
    assert not header_plausible(4, 4, 0, 1)  # SETTINGS on a stream
    assert not header_plausible(6, 3, 0, 1)  # RST_STREAM must be 4 bytes
    assert not header_plausible(10, 0, 0, 0)  # DATA on stream 0
    assert not header_plausible(10, 0, 0x40, 1)  # undefined flag
    assert not header_plausible(10, 12, 0, 1)  # unknown type never anchors a scan
    assert not header_plausible(5, 0, 0, 0x80000001)  # reserved bit
    wire = b"garbage!" + window_update(0, 10) + ping() + data(1, b"abc")
    assert scan_for_frames(wire, 0, len(wire), 16384) == (8, 0)
    # one frame ending at the end is not enough evidence
    single = b"xx" + data(1, b"abc")
    assert scan_for_frames(single, 0, len(single), 16384)[1] == NEED_MORE
    assert scan_for_frames(b"\xff" * 50, 0, 50, 16384)[1] == NOT_FOUND


def _plausible_length(buf: bytes, x: int, max_len: int) -> int | None:
    """The payload length of the frame header at ``x`` when it is plausible, else None."""
    length, ftype, flags = int.from_bytes(buf[x : x + 3], "big"), buf[x + 3], buf[x + 4]
    sid = int.from_bytes(buf[x + 5 : x + 9], "big")
    return length if header_plausible(length, ftype, flags, sid, max_len) else None


def _scan_reference(buf: bytes, start: int, end: int, max_len: int, final: bool) -> tuple[int, int]:
    """scan_for_frames's definition, one offset at a time (the chain rule as its docstring
    states it), to check that testing a block of offsets at once skips only offsets
    that cannot start a frame."""
    last = end - 9
    waiting = -1
    for x in range(start, last + 1):
        length = _plausible_length(buf, x, max_len)
        if length is None:
            continue
        n, y, ok = 1, x + 9 + length, True
        while n < 3:
            if y == end and n >= 2:
                break
            if y + 9 > end:
                if final and n >= 2:
                    break
                waiting = x if waiting < 0 else waiting
                ok = False
                break
            length = _plausible_length(buf, y, max_len)
            if length is None:
                ok = False
                break
            n, y = n + 1, y + 9 + length
        if ok:
            return x, 0
    if waiting >= 0:
        return waiting, NEED_MORE
    return max(start, last + 1), NOT_FOUND


def test_scan_after_long_garbage_matches_its_definition() -> None:
    import random

    from h2_builders import continuation, frame, goaway, priority, rst, settings

    rng = random.Random(7)
    makers = [
        lambda: window_update(rng.choice([0, 1, 3]), 10),
        lambda: ping(),
        lambda: data(rng.choice([1, 3, 5]), bytes(rng.randrange(0, 90))),
        lambda: continuation(rng.choice([1, 3]), b"\x82\x86"),
        lambda: frame(1, 0x04, 1, b"\x82\x86"),  # HEADERS
        lambda: rst(rng.choice([1, 3]), 8),
        lambda: settings({4: 65535}),
        lambda: goaway(3, 0),
        lambda: priority(5, 3),
    ]
    for case in range(300):
        frames = b"".join(rng.choice(makers)() for _ in range(rng.randrange(1, 6)))
        size = rng.choice([0, 10, 70, 500, 5000, 9000])
        # payload-like bytes: mostly small values, as gRPC/JSON bodies are, so that many
        # offsets pass the field checks and the chain rule decides
        junk = bytes(rng.choice(b'\x00\x01\x04\x08\x09{}"abc:0123456789 ') for _ in range(size))
        buf = bytearray(junk + frames)
        start = rng.randrange(0, len(buf))  # also inside the frames: a chain from any of them
        end = len(buf) - rng.randrange(0, 5)
        final = case % 3 == 0
        for max_len in (16384, 64):
            got = scan_for_frames(buf, start, end, max_len, final=final)
            assert got == _scan_reference(bytes(buf), start, end, max_len, final), (
                case,
                start,
                end,
            )
    wire = bytes(6000) + b"\xff" * 3000 + continuation(1, b"\x82") + ping() + data(1, b"abc")
    assert scan_for_frames(memoryview(wire), 0, len(wire), 16384) == (9000, 0)
    # a frame exactly as long as the largest allowed
    edge = b"\xff" * 200 + data(1, bytes(64)) + ping() + ping()
    assert scan_for_frames(edge, 0, len(edge), 64) == (200, 0)
