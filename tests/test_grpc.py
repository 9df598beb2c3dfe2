"""gRPC length-prefixed message splitting: spanning frames, several per frame, probing
without headers, gRPC-Web trailers, SSE events; and through a whole session."""

from __future__ import annotations

from h2_builders import (
    GRPC_RESPONSE,
    PREFACE,
    Conv,
    Hpack,
    data,
    grpc_msg,
    grpc_request_headers,
    headers,
    rst,
    run_session,
    settings,
)

from parsers.grpc import GrpcSplitter, looks_like_grpc
from parsers.llm.taps import EventSplitter
from parsers.records import TO_CLIENT


def _feed(sp: GrpcSplitter, pieces: list[bytes], base: int = 0) -> list[tuple[int, int, int, int]]:
    out: list[tuple[int, int, int, int]] = []
    off = base
    for k, p in enumerate(pieces):
        sp.frame_start()
        sp.feed(p, 0, len(p), off, k, out)
        sp.frame_end(out)
        off += len(p)
    return out


def test_message_spanning_frames_and_several_per_frame() -> None:
    m1, m2, m3 = grpc_msg(b"a" * 100), grpc_msg(b"b" * 3, compressed=True), grpc_msg(b"")
    wire = m1 + m2 + m3
    # split inside the prefix of m1, inside its body, and with m2+m3 in one piece
    pieces = [wire[:3], wire[3:50], wire[50:105], wire[105:]]
    out = _feed(GrpcSplitter(), pieces, base=1000)
    assert out == [(2, 100, 0, 1105), (3, 3, 1, 1113), (3, 0, 0, 1118)]


def test_probe_confirms_only_on_frame_boundary() -> None:
    sp = GrpcSplitter(probing=True)
    big = grpc_msg(b"z" * 30)
    out = _feed(sp, [big[:20], big[20:] + grpc_msg(b"k")])
    assert [o[1] for o in out] == [30, 1] and sp.confirmed and not sp.probing
    # a flag byte that is not 0/1 is rejected; the next frame start probes again
    sp2 = GrpcSplitter(probing=True)
    out2 = _feed(sp2, [b"\x07garbage-bytes", grpc_msg(b"ok")])
    assert [o[1] for o in out2] == [2]
    assert looks_like_grpc(grpc_msg(b"x") + grpc_msg(b"yy"))
    assert not looks_like_grpc(b"<html>hello</html>")


def test_lost_bytes_switch_to_probing() -> None:
    sp = GrpcSplitter()
    out: list = []
    m = grpc_msg(b"q" * 10)
    sp.feed(m, 0, 8, 0, 1, out)
    sp.lost()
    sp.frame_start()
    sp.feed(m, 0, len(m), 100, 2, out)
    sp.frame_end(out)
    assert out == [(2, 10, 0, 115)]


def test_grpc_web_trailer_frame_is_not_a_message() -> None:
    sp = GrpcSplitter(keep_trailer=True)
    out: list = []
    trailer = (
        b"\x80"
        + (len(b"grpc-status:0\r\ngrpc-message:OK\r\n")).to_bytes(4, "big")
        + b"grpc-status:0\r\ngrpc-message:OK\r\n"
    )
    wire = grpc_msg(b"hi") + trailer
    sp.feed(wire, 0, len(wire), 0, 9, out)
    assert [o[1] for o in out] == [2] and b"grpc-status:0" in sp.trailer


def test_sse_events_crlf_and_split() -> None:
    sp = EventSplitter()
    out: list = []
    body = b"data: a\n\ndata: b\r\n\r\nevent: x\ndata: c\n\n"
    pieces = [body[:5], body[5:17], body[17:18], body[18:]]
    off = 0
    for p in pieces:
        sp.feed(p, 0, len(p), off, off, out)
        off += len(p)
    assert [o[1] for o in out] == [9, 11, 18]
    assert [o[3] for o in out] == [9, 20, 38]


def _grpc_call(
    conv: Conv, ch: Hpack, sh: Hpack, sid: int, req: list[bytes], resp: list[bytes], t: float
) -> None:
    conv.send(0, headers(sid, ch.block(grpc_request_headers())), t)
    for k, m in enumerate(req):
        conv.send(0, data(sid, m, end=k == len(req) - 1), t + 1 + k)
    conv.send(1, headers(sid, sh.block(GRPC_RESPONSE)), t + 10)
    for k, m in enumerate(resp):
        conv.send(1, data(sid, m), t + 11 + k)
    conv.send(1, headers(sid, sh.block([("grpc-status", "0")]), end_stream=True), t + 20)


