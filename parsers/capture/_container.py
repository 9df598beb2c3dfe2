"""Sans-I/O decoding of capture containers (classic pcap and pcapng) into PacketBatch.

The caller feeds the (decompressed) file bytes in any chunking; the decoder keeps the
unconsumed tail, walks the record/block chain and hands back batches of packets whose
bytes are copied once into one uint8 buffer, or, for input the caller keeps unchanged
(``feed_shared``: a file mapped into memory), read in place. The unconsumed input lives in a window of
one reused buffer (consumed bytes only move the window's start), so feeding does not
reallocate and copy the kept tail every time.

Speed: the record chain is inherently sequential, so a tight loop only finds where each
record starts (one ``unpack_from`` per record); every header field is then read for all
records at once with numpy, and the structural checks (caplen limits, pcapng trailing
block length) are vectorised too. State-changing pcapng blocks (SHB, IDB) and rare packet
blocks (SPB, obsolete PB) stop the fast loop and go through a careful per-block path.
"""

from __future__ import annotations

import weakref

import numpy as np

from parsers.records import DecodeIssue, PacketBatch

from . import _linktypes
from ._format import (
    _BOM_BE,
    _BOM_LE,
    _PCAP_MAGICS,
    BUF_PAD,
    PCAP_HEADER_LEN,
    SHB_TYPE,
    CaptureFormatError,
    _concat_rows,
    _Rows,
)
from ._pcap import _PcapReader
from ._pcapng import _PcapngReader

# Input buffers handed out with batches, kept to be reused once no batch uses them:
# fresh memory costs a page fault per page on first write.
_SPARE_STORES = 2


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


# Packets per batch, and record bytes (from the first packet's data to the last one's
# end). The pipeline does some work per open connection and batch (its messages, ACKs and
# rates), so fewer batches cost less CPU where connections are many. 524,288 against
# 262,144 (`tailtap analyze` with its report, paired runs): 0.92 of the CPU on a realistic
# 1M-packet capture of 200 connections, 0.76 on one of 2,000, 1.01 on the 8-connection
# ideal one; peak memory 45-60 MiB more (866 MiB at 10M packets). 96 MiB holds 524,288
# packets of a realistic inference capture (150-170 bytes on average), and about 66,000
# full-size (1,500 byte) ones.
BATCH_PACKETS = 524_288
BATCH_BYTES = 96 << 20


