"""TLS record framing of one TCP direction (RFC 8446 section 5.1, RFC 5246 section 6.2):
records are cut from the in-order byte stream whatever the segments were, each timed by
the packet that completed it and placed by the direction offset just after it.

After bytes were lost the framing is found again at the next plausible record header
(type 20-23, version 3.x, length within the limit, and the next header plausible too
when its bytes are there)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA = 20, 21, 22, 23
MAX_RECORD = (1 << 14) + 2048  # the largest protected record (RFC 5246 section 6.2.3)
RECORD_HEADER = struct.Struct(">BHH")  # content type, version, length


@dataclass(slots=True)
class Record:
    content_type: int
    version: int
    payload: bytes
    ts_ns: int  # capture time of the packet that completed the record
    frame_no: int
    end_offset: int  # direction byte offset just after the record


def _header(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int, int] | None:
    """(content type, version, length) of the record header at ``pos`` (5 bytes there), or
    None when it is not a plausible one."""
    ctype, version, length = RECORD_HEADER.unpack_from(buf, pos)
    if CHANGE_CIPHER_SPEC <= ctype <= APPLICATION_DATA and version >> 8 == 3 and version & 0xFF <= 4 and length <= MAX_RECORD:
        return ctype, version, length
    return None


def _whole_records(data: bytes | memoryview) -> list[tuple[int, int, int]] | None:
    """(content type, version, end in ``data``) of each record when ``data`` is whole
    plausible records and nothing else; else None."""
    cut: list[tuple[int, int, int]] = []
    pos, n = 0, len(data)
    while pos < n:
        header = _header(data, pos) if pos + 5 <= n else None
        if header is None:
            return None
        ctype, version, length = header
        pos += 5 + length
        if pos > n:
            return None
        cut.append((ctype, version, pos))
    return cut or None


def _app_data_ends(data: bytes | memoryview) -> list[int] | None:
    """The end in ``data`` of each record when ``data`` is whole plausible application
    data records and nothing else (the usual packet once a connection is protected);
    else None."""
    cut = _whole_records(data)
    if cut is None:
        return None
    for ctype, _version, _end in cut:
        if ctype != APPLICATION_DATA:
            return None
    return [end for _ctype, _version, end in cut]


def _plausible(buf: bytes | bytearray, pos: int) -> bool:
    return _header(buf, pos) is not None


class RecordStream:
    """Cuts one direction's bytes into records."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.base = -1  # direction offset of buf[0]
        self.searching = False  # looking for a record boundary after lost bytes
        self.skipped = 0  # bytes passed over while searching (or lost)
        self.records = 0

    def feed(self, data: bytes, ts_ns: int, frame_no: int, offset: int, gap: int) -> list[Record]:
        if not self.buf and offset == self.base and not gap and not self.searching and type(data) is bytes:
            # the usual packet: whole records from its first byte on, nothing held before
            # them: cut from the bytes as they came (no copy into the buffer and out again)
            out = self._whole(data, ts_ns, frame_no, offset)
            if out is not None:
                return out
        if self.base < 0:
            self.base = offset
        elif gap or offset != self.base + len(self.buf):
            # bytes never came: the record they were in is lost, and the framing with it
            self.skipped += len(self.buf) + gap
            self.buf.clear()
            self.base = offset
            self.searching = True
        self.buf += data
        buf = self.buf
        pos, n = 0, len(buf)
        if self.searching:
            while pos + 5 <= n:
                if _plausible(buf, pos):
                    nxt = pos + 5 + int.from_bytes(buf[pos + 3 : pos + 5], "big")
                    if nxt + 5 > n or _plausible(buf, nxt):
                        break
                pos += 1
            if pos + 5 > n:
                keep = max(0, n - 4)  # a header may begin in the last 4 bytes
                self.skipped += keep
                del buf[:keep]
                self.base += keep
                return []
            self.skipped += pos
            self.searching = False
        out: list[Record] = []
        while pos + 5 <= n:
            length = int.from_bytes(buf[pos + 3 : pos + 5], "big")
            if not _plausible(buf, pos):
                self.searching = True  # not TLS framing any more: look for it again
                self.skipped += n - pos
                pos = n
                break
            end = pos + 5 + length
            if end > n:
                break
            out.append(Record(buf[pos], int.from_bytes(buf[pos + 1 : pos + 3], "big"), bytes(buf[pos + 5 : end]),
                              ts_ns, frame_no, self.base + end))  # fmt: skip
            pos = end
        del buf[:pos]
        self.base += pos
        self.records += len(out)
        return out

    def between_records(self) -> bool:
        """Whether the next bytes (at direction offset :attr:`base`) begin a record: bytes
        came, nothing is held, the framing is not being looked for after lost bytes."""
        return not self.buf and not self.searching and self.base >= 0

    def cut_outside(self, end: int, records: int) -> None:
        """``records`` whole records, up to direction offset ``end``, were cut from bytes
        that began at :attr:`base` (:meth:`between_records`) without this stream."""
        self.base = end
        self.records += records

    def _whole(self, data: bytes, ts_ns: int, frame_no: int, offset: int) -> list[Record] | None:
        """The records of ``data`` when it is whole plausible records and nothing else (what
        the loop of :meth:`feed` cuts from it then), else None with nothing changed."""
        cut = _whole_records(data)
        if cut is None:
            return None
        out, start = [], 0
        for ctype, version, end in cut:
            out.append(Record(ctype, version, data[start + 5 : end], ts_ns, frame_no, offset + end))
            start = end
        self.base = offset + len(data)
        self.records += len(out)
        return out
