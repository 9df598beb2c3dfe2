"""Capture decoding: pcap/pcapng container records and bulk link/IP/TCP header decoding.

Sans-I/O: the pipeline opens (and gunzips) files and feeds bytes to
:class:`CaptureDecoder`, which returns :class:`~parsers.records.PacketBatch` objects;
:func:`decode_segments` turns each batch into a :class:`~parsers.records.SegmentBatch`
of TCP segments with numpy, counting everything it does not decode in
:class:`~parsers.records.DecodeStats`. :class:`OutlierTimes` reads a packet stamped far
off the times of the packets around it at the time of the one before;
:func:`in_time_order` reads a batch's packets in time order.
"""

from __future__ import annotations

from ._addr import format_addr
from ._clock import OutlierTimes, in_time_order
from ._container import CaptureDecoder, CaptureFormatError
from ._packets import decode_segments

__all__ = ["CaptureDecoder", "CaptureFormatError", "OutlierTimes", "decode_segments", "format_addr", "in_time_order"]
