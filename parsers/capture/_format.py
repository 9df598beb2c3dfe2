"""What the capture readers share: the container constants, the error for input that is not
a capture, the decoded-record columns (_Rows) and the optional C record walks."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from parsers._native import speedups

# Optional C record walks (parsers/capture/_speedups.c, built by `pip install -e .`);
# without it, or with TAILTAP_PURE_PYTHON=1, the Python walks of _pcap and _pcapng give
# the same offsets.
_speedups = speedups("parsers.capture")

# Larger records are taken as corruption rather than waited for. Like libpcap, a pcap
# record may not exceed 256 KiB (or the file's snaplen when that is larger); like
# Wireshark, a pcapng block may not exceed 16 MiB.
MAX_CAPLEN = 262144
MAX_SNAPLEN = 16 << 20
MAX_BLOCK = 16 << 20
# Bytes after the last packet of a batch buffer (zeros, or the input's next bytes in a
# view of shared input), so bulk header reads never need a bounds copy for short
# packets at the very end.
BUF_PAD = 64

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
DSB_TYPE = 0x0A  # Decryption Secrets Block
DSB_TLS_KEY_LOG = 0x544C534B  # its secrets type for an NSS key log ("TLSK")
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

