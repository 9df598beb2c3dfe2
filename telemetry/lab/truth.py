"""A lab run's truth beside its capture: the capture's own summary (read with no tailtap
code), the impairment windows in absolute time, each client call's window and the per-window
comparison the run prints."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from telemetry.lab import scenarios as sc
from telemetry.lab.bridge import parse_frame
from telemetry.lab.netns import MTU

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


def iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")


def iter_pcap(path: Path | str) -> Iterator[tuple[int, int, bytes]]:
    """(timestamp ns, original length, captured bytes) of each record of a classic pcap."""
    import struct

    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return
        magic = struct.unpack("<I", head[:4])[0]
        endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        nano = magic in (0xA1B23C4D, 0x4D3CB2A1)
        rec = struct.Struct(endian + "IIII")
        while True:
            h = f.read(16)
            if len(h) < 16:
                return
            sec, frac, incl, orig = rec.unpack(h)
            data = f.read(incl)
            yield sec * NS_PER_S + (frac if nano else frac * 1000), orig, data


def read_pcap_summary(path: Path) -> dict[str, Any]:
    """Packets, bytes, first/last timestamp and the largest frame of a classic pcap."""
    out: dict[str, Any] = {"packets": 0, "bytes": 0, "max_frame_len": 0, "frames_over_mtu": 0}
    first = last = None
    for ts, orig, _data in iter_pcap(path):
        first = ts if first is None else first
        last = ts
        out["packets"] += 1
        out["bytes"] += orig
        out["max_frame_len"] = max(out["max_frame_len"], orig)
        if orig > MTU + 14:
            out["frames_over_mtu"] += 1
    out["first_ns"], out["last_ns"] = first, last
    return out


def _window_rows(scn: sc.Scenario, duration: float, t0: int) -> list[dict[str, Any]]:
    rows = []
    for w in scn.windows:
        start_s, end_s = round(w.start * duration, 3), round(w.end * duration, 3)
        start_ns, end_ns = t0 + int(start_s * NS_PER_S), t0 + int(end_s * NS_PER_S)
        eff = end_ns + int(w.settle_s * NS_PER_S)
        row: dict[str, Any] = {
            "name": w.name,
            "layer": w.layer,
            "cause": w.cause,
            "kind": w.kind,
            "direction": w.direction,
            "start_offset_s": start_s,
            "end_offset_s": end_s,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "effect_end_ns": eff,
            "start_iso": iso(start_ns),
            "end_iso": iso(end_ns),
            "effect_end_iso": iso(eff),
            "settle_s": w.settle_s,
            "also": [{"cause": c, "kind": k} for c, k in w.also],
        }
        if w.layer == "bridge":
            from telemetry.lab.impair import model_from_spec

            row["models"] = [model_from_spec(m).spec() for m in w.models]
        else:
            row["params"] = dict(w.params)
        rows.append(row)
    return rows


def assign_windows(table: Any, windows: list[dict[str, Any]]) -> Any:
    """Fill ``in_window``: the first window whose [start, effect_end) the call overlaps."""
    import pyarrow as pa

    starts = table.column("start_ns").to_pylist()
    ends = table.column("end_ns").to_pylist()
    names: list[str | None] = []
    for s, e in zip(starts, ends, strict=True):
        e = e if e is not None else s
        hit = None
        for w in windows:
            if s < w["effect_end_ns"] and e >= w["start_ns"]:
                hit = w["name"]
                break
        names.append(hit)
    i = table.schema.get_field_index("in_window")
    return table.set_column(i, "in_window", pa.array(names, pa.string()))


def recovered_effect_ends(folder: Path, windows: list[dict[str, Any]]) -> dict[str, int]:
    """When each loss window's effect really ended: the time the receiving side had every
    segment the bridge dropped in it, read from the capture on that side of the bridge
    (``capture.pcap`` at the server for drops toward it, ``capture_client.pcap`` at the
    client for drops toward it, when the run has one). A drop is recovered by the first
    later packet of its connection and direction that carries its first byte. Windows whose
    drops cannot be followed (no capture on the receiving side) are left out, and so are
    windows without drops. A fixed settle time is shorter than a retransmission timeout
    backed off a few times: without this, calls held by the loss after it count as outside
    the window."""
    import duckdb

    events = folder / "bridge_events.parquet"
    if not events.exists():
        return {}
    drops = duckdb.sql(
        "SELECT \"window\", direction, src_port, dst_port, tcp_seq, t_rx_ns FROM read_parquet(?) "
        "WHERE action = 'drop' AND payload_len > 0 AND tcp_seq IS NOT NULL ORDER BY t_rx_ns",
        params=[str(events)]).fetchall()
    names = {w["name"] for w in windows}
    receiver = {"to_server": folder / "capture.pcap", "to_client": folder / "capture_client.pcap"}
    ends: dict[str, int] = {}
    for direction, pcap in receiver.items():
        # per (ports): the drops not yet recovered, as [seq, dropped at, window]
        pending: dict[tuple[int, int], list[list[Any]]] = {}
        for window, d, sport, dport, seq, t in drops:
            if d == direction and window in names:
                pending.setdefault((sport, dport), []).append([seq, t, window])
        if not pending or not pcap.exists():
            continue
        first_drop = min(x[1] for v in pending.values() for x in v)
        for ts, _orig, f in iter_pcap(pcap):
            if ts <= first_drop:
                continue
            _ipv4, sport, dport, lo, length, _ip_id = parse_frame(f)  # as the bridge read it
            waiting = pending.get((sport, dport))
            if not waiting or length <= 0:
                continue
            kept = []
            for drop in waiting:
                # its first byte in this packet, the packet after the drop (32-bit sequence space)
                if ts > drop[1] and (drop[0] - lo) % 2**32 < length:
                    ends[drop[2]] = max(ends.get(drop[2], 0), ts)
                else:
                    kept.append(drop)
            pending[(sport, dport)] = kept
    return ends


def p99(values: list[float]) -> float | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    return v[min(len(v) - 1, int(round(0.99 * (len(v) - 1))))]


def compare(table: Any, windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """p99 of latency / TTFT / largest gap inside each window vs outside every window, per
    logical request (retries folded in: first start -> last end)."""
    rows = table.to_pylist()
    logical: dict[int, dict[str, Any]] = {}
    for r in rows:
        g = logical.setdefault(
            r["logical_id"],
            {
                "start": r["start_ns"],
                "end": r["end_ns"],
                "first": None,
                "gap": None,
                "method": r["method"],
                "in": r["in_window"],
                "ok": False,
            },  # fmt: skip
        )
        g["start"] = min(g["start"], r["start_ns"])
        if r["end_ns"] is not None:
            g["end"] = max(g["end"] or 0, r["end_ns"])
        if r["first_message_ns"] is not None:
            g["first"] = (
                r["first_message_ns"]
                if g["first"] is None
                else min(g["first"], r["first_message_ns"])
            )
        if r["max_gap_ms"] is not None:
            g["gap"] = max(g["gap"] or 0.0, r["max_gap_ms"])
        g["in"] = g["in"] or r["in_window"]
        g["ok"] = g["ok"] or r["grpc_status"] == 0

    def metrics(group: list[dict[str, Any]]) -> dict[str, Any]:
        gen = [g for g in group if g["method"] == "Generate"]
        return {
            "requests": len(group),
            "errors": sum(not g["ok"] for g in group),
            "latency_p99_ms": p99([(g["end"] - g["start"]) / NS_PER_MS for g in group if g["end"]]),
            "ttft_p99_ms": p99([(g["first"] - g["start"]) / NS_PER_MS for g in gen if g["first"]]),
            "max_gap_p99_ms": p99([g["gap"] for g in gen if g["gap"] is not None]),
        }

    groups = list(logical.values())
    out_rows = [g for g in groups if g["in"] is None]
    result = [{"window": None, **metrics(out_rows)}]
    for w in windows:
        result.append({"window": w["name"], **metrics([g for g in groups if g["in"] == w["name"]])})
    return result
