"""Real captures through AppSession (dpkt + naive in-order reassembly) checked against
tshark: per stream :path, :status, grpc-status, response message counts and the times of
the first and last response message (gRPC) or DATA frame (other HTTP/2)."""

from __future__ import annotations

from functools import cache

import pytest
from h2_builders import CAPTURES, TSHARK, read_capture, run_session, tshark_h2_streams

from parsers.records import TO_CLIENT

# capture, server port, tshark decode-as (None: tshark finds HTTP/2 by itself)
CLEARTEXT = [
    ("grpc-go_unary.pcapng", 50051, True),
    ("grpc-go_server_streaming.pcapng", 50051, True),
    ("grpc-go_client_streaming.pcapng", 50051, True),
    ("grpc-go_bidi_streaming.pcapng", 50051, True),
    ("derived_grpc-go_bidi_streaming_midstream.pcapng", 50051, True),
    ("grpc_person_search.pcapng", 50051, True),
    ("grpc_person_search_protobuf_with_image.pcapng", 50051, True),
    ("grpc_person_search_json_with_image.pcapng", 50052, True),
    ("grpc_person_search_protobuf_with_image-missing_headers.pcapng", 50051, True),
    ("client-grpc-web-proto-http2-send-two-unary.pcapng", 57228, True),
    ("grpc-node_via_connect_proxy.pcap", (6233, 8888), True),
    ("http2-h2c.pcap", 80, False),
    ("http2-nghttp2-push.pcap", 80, True),
    ("packet-h2-14.pcapng", 3000, True),
    ("derived_packet-h2-14_midstream.pcapng", 3000, True),
    ("dns-over-http2-post.pcap", 80, True),
    ("derived_dns-over-http2-post_midstream.pcap", 80, True),
    ("h2c_python_sample.pcapng", 8097, True),
]


@cache
def _ours(capture: str, port: int | tuple[int, ...]):
    ports = (port,) if isinstance(port, int) else port
    out = {}
    for c in read_capture(CAPTURES / capture, server_port=ports[0]):
        if c.server[1] not in ports or not c.chunks:
            continue
        _s, r = run_session(c.chunks)
        out[c.key] = r
    return out


@pytest.mark.tshark
@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
@pytest.mark.parametrize(("capture", "port", "decode_as"), CLEARTEXT)
def test_streams_match_tshark(capture: str, port: int | tuple[int, ...], decode_as: bool) -> None:
    first = port if isinstance(port, int) else port[0]
    ref = tshark_h2_streams(capture, port, [f"tcp.port=={first},http2"] if decode_as else [])
    ours = _ours(capture, port)
    assert ours, "no connection to the server port"
    checked = 0
    for (tcp_stream, sid), t in sorted(ref.items()):
        r = ours.get(tcp_stream)
        assert r is not None, f"tcp.stream {tcp_stream} missing"
        assert r.protocol == "h2c" and not r.flipped
        reqs = {q.stream_id: q for q in r.requests if q.protocol == "h2"}
        assert sid in reqs, f"stream {sid} missing"
        q = reqs[sid]
        if t.path:
            assert q.path == t.path, sid
        if t.status:
            assert q.http_status == int(t.status), sid
        if t.grpc_status:
            assert q.grpc_status == int(t.grpc_status), sid
        if t.grpc_msgs:
            got = (q.response_messages, q.first_message, q.last_message)
            assert got == (len(t.grpc_msgs), t.grpc_msgs[0], t.grpc_msgs[-1]), sid
            resp = [m for m in r.messages if m.stream_id == sid and m.direction == TO_CLIENT]
            assert [m.ts_ns for m in resp] == t.grpc_msgs
        elif t.resp_data_frames:
            got = (q.response_messages, q.first_message, q.last_message)
            want = (len(t.resp_data_frames), t.resp_data_frames[0], t.resp_data_frames[-1])
            assert got == want, sid
        checked += 1
    # nothing invented: every request we report is one tshark saw
    for tcp_stream, r in ours.items():
        for q in r.requests:
            if q.protocol == "h2":
                assert (tcp_stream, q.stream_id) in ref
        assert not [i for i in r.issues if i.kind in ("hpack_error", "h2_bad_frame")]
    assert checked


def test_bidi_kinds_and_midstream_grpc_without_headers() -> None:
    full = _ours("grpc-go_bidi_streaming.pcapng", 50051)
    (q,) = next(iter(full.values())).requests
    assert q.kind == "bidi" and (q.request_messages, q.response_messages) == (3, 3)
    mid = _ours("derived_grpc-go_bidi_streaming_midstream.pcapng", 50051)
    (m,) = next(iter(mid.values())).requests
    # request HEADERS missing: gRPC found by its framing, timings equal the full capture
    assert not m.headers_known and m.path is None and m.kind == "bidi"
    assert (m.first_message, m.last_message, m.end) == (q.first_message, q.last_message, q.end)
    assert m.response_messages == 3 and m.grpc_status == 0


def test_midstream_hpack_keeps_method_path_status() -> None:
    r = next(iter(_ours("derived_dns-over-http2-post_midstream.pcap", 80).values()))
    reqs = [q for q in r.requests if q.path == "/dns-query"]
    assert len(reqs) >= 28
    assert all(q.method == "POST" and q.http_status == 200 and not q.headers_known for q in reqs)
    assert sum(e.kind == "headers_unknown" for e in r.h2_events) >= 28


def test_midframe_capture_resyncs_where_tshark_gives_up() -> None:
    full = next(iter(_ours("http2-nghttp2-push.pcap", 80).values()))
    pushed = next(q for q in full.requests if q.stream_id == 2)
    cut = next(iter(_ours("derived_http2-nghttp2-push_midframe.pcap", 80).values()))
    assert cut.protocol == "h2c"
    ev = [e for e in cut.h2_events if e.kind == "resync"]
    assert len(ev) == 1 and ev[0].direction == TO_CLIENT and ev[0].value > 0
    (q,) = [q for q in cut.requests if q.stream_id == 2]
    # the frames after the resync point are the pushed stream's last DATA frames
    assert q.last_message == pushed.last_message and q.end == pushed.end
    assert q.response_messages == pushed.response_messages - 1
    assert any(e.kind == "goaway" for e in cut.h2_events)


def test_noise_connections_are_not_http() -> None:
    conns = read_capture(CAPTURES / "grpc-go_unary.pcapng", server_port=50051)
    noise = [c for c in conns if c.server[1] != 50051 and c.chunks]
    assert noise
    for c in noise:
        _s, r = run_session(c.chunks)
        assert r.protocol == "unknown" and r.requests == []


@pytest.mark.parametrize("capture", ["tcp_duplicates_retrans.pcap"])
def test_http1_capture(capture: str) -> None:
    (c,) = [c for c in read_capture(CAPTURES / capture) if c.chunks]
    _s, r = run_session(c.chunks)
    assert r.protocol == "http1" and not r.issues
    # tshark: 4 x POST /exhmedmx -> 200 OK
    assert [(q.stream_id, q.method, q.path, q.http_status) for q in r.requests] == [
        (k, "POST", "/exhmedmx", 200) for k in range(4)
    ]
    assert all(q.request_bytes > 1000 and q.end is not None for q in r.requests)
