"""Markdown summary of lab output directories (used for samples/README.md).

python -m telemetry.lab.summary samples/*/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def markdown(dirs: list[Path]) -> str:
    lines = [
        "| scenario | injected (window, s) | requests in / out | latency p99 in / out (ms) "
        "| TTFT p99 in / out (ms) | max gap p99 in / out (ms) | observed | bridge idle p50 / p99 (ms) "
        "| capture | disturbed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in dirs:
        p = Path(d) / "labels.json"
        if not p.exists():
            continue
        lab = json.loads(p.read_text())
        summ = {r["window"]: r for r in lab["client_summary"]}
        out = summ[None]
        idle = lab["bridge"]["idle_delay_ms"]
        size = (Path(d) / "capture.pcap").stat().st_size / 1e6
        cap = f"{lab['capture']['packets']} pkts, {size:.1f} MB"
        dist = lab["disturbed"]
        dist_s = f"{len(dist)} (max {max(x['max_late_ms'] for x in dist):.0f} ms)" if dist else "0"
        if not lab["windows"]:
            lines.append(
                f"| {lab['scenario']} | nothing | - / {out['requests']} | - / {_f(out['latency_p99_ms'])} "
                f"| - / {_f(out['ttft_p99_ms'])} | - / {_f(out['max_gap_p99_ms'])} | - "
                f"| {idle['p50']:.3f} / {idle['p99']:.3f} | {cap} | {dist_s} |"
            )
        for w in lab["windows"]:
            i = summ.get(w["name"], {})
            what = f"{w['name']} ({w['cause']}/{w['kind']}, {w['start_offset_s']:g}-{w['end_offset_s']:g})"
            obs = json.dumps(w.get("observed", {}), separators=(",", ":")).replace("|", "/")
            lines.append(
                f"| {lab['scenario']} | {what} | {i.get('requests', 0)} / {out['requests']} "
                f"| {_f(i.get('latency_p99_ms'))} / {_f(out['latency_p99_ms'])} "
                f"| {_f(i.get('ttft_p99_ms'))} / {_f(out['ttft_p99_ms'])} "
                f"| {_f(i.get('max_gap_p99_ms'))} / {_f(out['max_gap_p99_ms'])} | `{obs}` "
                f"| {idle['p50']:.3f} / {idle['p99']:.3f} | {cap} | {dist_s} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown([Path(a) for a in sys.argv[1:]]), end="")
