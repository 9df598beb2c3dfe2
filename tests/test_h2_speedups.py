"""The optional C fast path (parsers/h2/_speedups.c) gives exactly what the pure-Python
HTTP/2 code gives: same records, same messages, same events, same flow-control state, on
hand-built conversations that walk every exit of the fast path and on real captures."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from h2_builders import (
    CAPTURES,
    GRPC_RESPONSE,
    Conv,
    Hpack,
    as_run,
    continuation,
    data,
    frame,
    grpc_msg,
    grpc_request_headers,
    headers,
    read_capture,
    rst,
    settings,
    window_update,
)

from parsers.h2 import _conn
from parsers.records import PayloadChunk
from parsers.session import AppSession

pytestmark = pytest.mark.skipif(_conn._speedups is None, reason="C extension not built (pip install -e .)")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def _feed_group(s: AppSession, group: list[PayloadChunk], runs: bool) -> None:
    """Feed chunk by chunk, or gap-free stretches as ChunkRuns (gaps one by one)."""
    if not runs:
        for c in group:
            s.feed(c)
        return
    pending: list[PayloadChunk] = []
    for c in group + [None]:  # type: ignore[list-item]
        if c is None or c.gap_before:
            if pending:
                s.feed_run(as_run(pending))
                pending = []
            if c is not None:
                s.feed(c)
        else:
            pending.append(c)


def _run(chunks: list[PayloadChunk], pure: bool, monkeypatch, runs: bool = False, cols: bool = False) -> tuple:
    with monkeypatch.context() as m:
        if pure:
            m.setattr(_conn, "_speedups", None)
        s = AppSession(chunks[0].conn_key, 40000, 50051)
        rows = []
        # rows are taken after chunk 0, 7, 14, ...: the same points in both feeding modes
        bounds = [0, 1] + list(range(8, len(chunks), 7)) + [len(chunks)]
        for a, z in zip(bounds[:-1], bounds[1:], strict=True):
            if a >= z:
                continue
            _feed_group(s, chunks[a:z], runs)
            if (z - 1) % 7 == 0:
                if cols:  # the (n, 7) columns hold the same rows
                    reqs, a, evs = s.take_columns()
                    msgs = [tuple(r) for r in a.tolist()]
                else:
                    reqs, msgs, evs = s.take_rows()
                rows.append((reqs, msgs, [vars_of(e) for e in evs]))
        state = _state(s)
        r = s.finish(chunks[-1].ts_ns)
        return rows, r.requests, r.message_rows, [vars_of(e) for e in r.h2_events], state


_STREAM_COUNTERS = ("sid", "msgs", "first_msg_ts", "first_msg_off", "last_msg_ts", "msg_before_end", "msg_after_first",
                    "data_frames", "first_data_ts", "first_data_off", "last_data_ts", "data_bytes", "last_off",
                    "end_ts", "end_off")


def _state(s: AppSession) -> tuple | None:
    """What the C fast paths change besides records: framing, flow control, stream ids."""
    h2 = s._h2
    if h2 is None:
        return None
    splitters = [(st.sid, st.headers_known, list(st.mode),
                  [(type(sp).__name__, getattr(sp, "left", None), getattr(sp, "probing", None)) for sp in st.splitter])
                 for st in h2.streams.values()]
    # the open streams' counters (a finished stream's are in its record)
    counters = [tuple(getattr(st, f) for f in _STREAM_COUNTERS) for st in h2.streams.values()]
    return (
        [(D.base, D.frames, D.plain, D.data_left, D.pad_left) for D in h2.dirs],
        splitters,
        counters,
        [(fs.conn, dict(fs.streams), dict(fs.blocked)) for fs in h2.flows],
        (list(h2.closed), list(h2.streams), h2.first_opened, h2.last_opened, h2._frame_no),
    )


def vars_of(obj) -> tuple:
    return tuple(getattr(obj, f) for f in obj.__slots__)


def _assert_same(chunks: list[PayloadChunk], monkeypatch) -> None:
    """C and Python, chunk by chunk and as ChunkRuns: four times the same result."""
    fast = _run(chunks, False, monkeypatch)
    pure = _run(chunks, True, monkeypatch)
    assert fast == pure
    assert _run(chunks, False, monkeypatch, runs=True) == fast
    assert _run(chunks, True, monkeypatch, runs=True) == fast
    assert _run(chunks, False, monkeypatch, runs=True, cols=True) == fast
    assert _run(chunks, True, monkeypatch, cols=True) == fast


def _token_stream(windows: bool, streams: int = 3, tokens: int = 40, seed: int = 1) -> list[PayloadChunk]:
    """gRPC server streams, one DATA frame per chunk; optional WINDOW_UPDATEs; some
    compressed, empty, padded, split and multi-message frames mixed in."""
    rnd = random.Random(seed)
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    t = 0.0
    cv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings({4: 30000}), t)
    cv.send(1, settings() + settings(ack=True), t + 0.1)
    sid = 1
    for _ in range(streams):
        t += 1
        cv.send(0, headers(sid, hc.block(grpc_request_headers())) + data(sid, grpc_msg(b"q" * 20), end=True), t)
        t += 1
        cv.send(1, headers(sid, hs.block(GRPC_RESPONSE)), t)
        for k in range(tokens):
            t += 0.5
            kind = rnd.random()
            if kind < 0.75:
                payload = data(sid, grpc_msg(b"tok%04d" % k, compressed=k % 5 == 0))
                cv.send(1, payload, t)
            elif kind < 0.8:
                cv.send(1, data(sid, grpc_msg(b"")), t)
            elif kind < 0.85:
                cv.send(1, data(sid, grpc_msg(b"padded"), pad=3), t)
            elif kind < 0.9:  # one frame over two chunks
                payload = data(sid, grpc_msg(b"split" * 10))
                cv.send(1, payload[:12], t)
                cv.send(1, payload[12:], t + 0.1)
            elif kind < 0.95:  # two messages in one frame
                cv.send(1, data(sid, grpc_msg(b"a") + grpc_msg(b"bb")), t)
            else:  # two frames in one chunk
                cv.send(1, data(sid, grpc_msg(b"x")) + data(sid, grpc_msg(b"y")), t)
            if windows and k % 9 == 8:
                cv.send(0, window_update(0, 400) + window_update(sid, 300), t + 0.2)
        t += 1
        cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t)
        sid += 2
    return cv.chunks


@pytest.mark.parametrize("windows", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_token_streams_same_with_and_without_c(monkeypatch, windows, seed):
    _assert_same(_token_stream(windows, seed=seed), monkeypatch)


def _segments(wire: bytes, rnd: random.Random) -> list[bytes]:
    """A sender's bytes cut as TCP cuts them: full segments, now and then a short one."""
    out, i = [], 0
    while i < len(wire):
        n = 1448 if rnd.random() < 0.8 else rnd.randrange(1, 1448)
        out.append(wire[i : i + n])
        i += n
    return out


