"""pcapng: section, interface and packet blocks (enhanced, simple, obsolete) and the
interface statistics; enhanced packet blocks go through a fast walk, state-changing
blocks through a careful per-block path."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import _linktypes
from ._format import (
    _BOM_BE,
    _BOM_LE,
    _KNOWN_SKIPPED,
    _NS,
    _U32LE,
    DSB_TLS_KEY_LOG,
    DSB_TYPE,
    EPB_TYPE,
    IDB_TYPE,
    ISB_TYPE,
    MAX_BLOCK,
    NRB_TYPE,
    PB_TYPE,
    SHB_TYPE,
    SPB_TYPE,
    CaptureFormatError,
    _Rows,
    _speedups,
)
from ._gather import take_rows, take_struct

if TYPE_CHECKING:
    from ._container import CaptureDecoder


@dataclass(slots=True)
class _Iface:
    linktype: int
    snaplen: int
    tsresol: int  # raw if_tsresol byte: 10^-n, or 2^-n when the top bit is set
    tsoffset: int  # seconds added to every timestamp (if_tsoffset)


def ts_to_ns(raw: np.ndarray, tsresol: int, tsoffset: int) -> np.ndarray:
    """pcapng 64-bit timestamps in interface units -> int64 ns since the epoch."""
    raw = raw.astype(np.uint64, copy=False)
    exp = tsresol & 0x7F
    if tsresol & 0x80:  # power of two
        exp = min(exp, 63)
        if exp == 0:
            ns = raw.astype(np.int64) * _NS
        else:
            secs = (raw >> np.uint64(exp)).astype(np.int64)
            frac = raw & np.uint64((1 << exp) - 1)
            shift = exp
            if exp > 34:  # keep frac * 1e9 inside 64 bits (drops sub-ns precision only)
                frac = frac >> np.uint64(exp - 34)
                shift = 34
            ns = secs * _NS + ((frac * np.uint64(_NS)) >> np.uint64(shift)).astype(np.int64)
    elif exp <= 9:
        ns = raw.astype(np.int64) * (10 ** (9 - exp))
    elif exp - 9 <= 19:
        ns = (raw // np.uint64(10 ** (exp - 9))).astype(np.int64)
    else:
        ns = np.zeros(raw.shape, np.int64)
    if tsoffset:
        ns = ns + tsoffset * _NS
    return ns


def _walk_epb(data: memoryview, pos: int, end: int, head: struct.Struct) -> tuple[np.ndarray, int]:
    """Offsets (int64) of consecutive complete EPBs from ``pos``, and where the walk
    stopped; the hot loop of pcapng decoding.

    Stops at anything else (other block types, implausible lengths, the incomplete tail),
    which the careful per-block path then handles.
    """
    if _speedups is not None:
        raw, stop = _speedups.walk_epb(data, pos, end, head.format[0] == ">")
        return np.frombuffer(raw, np.int64), stop
    out, stop = _walk_epb_py(data, pos, end, head)
    return np.array(out, np.int64), stop


def _walk_epb_py(
    data: memoryview, pos: int, end: int, head: struct.Struct
) -> tuple[list[int], int]:
    unpack = head.unpack_from
    out: list[int] = []
    append = out.append
    last = end - 8
    while pos <= last:
        btype, blen = unpack(data, pos)
        if btype != EPB_TYPE or blen < 32 or blen & 3:
            break
        nxt = pos + blen
        if nxt > end:
            break
        append(pos)
        pos = nxt
    return out, pos


# Column dtypes of _speedups.epb_records: offsets, interfaces, raw timestamps, lengths.
_EPB_TYPES = (np.int64, np.int64, np.uint64, np.int64, np.int64)


def _bad_epb(at: int, blen: int, trailer: int, caplen: int) -> str:
    """The fatal issue's message for a corrupt EPB at byte ``at``."""
    if trailer != blen:
        why = f"total length {blen} at the start but {trailer} at the end (corrupt block length)"
    else:
        why = f"captured length {caplen} does not fit its {blen}-byte block"
    return f"enhanced packet block at byte {at}: {why}"


