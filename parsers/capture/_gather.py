"""Bulk reads of fixed-size byte windows at many positions of one uint8 buffer.

A strided view turns "the `width` bytes starting at each position" into rows of a 2-D
array, so one fancy-index copies every header window at once; a structured dtype then
exposes the big- or little-endian fields of those rows without per-packet Python.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from parsers._native import speedups

# Optional C gather (parsers/capture/_speedups.c): one memcpy per row instead of numpy's
# fancy indexing of the strided view; without it, or with TAILTAP_PURE_PYTHON=1, the
# numpy code below gives the same bytes.
_speedups = speedups("parsers.capture")


def as_bytes(buf: np.ndarray) -> np.ndarray:
    """A 1-D contiguous uint8 view (or copy) of ``buf``."""
    if buf.dtype != np.uint8 or buf.ndim != 1 or buf.strides[0] != 1:
        buf = np.ascontiguousarray(buf, dtype=np.uint8).reshape(-1)
    return buf


def take_rows(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """(n, width) uint8 copy of ``buf[pos[i] : pos[i] + width]`` for every i.

    Windows running past the end of ``buf`` are read from a clipped position: callers
    must mask such rows out by length checks (they are never used as data).
    """
    size = buf.shape[0]
    if (
        _speedups is not None
        and isinstance(pos, np.ndarray)
        and size >= width
        and buf.flags.c_contiguous
        and buf.dtype == np.uint8
        and pos.dtype == np.int64
    ):
        raw = _speedups.gather(buf, np.ascontiguousarray(pos), width)
        return np.frombuffer(raw, dtype=np.uint8).reshape(-1, width)
    if size < width:
        buf = np.concatenate([buf, np.zeros(width - size, np.uint8)])
        size = width
    windows = as_strided(buf, shape=(size - width + 1, width), strides=(1, 1), writeable=False)
    return windows[np.clip(pos, 0, size - width)]


def take_struct(buf: np.ndarray, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Records of a structured ``dtype`` read at every position (1-D structured array)."""
    return take_rows(buf, pos, dtype.itemsize).view(dtype)[:, 0]


def take_u8(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return buf[np.clip(pos, 0, buf.shape[0] - 1)]


_BE16 = np.dtype(">u2")
_BE32 = np.dtype(">u4")


def take_be16(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return take_rows(buf, pos, 2).view(_BE16)[:, 0].astype(np.int64)


def take_be32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return take_rows(buf, pos, 4).view(_BE32)[:, 0].astype(np.uint32)