class CaptureDecoder:
    """Incremental pcap/pcapng decoder: ``feed()`` bytes, get :class:`PacketBatch` back.

    A batch holds ``batch_packets`` packets, or fewer when their records would pass
    ``batch_bytes`` (at least one packet), and the last one from ``close()`` what is left.
    Big batches cost less per packet downstream (per connection and batch); the byte
    bound keeps a batch of full-size packets as small in memory as one of small packets.
    ``issues`` collects what was wrong with the file (never raised, except that input
    which is no capture at all raises :class:`CaptureFormatError`). After a fatal issue
    the rest of the input is ignored; everything before it is still delivered.

    Frame numbers count packet records/blocks as tshark does (SPB/PB included). Any
    chunking works; chunks of 1 MiB or more keep the per-call overhead negligible.
    ``kernel_drops`` is the kernel drop count from pcapng interface statistics (None
    when the file has none).
    """

    def __init__(self, batch_packets: int = BATCH_PACKETS, batch_bytes: int = BATCH_BYTES) -> None:
        if batch_packets < 1 or batch_bytes < 1:
            raise ValueError("batch_packets and batch_bytes must be >= 1")
        self.batch_packets = batch_packets
        self.batch_bytes = batch_bytes
        self.format: str | None = None
        self.issues: list[DecodeIssue] = []
        self.packets_read = 0
        self.bytes_read = 0
        # Sum over interfaces of the latest pcapng ISB drop counter (None when unknown).
        self.kernel_drops: int | None = None
        # TLS key logs carried by pcapng Decryption Secrets Blocks, in file order; the
        # reader of the packets takes them (and clears the list)
        self.tls_secrets: list[bytes] = []
        # unconsumed input: _store[_lo:_hi] (see _data); _store[_lo] is file offset _base
        self._store = np.empty(0, np.uint8)
        self._lo = self._hi = 0
        self._base = 0
        # the store is the caller's input, read in place (feed_shared), never written
        self._shared = False
        # stores handed out with batches, and a weak reference to each one's batch buffer
        self._retired: list[tuple[np.ndarray, weakref.ref]] = []
        self._pos = 0  # file offset of the next record/block to parse
        self._reader: _PcapReader | _PcapngReader | None = None
        self._pending: list[_Rows] = []
        self._pending_n = 0
        self._dead = False
        self._closed = False

    # -- public API ---------------------------------------------------------------
    def feed(self, data: bytes | bytearray | memoryview) -> list[PacketBatch]:
        if self._closed:
            raise ValueError("feed() after close()")
        self.bytes_read += len(data)
        if self._dead or not data:
            return []
        self._append(data)
        return self._parse()

    @property
    def resume_at(self) -> int:
        """Input offset of the first byte the decoder still needs: what
        :meth:`feed_shared` must begin at or before."""
        return self._base

    def feed_shared(self, data: memoryview, at: int) -> list[PacketBatch]:
        """:meth:`feed` for input the caller keeps unchanged while any batch lives (a
        file mapped into memory): ``data`` is the input from offset ``at`` on, where
        ``at`` is at most :attr:`resume_at` and ``data`` reaches past the input fed so
        far (what it holds again must be the same bytes). The decoder reads it in place
        and batch buffers are views of it: no byte is copied. The BUF_PAD bytes after a
        view's last packet are the input's next bytes; the last packets of the input,
        which have fewer after them, wait for more or are copied at :meth:`close`."""
        if self._closed:
            raise ValueError("feed_shared() after close()")
        end = at + len(data)
        if at > self._base or end <= self.bytes_read:
            raise ValueError(
                f"feed_shared() input [{at}, {end}) must start at or before {self._base} "
                f"and end after {self.bytes_read}"
            )
        self.bytes_read = end
        if self._dead:
            return []
        self._store = np.frombuffer(data, np.uint8)
        self._lo, self._hi = self._base - at, len(data)
        self._shared = True
        return self._parse()

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

    def _append(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        # the store keeps BUF_PAD spare bytes past the input: see _hand_out
        if self._shared or self._hi + n + BUF_PAD > self._store.shape[0]:
            keep = self._hi - self._lo
            if self._shared or keep + n > self._store.shape[0] // 2:
                # grow to twice what is needed: the window then slides over several
                # feeds before the kept tail has to move to the front again
                grown = np.empty(max(2 * (keep + n), 1 << 16) + BUF_PAD, np.uint8)
                grown[:keep] = self._store[self._lo : self._hi]
                self._store, self._shared = grown, False
            else:  # move the kept tail to the front (numpy copes with the overlap)
                self._store[:keep] = self._store[self._lo : self._hi]
            self._lo, self._hi = 0, keep
        self._store[self._hi : self._hi + n] = np.frombuffer(data, np.uint8)
        self._hi += n

    def _parse(self) -> list[PacketBatch]:
        """Walk the records of the input held, and hand out the batches now full."""
        if self._reader is None and not self._start():
            return []
        assert self._reader is not None
        self._reader.parse(self)
        batches = self._emit(final=False)
        self._trim()
        return batches

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
        if self._pending_n == 0 or (not final and self._pending_n < size and self._pending_span() < self.batch_bytes):
            return []
        rows = _concat_rows(self._pending)
        n = len(rows)
        ends = rows.data_off + rows.caplen
        # a view of shared input needs BUF_PAD bytes of it after its last packet: the
        # packets that end nearer the input's end wait for more, or at the end are copied
        viewable = n
        if self._shared:
            input_end = self._base + self._hi - self._lo
            viewable = int(np.searchsorted(ends, input_end - BUF_PAD, side="right"))
        cuts: list[tuple[int, int]] = []
        k = 0
        while k < viewable:
            j = min(k + size, viewable)
            fit = k + int(np.searchsorted(ends[k:j], rows.data_off[k] + self.batch_bytes, side="right"))
            if fit < j:  # the byte bound comes first (a packet at least)
                j = max(fit, k + 1)
            elif j - k < size and not final:  # neither bound reached: wait for more input
                break
            cuts.append((k, j))
            k = j
        if final and k < n:
            cuts.append((k, n))
            k = n
        out = [self._make_batch(rows, a, z, i == len(cuts) - 1) for i, (a, z) in enumerate(cuts)]
        if k < n:
            rest = _Rows(*(a[k:] for a in rows.columns()))
            self._pending, self._pending_n = [rest], n - k
        else:
            self._pending, self._pending_n = [], 0
        return out

    def _pending_span(self) -> int:
        """Bytes from the first pending record's data to the end of the last one's."""
        first, last = self._pending[0], self._pending[-1]
        return int(last.data_off[-1] + last.caplen[-1] - first.data_off[0])

    def _make_batch(self, rows: _Rows, k: int, j: int, last: bool) -> PacketBatch:
        """Rows [k, j) as a batch. Records are in file order and do not overlap, so the
        buffer is the span of input bytes from the first packet to the end of the last
        one, then BUF_PAD bytes: zeros after a copy, or for the last batch of an _emit
        the store itself (see _hand_out); the input's next bytes in a view of shared
        input (see feed_shared)."""
        start = int(rows.data_off[k])
        stop = int(rows.data_off[j - 1] + rows.caplen[j - 1])
        size = stop - start
        lo = self._lo + start - self._base
        if self._shared and lo + size + BUF_PAD <= self._hi:
            buf = self._store[lo : lo + size + BUF_PAD]  # a view of the caller's input
        elif last and not self._shared:
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
