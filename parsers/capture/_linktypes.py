"""Link-layer type numbers (LINKTYPE_* from tcpdump.org) that the bulk decoder understands."""

from __future__ import annotations

NULL = 0  # BSD loopback: 4-byte address family in the capturing host's byte order
ETHERNET = 1
RAW_12 = 12  # DLT_RAW on some BSDs (raw IP)
RAW_14 = 14  # DLT_RAW on OpenBSD (raw IP)
RAW = 101
LOOP = 108  # OpenBSD loopback: 4-byte address family in network byte order
LINUX_SLL = 113
IPV4 = 228
IPV6 = 229
LINUX_SLL2 = 276

RAW_IP = frozenset({RAW_12, RAW_14, RAW, IPV4, IPV6})
SUPPORTED = frozenset({NULL, ETHERNET, LOOP, LINUX_SLL, LINUX_SLL2}) | RAW_IP

NAMES = {
    NULL: "null",
    ETHERNET: "ether",
    RAW_12: "raw",
    RAW_14: "raw",
    RAW: "raw",
    LOOP: "loop",
    LINUX_SLL: "linux_sll",
    IPV4: "ipv4",
    IPV6: "ipv6",
    LINUX_SLL2: "linux_sll2",
}


def describe(linktype: int) -> str:
    """'ether (1)' style text for messages."""
    return f"{NAMES.get(linktype, 'unknown')} ({linktype})"
