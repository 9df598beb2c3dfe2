"""HTTP/2 (RFC 9113) decoding for passive captures: framing, tolerant HPACK, flow control
and per-stream request/message records. Sans-I/O; the public entry is
:class:`parsers.session.AppSession`, which drives :class:`H2Connection`."""

from ._conn import H2Connection
from ._frames import PREFACE, header_plausible, scan_for_frames
from ._hpack import TolerantDecoder

__all__ = [
    "H2Connection",
    "PREFACE",
    "TolerantDecoder",
    "header_plausible",
    "scan_for_frames",
]
