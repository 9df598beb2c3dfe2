"""Event framing of streamed response bodies (sans-I/O): server-sent events and JSON lines.

Both framers are fed the body bytes of one response as they arrive (any split, chunked
transfer coding and HTTP/2 framing already removed) and report each complete event as
``(event_type, data, ts_ns, size, end_offset)``: ``ts_ns`` is the time of the bytes that
completed it, ``size`` its body bytes (blank lines and comments before it included),
``end_offset`` the direction offset just after its last byte.

:class:`SseFramer` follows the WHATWG HTML "event stream" interpretation: lines end with
CRLF, LF or CR (also split across packets); a leading UTF-8 BOM is dropped; ``:`` starts
a comment; ``field: value`` loses one space after the colon; ``data`` lines are joined with
LF; ``event`` names the type (default ``message``); a blank line dispatches the event, but
only when it had data (a block of comments or of ``event``/``id``/``retry`` alone is no
event); an unterminated event at the end of the body is discarded.

:class:`NdjsonFramer`: newline-delimited JSON (Ollama, JSON Lines): every non-blank line
terminated by LF (CRLF tolerated) is one event with type ``""``; a last line without its
newline is not an event (NDJSON requires the newline).
"""

from __future__ import annotations

import re

_NL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"

RawEvent = tuple[str, str, int, int, int]  # event_type, data, ts_ns, size, end_offset


class _Lines:
    """Line splitting shared by the framers: lines completed by each feed (also across
    feeds, a CRLF split between two included) go to :meth:`_line_done`."""

    __slots__ = ("_line", "_cr", "_pos", "_start", "_skip")
    _NL = _NL

    def __init__(self) -> None:
        self._line = bytearray()  # unterminated line so far
        self._cr = False  # the last byte fed was a CR ending a line (maybe half a CRLF)
        self._pos = 0  # body bytes fed so far
        self._start = 0  # body position where the current event's bytes began
        self._skip = False  # the current line began before lost bytes: ignore it

    def feed(self, b: bytes, off: int, ts: int, out: list[RawEvent]) -> None:
        """Body bytes ``b``; ``off`` is the direction offset of ``b[0]``."""
        base = self._pos
        i = 0
        if self._cr:
            self._cr = False
            if b[:1] == b"\n":
                i = 1  # second half of a CRLF whose CR ended the previous feed
        line = self._line
        for m in self._NL.finditer(b, i):
            s, e = m.span()
            if line:
                line += b[i:s]
                text = bytes(line)
                line.clear()
            else:
                text = b[i:s]
            i = e
            if self._skip:
                self._skip = False
                continue
            self._line_done(text, ts, base + e, off + e, out)
        if i < len(b):
            line += b[i:]
        elif b[-1:] == b"\r":
            self._cr = True
        self._pos = base + len(b)

    def _line_done(self, line: bytes, ts: int, pos: int, end_off: int, out: list[RawEvent]) -> None:
        raise NotImplementedError

    def lost(self) -> None:
        """Bytes of the body were lost: the event being read is incomplete, and the next
        bytes may begin inside a line (skipped up to its end)."""
        self._skip = True
        self._line.clear()
        self._cr = False
        self._start = self._pos


class SseFramer(_Lines):
    """Incremental ``text/event-stream`` parser."""

    __slots__ = ("_first", "_data", "_type")

    def __init__(self) -> None:
        super().__init__()
        self._first = True  # no line completed yet: a BOM may lead the first one
        self._data: list[bytes] = []  # data field values of the event being read
        self._type = b""

    def feed(self, b: bytes, off: int, ts: int, out: list[RawEvent]) -> None:
        # the usual feed: a packet (or chunk) holding one whole ``data:`` line and the
        # blank line after it, nothing half-read before it: the event at once, without
        # the line loop (the same event and state as the loop leaves; tests compare them)
        # (:meth:`whole_events` does the same for events read already; written out here, a
        # list and a call per event saved: HTTP/2 DATA frames of one event each come here)
        if (b[-2:] == b"\n\n" and b.startswith(b"data:") and b.count(b"\n") == 2 and b"\r" not in b
                and not (self._line or self._cr or self._skip or self._data or self._type)):  # fmt: skip
            value = b[6:-2] if b[5:6] == b" " else b[5:-2]
            pos = self._pos + len(b)
            out.append(("message", value.decode("utf-8", "replace"), ts, pos - self._start, off + len(b)))
            self._start = self._pos = pos
            self._first = False
            return
        super().feed(b, off, ts, out)

    def between_events(self) -> bool:
        """Nothing of an event or line half-read: a feed of one whole ``data:`` line and the
        blank line after it is one event (the case :meth:`whole_events` takes)."""
        return not (self._line or self._cr or self._skip or self._data or self._type)

    def whole_events(self, events: list[tuple[int, str, int, int]], out: list[RawEvent]) -> None:
        """Whole simple events (one ``data:`` line, no CR, then the blank line), already
        read (:meth:`feed`'s first case; parsers/llm/_speedups.c over chunked HTTP/1.1
        bodies; parsers/h2/_speedups.c over HTTP/2 DATA frames): (ts_ns, data, the event's
        bytes, end offset) of each, fed :meth:`between_events`, one or several a feed:
        what the line loop reports of them and the state it leaves."""
        pos, start = self._pos, self._start
        for ts, data, n, end in events:
            pos += n
            out.append(("message", data, ts, pos - start, end))
            start = pos
        self._start = self._pos = pos
        self._first = False

    def _line_done(self, line: bytes, ts: int, pos: int, end_off: int, out: list[RawEvent]) -> None:
        if self._first:
            self._first = False
            if line.startswith(_BOM):
                line = line[3:]
        if not line:  # blank line: dispatch
            if self._data:
                etype = self._type.decode("utf-8", "replace") or "message"
                data = b"\n".join(self._data).decode("utf-8", "replace")
                out.append((etype, data, ts, pos - self._start, end_off))
                self._start = pos
            self._data = []
            self._type = b""
            return
        if line[0] == 0x3A:  # ':' comment
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._type = value
        # id, retry and unknown fields change nothing that is measured here

    def lost(self) -> None:
        super().lost()
        self._data = []
        self._type = b""
        self._first = False


class NdjsonFramer(_Lines):
    """Incremental newline-delimited JSON parser."""

    __slots__ = ()
    _NL = re.compile(rb"\n")

    def _line_done(self, line: bytes, ts: int, pos: int, end_off: int, out: list[RawEvent]) -> None:
        text = line.strip()
        if text:
            out.append(("", text.decode("utf-8", "replace"), ts, pos - self._start, end_off))
            self._start = pos
