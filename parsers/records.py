"""Records that flow between the sans-I/O parsers and the pipeline.

These are the contracts between modules:

* ``parsers.capture`` turns capture bytes into :class:`PacketBatch` and then
  :class:`SegmentBatch` (numpy columns, one row per packet / TCP segment);
* ``parsers.tcp`` turns segment batches into in-order :class:`PayloadChunk` per
  connection direction, :class:`TcpEvent`, :class:`RttSample`, ACK progress and
  :class:`ConnectionSummary` (its bulk path can hand out :class:`ChunkRun` and
  :class:`RttRun` instead: the same chunks and samples as columns);
* ``parsers.session`` (HTTP/1.1, HTTP/2, gRPC) turns payload chunks into
  :class:`RequestRecord`, :class:`MessageRecord` and :class:`H2Event`.

All times are UTC nanoseconds since the epoch (int). Directions are seen from the
connection's client: ``TO_SERVER`` (0) carries requests, ``TO_CLIENT`` (1) responses.
Byte offsets within a direction are counted from the first payload byte the capture
delivered for that direction (0-based), so the TCP layer's ACK progress and the
session layer's message end offsets can be joined.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from parsers.vocabulary import H2EventKind as H2EventKind
from parsers.vocabulary import HistoryLetter as HistoryLetter
from parsers.vocabulary import ResendPrompt as ResendPrompt
from parsers.vocabulary import RttSource as RttSource
from parsers.vocabulary import TcpEventKind as TcpEventKind
from parsers.vocabulary import Vocabulary as Vocabulary
from parsers.vocabulary import describe as describe

TO_SERVER = 0
TO_CLIENT = 1
DIRECTION_NAMES = ("to_server", "to_client")
MESSAGE_DIRECTION_NAMES = ("request", "response")

# TCP flag bits as on the wire.
FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80


@dataclass(slots=True)
class DecodeIssue:
    """Something wrong with the input, located in the file; never silently dropped."""

    kind: str  # truncated_record, bad_block, unknown_linktype, malformed_ip, ip_fragment, ...
    frame_no: int  # 1-based packet number in the file (0 = file level)
    message: str
    byte_offset: int = -1  # offset in the (decompressed) file, -1 when unknown
    fatal: bool = False  # True when nothing after this point can be read


@dataclass(slots=True)
class PacketBatch:
    """Raw packets of a capture, in file order. Row i's bytes are
    ``buf[offset[i] : offset[i] + caplen[i]]``."""

    frame_no: np.ndarray  # int64, 1-based position in the file
    ts_ns: np.ndarray  # int64
    linktype: np.ndarray  # int32 DLT/LINKTYPE value (pcapng interfaces may differ)
    caplen: np.ndarray  # int32 captured bytes
    origlen: np.ndarray  # int32 length on the wire
    offset: np.ndarray  # int64 into buf
    buf: np.ndarray  # uint8

    def __len__(self) -> int:
        return int(self.frame_no.shape[0])


@dataclass(slots=True)
class SegmentBatch:
    """TCP segments decoded in bulk from a PacketBatch (only packets that are TCP).

    Addresses are 16 bytes (IPv4 as ::ffff:a.b.c.d) split in two big-endian uint64
    halves so that flows can be grouped with numpy. Payload row i is
    ``buf[payload_off[i] : payload_off[i] + payload_len[i]]``; ``payload_wire_len`` is
    the length the IP header announces, larger when the snaplen cut the packet.
    """

    frame_no: np.ndarray  # int64
    ts_ns: np.ndarray  # int64
    ip_version: np.ndarray  # uint8 (4 or 6)
    src_hi: np.ndarray  # uint64
    src_lo: np.ndarray  # uint64
    dst_hi: np.ndarray  # uint64
    dst_lo: np.ndarray  # uint64
    sport: np.ndarray  # uint16
    dport: np.ndarray  # uint16
    seq: np.ndarray  # uint32
    ack: np.ndarray  # uint32
    flags: np.ndarray  # uint8
    window: np.ndarray  # uint16, raw (unscaled)
    payload_off: np.ndarray  # int64 into buf
    payload_len: np.ndarray  # int32 captured payload bytes
    payload_wire_len: np.ndarray  # int32 payload bytes on the wire
    has_ts: np.ndarray  # bool, TCP timestamp option present
    ts_val: np.ndarray  # uint32
    ts_ecr: np.ndarray  # uint32
    wscale: np.ndarray  # int8, window scale option (-1 when absent)
    mss: np.ndarray  # int32, MSS option (-1 when absent)
    ip_id: np.ndarray  # int32, IPv4 identification (-1 for IPv6)
    buf: np.ndarray  # uint8 (shared with the PacketBatch)
    # SACK blocks, only for rows that carry them: row index -> [(left, right), ...]
    sack: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.frame_no.shape[0])

    def payload(self, i: int) -> bytes:
        off = int(self.payload_off[i])
        return self.buf[off : off + int(self.payload_len[i])].tobytes()


@dataclass(slots=True)
class DecodeStats:
    """Counts kept by the bulk decoder so nothing is lost without a trace."""

    packets: int = 0
    bytes: int = 0
    tcp: int = 0
    udp: int = 0
    other_ip: int = 0
    non_ip: int = 0
    ip_fragments: int = 0
    truncated: int = 0  # packets cut by the snaplen inside the headers
    unknown_linktype: int = 0
    malformed: int = 0
    time_outliers: int = 0  # packets stamped far off the packets around them (parsers.capture._clock)
    out_of_time_order: int = 0  # packets read earlier than recorded (batches are read in time order)
    linktypes: dict[int, int] = field(default_factory=dict)  # linktype -> packets


@dataclass(slots=True)
class PayloadChunk:
    """In-order new bytes of one direction of a connection, as delivered by reassembly."""

    conn_key: int  # the TCP layer's internal connection index
    direction: int  # TO_SERVER / TO_CLIENT
    data: bytes
    ts_ns: int  # capture time of the packet that made these bytes deliverable
    frame_no: int
    stream_offset: int  # direction byte offset of data[0]
    gap_before: int = 0  # bytes missing just before data (capture loss / never seen)


class RunColumn(IntEnum):
    """Where each field of a :class:`ChunkRun` row sits (its int64 column): one in-order
    payload chunk, its bytes ``buf[START:END]``. The TCP layer's bulk path (numpy and
    parsers/tcp/_speedups.c) writes these rows, the HTTP/2 fast path
    (parsers/h2/_speedups.c) and the pipeline's counters read them."""

    DIRECTION = 0  # TCP direction (0/1 as the TCP layer named them)
    TS_NS = 1
    FRAME_NO = 2
    STREAM_OFFSET = 3  # direction byte offset of its first byte
    START = 4  # its bytes in the batch buffer: buf[START:END]
    END = 5


