"""Vectorised walk over TCP option lists of many segments at once.

The very common "NOP, NOP, timestamps" layout of data segments is recognised by the
caller in one comparison; this walk handles every other layout (SYN options, SACK,
odd orders). Each pass consumes one option of every segment still in its option area,
so the number of passes is the largest option count, never the number of segments.
"""

from __future__ import annotations

import numpy as np

from ._gather import take_be16, take_be32, take_u8

_MAX_OPTION_BYTES = 40  # data offset 15 -> 60-byte header -> 40 option bytes


def walk_options(
    buf: np.ndarray,
    start: np.ndarray,
    stop: np.ndarray,
    rows: np.ndarray,
    has_ts: np.ndarray,
    ts_val: np.ndarray,
    ts_ecr: np.ndarray,
    wscale: np.ndarray,
    mss: np.ndarray,
    sack: dict[int, list[tuple[int, int]]],
) -> int:
    """Decode the options in ``buf[start[i]:stop[i]]`` into the output arrays at ``rows[i]``.

    Returns the first row whose options are malformed (bad option length), or -1;
    options before the bad one are kept, the rest ignored, as a receiver would.
    """
    cur = start.astype(np.int64, copy=True)
    stop = stop.astype(np.int64, copy=False)
    act = np.arange(rows.shape[0])
    first_bad = -1
    sack_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for _ in range(_MAX_OPTION_BYTES):
        if act.size == 0:
            break
        c = cur[act]
        lim = stop[act]
        kind = take_u8(buf, c)
        nop = kind == 1
        opt = (kind != 0) & ~nop  # EOL (0) ends the list
        length = take_u8(buf, c + 1).astype(np.int64)
        bad = opt & ((c + 2 > lim) | (length < 2) | (c + length > lim))
        if bad.any():
            worst = int(rows[act[bad]].min())
            first_bad = worst if first_bad < 0 else min(first_bad, worst)
        good = opt & ~bad
        g = np.flatnonzero(good)
        if g.size:
            _record(
                buf,
                kind[g],
                length[g],
                c[g],
                rows[act[g]],
                has_ts,
                ts_val,
                ts_ecr,
                wscale,
                mss,
                sack_parts,
            )
        cur[act] = c + np.where(nop, 1, length)
        act = act[(nop | good) & (cur[act] < lim)]
    if sack_parts:
        _collect_sack(buf, sack_parts, sack)
    return first_bad


def _record(
    buf: np.ndarray,
    kind: np.ndarray,
    length: np.ndarray,
    pos: np.ndarray,
    rows: np.ndarray,
    has_ts: np.ndarray,
    ts_val: np.ndarray,
    ts_ecr: np.ndarray,
    wscale: np.ndarray,
    mss: np.ndarray,
    sack_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> None:
    m = (kind == 8) & (length == 10)
    if m.any():
        r, p = rows[m], pos[m]
        has_ts[r] = True
        ts_val[r] = take_be32(buf, p + 2)
        ts_ecr[r] = take_be32(buf, p + 6)
    m = (kind == 3) & (length == 3)
    if m.any():
        # RFC 7323 caps the shift at 14; clip so a bogus 255 cannot wrap to -1 in int8.
        wscale[rows[m]] = np.minimum(take_u8(buf, pos[m] + 2), 127).astype(np.int8)
    m = (kind == 2) & (length == 4)
    if m.any():
        mss[rows[m]] = take_be16(buf, pos[m] + 2)
    m = kind == 5
    if m.any():
        sack_parts.append((rows[m], pos[m], length[m]))


def _collect_sack(
    buf: np.ndarray,
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    sack: dict[int, list[tuple[int, int]]],
) -> None:
    rows = np.concatenate([p[0] for p in parts])
    pos = np.concatenate([p[1] for p in parts])
    nblocks = np.minimum((np.concatenate([p[2] for p in parts]) - 2) // 8, 4)
    left = np.zeros((rows.size, 4), np.uint32)
    right = np.zeros((rows.size, 4), np.uint32)
    for b in range(4):
        m = nblocks > b
        if not m.any():
            break
        left[m, b] = take_be32(buf, pos[m] + 2 + 8 * b)
        right[m, b] = take_be32(buf, pos[m] + 6 + 8 * b)
    for r, nb, lrow, rrow in zip(
        rows.tolist(), nblocks.tolist(), left.tolist(), right.tolist(), strict=True
    ):
        if nb > 0:
            sack.setdefault(r, []).extend(zip(lrow[:nb], rrow[:nb], strict=True))
