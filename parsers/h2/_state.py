"""What H2Connection keeps per TCP direction (_Dir), the packed message row the C fast
path and the pipeline share (MSG_ROW), and the connection's limits."""

from __future__ import annotations

from parsers.records import MESSAGE_ROW

from ._frames import DEFAULT_MAX_FRAME_SIZE, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY, HEADERS
from ._hpack import TolerantDecoder
from ._streams import Stream

# A message packed for H2Connection.msg_buf (layout: parsers.records.MESSAGE_ROW)
MSG_ROW = MESSAGE_ROW

# HEADERS flags that change the payload layout (padding, priority) or need
# CONTINUATION frames: only FLAG_END_HEADERS set means the payload is the whole block
_HEADERS_LAYOUT = FLAG_END_HEADERS | FLAG_PADDED | FLAG_PRIORITY

_KEPT_FLAGS = ~0xFE  # message flags kept: all but a gRPC flag byte's undefined bits 1-7
_CLOSED_KEEP = 4096  # recently closed stream ids remembered to ignore late frames
_HOLD_LIMIT = 20000  # records held while the orientation is unknown
# Largest believable jump between consecutive new stream ids (2 per stream); after a
# capture gap many HEADERS may have been lost, so allow more.
_MAX_SID_JUMP = 2 * 64
_MAX_SID_JUMP_LOSSY = 2 * 1_000_000


class _Dir:
    """Parsing state of one TCP direction (one sender)."""

    # parsers/h2/_speedups.c reads and writes the fields parsers/h2/_layout.py declares
    __slots__ = (
        "buf",
        "base",
        "synced",
        "skipped",
        "gap_note",
        "data_left",
        "pad_left",
        "data_stream",
        "data_sid",
        "data_flags",
        "data_len",
        "data_payload",
        "block",
        "block_sid",
        "block_type",
        "block_flags",
        "block_ts",
        "block_promised",
        "max_len",
        "max_known",
        "hpack",
        "frames",
        "marks",
        "plain",
    )

    def __init__(self, synced: bool, hpack_complete: bool) -> None:
        self.buf = bytearray()  # unconsumed bytes
        self.base = -1  # direction offset of buf[0] (-1: nothing seen yet)
        self.synced = synced
        self.skipped = 0  # bytes dropped while resynchronising
        self.gap_note = 0  # bytes lost (gap) that led to the current resync
        self.data_left = 0  # DATA payload bytes (without padding) still to come
        self.pad_left = 0
        self.data_stream: Stream | None = None
        self.data_sid = 0
        self.data_flags = 0
        self.data_len = 0  # data bytes of the current DATA frame (without padding)
        self.data_payload = 0  # whole payload length (flow-controlled)
        self.block: bytearray | None = None  # header block being assembled
        self.block_sid = 0
        self.block_type = HEADERS
        self.block_flags = 0
        self.block_ts = 0
        self.block_promised = 0
        self.max_len = DEFAULT_MAX_FRAME_SIZE  # the receiver's SETTINGS_MAX_FRAME_SIZE
        # Mid-connection the receiver may have raised it before the capture began.
        self.max_known = hpack_complete
        self.hpack = TolerantDecoder(complete=hpack_complete)
        self.frames = 0
        # (direction end offset, ts) of chunks held while looking for frame boundaries,
        # so frames found later still get the time of the packet that completed them
        self.marks: list[tuple[int, int]] = []
        # at a frame boundary with nothing buffered or pending (feed_chunk fast path)
        self.plain = False


_pack_msg = MSG_ROW.pack
