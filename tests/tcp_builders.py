"""Build :class:`SegmentBatch` objects for the TCP tests and the benchmark.

Two sources:

* :func:`read_capture` decodes a pcap / pcapng file with dpkt (a stand-in for
  ``parsers.capture`` until the bulk decoder exists; kept for cross-checks);
* :class:`Flow` builds hand-made segment sequences of one connection, so each TCP
  event can be produced on purpose.

:func:`make_batch` turns plain row dicts into a batch, :func:`slice_batch` and
:func:`concat_batches` cut and join batches (to feed the analyzer in pieces).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dpkt
import numpy as np

from parsers.records import ACK, FIN, PSH, RST, SYN, SegmentBatch

FLAG_LETTERS = {"S": SYN, "A": ACK, "F": FIN, "R": RST, "P": PSH}

_COLS_I64 = ("frame_no", "ts_ns", "payload_off")
_COLS = {
    "frame_no": np.int64,
    "ts_ns": np.int64,
    "ip_version": np.uint8,
    "src_hi": np.uint64,
    "src_lo": np.uint64,
    "dst_hi": np.uint64,
    "dst_lo": np.uint64,
    "sport": np.uint16,
    "dport": np.uint16,
    "seq": np.uint32,
    "ack": np.uint32,
    "flags": np.uint8,
    "window": np.uint16,
    "payload_off": np.int64,
    "payload_len": np.int32,
    "payload_wire_len": np.int32,
    "has_ts": np.bool_,
    "ts_val": np.uint32,
    "ts_ecr": np.uint32,
    "wscale": np.int8,
    "mss": np.int32,
    "ip_id": np.int32,
}


def addr_halves(addr: str) -> tuple[int, int]:
    """16-byte address (IPv4 mapped into ::ffff:0:0/96) as two big-endian uint64."""
    ip = ipaddress.ip_address(addr)
    if ip.version == 4:
        ip = ipaddress.IPv6Address("::ffff:" + addr)
    raw = ip.packed
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")


def make_batch(rows: Sequence[dict]) -> SegmentBatch:
    """Rows are dicts with the SegmentBatch column names plus ``payload`` (bytes) and
    optionally ``sack`` (list of raw (left, right) sequence pairs)."""
    cols: dict[str, list] = {k: [] for k in _COLS}
    parts: list[bytes] = []
    off = 0
    sack: dict[int, list[tuple[int, int]]] = {}
    for i, r in enumerate(rows):
        payload = r.get("payload", b"")
        for k in _COLS:
            if k == "payload_off":
                cols[k].append(off)
            elif k == "payload_len":
                cols[k].append(len(payload))
            elif k == "payload_wire_len":
                cols[k].append(r.get("payload_wire_len", len(payload)))
            else:
                cols[k].append(r[k])
        parts.append(payload)
        off += len(payload)
        if r.get("sack"):
            sack[i] = [(int(a) & 0xFFFFFFFF, int(b) & 0xFFFFFFFF) for a, b in r["sack"]]
    arrays = {k: np.array(v, dtype=_COLS[k]) for k, v in cols.items()}
    buf = np.frombuffer(b"".join(parts), dtype=np.uint8).copy()
    return SegmentBatch(**arrays, buf=buf, sack=sack)


def slice_batch(b: SegmentBatch, start: int, stop: int) -> SegmentBatch:
    """Rows [start, stop) of a batch (arrays copied, buf shared)."""
    arrays = {k: getattr(b, k)[start:stop].copy() for k in _COLS}
    sack = {i - start: v for i, v in b.sack.items() if start <= i < stop}
    return SegmentBatch(**arrays, buf=b.buf, sack=sack)


def concat_batches(batches: Sequence[SegmentBatch]) -> SegmentBatch:
    arrays: dict[str, list[np.ndarray]] = {k: [] for k in _COLS}
    bufs: list[np.ndarray] = []
    sack: dict[int, list[tuple[int, int]]] = {}
    row0 = 0
    buf0 = 0
    for b in batches:
        for k in _COLS:
            a = getattr(b, k)
            arrays[k].append(a + buf0 if k == "payload_off" else a)
        bufs.append(b.buf)
        for i, v in b.sack.items():
            sack[i + row0] = v
        row0 += len(b)
        buf0 += len(b.buf)
    out = {k: np.concatenate(v).astype(_COLS[k]) for k, v in arrays.items()}
    return SegmentBatch(**out, buf=np.concatenate(bufs), sack=sack)


def batches_of(b: SegmentBatch, size: int) -> list[SegmentBatch]:
    return [slice_batch(b, i, min(i + size, len(b))) for i in range(0, len(b), size)]


# --------------------------------------------------------------------------- hand-made


@dataclass
class Flow:
    """One connection's packets, written from the client's or the server's side.

    ``c()`` sends client -> server, ``s()`` server -> client. Sequence numbers are
    given relative to each side's ISN (``cisn``/``sisn``) unless ``raw=True``; time
    advances by ``step_us`` per packet unless ``t_us`` (absolute, from t0) is given.
    """

    client: tuple[str, int] = ("10.0.0.1", 40000)
    server: tuple[str, int] = ("10.0.0.2", 50051)
    cisn: int = 1000
    sisn: int = 5000
    t0_ns: int = 1_700_000_000_000_000_000
    step_us: int = 100
    rows: list[dict] = field(default_factory=list)
    _t_us: int = 0
    _ipid: list[int] = field(default_factory=lambda: [100, 30000])

    def _pkt(self, side: int, seq: int, ack: int, flags: str, data: bytes | int, **kw) -> Flow:
        src, dst = (self.client, self.server) if side == 0 else (self.server, self.client)
        if "t_us" in kw:
            self._t_us = kw.pop("t_us")
        else:
            self._t_us += kw.pop("dt_us", self.step_us)
        raw = kw.pop("raw", False)
        isn_me, isn_peer = (self.cisn, self.sisn) if side == 0 else (self.sisn, self.cisn)
        fl = 0
        for ch in flags:
            fl |= FLAG_LETTERS[ch]
        if isinstance(data, int):
            data = bytes((i * 7 + seq) & 0xFF for i in range(data))
        sh, sl = addr_halves(src[0])
        dh, dl = addr_halves(dst[0])
        if "ip_id" in kw:
            ip_id = kw.pop("ip_id")
        else:
            self._ipid[side] = (self._ipid[side] + 1) & 0xFFFF
            ip_id = self._ipid[side]
        tsval = kw.pop("tsval", None)
        tsecr = kw.pop("tsecr", 0)
        sack = kw.pop("sack", None)
        if sack and not raw:
            sack = [(a + isn_peer, b + isn_peer) for a, b in sack]
        row = {
            "frame_no": len(self.rows) + 1,
            "ts_ns": self.t0_ns + self._t_us * 1000,
            "ip_version": 4 if "." in src[0] else 6,
            "src_hi": sh,
            "src_lo": sl,
            "dst_hi": dh,
            "dst_lo": dl,
            "sport": src[1],
            "dport": dst[1],
            "seq": (seq if raw else seq + isn_me) & 0xFFFFFFFF,
            "ack": (ack if raw else ack + isn_peer) & 0xFFFFFFFF if "A" in flags else 0,
            "flags": fl,
            "window": kw.pop("win", 65535),
            "payload": data,
            "has_ts": tsval is not None,
            "ts_val": (tsval or 0) & 0xFFFFFFFF,
            "ts_ecr": tsecr & 0xFFFFFFFF,
            "wscale": kw.pop("ws", -1),
            "mss": kw.pop("mss", -1),
            "ip_id": ip_id if "." in src[0] else -1,
            "sack": sack,
        }
        if "wire_len" in kw:
            row["payload_wire_len"] = kw.pop("wire_len")
        if kw:
            raise TypeError(f"unknown options {sorted(kw)}")
        self.rows.append(row)
        return self

    def c(self, seq: int, ack: int = 0, flags: str = "A", data: bytes | int = b"", **kw) -> Flow:
        return self._pkt(0, seq, ack, flags, data, **kw)

    def s(self, seq: int, ack: int = 0, flags: str = "A", data: bytes | int = b"", **kw) -> Flow:
        return self._pkt(1, seq, ack, flags, data, **kw)

    def handshake(self, ws: int = -1, tsval: int | None = None) -> Flow:
        """SYN, SYN/ACK, ACK; relative seq 0 is the SYN (data starts at 1)."""
        kw = {} if tsval is None else {"tsval": tsval}
        self.c(0, 0, "S", ws=ws, mss=1460, **kw)
        self.s(
            0,
            1,
            "SA",
            ws=ws,
            mss=1460,
            **({} if tsval is None else {"tsval": tsval + 1000, "tsecr": tsval}),
        )
        self.c(1, 1, "A", **({} if tsval is None else {"tsval": tsval + 1, "tsecr": tsval + 1000}))
        return self

    def dup(self, index: int = -1, dt_us: int = 3) -> Flow:
        """Capture the row at ``index`` once more, ``dt_us`` later (a capture duplicate)."""
        row = dict(self.rows[index])
        self._t_us += dt_us
        row["ts_ns"] = self.t0_ns + self._t_us * 1000
        row["frame_no"] = len(self.rows) + 1
        self.rows.append(row)
        return self

    def batch(self) -> SegmentBatch:
        return make_batch(self.rows)


# --------------------------------------------------------------------------- captures


def _parse_opts(opts: bytes) -> dict:
    out: dict = {"ws": -1, "mss": -1, "ts": None, "sack": None}
    i = 0
    n = len(opts)
    while i < n:
        kind = opts[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= n:
            break
        ln = opts[i + 1]
        if ln < 2 or i + ln > n:
            break
        body = opts[i + 2 : i + ln]
        if kind == 2 and ln == 4:
            out["mss"] = struct.unpack("!H", body)[0]
        elif kind == 3 and ln == 3:
            out["ws"] = body[0]
        elif kind == 8 and ln == 10:
            out["ts"] = struct.unpack("!II", body)
        elif kind == 5 and ln >= 10:
            out["sack"] = [struct.unpack("!II", body[j : j + 8]) for j in range(0, ln - 2, 8)]
        i += ln
    return out


def _l3(linktype: int, data: bytes):
    if linktype == 1:  # Ethernet
        eth = dpkt.ethernet.Ethernet(data)
        return eth.data
    if linktype in (0, 108):  # BSD loopback (host / network order family)
        fam = struct.unpack("<I" if linktype == 0 else ">I", data[:4])[0]
        if fam > 0xFFFF:
            fam = struct.unpack(">I" if linktype == 0 else "<I", data[:4])[0]
        body = data[4:]
        return dpkt.ip.IP(body) if fam == 2 else dpkt.ip6.IP6(body)
    if linktype in (101, 12, 14):  # raw IP
        return dpkt.ip.IP(data) if data[0] >> 4 == 4 else dpkt.ip6.IP6(data)
    if linktype == 113:
        return dpkt.sll.SLL(data).data
    return None


def read_capture(path: str | Path) -> SegmentBatch:
    """Decode the TCP segments of a capture with dpkt (test helper, not the fast path)."""
    rows: list[dict] = []
    with open(path, "rb") as fh:
        magic = fh.read(4)
        fh.seek(0)
        reader = dpkt.pcapng.Reader(fh) if magic == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(fh)
        linktype = reader.datalink()
        nano = (
            getattr(reader, "_divisor", 1e6) > 1e6
            if isinstance(reader, dpkt.pcapng.Reader)
            else False
        )
        for frame_no, (ts, data) in enumerate(reader, start=1):
            try:
                ip = _l3(linktype, data)
            except (dpkt.UnpackError, struct.error, IndexError):
                continue
            if not isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)):
                continue
            tcp = ip.data
            if not isinstance(tcp, dpkt.tcp.TCP):
                continue
            if isinstance(ip, dpkt.ip.IP):
                version = 4
                src = str(ipaddress.IPv4Address(ip.src))
                dst = str(ipaddress.IPv4Address(ip.dst))
                wire = ip.len - ip.hl * 4 - tcp.off * 4
                ip_id = ip.id
            else:
                version = 6
                src = str(ipaddress.IPv6Address(ip.src))
                dst = str(ipaddress.IPv6Address(ip.dst))
                ext = sum(len(bytes(h)) for h in getattr(ip, "all_extension_headers", []))
                wire = ip.plen - ext - tcp.off * 4
                ip_id = -1
            payload = bytes(tcp.data)
            wire = max(wire, len(payload))
            o = _parse_opts(bytes(tcp.opts))
            sh, sl = addr_halves(src)
            dh, dl = addr_halves(dst)
            ts_ns = int(round(ts * 1e9)) if nano else int(round(ts * 1e6)) * 1000
            rows.append(
                {
                    "frame_no": frame_no,
                    "ts_ns": ts_ns,
                    "ip_version": version,
                    "src_hi": sh,
                    "src_lo": sl,
                    "dst_hi": dh,
                    "dst_lo": dl,
                    "sport": tcp.sport,
                    "dport": tcp.dport,
                    "seq": tcp.seq,
                    "ack": tcp.ack,
                    "flags": tcp.flags & 0xFF,
                    "window": tcp.win,
                    "payload": payload,
                    "payload_wire_len": wire,
                    "has_ts": o["ts"] is not None,
                    "ts_val": o["ts"][0] if o["ts"] else 0,
                    "ts_ecr": o["ts"][1] if o["ts"] else 0,
                    "wscale": o["ws"],
                    "mss": o["mss"],
                    "ip_id": ip_id,
                    "sack": o["sack"],
                }
            )
    return make_batch(rows)


def rows_of(b: SegmentBatch, idx: Iterable[int]) -> list[dict]:
    """Debug helper: rows as dicts."""
    return [{k: getattr(b, k)[i].item() for k in _COLS} for i in idx]


def decode_file(path: str | Path, batch_packets: int = 65536) -> list[SegmentBatch]:
    """Decode a capture with the project's bulk decoder (``parsers.capture``)."""
    from parsers.capture import CaptureDecoder, decode_segments
    from parsers.records import DecodeStats

    dec = CaptureDecoder(batch_packets=batch_packets)
    stats = DecodeStats()
    issues: list = []
    data = Path(path).read_bytes()
    batches = dec.feed(data) + dec.close()
    return [decode_segments(b, stats, issues) for b in batches]


