"""Hand-built capture bytes for the capture tests: packets, pcap and pcapng files.

Everything is written with struct from the format specifications, so the tests do not
depend on the decoder they check (or on any capture library).
"""

from __future__ import annotations

import ipaddress
import struct

# -- transport ------------------------------------------------------------------------

NOP = b"\x01"
EOL = b"\x00"


def opt_mss(mss: int) -> bytes:
    return struct.pack("!BBH", 2, 4, mss)


def opt_wscale(shift: int) -> bytes:
    return struct.pack("!BBB", 3, 3, shift)


def opt_sack_ok() -> bytes:
    return b"\x04\x02"


def opt_ts(val: int, ecr: int) -> bytes:
    return struct.pack("!BBII", 8, 10, val, ecr)


def opt_sack(blocks: list[tuple[int, int]]) -> bytes:
    return struct.pack("!BB", 5, 2 + 8 * len(blocks)) + b"".join(
        struct.pack("!II", left, right) for left, right in blocks
    )


def tcp(
    sport: int,
    dport: int,
    seq: int = 0,
    ack: int = 0,
    flags: int = 0x18,
    window: int = 65535,
    options: bytes = b"",
    payload: bytes = b"",
    data_offset: int | None = None,
) -> bytes:
    """A TCP segment; options are padded with EOL to a multiple of 4 bytes."""
    options += EOL * (-len(options) % 4)
    doff = data_offset if data_offset is not None else 5 + len(options) // 4
    return (
        struct.pack("!HHIIBBHHH", sport, dport, seq, ack, doff << 4, flags, window, 0, 0)
        + options
        + payload
    )


def udp(sport: int, dport: int, payload: bytes = b"") -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


# -- network --------------------------------------------------------------------------


