"""Text form of the 16-byte addresses that SegmentBatch stores as two uint64 halves."""

from __future__ import annotations

import ipaddress

V4_MAPPED_HI = 0
V4_MAPPED_PREFIX = 0xFFFF << 32  # ::ffff:0:0/96, the low half without the IPv4 address


def format_addr(hi: int, lo: int) -> str:
    """'10.0.0.1' for IPv4-mapped addresses (::ffff:a.b.c.d), '::1' style text otherwise."""
    hi, lo = int(hi), int(lo)
    if hi == V4_MAPPED_HI and (lo >> 32) == 0xFFFF:
        return str(ipaddress.IPv4Address(lo & 0xFFFFFFFF))
    return str(ipaddress.IPv6Address((hi << 64) | lo))