# --------------------------------------------------------------------------- running


@dataclass
class Run:
    """Everything a TcpAnalyzer produced for some input."""

    chunks: list
    events: list
    rtts: list
    summaries: list
    an: object

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.events:
            out[e.kind] = out.get(e.kind, 0) + 1
        return out

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.kind == kind]

    def data(self, direction: int, conn_key: int | None = None) -> bytes:
        return b"".join(
            c.data
            for c in self.chunks
            if c.direction == direction and (conn_key is None or c.conn_key == conn_key)
        )

    def dir_chunks(self, direction: int) -> list:
        return [c for c in self.chunks if c.direction == direction]

    def summary(self, conn_key: int | None = None):
        ss = [s for s in self.summaries if conn_key is None or s.conn_key == conn_key]
        assert len(ss) == 1, ss
        return ss[0]


def analyze(batches: SegmentBatch | Sequence[SegmentBatch], batch_size: int | None = None,
            finish: bool = True) -> Run:  # fmt: skip
    """Feed batches (optionally re-cut into ``batch_size`` rows) to a fresh analyzer."""
    from parsers.tcp import TcpAnalyzer

    if isinstance(batches, SegmentBatch):
        batches = [batches]
    if batch_size:
        batches = [x for b in batches for x in batches_of(b, batch_size)]
    an = TcpAnalyzer()
    chunks: list = []
    for b in batches:
        chunks += an.feed(b)
    summaries = []
    if finish:
        summaries = an.take_closed() + an.finish()
        chunks += an.take_chunks()
    events, rtts = an.take_events()
    return Run(chunks, events, rtts, summaries, an)
