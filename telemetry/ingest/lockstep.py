"""Two processes that read the same capture in lockstep (a capture split by connection).

:func:`fork_pair` forks the process; each side gets a :class:`Peer`. Both call
:meth:`Peer.exchange` at the same points of the same input and get what the other one
gave: how the halves share the little state that spans connections (the send log's
gates). A side that ends or fails closes its pipe, and the other one's next exchange
raises :class:`PeerGone` instead of waiting forever.
"""

from __future__ import annotations

import os
import pickle
import struct

_LEN = struct.Struct("<Q")


class PeerGone(Exception):
    """The other process of the pair ended before the exchange."""


class Peer:
    """One end of the pair's channel (two pipes). ``index`` 0 is the parent."""

    def __init__(self, index: int, read_fd: int, write_fd: int, child_pid: int | None) -> None:
        self.index = index
        self.child_pid = child_pid  # the parent's only
        self._read_fd = read_fd
        self._write_fd = write_fd

    def exchange(self, mine: object) -> object:
        """Give ``mine`` and return the other side's. The parent writes first and the
        child reads first, so messages of any size cannot deadlock."""
        if self.index == 0:
            self.send(mine)
            return self.receive()
        theirs = self.receive()
        self.send(mine)
        return theirs

    def send(self, obj: object) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_LEN.pack(len(data)) + data)
        try:
            while view:
                view = view[os.write(self._write_fd, view) :]
        except BrokenPipeError:
            raise PeerGone("the other process of the split capture ended") from None

    def receive(self) -> object:
        (size,) = _LEN.unpack(self._read_exactly(_LEN.size))
        return pickle.loads(self._read_exactly(size))

    def _read_exactly(self, n: int) -> bytes:
        parts, left = [], n
        while left:
            part = os.read(self._read_fd, min(left, 1 << 20))
            if not part:
                raise PeerGone("the other process of the split capture ended")
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    def close(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._read_fd = self._write_fd = -1


def fork_pair() -> Peer:
    """Fork the process; the parent's Peer has index 0 (and the child's pid), the
    child's index 1. Call it with no other thread running (fork copies only the caller)."""
    down_r, down_w = os.pipe()  # parent -> child
    up_r, up_w = os.pipe()  # child -> parent
    pid = os.fork()
    if pid == 0:
        os.close(down_w)
        os.close(up_r)
        return Peer(1, down_r, up_w, None)
    os.close(down_r)
    os.close(up_w)
    return Peer(0, up_r, down_w, pid)
