"""Plain, one-row-at-a-time computations that the tests hold the pipeline's bulk code to."""

from __future__ import annotations

from telemetry.ingest import RATE_BUCKET_NS


def sent_totals(chunks: list) -> dict[tuple[int, int], tuple[int, int]]:
    """(conn_key * 2 + direction, flow_rates bucket) -> (bytes, chunks) of PayloadChunks."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for c in chunks:
        key = (c.conn_key * 2 + c.direction, c.ts_ns // RATE_BUCKET_NS)
        nbytes, count = out.get(key, (0, 0))
        out[key] = (nbytes + len(c.data), count + 1)
    return out


def quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile of a sorted list (numpy's default method)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
