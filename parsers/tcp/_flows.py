"""Flow grouping and connection identity.

Rows of a :class:`SegmentBatch` are grouped by their unordered 4-tuple with numpy:
each row's two endpoints are put in a canonical order ("lo" endpoint first, by
address then port), the canonical tuple is hashed to one uint64 and one stable
argsort groups the rows while keeping capture order inside a group. Hash collisions
are checked column by column and fall back to an exact lexsort. The optional C
grouping (parsers/tcp/_speedups.c) gives the same groups with one hash-table pass.
"""

from __future__ import annotations

import hashlib
import ipaddress
import struct
from dataclasses import dataclass

import numpy as np

from parsers._native import speedups
from parsers.records import SegmentBatch

_speedups = speedups("parsers.tcp")

# Ports that are servers far more often than clients. Below 1024 everything counts.
SERVICE_PORTS = frozenset(
    {
        1080, 1433, 1521, 1883, 2049, 2375, 2376, 2379, 2380, 3000, 3001, 3306, 3389,
        4000, 4317, 4318, 4443, 5000, 5001, 5432, 5672, 5900, 6000, 6379, 6443, 7000,
        7001, 7443, 8000, 9000, 9042, 9090, 9091, 9092, 9200, 9300, 9443, 10000, 11211,
        11434, 15672, 27017, 50051, 50052, 50053, 50054, 50055,
    }
)  # fmt: skip

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S16 = np.uint64(16)


def is_service_port(port: int) -> bool:
    return port < 1024 or port in SERVICE_PORTS or 8000 <= port <= 8999


def server_is_lo(lo_port: int, hi_port: int) -> bool:
    """SYN not seen: guess which endpoint is the server. A service port wins; else the
    lower port is the server (ephemeral ports are high)."""
    a, b = is_service_port(lo_port), is_service_port(hi_port)
    if a != b:
        return a
    return lo_port <= hi_port


def _mix(x: np.ndarray) -> np.ndarray:
    # splitmix64 finaliser: cheap and good enough to spread the tuple over 64 bits
    x = x ^ (x >> _S30)
    x = x * _C1
    x = x ^ (x >> _S27)
    x = x * _C2
    return x ^ (x >> _S31)


@dataclass(slots=True)
class Groups:
    order: np.ndarray  # row indices, grouped by flow, capture order inside a group
    starts: np.ndarray
    stops: np.ndarray
    swap: np.ndarray  # bool per row: True when the source is the canonical "hi" endpoint
    batch: SegmentBatch

    def key(self, row: int) -> tuple[int, int, int, int, int, int]:
        """The canonical tuple (lo address halves, lo port, hi address halves, hi port)."""
        b = self.batch
        src = (int(b.src_hi[row]), int(b.src_lo[row]), int(b.sport[row]))
        dst = (int(b.dst_hi[row]), int(b.dst_lo[row]), int(b.dport[row]))
        return dst + src if self.swap[row] else src + dst


def group_flows(b: SegmentBatch) -> Groups:
    """Rows grouped by connection; groups in no particular order (the C grouping gives
    them in order of their first row)."""
    if _speedups is not None:
        cols = (
            np.ascontiguousarray(b.src_hi, np.uint64), np.ascontiguousarray(b.src_lo, np.uint64),
            np.ascontiguousarray(b.dst_hi, np.uint64), np.ascontiguousarray(b.dst_lo, np.uint64),
            np.ascontiguousarray(b.sport, np.uint16), np.ascontiguousarray(b.dport, np.uint16),
        )  # fmt: skip
        order, starts, stops, swap = _speedups.group_flows(*cols)
        return Groups(
            np.frombuffer(order, np.int64), np.frombuffer(starts, np.int64),
            np.frombuffer(stops, np.int64), np.frombuffer(swap, np.bool_), b,
        )  # fmt: skip
    sh, sl, dh, dl = b.src_hi, b.src_lo, b.dst_hi, b.dst_lo
    sp = b.sport.astype(np.int64)
    dp = b.dport.astype(np.int64)
    src_first = (sh < dh) | ((sh == dh) & ((sl < dl) | ((sl == dl) & (sp <= dp))))
    swap = ~src_first
    lo_hi = np.where(swap, dh, sh)
    lo_lo = np.where(swap, dl, sl)
    hi_hi = np.where(swap, sh, dh)
    hi_lo = np.where(swap, sl, dl)
    lo_port = np.where(swap, dp, sp)
    hi_port = np.where(swap, sp, dp)
    ports = (lo_port.astype(np.uint64) << _S16) | hi_port.astype(np.uint64)
    with np.errstate(over="ignore"):
        k = _mix(ports ^ _mix(hi_lo ^ _mix(hi_hi ^ _mix(lo_lo ^ _mix(lo_hi)))))
    n = len(k)
    order = np.argsort(k, kind="stable")
    sk = k[order]
    brk = np.flatnonzero(sk[1:] != sk[:-1]) + 1
    starts = np.concatenate(([0], brk)).astype(np.int64)
    stops = np.concatenate((brk, [n])).astype(np.int64)
    cols = (lo_hi, lo_lo, hi_hi, hi_lo, ports)
    counts = stops - starts
    for c in cols:
        cs = c[order]
        if not np.array_equal(cs, np.repeat(cs[starts], counts)):
            # 64-bit hash collision: group exactly (lexsort is stable)
            order = np.lexsort((ports, hi_lo, hi_hi, lo_lo, lo_hi))
            diff = np.zeros(n - 1, dtype=bool) if n > 1 else np.zeros(0, dtype=bool)
            for c2 in cols:
                c2s = c2[order]
                diff |= c2s[1:] != c2s[:-1]
            brk = np.flatnonzero(diff) + 1
            starts = np.concatenate(([0], brk)).astype(np.int64)
            stops = np.concatenate((brk, [n])).astype(np.int64)
            break
    return Groups(order, starts, stops, swap, b)


def addr_str(hi: int, lo: int) -> str:
    raw = hi.to_bytes(8, "big") + lo.to_bytes(8, "big")
    if raw[:12] == b"\x00" * 10 + b"\xff\xff":
        return str(ipaddress.IPv4Address(raw[12:]))
    return str(ipaddress.IPv6Address(raw))


def make_conn_id(key: tuple[int, int, int, int, int, int], first_ts_ns: int, run: bytes = b"") -> str:
    """Stable id: the canonical 4-tuple, the first packet time and the capture run that saw
    it (``run``: reruns agree; the same traffic in another capture is another connection
    of the store's, not the same rows twice)."""
    h = hashlib.blake2b(struct.pack("<6Qq", *key, first_ts_ns) + run, digest_size=8)
    return "C" + h.hexdigest()