def _options(body: bytes, off: int, order: str) -> list[tuple[int, bytes]]:
    """(code, value) of the pcapng options in ``body`` from ``off``."""
    out = []
    opt = struct.Struct(order + "HH")
    while off + 4 <= len(body):
        code, length = opt.unpack_from(body, off)
        if code == 0:
            break
        out.append((code, body[off + 4 : off + 4 + length]))
        off += 4 + ((length + 3) & ~3)
    return out


_BLOCK_NAMES = {
    SHB_TYPE: "section header block",
    IDB_TYPE: "interface description block",
    PB_TYPE: "packet block",
    SPB_TYPE: "simple packet block",
    NRB_TYPE: "name resolution block",
    ISB_TYPE: "interface statistics block",
    EPB_TYPE: "enhanced packet block",
    0x0A: "decryption secrets block",
}


def _block_name(btype: int) -> str:
    return _BLOCK_NAMES.get(btype, f"block of type 0x{btype:08x}")


class _PcapngReader:
    def __init__(self) -> None:
        self.order: str | None = None
        self.head: struct.Struct | None = None
        self.section = 0
        self.ifaces: list[_Iface] = []
        self.last_ts = 0  # for SPBs, which carry no timestamp
        self.drops: dict[tuple[int, int], int] = {}
        self.unknown_types: set[int] = set()
        # Packets from SPB/PB, decoded one by one; stored in order before the next EPBs.
        self.slow_rows: list[tuple[int, int, int, int, int, int]] = []

    def _set_order(self, order: str) -> None:
        self.order = order
        self.head = struct.Struct(order + "II")
        self.epb = np.dtype(
            [
                ("type", order + "u4"),
                ("len", order + "u4"),
                ("iface", order + "u4"),
                ("hi", order + "u4"),
                ("lo", order + "u4"),
                ("cap", order + "u4"),
                ("orig", order + "u4"),
            ]
        )
        self.u32 = np.dtype(order + "u4")

    def parse(self, dec: CaptureDecoder) -> None:
        while not dec._dead:
            if self.order is not None:
                if _speedups is not None:
                    self._epbs_c(dec)
                else:
                    data, base = dec._data, dec._base
                    positions, rel = _walk_epb(data, dec._pos - base, len(data), self.head)
                    if len(positions):
                        self._flush_slow(dec)
                        self._decode_epbs(dec, positions)
                        if not dec._dead:
                            dec._pos = base + rel
                if dec._dead:
                    break
            if not self._block(dec):
                break
        self._flush_slow(dec)

    def finish(self, dec: CaptureDecoder) -> None:
        if self.order is None:
            raise CaptureFormatError(f"pcapng section header cut short: {len(dec._data)} bytes", 0)
        self._flush_slow(dec)

    def describe_tail(self, dec: CaptureDecoder) -> str:
        rel = dec._pos - dec._base
        if len(dec._data) - rel >= 4 and self.head is not None:
            btype = struct.unpack_from(self.head.format[0] + "I", dec._data, rel)[0]
            return f"pcapng {_block_name(btype)} at byte {dec._pos}"
        return f"pcapng block at byte {dec._pos}"

    # -- bulk EPB path --------------------------------------------------------------
    def _epbs_c(self, dec: CaptureDecoder) -> None:
        """The bulk EPB path in C (``_speedups.epb_records``): it walks and decodes the
        sound EPBs from ``dec._pos`` and stops before a corrupt one, reported here."""
        assert _speedups is not None and self.head is not None
        base = dec._base
        rel, bad, blen, trailer, caplen, *cols = _speedups.epb_records(
            dec._data, dec._pos - base, dec._hi - dec._lo, self.head.format[0] == ">"
        )
        pos, iface, raw, cap, orig = (
            np.frombuffer(c, t) for c, t in zip(cols, _EPB_TYPES, strict=True)
        )
        if len(pos) or bad:
            self._flush_slow(dec)
            self._store_epbs(dec, pos, iface, raw, cap, orig)
        dec._pos = base + rel
        if bad:
            dec._fatal("bad_block", _bad_epb(dec._pos, blen, trailer, caplen), dec._pos)

    def _decode_epbs(self, dec: CaptureDecoder, positions: np.ndarray) -> None:
        pos = positions
        arr = np.frombuffer(dec._data, np.uint8)
        hdr = take_struct(arr, pos, self.epb)
        blen = hdr["len"].astype(np.int64)
        trailer = take_rows(arr, pos + blen - 4, 4).view(self.u32)[:, 0]
        caplen = hdr["cap"].astype(np.int64)
        bad = (trailer != blen) | (caplen > blen - 32)
        k = int(np.argmax(bad)) if bad.any() else len(pos)
        raw = (hdr["hi"].astype(np.uint64) << np.uint64(32)) | hdr["lo"].astype(np.uint64)
        self._store_epbs(
            dec, pos[:k], hdr["iface"][:k].astype(np.int64), raw[:k], caplen[:k], hdr["orig"][:k]
        )
        if k < len(pos):
            at = dec._base + int(positions[k])
            dec._pos = at
            why = _bad_epb(at, int(blen[k]), int(trailer[k]), int(caplen[k]))
            dec._fatal("bad_block", why, at)

    def _store_epbs(
        self,
        dec: CaptureDecoder,
        pos: np.ndarray,
        iface: np.ndarray,
        raw: np.ndarray,
        caplen: np.ndarray,
        origlen: np.ndarray,
    ) -> None:
        """Rows for EPBs at ``pos`` (relative to ``dec._data``): interface (int64),
        raw 64-bit timestamp (uint64), captured and wire lengths."""
        n = pos.shape[0]
        if n == 0:
            return
        first = dec.packets_read + 1
        dec.packets_read += n
        frame_no = np.arange(first, first + n, dtype=np.int64)
        known = iface < len(self.ifaces)
        if not known.all():
            bad = np.flatnonzero(~known)
            dec._issue(
                "bad_interface",
                int(frame_no[bad[0]]),
                f"{bad.size} enhanced packet block(s) refer to interface "
                f"{int(iface[bad[0]])} but section {self.section} describes "
                f"{len(self.ifaces)}; those packets are skipped",
                dec._base + int(pos[bad[0]]),
            )
            pos, raw, caplen, origlen, iface, frame_no = (
                pos[known],
                raw[known],
                caplen[known],
                origlen[known],
                iface[known],
                frame_no[known],
            )
            n = pos.shape[0]
            if n == 0:
                return
        i0 = int(iface[0])
        if len(self.ifaces) == 1 or bool((iface == i0).all()):
            f = self.ifaces[i0]
            ts = ts_to_ns(raw, f.tsresol, f.tsoffset)
            linktype = np.full(n, f.linktype, np.int32)
        else:
            ts = np.empty(n, np.int64)
            for i in np.unique(iface).tolist():
                m = iface == i
                f = self.ifaces[i]
                ts[m] = ts_to_ns(raw[m], f.tsresol, f.tsoffset)
            table = np.array([f.linktype for f in self.ifaces], np.int32)
            linktype = table[iface]
        self.last_ts = int(ts[-1])
        dec._add_rows(
            _Rows(
                frame_no=frame_no,
                ts_ns=ts,
                linktype=linktype,
                caplen=caplen.astype(np.int32),
                origlen=np.minimum(origlen, 0x7FFFFFFF).astype(np.int32),
                data_off=pos + (dec._base + 28),
            )
        )

    def _flush_slow(self, dec: CaptureDecoder) -> None:
        if not self.slow_rows:
            return
        cols = list(zip(*self.slow_rows, strict=True))
        self.slow_rows = []
        dec._add_rows(
            _Rows(
                frame_no=np.array(cols[0], np.int64),
                ts_ns=np.array(cols[1], np.int64),
                linktype=np.array(cols[2], np.int32),
                caplen=np.array(cols[3], np.int32),
                origlen=np.minimum(np.array(cols[4], np.int64), 0x7FFFFFFF).astype(np.int32),
                data_off=np.array(cols[5], np.int64),
            )
        )

    # -- careful per-block path -----------------------------------------------------
    def _bad_block(self, dec: CaptureDecoder, message: str, at: int) -> None:
        """Corruption: fatal mid-file; before the first section header, no capture at all."""
        if self.order is None:
            raise CaptureFormatError(f"unreadable pcapng file header: {message}", at)
        dec._fatal("bad_block", message, at)

    def _block(self, dec: CaptureDecoder) -> bool:
        """Handle the one block at dec._pos; False when it is incomplete (or fatal)."""
        data, base = dec._data, dec._base
        rel = dec._pos - base
        avail = len(data) - rel
        if avail < 12:
            return False
        at = dec._pos
        btype = _U32LE.unpack_from(data, rel)[0]
        if btype == SHB_TYPE:
            bom = bytes(data[rel + 8 : rel + 12])
            if bom not in (_BOM_LE, _BOM_BE):
                self._bad_block(
                    dec,
                    f"section header block at byte {at} has a bad byte-order magic "
                    f"({bom.hex(' ')})",
                    at,
                )
                return False
            order = "<" if bom == _BOM_LE else ">"
        else:
            assert self.order is not None  # the decoder only starts on an SHB
            order = self.order
        btype, blen = struct.unpack_from(order + "II", data, rel)
        name = _block_name(btype)
        if blen < 12 or blen % 4 or blen > MAX_BLOCK:
            self._bad_block(
                dec,
                f"{name} at byte {at} has an invalid total length {blen}: the file is "
                "corrupt from here",
                at,
            )
            return False
        if avail < blen:
            return False
        trailer = struct.unpack_from(order + "I", data, rel + blen - 4)[0]
        if trailer != blen:
            self._bad_block(
                dec,
                f"{name} at byte {at}: total length {blen} at the start but {trailer} at "
                "the end (corrupt block length)",
                at,
            )
            return False
        handler = {
            SHB_TYPE: self._shb,
            IDB_TYPE: self._idb,
            EPB_TYPE: self._short_epb,
            SPB_TYPE: self._spb,
            PB_TYPE: self._pb,
            ISB_TYPE: self._isb,
            DSB_TYPE: self._dsb,
        }.get(btype)
        if handler is not None:
            body = bytes(data[rel + 8 : rel + blen - 4])
            if not handler(dec, order, body, at):
                return False
        elif btype not in _KNOWN_SKIPPED and btype not in self.unknown_types:
            self.unknown_types.add(btype)
            dec._issue(
                "unknown_block",
                dec.packets_read + 1,
                f"skipped unknown pcapng {name} at byte {at} (and any later ones)",
                at,
            )
        dec._pos = at + blen
        return True

    def _too_short(self, dec: CaptureDecoder, btype: int, at: int, size: int) -> bool:
        self._bad_block(dec, f"{_block_name(btype)} at byte {at} is too short ({size} bytes)", at)
        return False

    def _shb(self, dec: CaptureDecoder, order: str, body: bytes, at: int) -> bool:
        if len(body) < 16:
            return self._too_short(dec, SHB_TYPE, at, len(body) + 12)
        major, minor = struct.unpack_from(order + "HH", body, 4)
        if major != 1:
            self._bad_block(
                dec,
                f"section header block at byte {at} has unsupported pcapng version {major}.{minor}",
                at,
            )
            return False
        self._flush_slow(dec)
        self._set_order(order)
        self.section += 1
        self.ifaces = []
        return True

    def _idb(self, dec: CaptureDecoder, order: str, body: bytes, at: int) -> bool:
        if len(body) < 8:
            return self._too_short(dec, IDB_TYPE, at, len(body) + 12)
        linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", body, 0)
        tsresol, tsoffset = 6, 0
        for code, value in _options(body, 8, order):
            if code == 9 and len(value) >= 1:
                tsresol = value[0]
            elif code == 14 and len(value) >= 8:
                tsoffset = struct.unpack_from(order + "q", value)[0]
        self.ifaces.append(_Iface(linktype, snaplen, tsresol, tsoffset))
        if linktype not in _linktypes.SUPPORTED:
            dec._issue(
                "unknown_linktype",
                0,
                f"interface {len(self.ifaces) - 1} of section {self.section} has link type "
                f"{_linktypes.describe(linktype)}, which is not decoded; its packets are "
                "counted only",
                at,
            )
        return True

    def _short_epb(self, dec: CaptureDecoder, order: str, body: bytes, at: int) -> bool:
        # Well-formed EPBs go through the bulk path; one here is shorter than its header.
        return self._too_short(dec, EPB_TYPE, at, len(body) + 12)

    def _packet_iface(self, dec: CaptureDecoder, iface: int, at: int, name: str) -> _Iface | None:
        if iface < len(self.ifaces):
            return self.ifaces[iface]
        dec._issue(
            "bad_interface",
            dec.packets_read,
            f"{name} at byte {at} refers to interface {iface} but section {self.section} "
            f"describes {len(self.ifaces)}; the packet is skipped",
            at,
        )
        return None

    def _spb(self, dec: CaptureDecoder, order: str, body: bytes, at: int) -> bool:
        if len(body) < 4:
            return self._too_short(dec, SPB_TYPE, at, len(body) + 12)
        dec.packets_read += 1
        f = self._packet_iface(dec, 0, at, "simple packet block")
        if f is None:
            return True
        origlen = struct.unpack_from(order + "I", body, 0)[0]
        caplen = min(origlen, len(body) - 4)
        if f.snaplen:
            caplen = min(caplen, f.snaplen)
        # SPBs carry no timestamp: reuse the previous packet's, so time stays monotonic.
        self.slow_rows.append(
            (dec.packets_read, self.last_ts, f.linktype, caplen, origlen, at + 12)
        )
        return True

    def _pb(self, dec: CaptureDecoder, order: str, body: bytes, at: int) -> bool:
        if len(body) < 20:
            return self._too_short(dec, PB_TYPE, at, len(body) + 12)
        iface, _drops, hi, lo, caplen, origlen = struct.unpack_from(order + "HHIIII", body, 0)
        if caplen > len(body) - 20:
            self._bad_block(
                dec,
                f"packet block at byte {at}: captured length {caplen} does not fit its "
                f"{len(body) + 12}-byte block",
                at,
            )
            return False
        dec.packets_read += 1
        f = self._packet_iface(dec, iface, at, "packet block")
        if f is None:
            return True
        raw = np.array([(hi << 32) | lo], np.uint64)
        ts = int(ts_to_ns(raw, f.tsresol, f.tsoffset)[0])
        self.last_ts = ts
        self.slow_rows.append((dec.packets_read, ts, f.linktype, caplen, origlen, at + 28))
        return True

    def _dsb(self, dec: CaptureDecoder, order: str, body: bytes, at: int) -> bool:
        """Decryption Secrets Block: a TLS key log is kept for the reader; other secrets
        (WireGuard, ZigBee...) are not used."""
        if len(body) < 8:
            return self._too_short(dec, DSB_TYPE, at, len(body) + 12)
        kind, length = struct.unpack_from(order + "II", body, 0)
        if kind == DSB_TLS_KEY_LOG and 8 + length <= len(body):
            dec.tls_secrets.append(bytes(body[8 : 8 + length]))
        return True

    def _isb(self, dec: CaptureDecoder, order: str, body: bytes, at: int) -> bool:
        if len(body) < 12:
            return True  # statistics are optional extras: a short one is just ignored
        iface = struct.unpack_from(order + "I", body, 0)[0]
        for code, value in _options(body, 12, order):
            if code == 5 and len(value) >= 8:  # isb_ifdrop
                self.drops[(self.section, iface)] = struct.unpack_from(order + "Q", value)[0]
        if self.drops:
            dec.kernel_drops = sum(self.drops.values())
        return True
