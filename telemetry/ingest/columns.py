"""Arrow columns built from buffers: text as codes into its distinct values, timestamps,
floats with NaN as null. No Python object per row where a column is the same value many
times."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

TS = pa.timestamp("ns", tz="UTC")
NO_TS = np.iinfo(np.int64).min  # a time not known (yet): null in the tables


def _text(codes: np.ndarray, values: Sequence[str], nulls: np.ndarray | None = None) -> pa.Array:
    """Text column of ``values[codes[i]]`` (null where ``nulls``) as a dictionary array
    (telemetry.store.parquet.TEXT, the form the writer takes text in):
    the rows' codes and each distinct value once. Ids and kinds repeat on every row; as
    codes, no bytes are made per row and the Parquet writer does not hash each row's text
    again (a third of its time). ``values`` must be distinct."""
    return pa.DictionaryArray.from_arrays(codes.astype(np.int32, copy=False), pa.array(values, pa.string()), mask=nulls)


def run_strings(values: list[str | None], counts: list[int]) -> pa.Array:
    """Text column of runs, ``counts[i]`` times ``values[i]`` (a batch's messages, an
    RttRun's samples share theirs); None: null."""
    code_of: dict[str, int] = {}
    codes = np.array([0 if v is None else code_of.setdefault(v, len(code_of)) for v in values], dtype=np.int32)
    nulls = None
    if None in values:
        nulls = np.repeat(np.array([v is None for v in values]), counts)
    return _text(np.repeat(codes, counts), list(code_of) or [""], nulls)


def coded_strings(codes: np.ndarray, names: Sequence[str | None]) -> pa.Array:
    """Text column of ``names[codes[i]]`` (``names`` distinct: a vocabulary; None: null)."""
    if None not in names:
        return _text(codes, names)
    named = np.array([n is not None for n in names])
    code_of = np.cumsum(named) - 1  # each name's code among the names that are not None
    return _text(np.maximum(code_of[codes], 0), [n for n in names if n is not None] or [""], ~named[codes])


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
    """A text column of one value (one code per row)."""
    return _text(np.zeros(n, dtype=np.int32), [value])


def float_col(values: np.ndarray) -> pa.Array:
    """float64 column, null where NaN (the computed times and gaps are never NaN)."""
    return pa.array(values, pa.float64(), mask=np.isnan(values))