@dataclass(slots=True)
class ChunkRun:
    """Consecutive :class:`PayloadChunk` of one connection (both directions, capture
    order) as columns over the batch buffer, none with ``gap_before``: what the TCP layer's
    bulk path hands out instead of an object and a ``bytes`` copy per packet."""

    conn_key: int
    # int64 (n, len(RunColumn)), C-contiguous, columns in RunColumn order (data is
    # buf[start:end])
    rows: np.ndarray
    buf: np.ndarray  # uint8

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def chunks(self, first: int = 0, stop: int | None = None) -> list[PayloadChunk]:
        """The run as PayloadChunks, rows ``first`` up to ``stop`` (the end)."""
        mv = memoryview(self.buf)
        key = self.conn_key
        return [  # (the columns in RunColumn order)
            PayloadChunk(key, d, bytes(mv[a:z]), ts, fno, off)
            for d, ts, fno, off, a, z in self.rows[first:stop].tolist()
        ]


# a ChunkRun row as bytes: int64s in RunColumn order, native byte order (as numpy and the
# C fast paths read them)
_RUN_ROW = struct.Struct(f"={len(RunColumn)}q")


def add_run_row(rows: bytearray, buf: bytearray, direction: int, data: bytes, ts_ns: int, frame_no: int,
                stream_offset: int) -> None:  # fmt: skip
    """Append a chunk to a run being gathered: its bytes to ``buf``, its row to ``rows``
    (parsers/tls/_speedups.c appends the same rows)."""
    start = len(buf)
    buf += data
    rows += _RUN_ROW.pack(direction, ts_ns, frame_no, stream_offset, start, start + len(data))


class RunBuilder:
    """A :class:`ChunkRun` gathered chunk by chunk (a TLS connection's decrypted records,
    handed on as one run): the rows in RunColumn order, the bytes in one buffer."""

    __slots__ = ("rows", "buf")

    def __init__(self) -> None:
        self.rows = bytearray()  # int64s, len(RunColumn) a chunk (add_run_row)
        self.buf = bytearray()

    def add(self, direction: int, data: bytes, ts_ns: int, frame_no: int, stream_offset: int) -> None:
        add_run_row(self.rows, self.buf, direction, data, ts_ns, frame_no, stream_offset)

    def take(self, conn_key: int) -> ChunkRun | None:
        """The chunks gathered as a run (None when there are none), and a fresh start."""
        if not self.rows:
            return None
        rows = np.frombuffer(self.rows, dtype=np.int64).reshape(-1, len(RunColumn))
        run = ChunkRun(conn_key, rows, np.frombuffer(self.buf, dtype=np.uint8))
        self.rows, self.buf = bytearray(), bytearray()
        return run


