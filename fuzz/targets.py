"""The fuzz targets: bytes in, the parsers run, nothing but documented problems out.

* ``capture``: a capture file (pcap/pcapng) through the container decoder, link/IP/TCP
  decode, TCP reassembly and analysis and the session layer of every connection;
* ``session``: a connection's two byte streams (chunked as the input says, with gaps)
  through protocol detection and the HTTP/2 (frames, HPACK, flow control), gRPC,
  HTTP/1.1, SSE/NDJSON and TLS decoders;
* ``hpack``: header blocks through the tolerant HPACK decoder;
* ``tls``: a TLS connection's records, handshake and decryption (with a key log that
  holds secrets for the input's own client random, so the decryption path runs too);
* ``sse_rows``: an HTTP/1.1 event-stream exchange whose rows (the input's chunks after a
  request and a chunked ``text/event-stream`` response head) reach the session as a
  ChunkRun, read with the C reader of whole chunked events (parsers/llm/_speedups.c) and
  without it: the two readings must be the same;
* ``h2_events``: the same over HTTP/2 cleartext: the input's server chunks are DATA frames
  of a ``text/event-stream`` response (or, marked, raw bytes), its client chunks
  WINDOW_UPDATEs, read with the HTTP/2 C path (parsers/h2/_speedups.c, which reads DATA
  frames of one whole event) and without it: the same again;
* ``llm_shapes``: an LLM stream's events (the input's texts between blank lines), read by
  parsers.llm.semantics.LlmStream with the shortcut for events of the last content
  event's shape and without it: the same kinds, tokens and facts; and their message rows
  read by an EventSplitter with the C reader of that shape (parsers/llm/_speedups.c) and
  without it: the same rows, TTFT point and facts;
* ``json_top``: a JSON body (cut in two where the input's first byte says) read by
  parsers.llm.jsonscan.TopLevelJson with the C pass over its strings and nested values
  (parsers/llm/_speedups.c; a body whole in its first feed, a cut at its start or end, read
  in C at once) and without it: the same top-level values and end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import numpy as np

from parsers import http1
from parsers.capture import CaptureDecoder, CaptureFormatError, decode_segments
from parsers.h2 import _conn as h2_conn
from parsers.h2._hpack import TolerantDecoder
from parsers.llm import jsonscan, semantics, taps
from parsers.records import ChunkRun, DecodeStats, PayloadChunk, RunBuilder, RunColumn
from parsers.session import AppSession
from parsers.tcp import TcpAnalyzer
from parsers.tls import KeyLog, TlsConnection

TS0 = 1_700_000_000_000_000_000


def chunks_of(data: bytes) -> Iterator[tuple[int, bytes, int]]:
    """The ``session``/``tls`` input: after one flags byte, records of (header byte: bit 7
    the direction, bit 6 a gap before it; 2-byte length; the bytes)."""
    pos = 1
    while pos + 3 <= len(data):
        head = data[pos]
        n = struct.unpack_from(">H", data, pos + 1)[0]
        part = data[pos + 3 : pos + 3 + n]
        pos += 3 + n
        yield head >> 7, part, (head >> 6) & 1


def encode_chunks(items: list[tuple[int, bytes]], flags: int = 0) -> bytes:
    """A ``session`` input from (direction, bytes) chunks (for seeds)."""
    out = bytearray([flags])
    for d, part in items:
        out += bytes([d << 7]) + struct.pack(">H", len(part)) + part
    return bytes(out)


def target_capture(data: bytes) -> None:
    dec = CaptureDecoder(batch_packets=256)
    cut = data[0] % 7 * 37 if data else 0
    try:
        batches = dec.feed(data[:cut]) + dec.feed(data[cut:]) + dec.close()
    except CaptureFormatError:
        return  # documented: not a capture
    tcp, sessions, stats, issues = TcpAnalyzer(), {}, DecodeStats(), []
    for batch in batches:
        for item in tcp.feed_runs(decode_segments(batch, stats, issues)):
            key = item.conn_key
            s = sessions.get(key)
            if s is None:
                s = sessions[key] = AppSession(key, *tcp.connection_info(key))
            if type(item) is ChunkRun:
                s.feed_run(item)
            else:
                s.feed(item)
            s.take_columns()
    for summary in tcp.finish():
        s = sessions.get(summary.conn_key)
        if s is not None:
            s.finish(summary.end_ns)
    tcp.take_events()


def target_session(data: bytes) -> None:
    force = bool(data and data[0] & 1)
    s = AppSession(1, 40000, 443 if data and data[0] & 2 else 8080, force_h2=force)
    off = [0, 0]
    for i, (d, part, gap) in enumerate(chunks_of(data)):
        lost = 100 if gap else 0
        off[d] += lost
        s.feed(PayloadChunk(1, d, part, TS0 + i * 1000, i + 1, off[d], lost))
        off[d] += len(part)
        if i % 8 == 7:
            s.take_columns()
    s.finish(TS0 + 10**9)


def target_hpack(data: bytes) -> None:
    dec = TolerantDecoder(complete=bool(data and data[0] & 1))
    pos = 1
    while pos < len(data):
        n = data[pos] + 1
        dec.decode(data[pos + 1 : pos + 1 + n])
        pos += 1 + n


def target_tls(data: bytes) -> None:
    keylog = KeyLog()
    random = data[1:33].ljust(32, b"\0")  # secrets for whatever client random the input sends
    keylog.add_text(f"CLIENT_RANDOM {random.hex()} {'ab' * 48}\n"
                    f"CLIENT_HANDSHAKE_TRAFFIC_SECRET {random.hex()} {'cd' * 32}\n"
                    f"SERVER_HANDSHAKE_TRAFFIC_SECRET {random.hex()} {'ef' * 32}\n")  # fmt: skip
    pieces, off = [], [0, 0]
    for i, (d, part, gap) in enumerate(chunks_of(data)):
        lost = 50 if gap else 0
        off[d] += lost
        pieces.append((d, part, TS0 + i, i + 1, off[d], lost))
        off[d] += len(part)
    got: list[tuple] = []
    conn = TlsConnection(1, 0, keylog, lambda *plain: got.append(plain))
    for piece in pieces:
        conn.feed(*piece)
    keyless = conn.keyless.take()
    runs, in_runs = tls_fed_in_runs(lambda handed: TlsConnection(1, 0, keylog, handed), pieces)
    if (in_runs, runs.keyless.take(), runs.facts(), runs.issues, runs.plain_ends, runs.tcp_ends) != (
            got, keyless, conn.facts(), conn.issues, conn.plain_ends, conn.tcp_ends):
        raise AssertionError("a TLS connection fed runs of packets read them otherwise")  # fmt: skip


def tls_fed_in_runs(make: Callable[[Callable], TlsConnection], pieces: list[tuple[int, bytes, int, int, int, int]]
                    ) -> tuple[TlsConnection, list[tuple]]:  # fmt: skip
    """A TLS connection (``make(plaintext callback)``) fed ``pieces`` (direction, bytes,
    ts_ns, frame_no, offset, bytes lost before) as a session hands them over: a piece after
    lost bytes on its own (TlsConnection.feed), the others as runs (feed_rows), the
    plaintext gathered into a run each time (what the connection hands on too, but after
    lost bytes). Returns it and the plaintext it gave, in order, as its callback's
    arguments (what feeding the pieces one by one hands on)."""
    plain, got = RunBuilder(), []

    def gathered() -> None:
        run = plain.take(1)
        got.extend([] if run is None else [(c.direction, c.data, c.ts_ns, c.frame_no, c.stream_offset, 0)
                                             for c in run.chunks()])  # fmt: skip

    def handed(d: int, b: bytes, ts: int, fno: int, off: int, gap: int) -> None:
        if gap:
            gathered()
            got.append((d, b, ts, fno, off, gap))
        else:
            plain.add(d, b, ts, fno, off)

    conn = make(handed)
    buf = b"".join(piece[1] for piece in pieces)
    rows: list[tuple[int, int, int, int, int, int]] = []
    at = 0

    def fed_as_run() -> None:
        conn.feed_rows(np.array(rows, dtype=np.int64).reshape(-1, len(RunColumn)), memoryview(buf), plain)
        gathered()
        rows.clear()

    for d, part, ts, fno, offset, lost in pieces:
        if lost:
            fed_as_run()
            conn.feed(d, part, ts, fno, offset, lost)
        else:
            rows.append((d, ts, fno, offset, at, at + len(part)))  # (RunColumn order)
        at += len(part)
    fed_as_run()
    return conn, got


SSE_REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: llm\r\nContent-Length: 2\r\n\r\n{}"
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk_run(parts: list[tuple[int, bytes]], ts0: int = TS0, step: int = 1000) -> ChunkRun:
    """One connection's ChunkRun of (direction, bytes) parts in order: part i at time
    ``ts0 + i * step``, frame i + 1, each direction's offsets counted from 0."""
    rows, off, pos = [], [0, 0], 0
    for i, (d, part) in enumerate(parts):
        rows.append((d, ts0 + i * step, i + 1, off[d], pos, pos + len(part)))
        off[d] += len(part)
        pos += len(part)
    buf = np.frombuffer(b"".join(part for _d, part in parts), dtype=np.uint8)
    return ChunkRun(1, np.array(rows, dtype=np.int64).reshape(-1, 6), buf)


