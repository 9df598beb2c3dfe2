"""HTTP/2 flow control and concurrency limits seen from the wire."""

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
    ping,
    run_session,
    settings,
    window_update,
)

from parsers.records import TO_CLIENT


def _start(
    conv: Conv,
    ch: Hpack,
    sh: Hpack,
    client_settings: dict[int, int],
    server_settings: dict[int, int],
) -> None:
    conv.send(0, PREFACE + settings(client_settings), 0)
    conv.send(1, settings(server_settings) + settings(ack=True), 0.1)
    conv.send(0, settings(ack=True), 0.2)


def test_stream_window_exhausted_then_reopened() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    _start(conv, ch, sh, {4: 1000}, {})  # client grants 1000 bytes per stream
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE)), 2)
    chunk = grpc_msg(b"x" * 495)  # 500 bytes
    conv.send(1, data(1, chunk), 3)
    conv.send(1, data(1, chunk), 4)  # window now 0: server blocked on stream 1
    conv.send(0, window_update(1, 1000), 54)  # reopened 50 ms later
    conv.send(1, data(1, chunk) + headers(1, sh.block([("grpc-status", "0")]), end_stream=True), 55)
    _s, r = run_session(conv.chunks)
    blocked = [e for e in r.h2_events if e.kind == "flow_control_blocked"]
    assert len(blocked) == 1
    b = blocked[0]
    assert b.stream_id == 1 and b.value == 1 and b.direction == TO_CLIENT
    assert b.ts_ns == conv.ts(4) and abs(b.duration_ms - 50.0) < 1e-6
    assert any(e.kind == "window_update" and e.value == 1000 for e in r.h2_events)


def test_connection_window_blocked_and_unresolved_at_end() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    _start(conv, ch, sh, {4: 1 << 20}, {})
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE)), 2)
    payload = grpc_msg(b"y" * 16379)  # 16384-byte frames
    for k in range(4):
        conv.send(1, data(1, payload), 3 + k)
    # 4 x 16384 = 65536 > 65535: connection window exhausted, never reopened
    _s, r = run_session(conv.chunks, end_ns=conv.ts(1006))
    blocked = [e for e in r.h2_events if e.kind == "flow_control_blocked"]
    assert len(blocked) == 1 and blocked[0].value == 0 and blocked[0].detail == "unresolved"
    assert abs(blocked[0].duration_ms - 1000.0) < 1e-6


def test_end_stream_frame_that_empties_window_is_not_blocked() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    _start(conv, ch, sh, {4: 505}, {})
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE)), 2)
    conv.send(1, data(1, grpc_msg(b"z" * 500), end=True), 3)
    _s, r = run_session(conv.chunks)
    assert not [e for e in r.h2_events if e.kind == "flow_control_blocked"]


def test_initial_window_change_shifts_open_streams() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    _start(conv, ch, sh, {4: 100}, {})
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE)) + data(1, grpc_msg(b"a" * 45)), 2)  # 50 left
    conv.send(0, settings({4: 40}), 3)  # delta -60: window -10, server must wait
    conv.send(0, window_update(1, 100), 13)
    conv.send(1, headers(1, sh.block([("grpc-status", "0")]), end_stream=True), 14)
    _s, r = run_session(conv.chunks)
    # the settings change pushed the open stream's window to -10: blocked until the
    # WINDOW_UPDATE 10 ms later
    (b,) = [e for e in r.h2_events if e.kind == "flow_control_blocked"]
    assert b.stream_id == 1 and b.ts_ns == conv.ts(3) and abs(b.duration_ms - 10.0) < 1e-6


def test_max_concurrent_streams_reached() -> None:
    conv, ch, sh = Conv(), Hpack(), Hpack()
    _start(conv, ch, sh, {}, {3: 2})
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    conv.send(
        0, headers(3, ch.block(grpc_request_headers())) + data(3, grpc_msg(b"q"), end=True), 2
    )
    _s, r = run_session(conv.chunks)
    ev = [e for e in r.h2_events if e.kind == "max_concurrent_streams"]
    assert len(ev) == 1 and ev[0].value == 2 and ev[0].stream_id == 3 and ev[0].ts_ns == conv.ts(2)