def _large_messages(seed: int) -> list[PayloadChunk]:
    """Requests and responses whose messages span many segments (and responses many
    DATA frames), cut into segments wherever they fall; streams interleave by segment."""
    rnd = random.Random(seed)
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    t = 0.0
    cv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings({4: 1 << 24}), t)
    cv.send(1, settings() + settings(ack=True), t + 0.1)
    cv.send(0, window_update(0, 1 << 24), t + 0.2)
    wires: dict[tuple[int, int], list[bytes]] = {}
    for sid in (1, 3, 5):
        body = grpc_msg(rnd.randbytes(rnd.randrange(2_000, 6_000)))
        wires[(0, sid)] = _segments(headers(sid, hc.block(grpc_request_headers())) + data(sid, body, end=True), rnd)
        response = b"".join(grpc_msg(rnd.randbytes(rnd.randrange(0, 40_000))) for _ in range(rnd.randrange(1, 4)))
        frames = b"".join(data(sid, response[i : i + 16_384]) for i in range(0, len(response), 16_384))
        trailers = headers(sid, hs.block([("grpc-status", "0")]), end_stream=True)
        wires[(1, sid)] = _segments(headers(sid, hs.block(GRPC_RESPONSE)) + frames + trailers, rnd)
    for d, sid in [(0, 1), (0, 3), (0, 5)]:  # the requests first, then the responses interleaved
        for seg in wires.pop((d, sid)):
            t += 0.001
            cv.send(d, seg, t)
    while wires:
        key = rnd.choice(sorted(wires))
        t += 0.001
        cv.send(key[0], wires[key].pop(0), t)
        if not wires[key]:
            del wires[key]
    return cv.chunks


@pytest.mark.parametrize("seed", range(6))
def test_large_messages_same_with_and_without_c(monkeypatch, seed):
    """Messages over many segments and DATA frames, cut anywhere: whole frames in C, the
    rest in Python, the same framing and splitter state as Python alone."""
    chunks = _large_messages(seed)
    assert len(chunks) > 40
    _assert_same(chunks, monkeypatch)


def test_unknown_stream_and_bad_lengths_fall_back(monkeypatch):
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    cv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings(), 0)
    cv.send(1, settings(), 0.1)
    cv.send(0, headers(1, hc.block(grpc_request_headers()), end_stream=True), 1)
    cv.send(1, headers(1, hs.block(GRPC_RESPONSE)), 2)
    cv.send(1, data(1, grpc_msg(b"ok")), 3)
    cv.send(1, data(3, grpc_msg(b"no such stream")), 4)  # unknown stream
    bad = bytearray(data(1, grpc_msg(b"len")))
    bad[13] += 1  # gRPC length one too long: continues in the next frame
    cv.send(1, bytes(bad), 5)
    cv.send(1, data(1, b"X" + grpc_msg(b"after")), 6)
    cv.send(1, frame(0x0A, 0, 1, b"unknown type"), 7)
    cv.send(1, data(1, grpc_msg(b"tail"), end=True), 8)
    _assert_same(cv.chunks, monkeypatch)


def test_bench_capture_same_with_and_without_c(tmp_path, monkeypatch):
    from gen_grpc_capture import write_capture

    path = tmp_path / "g.pcap"
    write_capture(str(path), 4000, connections=2, tokens=12)
    for conn in read_capture(path, 50051):
        if conn.chunks:
            _assert_same(conn.chunks, monkeypatch)


@pytest.mark.skipif(not CAPTURES.exists(), reason="shared captures not present")
@pytest.mark.parametrize(
    "name",
    ["grpc-go_bidi_streaming.pcapng", "grpc-go_server_streaming.pcapng", "grpc-go_unary.pcapng",
     "derived_grpc-go_bidi_streaming_midstream.pcapng", "http2-nghttp2-push.pcap", "packet-h2-14.pcapng"],
)
def test_shared_captures_same_with_and_without_c(monkeypatch, name):
    for conn in read_capture(CAPTURES / name):
        if conn.chunks:
            _assert_same(conn.chunks, monkeypatch)


def test_sent_runs_same_as_python_counting():
    from ingest_reference import sent_totals

    from telemetry.ingest import RATE_BUCKET_NS

    rnd = random.Random(7)
    chunks = [
        PayloadChunk(rnd.choice((1, 2, 9)), rnd.choice((0, 1)), b"x" * rnd.randrange(0, 1500),
                     1_700_000_000_000_000_000 + k * rnd.choice((1_000, 30_000_000)), k, 0)
        for k in range(3000)
    ]

    fast = _conn._speedups.sent_runs(chunks, RATE_BUCKET_NS)
    assert {key: tuple(v) for key, v in fast.items()} == sent_totals(chunks)
    assert _conn._speedups.sent_runs([], RATE_BUCKET_NS) == {}


def _run_whole(chunks: list[PayloadChunk], pure: bool, monkeypatch, runs: bool) -> tuple:
    """Everything in one go (one ChunkRun for all gap-free chunks): long streaks in C."""
    with monkeypatch.context() as m:
        if pure:
            m.setattr(_conn, "_speedups", None)
        s = AppSession(chunks[0].conn_key, 40000, 50051)
        _feed_group(s, chunks, runs)
        state = _state(s)
        r = s.finish(chunks[-1].ts_ns)
        return r.requests, r.message_rows, [vars_of(e) for e in r.h2_events], state


def _assert_same_whole(chunks: list[PayloadChunk], monkeypatch) -> None:
    want = _run_whole(chunks, True, monkeypatch, runs=False)
    assert _run_whole(chunks, False, monkeypatch, runs=True) == want
    assert _run_whole(chunks, False, monkeypatch, runs=False) == want