def sse_run(data: bytes) -> ChunkRun:
    """The ``sse_rows`` input as one connection's ChunkRun: a request, a chunked event-stream
    response head, then the input's chunks (direction 1: the server's; gaps ignored: a
    run has none)."""
    return chunk_run([(0, SSE_REQUEST), (1, SSE_HEAD)] + [(d, part) for d, part, _gap in chunks_of(data) if part])


def read_sse_run(run: ChunkRun, c_reader: bool, as_chunks: bool = False) -> tuple:
    """What a session reads of ``run`` (fed in two runs, cut where the input's last byte
    says; or ``as_chunks``, one PayloadChunk a row), with or without the C reader:
    requests, message rows, issues."""
    return _read_run(run, http1, c_reader, as_chunks)


def _read_run(run: ChunkRun, module, c_path: bool, as_chunks: bool) -> tuple:
    """:func:`read_sse_run` with ``module``'s C path (its ``_speedups``) on or off."""
    saved = module._speedups
    try:
        if not c_path:
            module._speedups = None
        s = AppSession(1, 40000, 8080)
        cut = int(run.buf[-1]) % (len(run) + 1) if len(run.buf) else 0
        taken = []
        for part in (ChunkRun(1, run.rows[:cut], run.buf), ChunkRun(1, run.rows[cut:], run.buf)):
            if as_chunks:
                for chunk in part.chunks():
                    s.feed(chunk)
            else:
                s.feed_run(part)
            taken.append(s.take_columns())
        result = s.finish(TS0 + 10**9)
    finally:
        module._speedups = saved
    return ([t[0] for t in taken], [[tuple(r) for r in t[1].tolist()] for t in taken], result.requests,
            [tuple(r) for r in result.message_rows], result.issues)  # fmt: skip