def expand_runs(items: list[PayloadChunk | ChunkRun]) -> list[PayloadChunk]:
    """PayloadChunks and ChunkRuns -> PayloadChunks, order kept."""
    if not any(type(x) is ChunkRun for x in items):
        return items  # type: ignore[return-value]
    out: list[PayloadChunk] = []
    for x in items:
        if type(x) is ChunkRun:
            out += x.chunks()
        else:
            out.append(x)
    return out


@dataclass(slots=True)
class TcpEvent:
    ts_ns: int
    conn_key: int
    direction: int
    kind: str  # retransmission, fast_retransmission, rto_retransmission, spurious_retransmission,
    # out_of_order, lost_segment, dup_ack, zero_window, window_full, rst, capture_loss,
    # reassembly_skip, upstream_loss (IP id gap: packets lost before the capture point)
    seq: int  # relative sequence number (0 = first byte seen of that direction)
    bytes: int
    frame_no: int
    recovery_ms: float | None = None  # for loss: hole first seen -> filled
    burst_id: int | None = None  # loss burst this event belongs to
    prompt: str | None = None  # resends: what made the sender resend (ResendPrompt)


@dataclass(slots=True)
class RttSample:
    ts_ns: int
    conn_key: int
    direction: int  # direction of the data whose ACK gave the sample
    rtt_ms: float
    source: str  # handshake, data_ack, tsecr


@dataclass(slots=True)
class RttRun:
    """RTT samples of one connection direction and source as columns (the TCP layer's
    bulk path): the same samples as a list of :class:`RttSample`, in order."""

    conn_key: int
    direction: int
    ts_ns: np.ndarray  # int64
    rtt_ms: np.ndarray  # float64
    source: str

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])

    def samples(self) -> list[RttSample]:
        k, d, src = self.conn_key, self.direction, self.source
        return [RttSample(t, k, d, r, src) for t, r in zip(self.ts_ns.tolist(), self.rtt_ms.tolist(), strict=True)]


def expand_rtts(items: list[RttSample | RttRun]) -> list[RttSample]:
    """RttSamples and RttRuns -> RttSamples, order kept."""
    if not any(type(x) is RttRun for x in items):
        return items  # type: ignore[return-value]
    out: list[RttSample] = []
    for x in items:
        if type(x) is RttRun:
            out += x.samples()
        else:
            out.append(x)
    return out


@dataclass(slots=True)
class ConnectionSummary:
    conn_key: int
    conn_id: str  # stable id: hash of the 4-tuple and first packet time
    client_addr: str
    client_port: int
    server_addr: str
    server_port: int
    client_known: bool  # True when the SYN (or the h2 preface) told who the client is
    start_ns: int
    end_ns: int
    packets: tuple[int, int]  # per direction (to_server, to_client)
    bytes: tuple[int, int]  # payload bytes per direction
    syn_seen: bool
    handshake_rtt_ms: float | None
    history: str
    # Network signals, filled by the TCP analysis (issue 3); zero when not computed.
    retransmissions: tuple[int, int] = (0, 0)
    loss_bursts: tuple[int, int] = (0, 0)
    longest_loss_burst: int = 0
    out_of_order: tuple[int, int] = (0, 0)
    zero_windows: tuple[int, int] = (0, 0)
    capture_loss_bytes: tuple[int, int] = (0, 0)
    ip_version: int = 4
    # ACK progress of each direction: arrays (ts_ns, acked direction offset) ascending,
    # used to find when the far end acknowledged a given byte.
    ack_progress: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None


@dataclass(slots=True)
class RequestRecord:
    """One HTTP/2 stream or HTTP/1.1 exchange. Times are ns (None when not seen)."""

    conn_key: int
    stream_id: int
    method: str | None = None
    path: str | None = None
    authority: str | None = None
    scheme: str | None = None
    content_type: str | None = None
    user_agent: str | None = None
    kind: str = "unknown"  # unary, server_stream, client_stream, bidi, sse, http
    request_start: int | None = None  # first client HEADERS
    request_end: int | None = None  # client END_STREAM
    response_headers: int | None = None
    first_message: int | None = None
    last_message: int | None = None
    end: int | None = None  # server END_STREAM or RST_STREAM
    http_status: int | None = None
    grpc_status: int | None = None
    grpc_message: str | None = None
    grpc_encoding: str | None = None
    request_messages: int = 0
    response_messages: int = 0
    request_bytes: int = 0  # DATA payload bytes (after padding removal)
    response_bytes: int = 0
    reset_code: int | None = None  # RST_STREAM error code when reset
    trailers_only: bool = False
    headers_known: bool = True  # False when HPACK context was missing for any block
    first_message_end_offset: int | None = None  # response direction offset after 1st msg
    end_offset: int | None = None  # response direction offset after the last byte
    protocol: str = "h2"  # h2 or http1
    # (parsers/h2/_speedups.c builds records slot by slot in this order: a new field goes
    # there too)
    first_byte: int | None = None  # first response body byte
    # what an LLM request's bodies (or KServe model_name) said; None when they did not
    model: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(slots=True)
