"""The closed vocabularies of the records' text columns (``tcp_events.kind``,
``rtt_samples.source``, ``h2_events.kind``, ``connections.history``): each name with its
meaning. Apart from :mod:`parsers.records` so that reading the store's schema
(``telemetry.store.schema``, which documents its columns from them) needs no numpy."""

from __future__ import annotations

from enum import StrEnum


class Vocabulary(StrEnum):
    """A closed set of names a column may hold, each with its meaning (``.doc``).

    Members are ``str``: records carry them as plain strings and the tables store them so;
    ``telemetry.store.schema`` writes each column's documentation from :func:`describe`.
    """

    doc: str

    def __new__(cls, value: str, doc: str = "") -> Vocabulary:
        member = str.__new__(cls, value)
        member._value_ = value
        member.doc = doc
        return member


def describe(vocabulary: type[Vocabulary]) -> str:
    """``name: meaning; ...``: a column's documentation, from its vocabulary."""
    return "; ".join(f"{m.value}: {m.doc}" if m.doc else m.value for m in vocabulary)


class TcpEventKind(Vocabulary):
    """``tcp_events.kind``: what the TCP layer saw (rules in :mod:`parsers.tcp._analysis`)."""

    RETRANSMISSION = "retransmission", "bytes the capture saw before, sent again (neither fast nor after a timeout: ACK-clocked recovery)"
    FAST_RETRANSMISSION = "fast_retransmission", "resent soon after 2+ duplicate ACKs or a SACK above the bytes"
    RTO_RETRANSMISSION = "rto_retransmission", "resent an RTO or more after the original with no ACK progress meanwhile"
    SPURIOUS_RETRANSMISSION = "spurious_retransmission", "resent bytes the receiver already had"
    OUT_OF_ORDER = "out_of_order", "an original segment arriving after later bytes (reordering)"
    LOST_SEGMENT = "lost_segment", "a sequence hole seen at the capture point (bytes lost before it); recovery_ms = until it filled"
    DUP_ACK = "dup_ack", "a duplicate ACK (reported on the direction of the data it acknowledges)"
    ZERO_WINDOW = "zero_window", "the receiver advertised a zero window; recovery_ms = how long it stayed shut"
    WINDOW_FULL = "window_full", "the sender filled the receiver's advertised window"
    RST = "rst", "a reset (reported on the side that sent it)"
    CAPTURE_LOSS = "capture_loss", "bytes the far end acknowledged that the capture never saw (one event a missing range)"
    REASSEMBLY_SKIP = "reassembly_skip", "a hole given up on: its bytes are skipped, the parsers resynchronise"
    UPSTREAM_LOSS = "upstream_loss", (
        "packets of this direction lost before the capture point that carried no data the capture "
        "misses: its sender numbers packets one by one (IP id) and some numbers never passed, without "
        "a hole in the sequence space (lost ACKs, or the first copy of what this packet resends); "
        "bytes = packets missing, recovery_ms = time since its previous packet")


class ResendPrompt(Vocabulary):
    """``tcp_events.prompt``: what made a sender resend bytes (the retransmission kinds, the
    spurious one too, whose verdict hides how it was sent)."""

    RECEIVER = "receiver", (
        "the receiver asked: duplicate ACKs or SACK blocks reported a hole shortly before (a spurious "
        "one: the original was overtaken on its way, then came; reordering)")
    TIMER = "timer", (
        "no report came: a retransmission timeout or a tail-loss probe fired (a spurious one: the ACKs "
        "were late, a delayed ACK or a stall on their way, not the data)")


class RttSource(Vocabulary):
    """``rtt_samples.source``: how a round-trip time was measured (see :mod:`parsers.tcp`)."""

    HANDSHAKE = "handshake", "SYN -> SYN/ACK, or SYN/ACK -> ACK"
    DATA_ACK = "data_ack", "a data segment -> the ACK that covered it, Karn's rule"
    TSECR = "tsecr", "a TCP timestamp -> its first echo"


class H2EventKind(Vocabulary):
    """``h2_events.kind``: connection-level HTTP/2 happenings (:mod:`parsers.h2`)."""

    SETTINGS = "settings", "a SETTINGS frame; detail = the values"
    WINDOW_UPDATE = "window_update", "value = the increment"
    RST_STREAM = "rst_stream", "value = the error code"
    GOAWAY = "goaway", "value = the error code; detail = last stream id and debug data"
    PING = "ping", "a PING (not an ACK)"
    FLOW_CONTROL_BLOCKED = "flow_control_blocked", "a sender waited for window; duration_ms = how long"
    HEADERS_UNKNOWN = "headers_unknown", "a header block that could not be decoded (HPACK state missed)"
    MAX_CONCURRENT_STREAMS = "max_concurrent_streams", "the peer's stream limit was reached"
    RESYNC = "resync", "the parser lost and found the frame boundary again; value = bytes skipped"
    PUSH_PROMISE = "push_promise", "a server push"
    PRIORITY = "priority", "a PRIORITY frame"


class HistoryLetter(Vocabulary):
    """``connections.history``: one letter per thing that happened, Zeek-style; upper case
    is the client's packets or data, lower case the server's (the legend of the column)."""

    SYN = "S", "SYN without ACK"
    SYN_ACK = "H", "SYN+ACK"
    ACK = "A", "pure ACK"
    DATA = "D", "payload"
    FIN = "F", "FIN"
    RESET = "R", "RST"
    RETRANSMISSION = "T", "retransmission"
    OUT_OF_ORDER = "O", "out-of-order (late original)"
    GAP = "L", "sequence gap seen"
    ZERO_WINDOW = "W", "zero window advertised (by that side)"
    CAPTURE_LOSS = "G", "capture loss of that side's data (far end ACKed bytes never captured)"
    SNAPLEN_CUT = "C", "payload cut by the snaplen"
    DUPLICATE = "X", "capture duplicate dropped"
    SKIPPED = "K", "reassembly hole given up (skipped)"
    GUESSED = "^", "client/server guessed (no SYN or SYN/ACK seen)"
    NO_WSCALE = "~", "window scale unknown (handshake not seen: windows read unscaled)"