_WEB_REQUEST = [(k, "application/grpc-web+proto" if k == "content-type" else v) for k, v in grpc_request_headers()]
_WEB_RESPONSE = [(":status", "200"), ("content-type", "application/grpc-web+proto")]


def _open_calls(client_settings: dict[int, int], sids, step: float, reply_after: float,
                web: tuple[int, ...] = ()) -> tuple[Conv, Hpack, Hpack, float]:
    """A gRPC connection's preface and settings, then a call opened on each of ``sids``
    (``step`` s apart: the request's HEADERS and message, the response HEADERS
    ``reply_after`` later; grpc-web on ``web``): the conversation, both HPACK encoders and
    the time of the last call."""
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    t = 0.0
    cv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings(client_settings), t)
    cv.send(1, settings() + settings(ack=True), t + 0.1)
    for sid in sids:
        t += step
        cv.send(0, headers(sid, hc.block(_WEB_REQUEST if sid in web else grpc_request_headers())) +
                data(sid, grpc_msg(b"q" * 9), end=True), t)
        cv.send(1, headers(sid, hs.block(_WEB_RESPONSE if sid in web else GRPC_RESPONSE)), t + reply_after)
    return cv, hc, hs, t


def _streaks(window: int, seed: int) -> list[PayloadChunk]:
    """Two interleaved server streams with long runs of whole-message DATA frames, a small
    stream window that runs out mid-streak (the window update comes later), empty and
    compressed messages, and an END_STREAM DATA frame ending a streak."""
    rnd = random.Random(seed)
    cv, _hc, hs, t = _open_calls({4: window}, (1, 3), 1, 0.1)
    for k in range(300):
        t += 0.01
        sid = 1 if (k // rnd.choice((1, 3, 17))) % 2 == 0 else 3
        body = b"tok%04d" % k if k % 13 else b""
        cv.send(1, data(sid, grpc_msg(body, compressed=k % 7 == 0)), t)
        if k % 97 == 96:
            cv.send(0, window_update(0, 5000) + window_update(1, 2000) + window_update(3, 2000), t + 0.001)
    cv.send(1, data(1, grpc_msg(b"last"), end=True), t + 0.1)
    for sid in (1, 3):
        cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.2)
    return cv.chunks


@pytest.mark.parametrize("window", [65535, 700, 120])
@pytest.mark.parametrize("seed", [1, 2])
def test_long_streaks_same_as_chunk_by_chunk(monkeypatch, window, seed):
    _assert_same_whole(_streaks(window, seed), monkeypatch)


def _interleaved(streams: int, window: int, seed: int) -> list[PayloadChunk]:
    """Many concurrent server streams whose DATA frames alternate at random, written
    together as real servers coalesce them (one to four frames of any streams a chunk):
    more streams than C keeps streaks for, windows that run out, a stream ending
    mid-stretch and another opening, a client stream's frames in between."""
    rnd = random.Random(seed)
    live = [1 + 2 * k for k in range(streams)]
    cv, hc, hs, t = _open_calls({4: window}, live, 0.01, 0.001)
    next_sid = 1 + 2 * streams
    for k in range(600):
        t += 0.003
        frames = b""
        for _ in range(rnd.choice((1, 1, 2, 3, 4))):
            sid = rnd.choice(live)
            body = b"tok%05d" % k if k % 11 else b""
            if rnd.random() < 0.01 and len(live) > 2:  # a stream ends: its trailers
                live.remove(sid)
                frames += data(sid, grpc_msg(body), end=False)
                frames += headers(sid, hs.block([("grpc-status", "0")]), end_stream=True)
                continue
            frames += data(sid, grpc_msg(body, compressed=k % 17 == 0))
        cv.send(1, frames, t)
        if k % 60 == 59:  # the client: a window update and a new request
            updates = window_update(0, 8000) + b"".join(window_update(s, 3000) for s in live)
            cv.send(0, updates + headers(next_sid, hc.block(grpc_request_headers())) +
                    data(next_sid, grpc_msg(b"r" * 5), end=True), t + 0.001)
            cv.send(1, headers(next_sid, hs.block(GRPC_RESPONSE)), t + 0.002)
            live.append(next_sid)
            next_sid += 2
    for sid in live:
        cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.2)
    return cv.chunks


@pytest.mark.parametrize(("streams", "window"), [(3, 65535), (24, 65535), (24, 900), (40, 300)])
@pytest.mark.parametrize("seed", [1, 2])
def test_interleaved_streams_same_as_chunk_by_chunk(monkeypatch, streams, window, seed):
    _assert_same_whole(_interleaved(streams, window, seed), monkeypatch)


def _split_frames(seed: int, mss: int, window: int) -> list[PayloadChunk]:
    """Large messages whose DATA frames span several segments (the rows in between carry
    no frame header), as a server writes them: a message over two frames, a frame of
    several messages, a message prefix cut by a segment boundary, small frames of other
    streams coalesced behind a frame's last bytes, the client's window updates between
    the segments, a grpc-web stream (its trailer kept) and an empty message; and large
    unary requests from the client, their one DATA frame ending the stream."""
    rnd = random.Random(seed)
    sids = (1, 3, 5, 7)
    cv, hc, hs, t = _open_calls({4: window}, sids, 0.01, 0.001, web=(7,))
    next_sid = 9
    for k in range(120):
        t += 0.01
        sid = rnd.choice(sids)
        shape = k % 5
        if shape == 0:  # one message over two frames
            body = grpc_msg(bytes(rnd.randrange(256) for _ in range(rnd.randrange(9000, 30000))))
            cut = rnd.randrange(6, len(body) - 6)
            write = data(sid, body[:cut]) + data(sid, body[cut:])
        elif shape == 1:  # a frame of several messages, some empty
            write = data(sid, b"".join(grpc_msg(b"m" * rnd.choice((0, 7, 3000, 5000))) for _ in range(4)))
        elif shape == 2 and sid == 7:  # grpc-web: a trailer frame inside DATA
            trailer = b"grpc-status: 0\r\ngrpc-message: " + b"m" * rnd.randrange(2000, 5000) + b"\r\n"
            write = data(sid, grpc_msg(b"w" * 4000) + bytes([0x80]) + len(trailer).to_bytes(4, "big") + trailer)
        else:  # one large message, then small frames of other streams
            write = data(sid, grpc_msg(b"x" * rnd.randrange(1500, 16000)))
            write += b"".join(data(s, grpc_msg(b"tok%d" % k)) for s in rnd.sample(sids, 2))
        step = mss + rnd.choice((0, 0, -3, 5))
        for i in range(0, len(write), step):
            cv.send(1, write[i : i + step], t)
            t += 0.0001
            if rnd.random() < 0.05:
                cv.send(0, window_update(0, 40000) + window_update(sid, 40000), t)
        if k % 7 == 3:  # a unary call with a large request, answered at once
            request = headers(next_sid, hc.block(grpc_request_headers()))
            request += data(next_sid, grpc_msg(b"r" * rnd.randrange(2000, 12000)), end=True)
            for i in range(0, len(request), mss):
                cv.send(0, request[i : i + mss], t)
                t += 0.0001
            cv.send(1, headers(next_sid, hs.block(GRPC_RESPONSE)) + data(next_sid, grpc_msg(b"e" * 30)) +
                    headers(next_sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.001)
            next_sid += 2
    for sid in sids:
        cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.2)
    return cv.chunks


