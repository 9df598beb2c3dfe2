"""Sans-I/O decoding of capture containers (classic pcap and pcapng) into PacketBatch.

The caller feeds the (decompressed) file bytes in any chunking; the decoder keeps the
unconsumed tail, walks the record/block chain and hands back batches of packets whose
bytes are copied once into one uint8 buffer. The unconsumed input lives in a window of
one reused buffer (consumed bytes only move the window's start), so feeding does not
reallocate and copy the kept tail every time.

Speed: the record chain is inherently sequential, so a tight loop only finds where each
record starts (one ``unpack_from`` per record); every header field is then read for all
records at once with numpy, and the structural checks (caplen limits, pcapng trailing
block length) are vectorised too. State-changing pcapng blocks (SHB, IDB) and rare packet
blocks (SPB, obsolete PB) stop the fast loop and go through a careful per-block path.
"""

from __future__ import annotations

import struct
import weakref
from dataclasses import dataclass

import numpy as np

from parsers._native import speedups
from parsers.records import DecodeIssue, PacketBatch

from . import _linktypes
from ._gather import take_rows, take_struct

# Optional C record walks (parsers/capture/_speedups.c, built by `pip install -e .`);
# without it, or with TAILTAP_PURE_PYTHON=1, the Python walks below give the same offsets.
_speedups = speedups("parsers.capture")

# Larger records are taken as corruption rather than waited for. Like libpcap, a pcap
# record may not exceed 256 KiB (or the file's snaplen when that is larger); like
# Wireshark, a pcapng block may not exceed 16 MiB.
MAX_CAPLEN = 262144
MAX_SNAPLEN = 16 << 20
MAX_BLOCK = 16 << 20
# Zero bytes after the last packet of a batch buffer, so bulk header reads never need
# a bounds copy for short packets at the very end.
BUF_PAD = 64
# Input buffers handed out with batches, kept to be reused once no batch uses them:
# fresh memory costs a page fault per page on first write.
_SPARE_STORES = 2

_NS = 1_000_000_000

# pcap magic (as the 4 file bytes) -> (byte order, ns per fraction unit, record header size)
_PCAP_MAGICS: dict[bytes, tuple[str, int, int]] = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000, 16),  # microseconds
    b"\xa1\xb2\xc3\xd4": (">", 1000, 16),
    b"\x4d\x3c\xb2\xa1": ("<", 1, 16),  # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1, 16),
    b"\x34\xcd\xb2\xa1": ("<", 1000, 24),  # Kuznetzov's modified pcap (extra 8 bytes)
    b"\xa1\xb2\xcd\x34": (">", 1000, 24),
}
PCAP_HEADER_LEN = 24

SHB_TYPE = 0x0A0D0D0A  # palindrome: readable in either byte order
_BOM_LE = b"\x4d\x3c\x2b\x1a"
_BOM_BE = b"\x1a\x2b\x3c\x4d"
IDB_TYPE, PB_TYPE, SPB_TYPE, NRB_TYPE, ISB_TYPE, EPB_TYPE = 1, 2, 3, 4, 5, 6
# Non-packet blocks skipped without a word: name resolution, interface statistics,
# systemd journal, decryption secrets, custom blocks, and a few rare/newer ones.
_KNOWN_SKIPPED = {NRB_TYPE, ISB_TYPE, 7, 8, 9, 0x0A, 0xBAD, 0x40000BAD}

_U32LE = struct.Struct("<I")


class CaptureFormatError(Exception):
    """The input is not a capture at all, or its file/section header is unreadable."""

    def __init__(self, message: str, byte_offset: int = 0) -> None:
        super().__init__(message)
        self.byte_offset = byte_offset


@dataclass(slots=True)
class _Rows:
    """Decoded packet records not yet handed out (absolute file offsets)."""

    frame_no: np.ndarray
    ts_ns: np.ndarray
    linktype: np.ndarray
    caplen: np.ndarray
    origlen: np.ndarray
    data_off: np.ndarray

    def __len__(self) -> int:
        return int(self.frame_no.shape[0])

    def cut(self, k: int) -> _Rows:
        return _Rows(*(a[:k] for a in self.columns()))

    def columns(self) -> tuple[np.ndarray, ...]:
        return (self.frame_no, self.ts_ns, self.linktype, self.caplen, self.origlen, self.data_off)


