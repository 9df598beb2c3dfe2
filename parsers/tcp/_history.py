"""Compact, Zeek-like connection history and orientation flips.

The history alphabet is documented in :mod:`parsers.tcp` (upper case = client,
lower case = server). Letters are appended in the order they first happen; the
"repeatable" letters are appended again when their count reaches 10, 100, 1000...
(as Zeek does), so ``TtT`` means the client retransmitted at least 10 times.
"""

from __future__ import annotations

import dataclasses

from parsers.records import ConnectionSummary, RttSample, TcpEvent

REPEATABLE = frozenset("TtOoLlWwGgXxKk")
_POW10 = frozenset(10**k for k in range(1, 12))


class History:
    __slots__ = ("chars", "counts")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.counts: dict[str, int] = {}

    def add(self, ch: str) -> None:
        n = self.counts.get(ch, 0) + 1
        self.counts[ch] = n
        if n == 1 or (n in _POW10 and ch in REPEATABLE):
            self.chars.append(ch)

    def add_side(self, letter: str, side: int) -> None:
        """``letter`` in upper case; side 0 = client (upper), 1 = server (lower)."""
        self.add(letter if side == 0 else letter.lower())

    def has(self, ch: str) -> bool:
        return ch in self.counts

    def __str__(self) -> str:
        return "".join(self.chars)


def flip_history(h: str) -> str:
    """Swap the client/server letters (marks such as ``^`` and ``~`` stay)."""
    return h.swapcase()


def flip_direction(direction: int) -> int:
    return 1 - direction


def flip_event(e: TcpEvent) -> TcpEvent:
    """The same event with the direction seen from the other side as client."""
    return dataclasses.replace(e, direction=1 - e.direction)


def flip_rtt_sample(s: RttSample) -> RttSample:
    return dataclasses.replace(s, direction=1 - s.direction)


def _swap(t: tuple) -> tuple:
    return (t[1], t[0])


def flip_summary(s: ConnectionSummary, client_known: bool | None = None) -> ConnectionSummary:
    """Swap client and server, every per-direction tuple, the history case and the ACK
    progress; ``client_known`` can be set (e.g. True once the HTTP/2 preface told)."""
    return dataclasses.replace(
        s,
        client_addr=s.server_addr,
        client_port=s.server_port,
        server_addr=s.client_addr,
        server_port=s.client_port,
        client_known=s.client_known if client_known is None else client_known,
        packets=_swap(s.packets),
        bytes=_swap(s.bytes),
        history=flip_history(s.history),
        retransmissions=_swap(s.retransmissions),
        loss_bursts=_swap(s.loss_bursts),
        out_of_order=_swap(s.out_of_order),
        zero_windows=_swap(s.zero_windows),
        capture_loss_bytes=_swap(s.capture_loss_bytes),
        ack_progress=None if s.ack_progress is None else _swap(s.ack_progress),
    )