@pytest.mark.parametrize(("mss", "window"), [(1448, 1 << 20), (536, 1 << 20), (1448, 20000)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_frames_same_as_chunk_by_chunk(monkeypatch, mss, window, seed):
    _assert_same_whole(_split_frames(seed, mss, window), monkeypatch)


@pytest.mark.parametrize(("stream_window", "sids"), [(1 << 20, (1, 3) * 6), (35000, (3,) * 6)])
def test_split_frame_ending_where_a_window_runs_out(monkeypatch, stream_window, sids):
    """The last segment of a split DATA frame exhausts the connection's window (65,535
    bytes; whole frames of two streams used most of it) or its stream's: the block opens
    there."""
    cv, _hc, _hs, t = _open_calls({4: stream_window}, (1, 3), 0.01, 0.001)
    for k, sid in enumerate(sids):  # 5,000 bytes each
        cv.send(1, data(sid, grpc_msg(b"a" * 4995)), t + 0.01 * k)
    frame = data(3, grpc_msg(b"b" * 9995))  # 10,000 more: the window runs out at its end
    for i in range(0, len(frame), 1448):
        cv.send(1, frame[i : i + 1448], t + 0.2 + 0.0001 * i)
    cv.send(0, window_update(0, 100000) + window_update(3, 100000), t + 0.3)
    cv.send(1, data(3, grpc_msg(b"c" * 100)), t + 0.4)
    _assert_same_whole(cv.chunks, monkeypatch)


def test_bench_capture_whole_runs_same(tmp_path, monkeypatch):
    from gen_grpc_capture import write_capture

    path = tmp_path / "g.pcap"
    write_capture(str(path), 6000, connections=2, tokens=40)
    for conn in read_capture(path, 50051):
        if conn.chunks:
            _assert_same_whole(conn.chunks, monkeypatch)


def _request_mix(seed: int, max_streams: int | None = None) -> list[PayloadChunk]:
    """Requests of many shapes, so the C HEADERS path meets each of its exits: unary gRPC
    (HEADERS + DATA in one chunk), GETs ending on HEADERS, trailers-only answers, 1xx,
    SSE, grpc-web, plain HTTP, two trailer blocks, CONTINUATION, padded and prioritised
    HEADERS, RST_STREAM, HEADERS on a closed stream, a stream id jump, odd frames after
    HEADERS in one chunk; header blocks repeat (decoded from the cache) and change."""
    rnd = random.Random(seed)
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    t = 0.0
    peer = {3: max_streams} if max_streams else {}
    cv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings(), t)
    cv.send(1, settings(peer) + settings(ack=True), t + 0.1)
    sid = 1
    for k in range(60):
        t += 1
        shape = rnd.randrange(14)
        path = f"/pkg.Svc/M{rnd.randrange(2)}"
        req = grpc_request_headers(path)
        if shape == 0:  # GET ending on its HEADERS, plain HTTP answer
            cv.send(0, headers(sid, hc.block([(":method", "GET"), (":scheme", "http"), (":path", "/x"),
                                              (":authority", "h")]), end_stream=True), t)
            cv.send(1, headers(sid, hs.block([(":status", "200"), ("content-type", "text/plain")])), t + 0.1)
            cv.send(1, data(sid, b"hello", end=True), t + 0.2)
        elif shape == 1:  # trailers-only answer
            cv.send(0, headers(sid, hc.block(req)) + data(sid, grpc_msg(b"q"), end=True), t)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE + [("grpc-status", "5")]), end_stream=True), t + 0.1)
        elif shape == 2:  # 100 Continue first
            cv.send(0, headers(sid, hc.block(req)), t)
            cv.send(1, headers(sid, hs.block([(":status", "100")])), t + 0.1)
            cv.send(0, data(sid, grpc_msg(b"body"), end=True), t + 0.2)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE)) + data(sid, grpc_msg(b"r")), t + 0.3)
            cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.4)
        elif shape == 3:  # server-sent events
            cv.send(0, headers(sid, hc.block([(":method", "GET"), (":scheme", "http"), (":path", "/ev"),
                                              (":authority", "h")]), end_stream=True), t)
            cv.send(1, headers(sid, hs.block([(":status", "200"), ("content-type", "text/event-stream")])), t + 0.1)
            cv.send(1, data(sid, b"data: a\n\ndata: b\n\n", end=True), t + 0.2)
        elif shape == 4:  # grpc-web
            web = [(n, "application/grpc-web+proto" if n == "content-type" else v) for n, v in req]
            cv.send(0, headers(sid, hc.block(web)) + data(sid, grpc_msg(b"w"), end=True), t)
            cv.send(1, headers(sid, hs.block([(":status", "200"), ("content-type", "application/grpc-web+proto")])), t + 0.1)
            cv.send(1, data(sid, grpc_msg(b"r") + b"\x80" + (17).to_bytes(4, "big") + b"grpc-status: 0\r\n"
                                    + b"", end=True), t + 0.2)
        elif shape == 5:  # two trailer blocks
            cv.send(0, headers(sid, hc.block(req)) + data(sid, grpc_msg(b"q"), end=True), t)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE)) + data(sid, grpc_msg(b"r")), t + 0.1)
            cv.send(1, headers(sid, hs.block([("x-more", "1")])), t + 0.2)
            cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.3)
        elif shape == 6:  # CONTINUATION, padding, priority
            blk = hc.block(req)
            cv.send(0, headers(sid, blk[:3], end_headers=False) + continuation(sid, blk[3:]), t)
            cv.send(0, data(sid, grpc_msg(b"q"), end=True), t + 0.05)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE), pad=2), t + 0.1)
            cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True, priority=(0, 3)), t + 0.2)
        elif shape == 7:  # reset by the server, then its late trailers
            cv.send(0, headers(sid, hc.block(req)), t)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE)) + rst(sid, 8), t + 0.1)
            cv.send(1, headers(sid, hs.block([("grpc-status", "1")]), end_stream=True), t + 0.2)
        elif shape == 8:  # HEADERS then an unknown frame and a PING in one chunk
            cv.send(0, headers(sid, hc.block(req)) + frame(0x0B, 0, 0, b"odd") + data(sid, grpc_msg(b"q"), end=True), t)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE)) + data(sid, grpc_msg(b"a")) + data(sid, grpc_msg(b"b")), t + 0.1)
            cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.2)
        elif shape == 9:  # a stream id far ahead (ignored), then a normal request
            cv.send(0, headers(sid + 400, hc.block(req), end_stream=True), t)
            cv.send(0, headers(sid, hc.block(req)) + data(sid, grpc_msg(b"q"), end=True), t + 0.05)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE)) + data(sid, grpc_msg(b"r"))
                    + headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.1)
        elif shape == 10:  # new header values: blocks insert into the dynamic table
            extra = [("x-req", str(k))]
            cv.send(0, headers(sid, hc.block(req + extra)) + data(sid, grpc_msg(b"q"), end=True), t)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE + extra)), t + 0.1)
            cv.send(1, data(sid, grpc_msg(b"r"), end=True), t + 0.2)
        elif shape == 11:  # two requests open at once, answered out of order
            cv.send(0, headers(sid, hc.block(req)) + data(sid, grpc_msg(b"q"), end=True)
                    + headers(sid + 2, hc.block(req)) + data(sid + 2, grpc_msg(b"q"), end=True), t)
            for s2 in (sid + 2, sid):
                cv.send(1, headers(s2, hs.block(GRPC_RESPONSE)), t + 0.1)
                cv.send(1, data(s2, grpc_msg(b"r")), t + 0.15)
                cv.send(1, headers(s2, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.2)
            sid += 2
        else:  # plain unary gRPC, the common case
            cv.send(0, headers(sid, hc.block(req)) + data(sid, grpc_msg(b"q" * 20), end=True), t)
            cv.send(1, headers(sid, hs.block(GRPC_RESPONSE)), t + 0.1)
            for j in range(rnd.randrange(4)):
                cv.send(1, data(sid, grpc_msg(b"tok%d" % j)), t + 0.2 + j / 100)
            cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.5)
        if rnd.random() < 0.1:  # HEADERS on a stream closed before (ignored)
            cv.send(1, headers(sid, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.6)
        sid += 2
    return cv.chunks


def _seen_from_the_middle(seed: int) -> list[PayloadChunk]:
    """A connection the capture joins in its middle: both HPACK encoders already hold
    entries it never saw (one peer's content-type among them), so header blocks come with
    unknown indexes; they repeat (decoded from the cache) and change. Requests whose
    content-type is hidden, or known while :authority is not; responses whose content-type
    is hidden (bodies probed for gRPC framing), streaming or unary, trailers, a stream
    answered while another opens."""
    rnd = random.Random(seed)
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    hidden_ct = rnd.random() < 0.5  # the client's content-type too, or only its :authority
    # before the capture: entries the decoder never sees
    hc.block([(":authority", "before:1"), ("user-agent", "old/1")] + ([("content-type", "application/grpc")] if hidden_ct else []))
    hs.block([("content-type", "application/grpc"), ("server", "before")])
    t = 0.0
    sid = 101
    for k in range(30):
        t += 1
        req = [(":method", "POST"), (":scheme", "http"), (":path", f"/pkg.Svc/M{rnd.randrange(2)}"),
               (":authority", "before:1"), ("content-type", "application/grpc"), ("te", "trailers"),
               ("user-agent", "old/1")]
        if rnd.random() < 0.2:
            req.append(("x-req", str(k)))  # a new value: the block inserts, the cache starts over
        cv.send(0, headers(sid, hc.block(req)) + data(sid, grpc_msg(b"q" * rnd.randrange(1, 40)), end=True), t)
        resp = headers(sid, hs.block([(":status", "200"), ("content-type", "application/grpc")]))
        toks = [data(sid, grpc_msg(b"tok%d" % j)) for j in range(rnd.randrange(1, 5))]
        trailers = headers(sid, hs.block([("grpc-status", "0")]), end_stream=True)
        if rnd.random() < 0.5:  # one write: headers, messages, trailers
            cv.send(1, resp + b"".join(toks) + trailers, t + 0.1)
        else:
            cv.send(1, resp, t + 0.1)
            for j, tok in enumerate(toks):
                cv.send(1, tok, t + 0.2 + j / 100)
            cv.send(1, trailers, t + 0.5)
        sid += 2
    return cv.chunks


@pytest.mark.parametrize("seed", range(6))
def test_connection_seen_from_its_middle_same_with_and_without_c(monkeypatch, seed):
    chunks = _seen_from_the_middle(seed)
    _assert_same(chunks, monkeypatch)
    _assert_same_whole(chunks, monkeypatch)
    # the blocks with unknown indexes were reported, and went through the C path
    rows, reqs, _msgs, events, _state = _run(chunks, False, monkeypatch)
    kinds = [e[4] for _r, _m, evs in rows for e in evs] + [e[4] for e in events]
    assert kinds.count("headers_unknown") >= 30
    assert len(reqs) + sum(len(r) for r, _m, _e in rows) == 30
    # and C took most of those blocks (Python decodes a block the first times it is seen)
    from parsers.h2._handlers import FrameHandlers

    blocks = {"n": 0}
    python_block = FrameHandlers._block

    def counted(self, *args):
        blocks["n"] += 1
        return python_block(self, *args)

    monkeypatch.setattr(FrameHandlers, "_block", counted)
    _run(chunks, True, monkeypatch)
    in_python = blocks["n"]
    blocks["n"] = 0
    _run(chunks, False, monkeypatch, runs=True)
    assert blocks["n"] < in_python / 2, (blocks["n"], in_python)


def _python_block_calls(chunks: list[PayloadChunk], monkeypatch) -> dict[str, int]:
    """How often the Python header-block paths ran, with C, feeding ChunkRuns."""
    from parsers.h2._handlers import FrameHandlers

    calls = {"_block": 0, "_headers_decoded": 0}
    for name in calls:
        python = getattr(FrameHandlers, name)

        def counted(self, *args, _python=python, _name=name):
            calls[_name] += 1
            return _python(self, *args)

        monkeypatch.setattr(FrameHandlers, name, counted)
    _run(chunks, False, monkeypatch, runs=True)
    return calls


def test_one_side_of_a_connection_seen_from_its_middle_goes_to_c_before_the_other_starts(monkeypatch):
    """A capture that joins a connection while the server streams an answer and the client
    only ACKs: the server's bytes go to the C fast path (as a ChunkRun) before the
    client's first bytes (which might have been a preface) come; the results are Python's."""
    cv = Conv()
    hs = Hpack()
    for k in range(60):  # stream 7's answer, its request before the capture
        cv.send(1, data(7, grpc_msg(b"tok%d" % k)), 1 + k / 10)
    cv.send(1, headers(7, hs.block([("grpc-status", "0")]), end_stream=True), 8)
    hc = Hpack()  # then the client's next request, and its answer
    cv.send(0, headers(9, hc.block(grpc_request_headers())) + data(9, grpc_msg(b"q"), end=True), 9)
    cv.send(1, headers(9, hs.block(GRPC_RESPONSE)) + data(9, grpc_msg(b"r")), 9.5)
    cv.send(1, headers(9, hs.block([("grpc-status", "0")]), end_stream=True), 9.6)
    _assert_same(cv.chunks, monkeypatch)
    _assert_same_whole(cv.chunks, monkeypatch)
    feeds = {"n": 0}
    python_feed = _conn.H2Connection.feed

    def counted(self, *args):
        feeds["n"] += 1
        return python_feed(self, *args)

    monkeypatch.setattr(_conn.H2Connection, "feed", counted)
    _run_whole(cv.chunks, False, monkeypatch, runs=True)
    assert feeds["n"] < 10, feeds  # of 64 chunks


@pytest.mark.parametrize("seed", [1, 2])
def test_header_blocks_seen_for_the_first_time_decoded_once_in_c(monkeypatch, seed):
    """A block not in the decoder's cache (new values, a fresh connection's first
    requests) is decoded by C and applied there, or, where C does not apply it (a 1xx, an
    event stream, a stream id jump...), handed to Python decoded: the HPACK state moves
    once either way, and the results are Python's."""
    chunks = _request_mix(seed)
    _assert_same(chunks, monkeypatch)
    calls = _python_block_calls(chunks, monkeypatch)
    assert calls["_headers_decoded"] > 0  # decoded in C, applied in Python
    # every request and response sends new values: no block is ever a cache hit
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    cv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings(), 0)
    cv.send(1, settings() + settings(ack=True), 0.1)
    for k in range(40):
        sid = 2 * k + 1
        cv.send(0, headers(sid, hc.block(grpc_request_headers() + [("x-req", str(k))]))
                + data(sid, grpc_msg(b"q"), end=True), k + 1)
        cv.send(1, headers(sid, hs.block(GRPC_RESPONSE + [("x-id", str(k))])) + data(sid, grpc_msg(b"r"))
                + headers(sid, hs.block([("grpc-status", "0"), ("x-n", str(k))]), end_stream=True), k + 1.5)
    _assert_same(cv.chunks, monkeypatch)
    _assert_same_whole(cv.chunks, monkeypatch)
    calls = _python_block_calls(cv.chunks, monkeypatch)
    assert calls["_block"] + calls["_headers_decoded"] < 10, calls  # of 120 blocks


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("max_streams", [None, 1, 100])
def test_request_shapes_same_with_and_without_c(monkeypatch, seed, max_streams):
    chunks = _request_mix(seed, max_streams)
    _assert_same(chunks, monkeypatch)
    _assert_same_whole(chunks, monkeypatch)


