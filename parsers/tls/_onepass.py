"""The usual packet of a TLS 1.3 connection being decrypted, opened in one pass: whole
application data records and nothing else, each opened with the AEAD call alone and its
plaintext added to a run being gathered. TlsConnection.feed_rows decides when a packet may
be (the direction's framing and sequence followed, nothing held); what this leaves (a
record that does not open as plain application data, and those after it) goes record by
record. :func:`open_whole` is parsers/tls/_speedups.c's where it was built, else
:func:`open_whole_records`: the same arguments, results and appended bytes."""

from __future__ import annotations

from collections.abc import Callable

from parsers._native import speedups
from parsers.records import add_run_row

from ._records import APPLICATION_DATA, _whole_records

_speedups = speedups("parsers.tls")


def open_whole_records(
    decrypt: Callable[[bytes, bytes, bytes], bytes], invalid_tag: type[Exception], iv: bytes, seq: int,
    buf: memoryview, a: int, z: int, direction: int, ts_ns: int, frame_no: int, offset: int, at: int,
    rows: bytearray, out: bytearray, plain_ends: list[int], tcp_ends: list[int],
) -> tuple[int, int, int, int] | None:  # fmt: skip
    """``buf[a:z]`` (a packet's bytes, at direction offset ``offset``) when it is whole
    application data records and nothing else (cut as :func:`_whole_records` cuts): its
    leading records opened at sequence numbers ``seq`` on (``decrypt``: the AEAD's, nonce =
    ``iv`` XOR the sequence number, the header as additional data) until one raises
    ``invalid_tag`` or holds another inner content type (padding too). Each opened record's
    plaintext but the empty ones is added to the run (``rows``, ``out``: add_run_row) at
    plaintext offset ``at`` on, its plaintext and direction end offsets to ``plain_ends``
    and ``tcp_ends``. Returns (records, opened, next sequence number, next plaintext
    offset); None, with nothing changed, when the packet is anything else."""
    data = bytes(buf[a:z])
    cut = _whole_records(data)
    if cut is None or any(ctype != APPLICATION_DATA for ctype, _version, _end in cut):
        return None
    iv_number = int.from_bytes(iv, "big")
    texts: list[tuple[bytes, int]] = []  # each opened record's plaintext and end in data
    start = 0
    for _ctype, _version, end in cut:
        nonce = (iv_number ^ (seq + len(texts))).to_bytes(12, "big")
        try:
            inner = decrypt(nonce, data[start + 5 : end], data[start : start + 5])
        except invalid_tag:
            break
        if not inner or inner[-1] != APPLICATION_DATA:
            break
        texts.append((inner[:-1], end))
        start = end
    for text, end in texts:  # (added once every call returned, as the C function does)
        if text:
            add_run_row(rows, out, direction, text, ts_ns, frame_no, at)
            at += len(text)
            plain_ends.append(at)
            tcp_ends.append(offset + end)
    return len(cut), len(texts), seq + len(texts), at


open_whole = _speedups.open_whole if _speedups is not None else open_whole_records