def ipv4(
    src: str,
    dst: str,
    payload: bytes,
    proto: int = 6,
    ident: int = 0x1234,
    options: bytes = b"",
    mf: bool = False,
    frag_offset: int = 0,
    total_length: int | None = None,
) -> bytes:
    options += b"\x00" * (-len(options) % 4)
    ihl = 5 + len(options) // 4
    tot = total_length if total_length is not None else ihl * 4 + len(payload)
    frag = (0x2000 if mf else 0) | (frag_offset // 8)
    return (
        struct.pack(
            "!BBHHHBBH4s4s",
            0x40 | ihl,
            0,
            tot,
            ident,
            frag,
            64,
            proto,
            0,
            ipaddress.IPv4Address(src).packed,
            ipaddress.IPv4Address(dst).packed,
        )
        + options
        + payload
    )


def ipv6(
    src: str,
    dst: str,
    payload: bytes,
    next_header: int = 6,
    ext: list[tuple[int, bytes]] | None = None,
    payload_length: int | None = None,
) -> bytes:
    """An IPv6 packet; ``ext`` is a list of (header type, header bytes without the
    next-header byte) built with :func:`ext_header`/:func:`frag_header`, in order."""
    chain = b""
    ext = ext or []
    for i, (_kind, body) in enumerate(ext):
        nxt = ext[i + 1][0] if i + 1 < len(ext) else next_header
        chain += bytes([nxt]) + body
    first = ext[0][0] if ext else next_header
    body = chain + payload
    plen = payload_length if payload_length is not None else len(body)
    return (
        struct.pack(
            "!IHBB16s16s",
            6 << 28,
            plen,
            first,
            64,
            ipaddress.IPv6Address(src).packed,
            ipaddress.IPv6Address(dst).packed,
        )
        + body
    )


def ext_header(kind: int, units: int = 0) -> tuple[int, bytes]:
    """Hop-by-hop (0), routing (43) or destination options (60) header of (units+1)*8
    bytes, filled with PadN."""
    size = (units + 1) * 8
    return kind, bytes([units]) + b"\x01" + bytes([size - 4]) + b"\x00" * (size - 4)


def frag_header(offset: int, more: bool, ident: int = 7) -> tuple[int, bytes]:
    return 44, struct.pack("!BHI", 0, (offset // 8) << 3 | int(more), ident)


def ah_header(payload_words: int = 4) -> tuple[int, bytes]:
    """Authentication header: (payload_words + 2) * 4 bytes."""
    size = (payload_words + 2) * 4
    return 51, bytes([payload_words]) + b"\x00" * (size - 2)


# -- link -----------------------------------------------------------------------------

MAC_A = bytes.fromhex("020000000001")
MAC_B = bytes.fromhex("020000000002")


def ether(
    payload: bytes, ethertype: int = 0x0800, vlans: list[tuple[int, int]] | None = None
) -> bytes:
    """Ethernet II frame; ``vlans`` is a list of (TPID, VLAN id) tags, outermost first."""
    out = MAC_A + MAC_B
    for tpid, vid in vlans or []:
        out += struct.pack("!HH", tpid, vid)
    return out + struct.pack("!H", ethertype) + payload


def sll(payload: bytes, protocol: int = 0x0800) -> bytes:
    """Linux cooked capture v1 (16 bytes)."""
    return struct.pack("!HHH8sH", 0, 1, 6, MAC_A + b"\0\0", protocol) + payload


def sll2(payload: bytes, protocol: int = 0x0800) -> bytes:
    """Linux cooked capture v2 (20 bytes)."""
    return struct.pack("!HHIHBB8s", protocol, 0, 2, 1, 0, 6, MAC_A + b"\0\0") + payload


def null(payload: bytes, family: int = 2, order: str = "<") -> bytes:
    """BSD loopback header: address family in the given byte order."""
    return struct.pack(order + "I", family) + payload


# -- containers -----------------------------------------------------------------------

# (ts_ns, data) or (ts_ns, data, origlen)
Packet = tuple[int, bytes] | tuple[int, bytes, int]


def _unpack(pkt: Packet) -> tuple[int, bytes, int]:
    if len(pkt) == 3:
        return pkt  # type: ignore[return-value]
    ts, data = pkt  # type: ignore[misc]
    return ts, data, len(data)


def pcap(
    packets: list[Packet],
    linktype: int = 1,
    nano: bool = False,
    big_endian: bool = False,
    snaplen: int = 262144,
) -> bytes:
    o = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(o + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for pkt in packets:
        ts, data, origlen = _unpack(pkt)
        sec, ns = divmod(ts, 1_000_000_000)
        frac = ns if nano else ns // 1000
        out.append(struct.pack(o + "IIII", sec, frac, len(data), origlen) + data)
    return b"".join(out)


def _pad4(b: bytes) -> bytes:
    return b + b"\x00" * (-len(b) % 4)


def block(btype: int, body: bytes, order: str = "<") -> bytes:
    body = _pad4(body)
    total = 12 + len(body)
    return struct.pack(order + "II", btype, total) + body + struct.pack(order + "I", total)


def option(code: int, value: bytes, order: str = "<") -> bytes:
    return struct.pack(order + "HH", code, len(value)) + _pad4(value)


def end_of_options(order: str = "<") -> bytes:
    return struct.pack(order + "HH", 0, 0)


def shb(order: str = "<", options: bytes = b"") -> bytes:
    return block(0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1) + options, order)


def idb(
    linktype: int = 1,
    snaplen: int = 0,
    tsresol: int | None = None,
    tsoffset: int | None = None,
    order: str = "<",
) -> bytes:
    opts = b""
    if tsresol is not None:
        opts += option(9, bytes([tsresol]), order)
    if tsoffset is not None:
        opts += option(14, struct.pack(order + "q", tsoffset), order)
    if opts:
        opts += end_of_options(order)
    return block(1, struct.pack(order + "HHI", linktype, 0, snaplen) + opts, order)


def epb(
    iface: int, ts_units: int, data: bytes, origlen: int | None = None, order: str = "<",
    options: bytes = b"",
) -> bytes:  # fmt: skip
    origlen = len(data) if origlen is None else origlen
    hi, lo = ts_units >> 32, ts_units & 0xFFFFFFFF
    body = struct.pack(order + "IIIII", iface, hi, lo, len(data), origlen) + _pad4(data)
    return block(6, body + options, order)


def spb(data: bytes, origlen: int | None = None, order: str = "<") -> bytes:
    origlen = len(data) if origlen is None else origlen
    return block(3, struct.pack(order + "I", origlen) + data, order)


def pb(iface: int, ts_units: int, data: bytes, order: str = "<") -> bytes:
    hi, lo = ts_units >> 32, ts_units & 0xFFFFFFFF
    body = struct.pack(order + "HHIIII", iface, 0, hi, lo, len(data), len(data)) + _pad4(data)
    return block(2, body, order)


def isb(iface: int, ifdrop: int, order: str = "<") -> bytes:
    body = struct.pack(order + "III", iface, 0, 0)
    body += option(5, struct.pack(order + "Q", ifdrop), order) + end_of_options(order)
    return block(5, body, order)


def nrb(order: str = "<") -> bytes:
    name = b"\x0a\x00\x00\x01host.example\x00"
    rec = struct.pack(order + "HH", 1, len(name)) + _pad4(name)
    return block(4, rec + struct.pack(order + "HH", 0, 0), order)


def dsb(order: str = "<") -> bytes:
    secrets = b"CLIENT_RANDOM 00 11\n"
    return block(0x0A, struct.pack(order + "II", 0x544C534B, len(secrets)) + secrets, order)


def custom_block(order: str = "<") -> bytes:
    return block(0x00000BAD, struct.pack(order + "I", 32473) + b"vendor data", order)


# -- damaged clocks ---------------------------------------------------------------------


def records(src: bytes) -> tuple[bytes, list[bytes]]:
    """A classic little-endian pcap's file header and its records (record header and bytes)."""
    assert src[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"), "a little-endian pcap"
    out, at = [], 24
    while at + 16 <= len(src):
        end = at + 16 + struct.unpack_from("<I", src, at + 8)[0]
        out.append(src[at:end])
        at = end
    return src[:24], out


def restamp(src: bytes, stamp) -> bytes:
    """A classic little-endian pcap ``src`` with each packet's time (seconds, fraction: micro-
    or nanoseconds) replaced by ``stamp(index, seconds, fraction)`` (a clock that misbehaved)."""
    header, recs = records(src)
    return header + b"".join(struct.pack("<II", *stamp(i, *struct.unpack_from("<II", r))) + r[8:]
                             for i, r in enumerate(recs))