def _random_stream(rnd: random.Random, sid: int):
    """A finished Stream with random headers, counters and flags (what to_record reads)."""
    from parsers.h2._streams import Stream

    st = Stream(sid)
    pick = rnd.choice
    for d in (0, 1):
        st.mode[d] = pick(("grpc", "grpc", "grpc", "http", "sse", "probe"))
        st.msgs[d] = pick((0, 1, 2, 5))
        st.data_bytes[d] = rnd.randrange(1000)
        st.data_frames[d] = pick((0, 1, 3))
        st.hdr_ts[d] = pick((None, 10 + d))
        st.end_ts[d] = pick((None, 20 + d))
        st.end_off[d] = pick((None, 300 + d))
        st.last_off[d] = pick((None, 400 + d))
        st.first_msg_ts[d] = pick((None, 30 + d))
        st.last_msg_ts[d] = pick((None, 40 + d))
        st.first_msg_off[d] = pick((None, 500 + d))
        st.first_data_ts[d] = pick((None, 50 + d))
        st.last_data_ts[d] = pick((None, 60 + d))
        st.first_data_off[d] = pick((None, 600 + d))
        st.msg_before_end[d] = pick((False, True))
        st.msg_after_first[d] = pick((False, True))

    def block(names: dict[str, tuple]) -> dict[str, str] | None:
        if rnd.random() < 0.1:
            return None
        return {k: pick(v) for k, v in names.items() if rnd.random() < 0.8}

    st.hdr[0] = block({":method": ("POST", "GET"), ":path": ("/a", "/b%20c"), ":authority": ("h:1", ""),
                       "host": ("hh",), ":scheme": ("http", "https"), "content-type": ("application/grpc", ""),
                       "user-agent": ("ua",), "grpc-encoding": ("gzip", "")})
    st.hdr[1] = block({":status": ("200", "404", "2x", "", "\u0662\u0660\u0660"),
                       "content-type": ("application/grpc", "", "text/plain"),
                       "grpc-status": ("3", " 4 ", "", "x", "\u0661"), "grpc-message": ("oops", "a%20b", ""),
                       "grpc-encoding": ("identity", "")})
    st.trailers[1] = block({"grpc-status": ("0", "14", " 2", "", "\u0663"),
                            "grpc-message": ("fine", "%E2%9C%93", "100%", "")})
    if rnd.random() < 0.1:
        st.rst_ts, st.rst_code, st.rst_dir, st.rst_off = 25, 8, pick((0, 1)), 700
    if rnd.random() < 0.1:
        st.web_trailers = pick(({}, {"grpc-status": "7"}, {"grpc-message": "w"}))
    st.trailers_only = pick((False, True))
    st.headers_known = pick((False, True))
    return st


