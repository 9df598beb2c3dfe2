"""HTTP/2 frame constants, header plausibility and resynchronisation scanning.

Sans-I/O helpers only: nothing here keeps connection state.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_LEN = 9
DEFAULT_MAX_FRAME_SIZE = 16384
MAX_FRAME_LEN = (1 << 24) - 1

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0, 1, 2, 3, 4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 5, 6, 7, 8, 9
FRAME_NAMES = (
    "DATA",
    "HEADERS",
    "PRIORITY",
    "RST_STREAM",
    "SETTINGS",
    "PUSH_PROMISE",
    "PING",
    "GOAWAY",
    "WINDOW_UPDATE",
    "CONTINUATION",
)

FLAG_END_STREAM = 0x1
FLAG_ACK = 0x1
FLAG_END_HEADERS = 0x4
FLAG_PADDED = 0x8
FLAG_PRIORITY = 0x20

SETTINGS_NAMES = {
    1: "HEADER_TABLE_SIZE",
    2: "ENABLE_PUSH",
    3: "MAX_CONCURRENT_STREAMS",
    4: "INITIAL_WINDOW_SIZE",
    5: "MAX_FRAME_SIZE",
    6: "MAX_HEADER_LIST_SIZE",
    8: "ENABLE_CONNECT_PROTOCOL",
    9: "NO_RFC7540_PRIORITIES",
}

# struct layout of a frame header: 16+8 bit length, type, flags, stream id (with R bit).
_HDR = struct.Struct(">HBBBL")
unpack_header = _HDR.unpack_from

# Flags a sender may set per known type; anything else is a sign we are not on a frame
# boundary (the RFC says ignore unknown flags, but real stacks never send them).
_VALID_FLAGS = (0x09, 0x2D, 0x00, 0x00, 0x01, 0x0C, 0x01, 0x00, 0x00, 0x04)
# Frame types that must be on a stream (True), on stream 0 (False), or either (None).
_ON_STREAM = (True, True, True, True, False, True, False, False, None, True)


def header_plausible(
    length: int, ftype: int, flags: int, sid: int, max_len: int = MAX_FRAME_LEN
) -> bool:
    """Whether a parsed frame header could be a real one (known types only).

    Used to find frame boundaries when the capture started mid-connection or bytes
    were lost, and to notice when the parser lost its way.
    """
    if ftype > 9 or sid & 0x80000000 or length > max_len:
        return False
    if flags & ~_VALID_FLAGS[ftype]:
        return False
    # a PUSH_PROMISE is promised on a client-initiated (odd) stream
    return _layout_ok(length, ftype, flags, sid) and (ftype != PUSH_PROMISE or sid & 1 == 1)


def frame_ok_in_sync(length: int, ftype: int, flags: int, sid: int, max_len: int) -> bool:
    """Looser check while in sync: unknown types are legal (and skipped) as long as
    their length is sane; known types must satisfy their layout rules."""
    if ftype > 9:
        return length <= max_len and not sid & 0x80000000
    if sid & 0x80000000 or length > max_len:
        return False
    return _layout_ok(length, ftype, flags, sid)


def _layout_ok(length: int, ftype: int, flags: int, sid: int) -> bool:
    """The layout rules of a known frame type: on a stream or not, fixed or minimum sizes."""
    on = _ON_STREAM[ftype]
    if on is True and sid == 0:
        return False
    if on is False and sid != 0:
        return False
    if ftype == PRIORITY:
        return length == 5
    if ftype == RST_STREAM or ftype == WINDOW_UPDATE:
        return length == 4
    if ftype == SETTINGS:
        return length == 0 if flags & FLAG_ACK else length % 6 == 0
    if ftype == PING:
        return length == 8
    if ftype == GOAWAY:
        return length >= 8
    if ftype == PUSH_PROMISE:
        return length >= 4
    return True


NEED_MORE = -1
NOT_FOUND = -2

# Flags allowed per type, and whether it must be on a stream (1), on stream 0 (0) or
# either (2), as arrays (types above 9 never pass: they are filtered first).
_FLAGS_ALLOWED = np.array(_VALID_FLAGS, dtype=np.uint8)
_STREAM_RULE = np.array([2 if on is None else int(on) for on in _ON_STREAM], dtype=np.uint8)
# Scans of at least this many offsets test the header fields of a block of offsets at
# once (numpy) and follow chains from the survivors only: after a gap in a busy
# connection's bytes the scan crosses thousands of payload bytes, one Python step each.
_VECTOR_MIN = 64
_VECTOR_BLOCK = 4096


def _candidates(
    buf: bytes | bytearray | memoryview, start: int, last: int, max_len: int
) -> Iterator[int]:
    """The offsets in ``[start, last]`` whose 9 bytes pass the field checks of
    :func:`header_plausible` (known type, reserved bit clear, length within ``max_len``,
    only the type's flags, on a stream or on stream 0 as the type must be), in order.
    The others cannot start a frame, so skipping them changes nothing but the time
    taken."""
    if last - start < _VECTOR_MIN:
        yield from range(start, last + 1)
        return
    whole = np.frombuffer(buf, dtype=np.uint8)
    for lo in range(start, last + 1, _VECTOR_BLOCK):
        hi = min(lo + _VECTOR_BLOCK, last + 1)  # offsets lo .. hi-1
        ftype = whole[lo + 3 : hi + 3]
        known = ftype <= 9
        length = (
            (whole[lo:hi].astype(np.int64) << 16)
            | (whole[lo + 1 : hi + 1].astype(np.int64) << 8)
            | whole[lo + 2 : hi + 2]
        )
        flags = whole[lo + 4 : hi + 4]
        kind = np.where(known, ftype, 0)
        allowed = _FLAGS_ALLOWED[kind]
        rule = _STREAM_RULE[kind]
        sid_hi = whole[lo + 5 : hi + 5]  # the stream id's first byte, with the reserved bit
        on_zero = (
            sid_hi | whole[lo + 6 : hi + 6] | whole[lo + 7 : hi + 7] | whole[lo + 8 : hi + 8]
        ) == 0
        stream_ok = (rule == 2) | ((rule == 1) & ~on_zero) | ((rule == 0) & on_zero)
        ok = (
            known
            & ((sid_hi & 0x80) == 0)
            & (length <= max_len)
            & ((flags & ~allowed) == 0)
            & stream_ok
        )
        for x in np.flatnonzero(ok).tolist():
            yield lo + x


def scan_for_frames(
    buf: bytes | bytearray | memoryview,
    start: int,
    end: int,
    max_len: int,
    min_chain: int = 3,
    final: bool = False,
) -> tuple[int, int]:
    """Find the first offset in ``buf[start:end]`` where ``min_chain`` plausible frame
    headers follow each other back to back.

    Returns ``(offset, 0)`` for the first confirmed chain, else ``(offset, NEED_MORE)``
    when a candidate chain runs past the buffered bytes (caller should wait for more
    data and rescan from ``offset``), and ``(end_scanned, NOT_FOUND)`` when nothing can start
    before ``end_scanned`` (those bytes can be dropped). A chain of two whose second
    frame ends exactly at ``end`` is accepted too: senders flush whole frames, so a
    packet boundary on a frame boundary is strong evidence.

    With ``final`` (no more bytes will come), a candidate that runs out of bytes is
    accepted when at least two headers chained.
    """
    last = end - FRAME_HEADER_LEN
    waiting = -1  # first candidate whose chain ran past the buffered bytes
    for x in _candidates(buf, start, last, max_len):
        hi, lo, ftype, flags, sid = unpack_header(buf, x)
        length = (hi << 8) | lo
        if not header_plausible(length, ftype, flags, sid, max_len):
            continue
        # Follow the chain.
        n = 1
        y = x + FRAME_HEADER_LEN + length
        ok = True
        while n < min_chain:
            if y == end and n >= 2:
                break  # chain ends exactly at the buffer end: accept
            if y + FRAME_HEADER_LEN > end:
                if final and n >= 2:
                    break
                # Undecided: keep looking for a chain confirmed within the buffer
                # (a false candidate must not stall us until its length arrives).
                if waiting < 0:
                    waiting = x
                ok = False
                break
            hi, lo, ftype, flags, sid = unpack_header(buf, y)
            length = (hi << 8) | lo
            if not header_plausible(length, ftype, flags, sid, max_len):
                ok = False
                break
            n += 1
            y += FRAME_HEADER_LEN + length
        if ok:
            return x, 0
    if waiting >= 0:
        return waiting, NEED_MORE
    return max(start, last + 1), NOT_FOUND
