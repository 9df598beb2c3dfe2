"""Arrow columns built from buffers: strings repeated or in runs, timestamps, floats with
NaN as null. No Python object per row where a column is the same value many times."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

TS = pa.timestamp("ns", tz="UTC")
NO_TS = np.iinfo(np.int64).min  # a time not known (yet): null in the tables


def run_strings(values: list[str], counts: list[int]) -> pa.Array:
    """String column of runs, ``counts[i]`` times ``values[i]``, built from buffers: no
    Python str per row (a batch's messages, an RttRun's samples share theirs)."""
    raw = [v.encode() for v in values]
    lens = np.repeat(np.array([len(r) for r in raw], dtype=np.int64), counts)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] >= 2**31:  # beyond 32-bit offsets (never for one flush's rows)
        return pa.array([v for v, k in zip(values, counts, strict=True) for _ in range(k)], pa.string())
    data = b"".join([r * k for r, k in zip(raw, counts, strict=True)])
    return pa.StringArray.from_buffers(len(lens), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))


def coded_strings(codes: np.ndarray, names: Sequence[str]) -> pa.Array:
    """String column of ``names[codes[i]]``, built from buffers: each row's name taken as
    one fixed-width item (NUL-padded to the longest name), the padding then cut (no
    Python str per row; used where runs of one value are short, e.g. samples alternating
    between two kinds)."""
    raw = [v.encode() for v in names]
    lens = np.array([len(r) for r in raw], dtype=np.int64)
    width = max(int(lens.max(initial=0)), 1)
    row_lens = lens[codes]
    offsets = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum(row_lens, out=offsets[1:])
    if offsets[-1] >= 2**31:  # beyond 32-bit offsets (never for one flush's rows)
        return pa.array([names[c] for c in codes.tolist()], pa.string())
    data = np.array(raw, dtype=f"S{width}")[codes].view(np.uint8)
    if not (lens == width).all():
        kept = np.arange(width) < lens[:, None]  # per name: which of its width bytes are its own
        data = data[kept[codes].reshape(-1)]
    return pa.StringArray.from_buffers(len(codes), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))


class Part(NamedTuple):
    """One connection's rows of a table, built into one table with other connections'
    (a table costs more than a connection's few hundred rows: ~1 ms a connection)."""

    conn_id: str
    flip: int  # 1: the TCP layer's directions are the session's the other way round
    rows: Any  # what the table's builder takes of one connection
    n: int  # the table rows they make


def concat_columns(sets: Sequence[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Column by column, the concatenation of row sets given as tuples of columns."""
    return tuple(np.concatenate(c) for c in zip(*sets, strict=True))


def id_columns(capture_id: str, parts: Sequence[Part]) -> dict[str, pa.Array]:
    """capture_id and conn_id columns of the parts' rows, in order."""
    counts = [p.n for p in parts]
    return {"capture_id": repeat(capture_id, sum(counts)), "conn_id": run_strings([p.conn_id for p in parts], counts)}


def repeat(value: str, n: int) -> pa.Array:
    """A string column of one value, built from buffers (no list of n references, and
    no pyarrow.compute import)."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def float_col(values: np.ndarray) -> pa.Array:
    """float64 column, null where NaN (the computed times and gaps are never NaN)."""
    return pa.array(values, pa.float64(), mask=np.isnan(values))