def test_kinds_and_message_records() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    _grpc_call(conv, ch, sh, 1, [grpc_msg(b"u")], [grpc_msg(b"v")], 100)
    _grpc_call(
        conv, ch, sh, 3, [grpc_msg(b"u")], [grpc_msg(b"t1"), grpc_msg(b"t2"), grpc_msg(b"t3")], 200
    )
    _grpc_call(conv, ch, sh, 5, [grpc_msg(b"a"), grpc_msg(b"b")], [grpc_msg(b"sum")], 300)
    # bidi: a response message arrives while the client still sends
    conv.send(0, headers(7, ch.block(grpc_request_headers())) + data(7, grpc_msg(b"r1")), 400)
    conv.send(1, headers(7, sh.block(GRPC_RESPONSE)) + data(7, grpc_msg(b"s1")), 401)
    conv.send(0, data(7, grpc_msg(b"r2"), end=True), 402)
    conv.send(
        1,
        data(7, grpc_msg(b"s2")) + headers(7, sh.block([("grpc-status", "0")]), end_stream=True),
        403,
    )
    _s, r = run_session(conv.chunks)
    kinds = {q.stream_id: q.kind for q in r.requests}
    assert kinds == {1: "unary", 3: "server_stream", 5: "client_stream", 7: "bidi"}
    q3 = next(q for q in r.requests if q.stream_id == 3)
    assert q3.first_message == conv.ts(211) and q3.last_message == conv.ts(213)
    assert q3.response_messages == 3 and q3.request_end == conv.ts(201)
    msgs3 = [m for m in r.messages if m.stream_id == 3 and m.direction == TO_CLIENT]
    assert [m.index for m in msgs3] == [0, 1, 2]
    assert q3.first_message_end_offset == msgs3[0].end_offset
    assert q3.end_offset > msgs3[-1].end_offset


def test_messages_spanning_data_frames_time_of_completing_packet() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    big = grpc_msg(b"x" * 3000)
    f1, f2 = data(1, big[:1000]), data(1, big[1000:] + grpc_msg(b"tail"))
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE)) + f1, 2)
    # second frame split over three packets: the big message completes in the second
    conv.send(1, f2[:1500], 3)
    conv.send(1, f2[1500:2014], 4)
    conv.send(1, f2[2014:], 5)
    conv.send(1, headers(1, sh.block([("grpc-status", "0")]), end_stream=True), 6)
    _s, r = run_session(conv.chunks)
    resp = [m for m in r.messages if m.direction == TO_CLIENT]
    assert [(m.size, m.ts_ns) for m in resp] == [(3000, conv.ts(4)), (4, conv.ts(5))]
    # end offsets are exact direction offsets (after the message's last byte): the big
    # message ends exactly at the end of the ts=4 packet, the tail at the end of ts=5
    c4, c5 = conv.chunks[-3], conv.chunks[-2]
    assert resp[0].end_offset == c4.stream_offset + len(c4.data)
    assert resp[1].end_offset == c5.stream_offset + len(c5.data)


def test_trailers_only_and_rst() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    conv.send(0, PREFACE + settings(), 0)
    conv.send(1, settings(), 0)
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    only = sh.block(
        [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", "8"),
            ("grpc-message", "quota%20exceeded"),
        ]
    )
    conv.send(1, headers(1, only, end_stream=True), 2)
    conv.send(0, headers(3, ch.block(grpc_request_headers())) + data(3, grpc_msg(b"q")), 3)
    conv.send(0, rst(3, 8), 4)
    _s, r = run_session(conv.chunks)
    q1, q3 = sorted(r.requests, key=lambda q: q.stream_id)
    assert q1.trailers_only and q1.grpc_status == 8 and q1.grpc_message == "quota exceeded"
    assert q1.response_headers == conv.ts(2) and q1.end == conv.ts(2) and q1.response_messages == 0
    assert q3.reset_code == 8 and q3.end == conv.ts(4) and q3.request_end is None
