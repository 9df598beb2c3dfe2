"""HTTP/2 flow-control accounting (RFC 9113 section 5.2) as seen from the wire.

For each sending direction we track the connection send window and each stream's send
window: DATA payload (padding included) consumes both, WINDOW_UPDATE from the peer
refills them, and the peer's SETTINGS_INITIAL_WINDOW_SIZE sets (and shifts) the stream
windows. A sender is *blocked* when a window reaches <= 0 while its stream is still open
for sending; the block lasts until the WINDOW_UPDATE that reopens it. Windows are only
known when the connection start was seen; mid-connection we do not guess.

Past bytes the capture missed (a gap, a resynchronisation), a window is an upper bound. The
DATA a sender sent in them is not subtracted: its windows only overstate what it had. The
receiver's missing bytes may have given window back (WINDOW_UPDATE) or raised the initial
one (SETTINGS): the connection's window and those of the streams open then have no bound
from there (UNBOUNDED); a stream opened later starts from the initial window. A sender that
sends DATA on a window seen exhausted had more than the capture saw given: that block is
dropped and the window is unbounded. So a block seen is one the sender was in; one may go
unseen, none is made up.
"""

from __future__ import annotations

DEFAULT_WINDOW = 65535
UNBOUNDED = 1 << 62  # a window the capture cannot bound from above


class FlowState:
    """Send windows of one direction (the sender)."""

    # parsers/h2/_speedups.c reads and writes the fields parsers/h2/_layout.py declares
    __slots__ = ("known", "conn", "initial", "streams", "blocked")

    def __init__(self, known: bool) -> None:
        self.known = known
        self.conn = DEFAULT_WINDOW
        self.initial = DEFAULT_WINDOW  # from the receiver's SETTINGS_INITIAL_WINDOW_SIZE
        self.streams: dict[int, int] = {}
        # (stream id or 0) -> (ts_ns when blocked, frame_no) for open blocks
        self.blocked: dict[int, tuple[int, int]] = {}

    def open_stream(self, sid: int) -> None:
        if sid not in self.streams:
            self.streams[sid] = self.initial

    def close_stream(self, sid: int) -> None:
        self.streams.pop(sid, None)
        self.blocked.pop(sid, None)

    def set_initial(self, value: int, ts: int = 0) -> None:
        """The receiver changed SETTINGS_INITIAL_WINDOW_SIZE: every open stream window
        shifts by the difference and may go negative (the sender must then wait)."""
        delta = value - self.initial
        self.initial = value
        if delta:
            s = self.streams
            for sid in s:
                w = s[sid] + delta
                s[sid] = w
                if w <= 0 and self.known and sid not in self.blocked:
                    self.blocked[sid] = (ts, 0)

    def lose_updates(self) -> None:
        """The receiver's bytes went missing (see the module's docstring)."""
        self.conn = UNBOUNDED
        for sid in self.streams:
            self.streams[sid] = UNBOUNDED
        self.blocked.clear()  # (a missed update may have ended them: when is not known)

    def consume(self, sid: int, length: int, ts: int, end_stream: bool) -> None:
        """DATA of ``length`` flow-controlled bytes sent on ``sid``."""
        if not self.known:
            return
        if length and self.blocked:
            # sent on a window seen exhausted: it was not
            if self.blocked.pop(0, None) is not None:
                self.conn = UNBOUNDED
            if self.blocked.pop(sid, None) is not None and sid in self.streams:
                self.streams[sid] = UNBOUNDED
        self.conn -= length
        w = self.streams.get(sid)
        if w is not None:
            w -= length
            self.streams[sid] = w
            if w <= 0 and not end_stream and sid not in self.blocked:
                self.blocked[sid] = (ts, 0)
        if self.conn <= 0 and not end_stream and 0 not in self.blocked:
            self.blocked[0] = (ts, 0)

    def update(self, sid: int, increment: int) -> int | None:
        """WINDOW_UPDATE received by this sender. Returns the ts the block began when
        this update reopened a blocked window."""
        if sid == 0:
            self.conn += increment
            if self.conn > 0 and 0 in self.blocked:
                return self.blocked.pop(0)[0]
            return None
        w = self.streams.get(sid)
        if w is None:
            return None
        w += increment
        self.streams[sid] = w
        if w > 0 and sid in self.blocked:
            return self.blocked.pop(sid)[0]
        return None
