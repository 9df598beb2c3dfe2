"""The usual packets of a TLS 1.3 connection being decrypted, opened in one pass: whole
application data records and nothing else, each opened with the AEAD call alone and its
plaintext added to a run being gathered. TlsConnection.feed_rows says which directions'
packets may be (their framing and sequence followed, nothing held); what this leaves (a
packet of anything else, a record that does not open as plain application data and those
after it) goes record by record. :func:`open_run` is parsers/tls/_speedups.c's where it was
built, else :func:`open_run_rows`: the same arguments, results and appended bytes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from parsers._native import speedups
from parsers.records import add_run_row

from ._records import APPLICATION_DATA, _app_data_ends

_speedups = speedups("parsers.tls")


def open_whole_records(
    decrypt: Callable[[bytes, bytes, bytes], bytes], invalid_tag: type[Exception], iv: bytes, seq: int,
    buf: memoryview, a: int, z: int, direction: int, ts_ns: int, frame_no: int, offset: int, at: int,
    rows: bytearray, out: bytearray, plain_ends: list[int], tcp_ends: list[int],
) -> tuple[int, int, int, int] | None:  # fmt: skip
    """``buf[a:z]`` (a packet's bytes, at direction offset ``offset``) when it is whole
    application data records and nothing else (cut as :func:`_app_data_ends` cuts): its
    leading records opened at sequence numbers ``seq`` on (``decrypt``: the AEAD's, nonce =
    ``iv`` XOR the sequence number, the header as additional data) until one raises
    ``invalid_tag`` or holds another inner content type (padding too). Each opened record's
    plaintext but the empty ones is added to the run (``rows``, ``out``: add_run_row) at
    plaintext offset ``at`` on, its plaintext and direction end offsets to ``plain_ends``
    and ``tcp_ends``. Returns (records, opened, next sequence number, next plaintext
    offset); None, with nothing changed, when the packet is anything else."""
    data = bytes(buf[a:z])
    ends = _app_data_ends(data)
    if ends is None:
        return None
    iv_number = int.from_bytes(iv, "big")
    texts: list[tuple[bytes, int]] = []  # each opened record's plaintext and end in data
    start = 0
    for end in ends:
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
    return len(ends), len(texts), seq + len(texts), at


Pair = tuple  # (the client's, the server's)


def open_run_rows(
    rows: np.ndarray, first: int, buf: memoryview, client_dir: int, decrypts: Pair, ivs: Pair, seqs: Pair,
    bases: Pair, ats: Pair, invalid_tag: type[Exception], out_rows: bytearray, out: bytearray, plain_ends: Pair,
    tcp_ends: Pair,
) -> tuple[int, int, int, Pair, Pair, Pair, Pair, Pair]:  # fmt: skip
    """The rows of a ChunkRun (``rows``, int64 in RunColumn order; their bytes in ``buf``)
    from ``first`` on, each packet read by :func:`open_whole_records` while it is of a role
    being read in one pass (``decrypts``: the role's AEAD decrypt, or None), starts at its
    next record (``bases``) and is whole application data records, with the role's IV,
    sequence number, plaintext offset and end lists. Stops at the first row it does not
    read (nothing of it taken), or after a row some record of which did not open. Returns
    (stop, that row's records and opened or -1, -1, and by role: sequence numbers, next
    record offsets, plaintext offsets, records cut, records opened)."""
    seq, base, at, cut, opened_by = list(seqs), list(bases), list(ats), [0, 0], [0, 0]
    i, n = first, len(rows)
    while i < n:
        d, ts, fno, off, a, z = rows[i].tolist()
        role = 0 if d == client_dir else 1
        if decrypts[role] is None or off != base[role]:
            break
        got = open_whole_records(decrypts[role], invalid_tag, ivs[role], seq[role], buf, a, z, d, ts, fno, off,
                                 at[role], out_rows, out, plain_ends[role], tcp_ends[role])  # fmt: skip
        if got is None:
            break
        records, opened, seq[role], at[role] = got
        base[role] = off + z - a
        cut[role] += records
        opened_by[role] += opened
        if opened < records:
            return i, records, opened, tuple(seq), tuple(base), tuple(at), tuple(cut), tuple(opened_by)
        i += 1
    return i, -1, -1, tuple(seq), tuple(base), tuple(at), tuple(cut), tuple(opened_by)


open_run = _speedups.open_run if _speedups is not None else open_run_rows
