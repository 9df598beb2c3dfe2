"""The fuzz targets: bytes in, the parsers run, nothing but documented problems out.

* ``capture``: a capture file (pcap/pcapng) through the container decoder, link/IP/TCP
  decode, TCP reassembly and analysis and the session layer of every connection;
* ``session``: a connection's two byte streams (chunked as the input says, with gaps)
  through protocol detection and the HTTP/2 (frames, HPACK, flow control), gRPC,
  HTTP/1.1, SSE/NDJSON and TLS decoders;
* ``hpack``: header blocks through the tolerant HPACK decoder;
* ``tls``: a TLS connection's records, handshake and decryption (with a key log that
  holds secrets for the input's own client random, so the decryption path runs too).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from parsers.capture import CaptureDecoder, CaptureFormatError, decode_segments
from parsers.h2._hpack import TolerantDecoder
from parsers.records import ChunkRun, DecodeStats, PayloadChunk
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
    got: list[int] = []
    conn = TlsConnection(1, 0, keylog, lambda d, b, ts, fno, off, gap: got.append(len(b)))
    off = [0, 0]
    for i, (d, part, gap) in enumerate(chunks_of(data)):
        lost = 50 if gap else 0
        off[d] += lost
        conn.feed(d, part, TS0 + i, i + 1, off[d], lost)
        off[d] += len(part)
    conn.keyless.take()
    conn.facts()


TARGETS: dict[str, Callable[[bytes], None]] = {
    "capture": target_capture, "session": target_session, "hpack": target_hpack, "tls": target_tls,
}  # fmt: skip