@pytest.mark.parametrize("seed", range(4))
def test_to_records_same_as_to_record(seed):
    rnd = random.Random(seed)
    streams = [_random_stream(rnd, 2 * k + 1) for k in range(400)]
    for client in (0, 1):
        want = [vars_of(st.to_record(7, client)) for st in streams]
        assert [vars_of(r) for r in _conn._speedups.to_records(streams, 7, client)] == want


def test_c_built_stream_and_splitter_same_as_python():
    """The C path builds new Streams and GrpcSplitters slot by slot: same as __init__."""
    from parsers.grpc import GrpcSplitter
    from parsers.h2._streams import Stream

    assert vars_of(_conn._speedups.stream(7)) == vars_of(Stream(7))
    for web in (False, True):
        assert vars_of(_conn._speedups.splitter(web)) == vars_of(GrpcSplitter(keep_trailer=web))


@pytest.mark.parametrize("seed", range(12))
def test_mangled_bytes_same_with_and_without_c(monkeypatch, seed):
    """Random bytes overwritten in a fifth of the chunks: the C path meets frames that are
    not what they seem (bad lengths, types, flags, stream ids, header blocks) and must
    agree with Python on all of it, never crash."""
    rnd = random.Random(seed)
    chunks = []
    for c in _request_mix(seed % 5, rnd.choice([None, 100])):
        b = bytearray(c.data)
        if b and rnd.random() < 0.2:
            for _ in range(rnd.randrange(1, 4)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
        chunks.append(PayloadChunk(c.conn_key, c.direction, bytes(b), c.ts_ns, c.frame_no, c.stream_offset))
    _assert_same_whole(chunks, monkeypatch)
    assert _run(chunks, False, monkeypatch, runs=True) == _run(chunks, True, monkeypatch)


def test_huffman_strings_decode_as_hpack_decodes() -> None:
    """The C Huffman decoder walks hpack's own state machine: RFC 7541's examples (C.4),
    20,000 random strings hpack's encoder coded, and 20,000 random byte strings (many of
    them no valid code) give hpack's bytes, or None exactly where hpack raises; the header
    decoder then lets hpack raise its own error."""
    from hpack.exceptions import HPACKDecodingError
    from hpack.huffman import HuffmanEncoder
    from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
    from hpack.huffman_table import decode_huffman

    from parsers.h2 import _hpack

    c_huffman = _conn._speedups.huffman
    rfc = {"f1e3c2e5f23a6ba0ab90f4ff": b"www.example.com", "a8eb10649cbf": b"no-cache",
           "25a849e95ba97d7f": b"custom-key", "25a849e95bb8e8b4bf": b"custom-value"}  # fmt: skip
    for coded, text in rfc.items():
        assert c_huffman(bytes.fromhex(coded)) == text
    encoder = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)
    rng = random.Random(7)
    for _ in range(20_000):
        text = rng.randbytes(rng.randrange(0, 64))
        coded = encoder.encode(text)
        assert c_huffman(memoryview(coded)) == text == decode_huffman(coded)
    declined = 0
    for _ in range(20_000):
        raw = rng.randbytes(rng.randrange(0, 12))
        try:
            want = decode_huffman(raw)
        except HPACKDecodingError:
            want = None
        got = c_huffman(memoryview(raw))
        assert got == want, raw.hex()
        declined += got is None
    assert 1_000 < declined < 19_000, declined
    assert _hpack._huffman is not decode_huffman  # the header decoder uses the C one
    with pytest.raises(HPACKDecodingError, match="Invalid Huffman string"):
        _hpack._huffman(memoryview(b"\xff\xff\xff\xff"))  # EOS inside a string