def target_sse_rows(data: bytes) -> None:
    run = sse_run(data)
    without = read_sse_run(run, False, as_chunks=True)
    if read_sse_run(run, True) != without or read_sse_run(run, True, as_chunks=True) != without:
        raise AssertionError("the C reader of chunked events read the rows otherwise")


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + sid.to_bytes(4, "big") + payload


def _header_block(fields: list[tuple[bytes, bytes]]) -> bytes:
    """HPACK literals without indexing, new names, no Huffman (RFC 7541 6.2.2)."""
    return b"".join(b"\0" + bytes([len(n)]) + n + bytes([len(v)]) + v for n, v in fields)


def h2_events_run(data: bytes) -> ChunkRun:
    """The ``h2_events`` input as one connection's ChunkRun: the preface and SETTINGS (the
    client's initial window 300 bytes when bit 0 of the flags byte is set), a request on
    stream 1 and its ``text/event-stream`` response head, then the input's chunks: a
    server chunk is a DATA frame on stream 1 carrying it (marked with the gap bit: the
    bytes as they are, frames the input writes itself or none), a client chunk two
    WINDOW_UPDATEs (connection and stream, of its length + 1); with bit 1, an empty DATA
    frame ending the stream last."""
    flags = data[0] if data else 0
    window = 300 if flags & 1 else 65535
    request = _header_block([(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/v1/chat/completions"),
                             (b":authority", b"llm")])  # fmt: skip
    response = _header_block([(b":status", b"200"), (b"content-type", b"text/event-stream")])
    parts = [(0, H2_PREFACE + h2_frame(4, 0, 0, (4).to_bytes(2, "big") + window.to_bytes(4, "big"))),
             (1, h2_frame(4, 0, 0) + h2_frame(4, 1, 0)), (0, h2_frame(1, 5, 1, request)), (1, h2_frame(1, 4, 1, response))]  # fmt: skip
    for d, part, marked in chunks_of(data):
        if d == 0:
            inc = (len(part) + 1).to_bytes(4, "big")
            parts.append((0, h2_frame(8, 0, 0, inc) + h2_frame(8, 0, 1, inc)))
        else:
            parts.append((1, part if marked else h2_frame(0, 0, 1, part)))
    if flags & 2:
        parts.append((1, h2_frame(0, 1, 1)))
    return chunk_run([(d, p) for d, p in parts if p])


def target_h2_events(data: bytes) -> None:
    run = h2_events_run(data)
    without = _read_run(run, h2_conn, False, as_chunks=True)
    if _read_run(run, h2_conn, True, False) != without or _read_run(run, h2_conn, True, True) != without:
        raise AssertionError("the HTTP/2 C path read the event stream otherwise")


def llm_events(data: bytes) -> list[str]:
    """The ``llm_shapes`` input: event data texts between blank lines (undecodable bytes
    replaced, as the framers decode them)."""
    return data.decode("utf-8", "replace").split("\n\n")


STREAM_FACTS = ("model", "finish_reason", "prompt_tokens", "completion_tokens", "api", "done",
                "_cum", "_cum_all", "_counted", "_count_all")  # fmt: skip


def read_llm_events(texts: list[str], shapes: bool) -> tuple:
    """What an LlmStream says of each event and its facts at the end, with the shortcut for
    events of a content event's shape, or without (no shape is ever taken)."""
    saved = semantics._content_shape
    try:
        if not shapes:
            semantics._content_shape = lambda _s, _obj: None
        stream = semantics.LlmStream()
        said = [stream.event("message", text) for text in texts]
    finally:
        semantics._content_shape = saved
    return said, tuple(getattr(stream, name) for name in STREAM_FACTS)


def read_llm_messages(batches: list[list[str]], c_reader: bool) -> tuple:
    """The message rows, TTFT point and facts an EventSplitter gives of the events (whole
    ``data:`` events, fed a batch at a time), with the C reader of a stream's known shape or
    without it."""
    saved = taps._speedups
    try:
        if not c_reader:
            taps._speedups = None
        splitter, out, i = taps.EventSplitter(), [], 0
        for texts in batches:
            splitter.feed_whole_events([(i + k, text, len(text) + 8, 100 * (i + k + 1)) for k, text in enumerate(texts)], out)
            i += len(texts)
    finally:
        taps._speedups = saved
    return out, splitter.first_ts, splitter.first_off, tuple(getattr(splitter.stream, name) for name in STREAM_FACTS)


def target_llm_shapes(data: bytes) -> None:
    texts = llm_events(data)
    if read_llm_events(texts, True) != read_llm_events(texts, False):
        raise AssertionError("an event read by the shape of the last content event was read otherwise")
    if read_llm_messages([texts], True) != read_llm_messages([texts], False):
        raise AssertionError("an event read by the C reader of a stream's shape was read otherwise")


JSON_KEYS = semantics.REQUEST_KEYS | semantics.RESPONSE_KEYS


def json_pieces(data: bytes) -> list[bytes]:
    """The ``json_top`` input: one byte that says where to cut (in 256ths), then the body."""
    if not data:
        return []
    body = data[1:]
    cut = data[0] * len(body) // 256
    return [body[:cut], body[cut:]]


def read_json_top(pieces: list[bytes], c_pass: bool, keys: frozenset[bytes] = JSON_KEYS, **bounds: int) -> tuple:
    """The top-level values TopLevelJson (``keys``, ``bounds``: its limit and value_cap)
    keeps of the pieces, and whether it is done, with the C pass over strings and nested
    values or without it."""
    saved = jsonscan._speedups
    try:
        if not c_pass:
            jsonscan._speedups = None
        scan = jsonscan.TopLevelJson(keys, **bounds)
        for piece in pieces:
            scan.feed(piece)
    finally:
        jsonscan._speedups = saved
    return scan.values, scan.done


def target_json_top(data: bytes) -> None:
    pieces = json_pieces(data)
    if read_json_top(pieces, True, value_cap=4096) != read_json_top(pieces, False, value_cap=4096):
        raise AssertionError("a JSON body's top-level values were read otherwise by the C pass")


TARGETS: dict[str, Callable[[bytes], None]] = {
    "capture": target_capture, "session": target_session, "hpack": target_hpack, "tls": target_tls,
    "sse_rows": target_sse_rows, "h2_events": target_h2_events, "llm_shapes": target_llm_shapes,
    "json_top": target_json_top,
}  # fmt: skip