def _stream_1_half_sent() -> tuple[Conv, Hpack, Hpack, bytes]:
    """The client grants 1000 bytes a stream and asks on stream 1; the server has sent 500
    of them (at 3 ms). Returns the conversation, both HPACK encoders and a 500-byte DATA
    payload."""
    conv, ch, sh = Conv(), Hpack(), Hpack()
    _start(conv, ch, sh, {4: 1000}, {})
    conv.send(0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1)
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE)), 2)
    chunk = grpc_msg(b"x" * 495)  # 500 bytes
    conv.send(1, data(1, chunk), 3)
    return conv, ch, sh, chunk


def test_a_sender_s_missed_bytes_leave_its_blocks_seen() -> None:
    """Past DATA the capture missed, the server's windows are upper bounds: a stream
    opened after the gap is followed exactly, and its exhausted window is a block."""
    conv, ch, sh, chunk = _stream_1_half_sent()
    lost = data(1, grpc_msg(b"z" * 86))  # a 100-byte DATA frame of stream 1 the capture missed
    conv.send(0, headers(3, ch.block(grpc_request_headers())) + data(3, grpc_msg(b"q"), end=True), 4)
    conv.send(1, data(3, chunk), 5, gap=len(lost))
    conv.send(1, data(3, chunk), 6)  # stream 3's 1000 bytes gone: blocked
    conv.send(0, window_update(3, 1000), 56)
    conv.send(1, data(3, chunk), 57)
    _s, r = run_session(conv.chunks)
    blocked = [e for e in r.h2_events if e.kind == "flow_control_blocked"]
    assert [(b.stream_id, b.ts_ns) for b in blocked] == [(3, conv.ts(6))]
    assert abs(blocked[0].duration_ms - 50.0) < 1e-6


def test_a_receiver_s_missed_bytes_make_no_block() -> None:
    """A WINDOW_UPDATE the capture missed gave the server its window back: the windows of
    the connection and of the streams open then have no bound past it, and sending what
    the capture did not see granted is no block (before, it read as one, blamed on the
    client's flow control). A stream opened later is followed from the initial window."""
    conv, ch, sh, chunk = _stream_1_half_sent()
    conv.send(0, ping(), 4, gap=len(window_update(1, 1000)))  # the update itself was missed
    conv.send(1, data(1, chunk), 5)  # the 1000 bytes seen granted are sent: 1000 more remain
    conv.send(0, headers(3, ch.block(grpc_request_headers())) + data(3, grpc_msg(b"q"), end=True), 6)
    conv.send(1, headers(3, sh.block(GRPC_RESPONSE)) + data(3, chunk), 7)
    conv.send(1, data(3, chunk), 8)  # stream 3's 1000 bytes gone: blocked
    _s, r = run_session(conv.chunks, end_ns=conv.ts(1008))
    blocked = [e for e in r.h2_events if e.kind == "flow_control_blocked"]
    assert [(b.stream_id, b.ts_ns, b.detail) for b in blocked] == [(3, conv.ts(8), "unresolved")]


def test_data_sent_on_a_window_seen_exhausted_makes_no_block() -> None:
    """A sender that goes on sending on a window the capture saw exhausted had more
    window than the capture saw given (bytes missed, or a sender that ignores flow
    control, as the benchmark's generated capture): no block, before or after."""
    conv, ch, sh, chunk = _stream_1_half_sent()
    conv.send(1, data(1, chunk), 4)  # window 0 as seen
    conv.send(1, data(1, chunk), 5)  # yet more: it was not
    conv.send(1, data(1, chunk), 6)
    conv.send(0, window_update(1, 1000), 50)
    _s, r = run_session(conv.chunks, end_ns=conv.ts(1000))
    assert [e for e in r.h2_events if e.kind == "flow_control_blocked"] == []