# -- server-sent events over HTTP/2 (try_sse_frame) ------------------------------------

_SSE_REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "llm"),
                ("content-type", "application/json")]


def _chunk_event(k: int, model: str = "m") -> bytes:
    """An OpenAI chat completion chunk as one event: its meaning is read (tokens, kind)."""
    if k == 0:
        delta = '{"role":"assistant","content":""}'
    else:
        delta = f'{{"content":"tok{k}"}}'
    return b'data: {"id":"c","object":"chat.completion.chunk","model":"%s","choices":[{"index":0,"delta":%s}]}\n\n' % (
        model.encode(), delta.encode())


def _event_streams(seed: int, grpc_beside: bool = False, window: int | None = None) -> list[PayloadChunk]:
    """OpenAI-style SSE responses over HTTP/2, one event a DATA frame mostly (the case C
    takes), with every way out of it mixed in: two events in a frame, an event split over
    frames or chunks, comments, event: lines, CRLF line ends, an empty data: line, bytes
    that are not UTF-8, padding, END_STREAM on an event, NDJSON and JSON bodies, a window
    running out (``window``: the client's initial window), WINDOW_UPDATEs, two frames in
    one chunk, and (``grpc_beside``) gRPC token streams interleaved, whose frames C keeps
    in streaks across the events' Python calls."""
    rnd = random.Random(seed)
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    t = 0.0
    cv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings({4: window} if window else {}), t)
    cv.send(1, settings() + settings(ack=True), t + 0.1)
    sid = 1
    for _ in range(6):
        t += 1
        body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
        ndjson = rnd.random() < 0.15
        cv.send(0, headers(sid, hc.block(_SSE_REQUEST)) + data(sid, body, end=True), t)
        ctype = "application/x-ndjson" if ndjson else "text/event-stream"
        cv.send(1, headers(sid, hs.block([(":status", "200"), ("content-type", ctype)])), t + 0.1)
        g = sid + 2 if grpc_beside else None
        if g is not None:
            cv.send(0, headers(g, hc.block(grpc_request_headers())) + data(g, grpc_msg(b"q"), end=True), t + 0.15)
            cv.send(1, headers(g, hs.block(GRPC_RESPONSE)), t + 0.16)
        for k in range(rnd.randrange(20, 60)):
            t += 0.01
            ev = _chunk_event(k)
            if ndjson:
                ev = ev[6:-1]  # the JSON and one newline
            shape = rnd.random()
            if shape < 0.6:
                cv.send(1, data(sid, ev), t)
            elif shape < 0.65:
                cv.send(1, data(sid, ev + _chunk_event(k + 100)), t)
            elif shape < 0.7:  # one event over two frames
                cut = rnd.randrange(1, len(ev))
                cv.send(1, data(sid, ev[:cut]) + data(sid, ev[cut:]), t)
            elif shape < 0.74:  # a frame over two chunks
                frame_bytes = data(sid, ev)
                cut = rnd.randrange(1, len(frame_bytes))
                cv.send(1, frame_bytes[:cut], t)
                cv.send(1, frame_bytes[cut:], t + 0.001)
            elif shape < 0.77:
                cv.send(1, data(sid, b": keep-alive\n\n" + ev), t)
            elif shape < 0.8:
                cv.send(1, data(sid, b"event: delta\n" + ev), t)
            elif shape < 0.83:
                cv.send(1, data(sid, ev.replace(b"\n", b"\r\n")), t)
            elif shape < 0.85:
                cv.send(1, data(sid, rnd.choice([b"data:\n\n", b"data: \n\n", b"data:x\n\n", b"data: \xff\xfe\n\n"])), t)
            elif shape < 0.88:
                cv.send(1, data(sid, ev, pad=rnd.randrange(4)), t)
            elif shape < 0.9:  # two event frames in one chunk
                cv.send(1, data(sid, ev) + data(sid, _chunk_event(k + 200)), t)
            elif shape < 0.93 and g is not None:  # a gRPC message between the events
                cv.send(1, data(g, grpc_msg(b"tok%d" % k)) + data(sid, ev) + data(g, grpc_msg(b"x")), t)
            else:
                cv.send(1, data(sid, ev), t)
            if window and rnd.random() < 0.2:
                cv.send(0, window_update(0, 2 * window) + window_update(sid, window), t + 0.002)
        t += 0.05
        if rnd.random() < 0.5:
            cv.send(1, data(sid, b"data: [DONE]\n\n", end=True), t)
        else:
            cv.send(1, data(sid, b"data: [DONE]\n\n") + data(sid, b"", end=True), t)
        if g is not None:
            cv.send(1, headers(g, hs.block([("grpc-status", "0")]), end_stream=True), t + 0.01)
            sid += 2
        sid += 2
    return cv.chunks