def _concat_rows(parts: list[_Rows]) -> _Rows:
    if len(parts) == 1:
        return parts[0]
    cols = zip(*(p.columns() for p in parts), strict=True)
    return _Rows(*(np.concatenate(c) for c in cols))


def _describe_garbage(head: bytes) -> str:
    """Name what the first bytes look like, for the error message."""
    signatures = [
        (b"\x1f\x8b", "gzip-compressed data (decompress it first)"),
        (b"BZh", "bzip2-compressed data"),
        (b"\xfd7zXZ\x00", "xz-compressed data"),
        (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
        (b"PK\x03\x04", "a zip archive"),
        (b"\x7fELF", "an ELF executable"),
        (b"snoop\x00\x00\x00", "a Sun snoop capture (not supported)"),
        (b"GMBU", "a Microsoft Network Monitor capture (not supported)"),
        (b"XCP\x00", "a NetXray/Sniffer capture (not supported)"),
    ]
    for magic, name in signatures:
        if head.startswith(magic):
            return name
    text = head[:32]
    if text and all(32 <= b < 127 or b in (9, 10, 13) for b in text):
        return f"text {text.decode('ascii')!r}"
    return f"bytes {head[:16].hex(' ')}"


class CaptureDecoder:
    """Incremental pcap/pcapng decoder: ``feed()`` bytes, get :class:`PacketBatch` back.

    Batches hold exactly ``batch_packets`` packets except the last one from ``close()``.
    ``issues`` collects what was wrong with the file (never raised, except that input
    which is no capture at all raises :class:`CaptureFormatError`). After a fatal issue
    the rest of the input is ignored; everything before it is still delivered.

    Frame numbers count packet records/blocks as tshark does (SPB/PB included). Any
    chunking works; chunks of 1 MiB or more keep the per-call overhead negligible.
    ``kernel_drops`` is the kernel drop count from pcapng interface statistics (None
    when the file has none).
    """

    def __init__(self, batch_packets: int = 65536) -> None:
        if batch_packets < 1:
            raise ValueError("batch_packets must be >= 1")
        self.batch_packets = batch_packets
        self.format: str | None = None
        self.issues: list[DecodeIssue] = []
        self.packets_read = 0
        self.bytes_read = 0
        # Sum over interfaces of the latest pcapng ISB drop counter (None when unknown).
        self.kernel_drops: int | None = None
        # unconsumed input: _store[_lo:_hi] (see _data); _store[_lo] is file offset _base
        self._store = np.empty(0, np.uint8)
        self._lo = self._hi = 0
        self._base = 0
        # stores handed out with batches, and a weak reference to each one's batch buffer
        self._retired: list[tuple[np.ndarray, weakref.ref]] = []
        self._pos = 0  # file offset of the next record/block to parse
        self._reader: _PcapReader | _PcapngReader | None = None
        self._pending: list[_Rows] = []
        self._pending_n = 0
        self._dead = False
        self._closed = False

    # -- public API ---------------------------------------------------------------
    def feed(self, data: bytes) -> list[PacketBatch]:
        if self._closed:
            raise ValueError("feed() after close()")
        self.bytes_read += len(data)
        if self._dead or not data:
            return []
        self._append(data)
        if self._reader is None and not self._start():
            return []
        assert self._reader is not None
        self._reader.parse(self)
        batches = self._emit(final=False)
        self._trim()
        return batches

    def close(self) -> list[PacketBatch]:
        if self._closed:
            return []
        self._closed = True
        if self._reader is None:
            self._raise_unstarted()
        assert self._reader is not None
        if not self._dead:
            self._reader.finish(self)
            rest = self._base + len(self._data) - self._pos
            if rest > 0:
                self._issue(
                    "truncated_record",
                    self.packets_read + 1,
                    f"{self._reader.describe_tail(self)} cut short at end of input: only "
                    f"{rest} bytes present",
                    self._pos,
                )
        batches = self._emit(final=True)
        self._store = np.empty(0, np.uint8)
        self._lo = self._hi = 0
        self._retired = []
        return batches

    @property
    def _data(self) -> memoryview:
        """The unconsumed input; ``_data[0]`` is file offset ``_base``."""
        return memoryview(self._store)[self._lo : self._hi]

    def _append(self, data: bytes) -> None:
        n = len(data)
        # the store keeps BUF_PAD spare bytes past the input: see _hand_out
        if self._hi + n + BUF_PAD > self._store.shape[0]:
            keep = self._hi - self._lo
            if keep + n > self._store.shape[0] // 2:
                # grow to twice what is needed: the window then slides over several
                # feeds before the kept tail has to move to the front again
                grown = np.empty(max(2 * (keep + n), 1 << 16) + BUF_PAD, np.uint8)
                grown[:keep] = self._store[self._lo : self._hi]
                self._store = grown
            else:  # move the kept tail to the front (numpy copes with the overlap)
                self._store[:keep] = self._store[self._lo : self._hi]
            self._lo, self._hi = 0, keep
        self._store[self._hi : self._hi + n] = np.frombuffer(data, np.uint8)
        self._hi += n

    # -- used by the readers ------------------------------------------------------
    def _issue(
        self, kind: str, frame_no: int, message: str, byte_offset: int, fatal: bool = False
    ) -> None:
        self.issues.append(DecodeIssue(kind, frame_no, message, byte_offset, fatal))

    def _fatal(self, kind: str, message: str, byte_offset: int) -> None:
        self._issue(kind, self.packets_read + 1, message, byte_offset, fatal=True)
        self._dead = True

    def _add_rows(self, rows: _Rows) -> None:
        if len(rows):
            self._pending.append(rows)
            self._pending_n += len(rows)

    # -- internals ----------------------------------------------------------------
    def _start(self) -> bool:
        """Recognise the container from the first bytes; False while more are needed."""
        head = bytes(self._data[:PCAP_HEADER_LEN])
        if len(head) < 4:
            return False
        magic = head[:4]
        if magic in _PCAP_MAGICS:
            if len(head) < PCAP_HEADER_LEN:
                return False
            self._reader = _PcapReader(head)
            self.format = "pcap"
            self._pos = PCAP_HEADER_LEN
            if self._reader.linktype not in _linktypes.SUPPORTED:
                self._issue(
                    "unknown_linktype",
                    0,
                    f"file link type {_linktypes.describe(self._reader.linktype)} is not "
                    "decoded; its packets are counted only",
                    20,
                )
            return True
        if magic == SHB_TYPE.to_bytes(4, "little"):
            if len(head) < 12:
                return False
            if head[8:12] not in (_BOM_LE, _BOM_BE):
                raise CaptureFormatError(
                    "pcapng section header block at byte 0 has a bad byte-order magic "
                    f"({head[8:12].hex(' ')})",
                    8,
                )
            self._reader = _PcapngReader()
            self.format = "pcapng"
            return True
        raise CaptureFormatError(
            f"not a pcap or pcapng capture: found {_describe_garbage(head)} at byte 0", 0
        )

    def _raise_unstarted(self) -> None:
        head = bytes(self._data[:16])
        if not head:
            raise CaptureFormatError("empty input: no capture file header (0 bytes)", 0)
        if head[:4] in _PCAP_MAGICS:
            raise CaptureFormatError(
                f"pcap file header cut short: {len(self._data)} of {PCAP_HEADER_LEN} bytes", 0
            )
        if head[:4] == SHB_TYPE.to_bytes(4, "little"):
            raise CaptureFormatError(f"pcapng section header cut short: {len(self._data)} bytes", 0)
        raise CaptureFormatError(
            f"input too short to be a capture ({len(head)} bytes: {head.hex(' ')})", 0
        )

    def _emit(self, final: bool) -> list[PacketBatch]:
        size = self.batch_packets
        if self._pending_n == 0 or (self._pending_n < size and not final):
            return []
        rows = _concat_rows(self._pending)
        n = len(rows)
        out: list[PacketBatch] = []
        k = 0
        while n - k >= size or (final and k < n):
            j = min(k + size, n)
            last = not (n - j >= size or (final and j < n))
            out.append(self._make_batch(rows, k, j, last))
            k = j
        if k < n:
            rest = _Rows(*(a[k:] for a in rows.columns()))
            self._pending, self._pending_n = [rest], n - k
        else:
            self._pending, self._pending_n = [], 0
        return out

    def _make_batch(self, rows: _Rows, k: int, j: int, last: bool) -> PacketBatch:
        """Rows [k, j) as a batch. Records are in file order and do not overlap, so the
        buffer is the span of input bytes from the first packet to the end of the last
        one, then BUF_PAD zero bytes: a copy, or for the last batch of an _emit the
        store itself (see _hand_out)."""
        start = int(rows.data_off[k])
        stop = int(rows.data_off[j - 1] + rows.caplen[j - 1])
        size = stop - start
        lo = self._lo + start - self._base
        if last:
            buf = self._hand_out(lo, lo + size)
        else:
            buf = np.empty(size + BUF_PAD, np.uint8)
            buf[:size] = self._store[lo : lo + size]
            buf[size:] = 0
        return PacketBatch(
            frame_no=rows.frame_no[k:j],
            ts_ns=rows.ts_ns[k:j],
            linktype=rows.linktype[k:j],
            caplen=rows.caplen[k:j],
            origlen=rows.origlen[k:j],
            offset=rows.data_off[k:j] - start,
            buf=buf,
        )

    def _hand_out(self, a: int, z: int) -> np.ndarray:
        """``_store[a:z]`` plus BUF_PAD zero bytes, without copying the span: the bytes
        from z on move to a new store and the old one is left to the batch (the decoder
        never writes to it again), so the input is copied once, not twice."""
        store, hi = self._store, self._hi
        rest = hi - z
        fresh = self._spare(max(store.shape[0], 2 * rest + BUF_PAD))
        fresh[:rest] = store[z:hi]
        self._base += z - self._lo
        self._store, self._lo, self._hi = fresh, 0, rest
        store[z : z + BUF_PAD] = 0
        # Through a memoryview: numpy views of the buffer then all keep this array (it
        # is the first base that is not an ndarray view of the store), so its weak
        # reference dies exactly when nothing can see the store any more.
        buf = np.frombuffer(memoryview(store)[a : z + BUF_PAD], np.uint8)
        self._retired.append((store, weakref.ref(buf)))
        del self._retired[:-_SPARE_STORES]
        return buf

    def _spare(self, size: int) -> np.ndarray:
        """A buffer of at least ``size`` bytes: a retired store whose batch buffer is
        gone (with every view of it), else a new one."""
        for i, (store, buf) in enumerate(self._retired):
            if buf() is None and store.shape[0] >= size:
                del self._retired[i]
                return store
        return np.empty(size, np.uint8)

    def _trim(self) -> None:
        keep = int(self._pending[0].data_off[0]) if self._pending else self._pos
        drop = keep - self._base
        if drop > 0:
            self._lo += drop
            self._base = keep


def _walk_pcap(
    data: memoryview, pos: int, end: int, hdrlen: int, caplen_at: struct.Struct
) -> tuple[np.ndarray, int]:
    """Offsets (int64) of the complete records from ``pos``, and where the walk stopped;
    the hot loop of pcap decoding."""
    if _speedups is not None:
        raw, stop = _speedups.walk_pcap(data, pos, end, hdrlen, caplen_at.format[0] == ">")
        return np.frombuffer(raw, np.int64), stop
    out, stop = _walk_pcap_py(data, pos, end, hdrlen, caplen_at)
    return np.array(out, np.int64), stop


def _walk_pcap_py(
    data: memoryview, pos: int, end: int, hdrlen: int, caplen_at: struct.Struct
) -> tuple[list[int], int]:
    unpack = caplen_at.unpack_from
    out: list[int] = []
    append = out.append
    last = end - hdrlen
    while pos <= last:
        nxt = pos + hdrlen + unpack(data, pos + 8)[0]
        if nxt > end:
            break
        append(pos)
        pos = nxt
    return out, pos


class _PcapReader:
    def __init__(self, header: bytes) -> None:
        order, self.frac_ns, self.hdrlen = _PCAP_MAGICS[header[:4]]
        _major, _minor, _zone, _sigfigs, self.snaplen, network = struct.unpack(
            order + "HHiIII", header[4:24]
        )
        # The top bits of the link type field carry FCS information (ignored: the IP
        # length trims any trailing FCS).
        self.linktype = network & 0x03FFFFFF
        self.max_caplen = max(MAX_CAPLEN, min(self.snaplen, MAX_SNAPLEN))
        self.caplen_at = struct.Struct(order + "I")
        self.rec = np.dtype(
            [
                ("sec", order + "u4"),
                ("frac", order + "u4"),
                ("cap", order + "u4"),
                ("orig", order + "u4"),
            ]
        )

    def parse(self, dec: CaptureDecoder) -> None:
        data, base = dec._data, dec._base
        end = len(data)
        if _speedups is not None:
            rel = self._records_c(dec)
        else:
            positions, rel = _walk_pcap(data, dec._pos - base, end, self.hdrlen, self.caplen_at)
            self._decode(dec, positions)
            if dec._dead:
                return
        dec._pos = base + rel
        # An incomplete record claiming an absurd size is corruption, not a short read.
        if rel + self.hdrlen <= end:
            caplen = self.caplen_at.unpack_from(data, rel + 8)[0]
            if caplen > self.max_caplen:
                dec._fatal(
                    "bad_record",
                    f"pcap record header at byte {base + rel} claims {caplen} captured "
                    f"bytes (more than {self.max_caplen}): the file is corrupt from here",
                    base + rel,
                )

    def _records_c(self, dec: CaptureDecoder) -> int:
        """Walk and decode the complete records in C (``_speedups.pcap_records``); it
        stops before a record claiming too many bytes, which the caller then reports.
        Returns where the walk stopped (relative to ``dec._data``)."""
        assert _speedups is not None
        rel, ts, caplen, origlen, off = _speedups.pcap_records(
            dec._data, dec._pos - dec._base, len(dec._data), self.hdrlen,
            self.caplen_at.format[0] == ">", self.frac_ns, self.max_caplen,
            dec._base + self.hdrlen,
        )  # fmt: skip
        n = len(off) // 8
        if n:
            first = dec.packets_read + 1
            dec._add_rows(
                _Rows(
                    frame_no=np.arange(first, first + n, dtype=np.int64),
                    ts_ns=np.frombuffer(ts, np.int64),
                    linktype=np.full(n, self.linktype, np.int32),
                    caplen=np.frombuffer(caplen, np.int32),
                    origlen=np.frombuffer(origlen, np.int32),
                    data_off=np.frombuffer(off, np.int64),
                )
            )
            dec.packets_read += n
        return rel

    def _decode(self, dec: CaptureDecoder, positions: np.ndarray) -> np.ndarray:
        """Read every record header at once; a bad caplen is fatal at its record."""
        if not len(positions):
            return positions
        pos = positions
        arr = np.frombuffer(dec._data, np.uint8)
        hdr = take_struct(arr, pos, self.rec)
        caplen = hdr["cap"].astype(np.int64)
        bad = caplen > self.max_caplen
        if not bad.any():
            self._store(dec, pos, hdr, caplen)
            return positions
        k = int(np.argmax(bad))
        claimed = int(caplen[k])
        self._store(dec, pos[:k], hdr[:k], caplen[:k])
        at = dec._base + int(positions[k])
        dec._pos = at
        dec._fatal(
            "bad_record",
            f"pcap record header at byte {at} claims {claimed} captured bytes (more than "
            f"{self.max_caplen}): the file is corrupt from here",
            at,
        )
        return positions[:k]

    def _store(
        self, dec: CaptureDecoder, pos: np.ndarray, hdr: np.ndarray, caplen: np.ndarray
    ) -> None:
        n = pos.shape[0]
        if n == 0:
            return
        ts = hdr["sec"].astype(np.int64) * _NS + hdr["frac"].astype(np.int64) * self.frac_ns
        first = dec.packets_read + 1
        dec._add_rows(
            _Rows(
                frame_no=np.arange(first, first + n, dtype=np.int64),
                ts_ns=ts,
                linktype=np.full(n, self.linktype, np.int32),
                caplen=caplen.astype(np.int32),
                origlen=np.minimum(hdr["orig"], 0x7FFFFFFF).astype(np.int32),
                data_off=pos + (dec._base + self.hdrlen),
            )
        )
        dec.packets_read += n

    def finish(self, dec: CaptureDecoder) -> None:
        pass

    def describe_tail(self, dec: CaptureDecoder) -> str:
        return f"pcap record at byte {dec._pos}"


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
