"""Classic pcap: the file header and the record chain (the fast walk finds where each
record starts; numpy reads every header field at once)."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np

from ._format import (
    _NS,
    _PCAP_MAGICS,
    MAX_CAPLEN,
    MAX_SNAPLEN,
    _Rows,
    _speedups,
)
from ._gather import take_struct

if TYPE_CHECKING:
    from ._container import CaptureDecoder


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