def _python_event_feeds(chunks: list[PayloadChunk], monkeypatch) -> tuple[int, int]:
    """(events fed through EventSplitter.feed, events C read: feed_whole_events), with C."""
    from parsers.llm.taps import EventSplitter

    counts = [0, 0]
    feed, whole = EventSplitter.feed, EventSplitter.feed_whole_events

    def counted_feed(self, *args):
        counts[0] += 1
        return feed(self, *args)

    def counted_whole(self, events, out):
        counts[1] += len(events)
        return whole(self, events, out)

    with monkeypatch.context() as m:
        m.setattr(EventSplitter, "feed", counted_feed)
        m.setattr(EventSplitter, "feed_whole_events", counted_whole)
        _run_whole(chunks, False, monkeypatch, runs=True)
    return counts[0], counts[1]


@pytest.mark.parametrize("grpc_beside", [False, True], ids=["sse", "sse+grpc"])
@pytest.mark.parametrize("window", [None, 700], ids=["window", "small-window"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_event_streams_same_with_and_without_c(monkeypatch, seed, window, grpc_beside):
    """Every table row and every piece of state the same, C or Python, chunk by chunk, in
    runs, and whole; and C took most events (the one-event frames) while the rest went to
    Python."""
    chunks = _event_streams(seed, grpc_beside, window)
    _assert_same(chunks, monkeypatch)
    _assert_same_whole(chunks, monkeypatch)
    python_feeds, c_events = _python_event_feeds(chunks, monkeypatch)
    assert c_events > 0 and python_feeds > 0, (c_events, python_feeds)


@pytest.mark.parametrize(("payload", "taken"), [
    (b"data: x\n\n", 1),
    (b"data:x\n\n", 1),
    (b"data:\n\n", 1),
    (b"data: \xff\n\n", 1),
    (b"data: x\n\ndata: y\n\ndata:z\n\n", 3),  # a server's writes coalesced into one frame
    (b"data: x\r\n\r\n", 0),
    (b"data: a\rb\n\n", 0),  # a CR ends a line too
    (b"data: a\ndata: b\n\n", 0),
    (b": c\n\ndata: x\n\n", 0),
    (b"event: e\ndata: x\n\n", 0),
    (b"data: x\n\ndata: y\n", 0),  # an event left half-read: the frame to Python
    (b"data: x\n\n\n", 0),
    (b"x", 0),
])  # fmt: skip
def test_what_the_c_path_takes_of_an_event_stream(payload, taken, monkeypatch):
    """The events C reads out of one DATA frame (after a first usual one), and the same
    result as Python either way."""
    cv = Conv()
    hc, hs = Hpack(), Hpack()
    cv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings(), 0)
    cv.send(1, settings() + settings(ack=True), 0.1)
    cv.send(0, headers(1, hc.block(_SSE_REQUEST), end_stream=True), 1)
    cv.send(1, headers(1, hs.block([(":status", "200"), ("content-type", "text/event-stream")])), 2)
    cv.send(1, data(1, b"data: first\n\n"), 3)
    cv.send(1, data(1, payload), 4)
    cv.send(1, data(1, b"", end=True), 5)
    _assert_same(cv.chunks, monkeypatch)
    python_feeds, c_events = _python_event_feeds(cv.chunks, monkeypatch)
    assert (c_events, python_feeds) == (1 + taken, 0 if taken else 1)