class MessageRecord:
    """One gRPC length-prefixed message (or SSE event / HTTP body chunk)."""

    conn_key: int
    stream_id: int
    direction: int  # TO_SERVER = request, TO_CLIENT = response
    index: int  # 0-based within the stream and direction
    ts_ns: int  # capture time of the packet that completed it
    size: int  # message payload bytes (without the 5-byte prefix)
    compressed: bool
    end_offset: int  # direction byte offset just after its last byte
    event: int = 0  # LLM stream event kind (parsers.llm.semantics.EVENT_NAMES), 0: not an event
    tokens: int | None = None  # tokens the event carries, when the stream says


# One message as it travels from the HTTP/2 and HTTP/1.1 parsers (and the C fast path,
# which appends MESSAGE_ROW bytes) to the pipeline (which reads them as (n, 7) int64
# columns): a MessageRecord without its conn_key, seven native int64s in MessageColumn order.
MessageRow = tuple[int, int, int, int, int, int, int]
MESSAGE_ROW = struct.Struct("=7q")


class MessageColumn(IntEnum):
    """Where each field of a MessageRow sits (its tuple index and int64 column)."""

    STREAM_ID = 0
    DIRECTION = 1
    INDEX = 2
    TS_NS = 3
    SIZE = 4
    FLAGS = 5  # message_flags below
    END_OFFSET = 6


# MessageRow field 5 (message "flags", an int): bit 0 the gRPC compressed flag; bits 8-11
# the event kind; bits 12 and up the event's tokens + 1 (0: not said). One int, so the
# messages of every protocol travel as the same seven int64 columns.
def message_flags(compressed: bool, event: int = 0, tokens: int | None = None) -> int:
    flags = (1 if compressed else 0) | (event << 8)
    if tokens is not None and tokens >= 0:
        flags |= (tokens + 1) << 12
    return flags


def unpack_flags(flags: int) -> tuple[bool, int, int | None]:
    """compressed, event kind, tokens (None: not said) of message flags."""
    f = int(flags)
    return bool(f & 1), (f >> 8) & 0xF, (f >> 12) - 1 if f >> 12 else None


def message_from_row(conn_key: int, row: tuple) -> MessageRecord:
    """A MessageRecord from a MessageRow (stream_id, direction, index, ts_ns, size, flags,
    end_offset)."""
    sid, d, idx, ts, size, flags, end = row
    compressed, event, tokens = unpack_flags(flags)
    return MessageRecord(conn_key, sid, d, idx, ts, size, compressed, end, event, tokens)


@dataclass(slots=True)
class H2Event:
    ts_ns: int
    conn_key: int
    stream_id: int
    direction: int
    kind: str  # settings, window_update, rst_stream, goaway, ping, flow_control_blocked,
    # headers_unknown, max_concurrent_streams, resync, priority, push_promise
    value: int | None = None
    detail: str | None = None
    duration_ms: float | None = None  # for flow_control_blocked


def c_header() -> str:
    """``parsers/records.h``: the row layouts above as C enums, for the C fast paths (a
    test checks the committed header is this text; ``python -m parsers.records`` prints it)."""
    lines = [
        "/* Generated from parsers/records.py (python -m parsers.records > parsers/records.h):",
        " * the layouts of the rows the C fast paths and the Python code share. Do not edit. */",
        "#ifndef TAILTAP_RECORDS_H",
        "#define TAILTAP_RECORDS_H",
    ]
    for prefix, enum, what in (("MSG", MessageColumn, "MessageRow (MESSAGE_ROW: native int64s)"),
                               ("RUN", RunColumn, "ChunkRun row (int64s)")):
        lines.append(f"/* {enum.__name__}: the columns of a {what} */")
        lines.append("enum {")
        lines += [f"    {prefix}_{m.name} = {int(m)}," for m in enum]
        lines.append(f"    {prefix}_NCOLS = {len(enum)}")
        lines.append("};")
    lines.append("#endif")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(c_header(), end="")
