"""Bulk link + IP + TCP header decoding: PacketBatch -> SegmentBatch.

Every step works on whole columns: per-packet offsets are numpy arrays, header windows
are read for all packets at once (see ``_gather``), and variable-length parts (VLAN tag
stacks, IPv6 extension header chains, TCP options) advance all packets by one element
per pass. Python-level work per packet only happens for SACK lists (building the dict).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parsers._native import speedups
from parsers.records import DecodeIssue, DecodeStats, PacketBatch, SegmentBatch

from . import _linktypes as lt
from ._addr import V4_MAPPED_PREFIX
from ._gather import as_bytes, take_be16, take_rows, take_struct, take_u8
from ._tcp_options import walk_options

# Optional C header decode (parsers/capture/_speedups.c): one pass per packet instead of
# numpy passes per header field; without it, or with TAILTAP_PURE_PYTHON=1, the numpy
# code below gives the same segments, counts and issues.
_speedups = speedups("parsers.capture")

# Per-packet outcome; the counts go to DecodeStats.
_PENDING, _TCP, _UDP, _OTHER_IP, _NON_IP, _FRAG, _TRUNC, _MALFORMED, _UNKNOWN_LT = range(9)

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
# 802.1Q, 802.1ad (QinQ service tag) and the pre-standard QinQ tags.
VLAN_TPIDS = (0x8100, 0x88A8, 0x9100, 0x9200)
_MAX_VLAN_DEPTH = 16
# IPv6 extension headers walked to reach the transport header: hop-by-hop, routing,
# fragment, AH, destination options, mobility.
_IPV6_EXT = (0, 43, 44, 51, 60, 135)
_IPV6_FRAGMENT, _IPV6_AH = 44, 51
_MAX_IPV6_EXT = 16
# BSD address families for IPv6 in DLT_NULL/LOOP headers (NetBSD/OpenBSD, FreeBSD, Darwin).
_AF_INET, _AF_INET6 = 2, (24, 28, 30)

_IPV4_HDR = np.dtype(
    [("vihl", "u1"), ("tos", "u1"), ("tot", ">u2"), ("id", ">u2"), ("frag", ">u2"),
     ("ttl", "u1"), ("proto", "u1"), ("csum", ">u2"), ("src", ">u4"), ("dst", ">u4")]
)  # fmt: skip
_IPV6_HDR = np.dtype(
    [("vtf", ">u4"), ("plen", ">u2"), ("nxt", "u1"), ("hlim", "u1"), ("src_hi", ">u8"),
     ("src_lo", ">u8"), ("dst_hi", ">u8"), ("dst_lo", ">u8")]
)  # fmt: skip
_TCP_HDR = np.dtype(
    [("sport", ">u2"), ("dport", ">u2"), ("seq", ">u4"), ("ack", ">u4"), ("off", "u1"),
     ("flags", "u1"), ("win", ">u2"), ("csum", ">u2"), ("urp", ">u2")]
)  # fmt: skip
_TS_LAYOUT = 0x0101080A  # NOP, NOP, kind 8 (timestamps), length 10


def _any_of(a: np.ndarray, values: tuple[int, ...]) -> np.ndarray:
    out = a == values[0]
    for v in values[1:]:
        out |= a == v
    return out


def _where(idx: np.ndarray, n: int) -> np.ndarray | slice:
    """Index for a subset; a plain slice when it is everything (no fancy-index copies)."""
    return slice(None) if idx.size == n else idx


def decode_segments(
    batch: PacketBatch, stats: DecodeStats, issues: list[DecodeIssue]
) -> SegmentBatch:
    """Decode the TCP segments of ``batch``; count everything else in ``stats``.

    ``stats.bytes`` adds captured bytes. Issues are reported once per kind (and per
    unsupported link type) with running counts: pass the same ``issues`` list for every
    batch of a capture. The SegmentBatch shares ``buf`` with the PacketBatch.
    """
    buf = as_bytes(batch.buf)
    n = len(batch)
    stats.packets += n
    stats.bytes += int(batch.caplen.sum(dtype=np.int64))
    groups = _link_groups(batch, stats, issues)
    seg = _decode_c(buf, batch, stats, issues) if _speedups is not None else None
    if seg is None:
        seg = _decode_numpy(buf, batch, groups, stats, issues)
    return seg


def _decode_c(
    buf: np.ndarray, batch: PacketBatch, stats: DecodeStats, issues: list[DecodeIssue]
) -> SegmentBatch | None:
    """decode_segments through the C pass; None when it declines (bytes outside buf)."""
    assert _speedups is not None
    n = len(batch)
    cols = [np.empty(n, t) for t in _C_COLUMNS]
    res = _speedups.decode_tcp(
        buf,
        np.ascontiguousarray(batch.offset, np.int64),
        np.ascontiguousarray(batch.caplen, np.int32),
        np.ascontiguousarray(batch.origlen, np.int32),
        np.ascontiguousarray(batch.linktype, np.int32),
        np.ascontiguousarray(batch.frame_no, np.int64),
        np.ascontiguousarray(batch.ts_ns, np.int64),
        *cols,
    )
    if res == -1:
        return None
    m, slow_rows, slow_start, slow_stop = res
    (cls, frame_no, ts_ns, version, src_hi, src_lo, dst_hi, dst_lo, sport, dport, seq, ack, flags,
     window, payload_off, payload_len, wire_len, has_ts, ts_val, ts_ecr, ip_id) = cols  # fmt: skip
    seg = SegmentBatch(
        frame_no=frame_no[:m],
        ts_ns=ts_ns[:m],
        ip_version=version[:m],
        src_hi=src_hi[:m],
        src_lo=src_lo[:m],
        dst_hi=dst_hi[:m],
        dst_lo=dst_lo[:m],
        sport=sport[:m],
        dport=dport[:m],
        seq=seq[:m],
        ack=ack[:m],
        flags=flags[:m],
        window=window[:m],
        payload_off=payload_off[:m],
        payload_len=payload_len[:m],
        payload_wire_len=wire_len[:m],
        has_ts=has_ts[:m],
        ts_val=ts_val[:m],
        ts_ecr=ts_ecr[:m],
        wscale=np.full(m, -1, np.int8),
        mss=np.full(m, -1, np.int32),
        ip_id=ip_id[:m],
        buf=buf,
    )
    bad_options = -1
    if slow_rows:
        bad_options = walk_options(
            buf, np.frombuffer(slow_start, np.int64), np.frombuffer(slow_stop, np.int64),
            np.frombuffer(slow_rows, np.int64), seg.has_ts, seg.ts_val, seg.ts_ecr, seg.wscale,
            seg.mss, seg.sack,
        )  # fmt: skip
    _count(cls, batch, stats, issues)
    _report_options(seg, bad_options, issues)
    return seg


# Column dtypes of _speedups.decode_tcp's outputs, in its argument order.
_C_COLUMNS = (
    np.int8, np.int64, np.int64, np.uint8, np.uint64, np.uint64, np.uint64, np.uint64,
    np.uint16, np.uint16, np.uint32, np.uint32, np.uint8, np.uint16, np.int64, np.int32,
    np.int32, np.bool_, np.uint32, np.uint32, np.int32,
)  # fmt: skip


def _decode_numpy(
    buf: np.ndarray,
    batch: PacketBatch,
    groups: list[tuple[int, np.ndarray | slice, int]],
    stats: DecodeStats,
    issues: list[DecodeIssue],
) -> SegmentBatch:
    n = len(batch)
    start = batch.offset.astype(np.int64, copy=False)
    pend = start + batch.caplen.astype(np.int64)  # end of the captured bytes
    wend = start + batch.origlen.astype(np.int64)  # end of the packet on the wire
    cls = np.zeros(n, np.int8)
    l3 = start.copy()
    etype = np.zeros(n, np.int64)
    _link_layer(buf, groups, start, pend, l3, etype, cls)

    net = _Net.empty(n)
    pending = cls == _PENDING
    is_v4 = pending & (etype == ETH_IPV4)
    is_v6 = pending & (etype == ETH_IPV6)
    cls[pending & ~is_v4 & ~is_v6] = _NON_IP
    v4 = np.flatnonzero(is_v4)
    if v4.size:
        _ipv4(buf, _where(v4, n), l3, pend, wend, cls, net)
    v6 = np.flatnonzero(is_v6)
    if v6.size:
        _ipv6(buf, _where(v6, n), l3, pend, wend, cls, net)
    l4, ipend, proto = net.l4, net.ipend, net.proto

    pending = cls == _PENDING
    cls[pending & (proto == 17)] = _UDP
    cls[pending & (proto != 6) & (proto != 17)] = _OTHER_IP
    t = np.flatnonzero(pending & (proto == 6))
    sel = _where(t, n)
    p = l4[sel]
    h = take_struct(buf, p, _TCP_HDR)
    room = pend[sel] - p
    doff = (h["off"] >> 4).astype(np.int64) * 4
    trunc = (room < 20) | (room < doff)
    bad = ~trunc & ((doff < 20) | (p + doff > ipend[sel]))
    cls[sel] = np.where(trunc, _TRUNC, np.where(bad, _MALFORMED, _TCP))
    ok = ~(trunc | bad)
    if not ok.all():
        sel, p, h, doff = t[ok], p[ok], h[ok], doff[ok]
    seg = SegmentBatch(
        frame_no=batch.frame_no[sel],
        ts_ns=batch.ts_ns[sel],
        ip_version=net.version[sel],
        src_hi=net.src_hi[sel],
        src_lo=net.src_lo[sel],
        dst_hi=net.dst_hi[sel],
        dst_lo=net.dst_lo[sel],
        sport=h["sport"].astype(np.uint16),
        dport=h["dport"].astype(np.uint16),
        seq=h["seq"].astype(np.uint32),
        ack=h["ack"].astype(np.uint32),
        flags=h["flags"].astype(np.uint8),
        window=h["win"].astype(np.uint16),
        payload_off=p + doff,
        payload_len=np.zeros(0, np.int32),
        payload_wire_len=np.zeros(0, np.int32),
        has_ts=np.zeros(p.shape[0], bool),
        ts_val=np.zeros(p.shape[0], np.uint32),
        ts_ecr=np.zeros(p.shape[0], np.uint32),
        wscale=np.full(p.shape[0], -1, np.int8),
        mss=np.full(p.shape[0], -1, np.int32),
        ip_id=net.ip_id[sel],
        buf=buf,
    )
    end = ipend[sel]
    seg.payload_wire_len = (end - seg.payload_off).astype(np.int32)
    # Captured payload stops at the snaplen or at the IP end (Ethernet padding, FCS).
    seg.payload_len = np.maximum(np.minimum(pend[sel], end) - seg.payload_off, 0).astype(np.int32)
    bad_options = _tcp_options(buf, p, doff, seg)
    _count(cls, batch, stats, issues)
    _report_options(seg, bad_options, issues)
    return seg


def _report_options(seg: SegmentBatch, bad_options: int, issues: list[DecodeIssue]) -> None:
    if bad_options >= 0:
        _upsert(
            issues, "malformed_tcp_options", "TCP options", int(seg.frame_no[bad_options]),
            "TCP options with a bad length: the options after it are ignored",
        )  # fmt: skip


def _link_groups(
    batch: PacketBatch, stats: DecodeStats, issues: list[DecodeIssue]
) -> list[tuple[int, np.ndarray | slice, int]]:
    """(link type, rows, count) of the batch; counts every link type in ``stats`` and
    reports the ones that are not decoded."""
    n = len(batch)
    if n == 0:
        return []
    linktype = batch.linktype
    first = int(linktype[0])
    if bool((linktype == first).all()):
        groups: list[tuple[int, np.ndarray | slice, int]] = [(first, slice(None), n)]
    else:
        values, counts = np.unique(linktype, return_counts=True)
        groups = [
            (int(v), np.flatnonzero(linktype == v), int(c))
            for v, c in zip(values, counts, strict=True)
        ]
    for link, sel, count in groups:
        stats.linktypes[link] = stats.linktypes.get(link, 0) + count
        if link not in lt.SUPPORTED:
            stats.unknown_linktype += count
            frame = int(batch.frame_no[sel][0])
            _upsert(
                issues, "unknown_linktype", f"link type {link} ", frame,
                f"link type {link} ({lt.NAMES.get(link, 'unsupported')}) is not decoded: "
                f"{stats.linktypes[link]} packet(s) counted only",
            )  # fmt: skip
    return groups


def _link_layer(
    buf: np.ndarray,
    groups: list[tuple[int, np.ndarray | slice, int]],
    start: np.ndarray,
    pend: np.ndarray,
    l3: np.ndarray,
    etype: np.ndarray,
    cls: np.ndarray,
) -> None:
    """Set l3 (network header offset) and etype (0x0800/0x86DD/other) for every packet."""
    for link, sel, count in groups:
        s = start[sel]
        if link == lt.ETHERNET:
            hdr, et = 14, take_be16(buf, s + 12)
        elif link == lt.LINUX_SLL:
            hdr, et = 16, take_be16(buf, s + 14)
        elif link == lt.LINUX_SLL2:
            hdr, et = 20, take_be16(buf, s)
        elif link in lt.RAW_IP:
            hdr = 0
            if link == lt.IPV4:
                et = np.full(count, ETH_IPV4, np.int64)
            elif link == lt.IPV6:
                et = np.full(count, ETH_IPV6, np.int64)
            else:  # the version nibble tells; anything but 6 is checked as IPv4
                et = np.where((take_u8(buf, s) >> 4) == 6, ETH_IPV6, ETH_IPV4)
        elif link in (lt.NULL, lt.LOOP):
            hdr = 4
            # Host byte order for NULL, network order for LOOP: a value above 16 bits
            # can only be a byte-swapped family.
            af = take_rows(buf, s, 4).view("<u4")[:, 0].astype(np.int64)
            af = np.where(af > 0xFFFF, af.astype(np.uint32).byteswap().astype(np.int64), af)
            et = np.where(af == _AF_INET, ETH_IPV4, np.where(_any_of(af, _AF_INET6), ETH_IPV6, 0))
        else:  # not decoded (counted and reported by _link_groups)
            cls[sel] = _UNKNOWN_LT
            continue
        l3[sel] = s + hdr
        etype[sel] = et
    # VLAN tags (any depth): each pass strips one tag from every packet that has one.
    for _ in range(_MAX_VLAN_DEPTH):
        tagged = np.flatnonzero(_any_of(etype, VLAN_TPIDS) & (cls == _PENDING))
        if tagged.size == 0:
            break
        p = l3[tagged] + 4
        etype[tagged] = take_be16(buf, p - 2)
        l3[tagged] = p
    cls[(l3 > pend) & (cls == _PENDING)] = _TRUNC


@dataclass(slots=True)
class _Net:
    """Network-layer results, one slot per packet of the batch."""

    l4: np.ndarray  # transport header offset in buf
    ipend: np.ndarray  # end of the IP packet (as announced) in buf
    proto: np.ndarray  # transport protocol, -1 when not IP
    version: np.ndarray
    src_hi: np.ndarray
    src_lo: np.ndarray
    dst_hi: np.ndarray
    dst_lo: np.ndarray
    ip_id: np.ndarray

    @classmethod
    def empty(cls, n: int) -> _Net:
        u64 = [np.zeros(n, np.uint64) for _ in range(4)]
        return cls(
            np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, -1, np.int64),
            np.zeros(n, np.uint8), *u64, np.full(n, -1, np.int32),
        )  # fmt: skip


def _ipv4(
    buf: np.ndarray,
    sel: np.ndarray | slice,
    l3: np.ndarray,
    pend: np.ndarray,
    wend: np.ndarray,
    cls: np.ndarray,
    net: _Net,
) -> None:
    p = l3[sel]
    h = take_struct(buf, p, _IPV4_HDR)
    room = pend[sel] - p
    ihl = (h["vihl"] & 15).astype(np.int64) * 4
    tot = h["tot"].astype(np.int64)
    trunc = (room < 20) | (room < ihl)
    bad = ~trunc & (((h["vihl"] >> 4) != 4) | (ihl < 20) | ((tot != 0) & (tot < ihl)))
    frag = ~trunc & ~bad & ((h["frag"] & 0x3FFF) != 0)  # MF flag or fragment offset
    cls[sel] = np.where(trunc, _TRUNC, np.where(bad, _MALFORMED, np.where(frag, _FRAG, 0)))
    net.l4[sel] = p + ihl
    # A zero total length is what TSO/GSO captures show: the frame length rules.
    net.ipend[sel] = np.where(tot == 0, wend[sel], p + tot)
    net.proto[sel] = h["proto"]
    net.version[sel] = 4
    net.src_lo[sel] = h["src"].astype(np.uint64) | np.uint64(V4_MAPPED_PREFIX)
    net.dst_lo[sel] = h["dst"].astype(np.uint64) | np.uint64(V4_MAPPED_PREFIX)
    net.ip_id[sel] = h["id"]


def _ipv6(
    buf: np.ndarray,
    sel: np.ndarray | slice,
    l3: np.ndarray,
    pend: np.ndarray,
    wend: np.ndarray,
    cls: np.ndarray,
    net: _Net,
) -> None:
    p = l3[sel]
    pe = pend[sel]
    h = take_struct(buf, p, _IPV6_HDR)
    trunc = (pe - p) < 40
    bad = ~trunc & ((h["vtf"] >> 28) != 6)
    plen = h["plen"].astype(np.int64)
    # Zero payload length: jumbogram or a TSO/GSO capture; the frame length rules.
    end = np.where(plen == 0, wend[sel], p + 40 + plen)
    q = p + 40
    nh = h["nxt"].astype(np.int64)
    frag = np.zeros(p.shape[0], bool)
    walk = np.flatnonzero(~trunc & ~bad & _any_of(nh, _IPV6_EXT))
    for _ in range(_MAX_IPV6_EXT):
        if walk.size == 0:
            break
        qa, na = q[walk], nh[walk]
        e = take_rows(buf, qa, 8).astype(np.int64)
        size = np.where(
            na == _IPV6_FRAGMENT, 8, np.where(na == _IPV6_AH, (e[:, 1] + 2) * 4, (e[:, 1] + 1) * 8)
        )
        short = qa + 8 > pe[walk]
        # Fragment header: offset (13 bits) or M flag set; an atomic fragment is whole.
        fr = (na == _IPV6_FRAGMENT) & ((((e[:, 2] << 8) | e[:, 3]) & 0xFFF9) != 0)
        q[walk] = qa + size
        nh[walk] = e[:, 0]
        trunc[walk] |= short
        frag[walk] |= fr & ~short
        walk = walk[~short & ~fr & _any_of(e[:, 0], _IPV6_EXT)]
    bad[walk] = True  # absurdly long extension header chain
    bad |= ~trunc & (q > end)
    cls[sel] = np.where(trunc, _TRUNC, np.where(bad, _MALFORMED, np.where(frag, _FRAG, 0)))
    net.l4[sel] = q
    net.ipend[sel] = end
    net.proto[sel] = nh
    net.version[sel] = 6
    net.src_hi[sel] = h["src_hi"]
    net.src_lo[sel] = h["src_lo"]
    net.dst_hi[sel] = h["dst_hi"]
    net.dst_lo[sel] = h["dst_lo"]


def _tcp_options(buf: np.ndarray, tcp: np.ndarray, doff: np.ndarray, seg: SegmentBatch) -> int:
    """Fill has_ts/ts_val/ts_ecr/wscale/mss/sack; returns the first bad row or -1."""
    o = np.flatnonzero(doff > 20)
    if o.size == 0:
        return -1
    start = tcp[o] + 20
    w = take_rows(buf, start, 12)
    words = w.view(">u4")  # (k, 3): layout word, TSval, TSecr
    fast = (doff[o] == 32) & (words[:, 0] == _TS_LAYOUT)
    f = o[fast]
    if f.size:
        seg.has_ts[f] = True
        seg.ts_val[f] = words[fast, 1]
        seg.ts_ecr[f] = words[fast, 2]
    slow = ~fast
    if not slow.any():
        return -1
    rows = o[slow]
    return walk_options(
        buf, start[slow], tcp[rows] + doff[rows], rows, seg.has_ts, seg.ts_val, seg.ts_ecr,
        seg.wscale, seg.mss, seg.sack,
    )  # fmt: skip


def _count(
    cls: np.ndarray, batch: PacketBatch, stats: DecodeStats, issues: list[DecodeIssue]
) -> None:
    c = np.bincount(cls, minlength=9)
    stats.tcp += int(c[_TCP])
    stats.udp += int(c[_UDP])
    stats.other_ip += int(c[_OTHER_IP])
    stats.non_ip += int(c[_NON_IP])
    stats.ip_fragments += int(c[_FRAG])
    stats.truncated += int(c[_TRUNC])
    stats.malformed += int(c[_MALFORMED])

    def first(code: int) -> int:
        return int(batch.frame_no[int(np.argmax(cls == code))])

    if c[_FRAG]:
        _upsert(
            issues, "ip_fragment", "IP fragments", first(_FRAG),
            f"IP fragments are not reassembled: {stats.ip_fragments} fragment(s) skipped",
        )  # fmt: skip
    if c[_TRUNC]:
        _upsert(
            issues, "truncated_packet", "packets cut", first(_TRUNC),
            f"packets cut by the snaplen inside their headers: {stats.truncated} skipped",
        )  # fmt: skip
    if c[_MALFORMED]:
        _upsert(
            issues, "malformed_ip", "malformed", first(_MALFORMED),
            f"malformed IP/TCP headers: {stats.malformed} packet(s) skipped",
        )  # fmt: skip


def _upsert(issues: list[DecodeIssue], kind: str, prefix: str, frame_no: int, message: str) -> None:
    """One issue per kind/key with a running count: update it if already reported."""
    for issue in issues:
        if issue.kind == kind and issue.message.startswith(prefix):
            issue.message = message
            return
    issues.append(DecodeIssue(kind, frame_no, message))
