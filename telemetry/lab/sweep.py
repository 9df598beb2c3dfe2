"""A randomized lab sweep: runs whose network, load and impairment are drawn from ranges,
split into a tuning part and a held-out part before anything is scored.

Each run's parameters are drawn from ``random.Random(f"{seed}:{index}")`` alone, so run
``index`` of a seed is the same run whoever asks for it, and the split is fixed by the
same draw: thresholds may be chosen on the ``tuning`` runs only; ``heldout`` runs are for
scoring. The ranges:

* path: RTT floor log-uniform from 0.1 to 80 ms (a constant delay in the bridge, both
  directions, for the whole run); link rate unlimited or 20-200 Mbit/s;
* load: 4-20 requests/s Poisson over 1-6 HTTP/2 connections; a mix of unary ``Embed``
  (5-15 ms) and streaming ``Generate`` (prefill 10-60 ms, 20-80 tokens 8-30 ms apart),
  10-50 % Embed;
* capture point: the server's veth (70 %) or the client's (30 %);
* duration: 30-90 s (80 %), 90-240 s (15 %), 240-600 s (5 %);
* impairment: one of clean, loss_burst, uplink_loss, reordering, queueing (a bottleneck
  FIFO filled by a bulk download), jitter, shaper, policer, server_stall, flow_control
  (a slow reader), resource_exhausted, loss_then_stall; its window 3-60 s (at most 45 % of
  the run), its magnitudes drawn per run.

``ranges=2`` (``tailtap lab sweep --ranges 2``) draws from wider ranges, from the same
``(seed, index)`` but its own stream (so ``ranges=1`` runs are unchanged):

* cross traffic: off (65 %), during the impairment windows (20 %) or for the whole run
  (15 %): the bulk download over a link of 5-50 Mbit/s whose buffer holds 20-200 ms of it
  (during a window, the queue it builds is injected too: ``also`` queueing);
* link buffer otherwise 64 KB-1 MB;
* direction: reordering, jitter, shaper and policer act on the uplink (client -> server)
  in 30 % of their windows;
* one more cause, ``zero_window`` (a server slow to read: frozen in slices, 16 KB receive
  buffer, 8-32 KB Embed inputs);
* two windows of different causes in 30 % of the impaired runs; clean runs 10 %.
"""

from __future__ import annotations

import json
import math
import random
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from telemetry.lab import scenarios as sc

IMPAIRMENTS = (
    "clean", "loss_burst", "uplink_loss", "reordering", "queueing", "jitter", "shaper", "policer",
    "server_stall", "flow_control", "resource_exhausted", "loss_then_stall",
)  # fmt: skip
IMPAIRMENTS_V2 = (
    "loss_burst", "uplink_loss", "reordering", "queueing", "jitter", "shaper", "policer", "server_stall",
    "flow_control", "resource_exhausted", "zero_window",
)  # fmt: skip
RANGES = (1, 2)
HELDOUT_SHARE = 0.6  # of the runs; the rest is the tuning split
RUN_META = "sweep.json"


@dataclass
class SweepRun:
    """One drawn run: what to run and where its capture point is."""

    index: int
    seed: int
    split: str  # tuning | heldout
    impairment: str
    duration_s: float
    rtt_floor_ms: float
    link_mbps: float | None
    capture_point: str  # server | client
    load: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    windows: list[dict[str, Any]] = field(default_factory=list)
    ranges: int = 1
    cross_traffic: str = "off"  # off | window | run (ranges 2)
    link_buffer_bytes: int | None = None  # the link's FIFO (default 400 KB)
    bulk_windows: list[list[float]] = field(default_factory=list)  # cross traffic [start_s, end_s]
    client: dict[str, Any] = field(default_factory=dict)  # client overrides besides the load
    sysctls: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        if self.ranges != 1:
            return f"sweep-r{self.ranges}-{self.seed}-{self.index:03d}"
        return f"sweep-{self.seed}-{self.index:03d}"


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _load_and_server(rng: random.Random, embed_share: tuple[float, float], embed_ms: tuple[float, float],
                     prefill_ms: tuple[float, float]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The client's load (Poisson rate, connections, unary share, tokens asked) and the
    server's timing model (Embed ~embed_ms; Generate prefill, then a token per interval)."""
    load = {
        "rate": round(rng.uniform(4, 20), 1),
        "connections": rng.randint(1, 6),
        "embed_share": round(rng.uniform(*embed_share), 2),
        "max_tokens": sorted((rng.randint(20, 50), rng.randint(50, 80))),
    }
    server = {
        "embed_base_ms": round(rng.uniform(*embed_ms), 1),
        "prefill_base_ms": round(rng.uniform(*prefill_ms), 1),
        "token_interval_ms": round(rng.uniform(8, 30), 1),
    }
    return load, server


def draw(seed: int, index: int, ranges: int = 1) -> SweepRun:
    """The parameters of run ``index`` of the sweep ``seed`` (``ranges``: 1 or 2, see above)."""
    if ranges == 2:
        return _draw_v2(seed, index)
    if ranges != 1:
        raise ValueError(f"ranges must be one of {RANGES}, not {ranges}")
    rng = random.Random(f"{seed}:{index}")
    split = "heldout" if rng.random() < HELDOUT_SHARE else "tuning"
    r = rng.random()
    duration = rng.uniform(30, 90) if r < 0.8 else rng.uniform(90, 240) if r < 0.95 else rng.uniform(240, 600)
    floor = _log_uniform(rng, 0.1, 80.0)
    link = None if rng.random() < 0.6 else round(rng.uniform(20, 200), 1)
    point = "server" if rng.random() < 0.7 else "client"
    impairment = IMPAIRMENTS[rng.randrange(len(IMPAIRMENTS))]
    load, server = _load_and_server(rng, embed_share=(0.1, 0.5), embed_ms=(5, 15), prefill_ms=(10, 60))
    length = min(rng.uniform(3, 60), 0.45 * duration)
    start = rng.uniform(0.15 * duration, 0.85 * duration - length)
    windows = _windows(rng, impairment, start, length, duration, floor)
    return SweepRun(index, seed, split, impairment, round(duration, 1), round(floor, 3), link, point,
                    load, server, windows)


def _bridge(name: str, cause: str, kind: str, direction: str, models: list[dict[str, Any]],
            start: float, length: float, settle: float) -> dict[str, Any]:
    return {"name": name, "layer": "bridge", "cause": cause, "kind": kind, "direction": direction,
            "models": models, "start_s": start, "end_s": start + length, "settle_s": settle}


def _windows(rng: random.Random, impairment: str, start: float, length: float, duration: float,
             floor_ms: float) -> list[dict[str, Any]]:
    # losses recover by RTO (200 ms and more, backing off): effects outlast the window
    settle_loss = 2.0 + 0.02 * floor_ms
    if impairment == "clean":
        return []
    if impairment in ("loss_burst", "uplink_loss"):
        direction = "to_client" if impairment == "loss_burst" else "to_server"
        models = [{"kind": "gilbert_elliott", "p_gb": round(rng.uniform(0.005, 0.03), 4),
                   "p_bg": round(rng.uniform(0.2, 0.5), 3), "loss_good": 0.0,
                   "loss_bad": round(rng.uniform(0.5, 0.95), 2), "match": "all"}]
        if rng.random() < 0.5:
            models.insert(0, {"kind": "drop_consecutive", "n": rng.randint(3, 10), "after_ms": 200.0,
                              "every_ms": round(rng.uniform(800, 3000)), "match": "payload"})
        kind = "uplink" if direction == "to_server" else "gilbert_elliott"
        return [_bridge(impairment, "loss_burst", kind, direction, models, start, length, settle_loss)]
    if impairment == "reordering":
        models = [{"kind": "reorder", "share": round(rng.uniform(0.02, 0.1), 3),
                   "hold_ms": round(rng.uniform(3, 40) + 0.5 * floor_ms, 1), "match": "payload"}]
        return [_bridge("reordering", "reordering", "reorder", "to_client", models, start, length, 0.5 + 0.01 * floor_ms)]
    if impairment == "queueing":
        models = [{"kind": "queue", "rate_bps": int(rng.uniform(1, 8) * 1e6),
                   "limit_bytes": rng.randint(20_000, 120_000), "match": "all"}]
        return [_bridge("queueing", "queueing", "bottleneck", "to_client", models, start, length, 1.5)]
    if impairment == "jitter":
        delay = rng.uniform(10, 60)
        models = [{"kind": "delay", "delay_ms": round(delay, 1), "jitter_ms": round(delay * rng.uniform(0.3, 0.9), 1),
                   "match": "all"}]
        return [_bridge("jitter", "queueing", "delay_jitter", "to_client", models, start, length, 1.0)]
    if impairment == "shaper":
        models = [{"kind": "shaper", "rate_bps": int(rng.uniform(200_000, 1_500_000)),
                   "burst_bytes": rng.randint(3_000, 16_000), "limit_bytes": rng.randint(32_000, 200_000),
                   "match": "all"}]
        return [_bridge("shaper", "throttling", "shaper", "to_client", models, start, length, 3.0)]
    if impairment == "policer":
        models = [{"kind": "policer", "rate_bps": int(rng.uniform(200_000, 1_200_000)),
                   "burst_bytes": rng.randint(4_000, 16_000), "match": "all"}]
        return [_bridge("policer", "throttling", "policer", "to_client", models, start, length, settle_loss)]
    if impairment == "server_stall":
        return [{"name": "server_stall", "layer": "server", "cause": "server", "kind": "prefill_stall",
                 "params": {"kind": "stall", "extra_ms": round(rng.uniform(100, 800)), "decode_factor": 1.0},
                 "start_s": start, "end_s": start + length, "settle_s": 0.5}]
    if impairment == "flow_control":
        return [{"name": "flow_control", "layer": "client", "cause": "throttling", "kind": "h2_flow_control",
                 "params": {"kind": "slow_reader", "freeze_ms": round(rng.uniform(150, 400)),
                            "run_ms": round(rng.uniform(50, 200)), "read_delay_ms": 0.0},
                 "start_s": start, "end_s": start + length, "settle_s": 1.0}]
    if impairment == "resource_exhausted":
        return [{"name": "resource_exhausted", "layer": "server", "cause": "throttling", "kind": "resource_exhausted",
                 "params": {"kind": "resource_exhausted", "p": round(rng.uniform(0.2, 0.6), 2), "after_ms": 2.0},
                 "start_s": start, "end_s": start + length, "settle_s": 0.5}]
    if impairment == "loss_then_stall":
        half = length / 2
        loss = _windows(rng, "loss_burst", start, half * 0.8, duration, floor_ms)
        stall = _windows(rng, "server_stall", start + half * 1.1, half * 0.8, duration, floor_ms)
        return loss + stall
    raise ValueError(f"unknown impairment {impairment!r}")


def _draw_v2(seed: int, index: int) -> SweepRun:
    rng = random.Random(f"{seed}:{index}:ranges2")
    split = "heldout" if random.Random(f"{seed}:{index}").random() < HELDOUT_SHARE else "tuning"  # as ranges 1
    r = rng.random()
    duration = round(rng.uniform(30, 90) if r < 0.8 else rng.uniform(90, 240) if r < 0.95 else rng.uniform(240, 600), 1)
    floor = _log_uniform(rng, 0.1, 80.0)
    point = "server" if rng.random() < 0.6 else "client"
    c = rng.random()
    cross = "off" if c < 0.65 else "window" if c < 0.85 else "run"
    link: float | None = None if rng.random() < 0.5 else round(_log_uniform(rng, 10, 200), 1)
    if cross != "off":  # the bulk download needs a bottleneck (and the bridge a bounded rate)
        link = round(_log_uniform(rng, 5, 50), 1)
        buffer = int(link * 1e6 / 8 * rng.uniform(0.02, 0.2))
    else:
        buffer = int(_log_uniform(rng, 64_000, 1_000_000))
    causes: list[str] = []
    if rng.random() >= 0.1:
        causes.append(IMPAIRMENTS_V2[rng.randrange(len(IMPAIRMENTS_V2))])
        if rng.random() < 0.3:
            causes.append(rng.choice([x for x in IMPAIRMENTS_V2 if x != causes[0]]))
    load, server = _load_and_server(rng, embed_share=(0.1, 0.6), embed_ms=(3, 20), prefill_ms=(10, 80))
    # each window in its own slot of [15 %, 90 %] of the run, leaving time to settle
    windows: list[dict[str, Any]] = []
    slot = 0.75 * duration / max(len(causes), 1)
    for i, cause in enumerate(causes):
        lo = 0.15 * duration + i * slot
        length = max(3.0, min(rng.uniform(3, 60), 0.7 * slot - 4 - 0.02 * floor))
        start = rng.uniform(lo, lo + slot - length - 3 - 0.02 * floor)
        windows += ([_zero_window(rng, start, length)] if cause == "zero_window"
                    else _windows(rng, cause, start, length, duration, floor))
    if len({w["name"] for w in windows}) < len(windows):
        for i, w in enumerate(windows):
            w["name"] = f"{w['name']}_{i + 1}"
    uplink = ("reordering", "jitter", "shaper", "policer")
    for w in windows:
        if w["name"].split("_")[0] in uplink and w.get("layer") == "bridge" and rng.random() < 0.3:
            w["direction"] = "to_server"
    client: dict[str, Any] = {}
    sysctls: dict[str, dict[str, str]] = {}
    if "flow_control" in causes:
        client["channel_options"] = [["grpc.http2.lookahead_bytes", 256], ["grpc.http2.bdp_probe", 0]]
    if "zero_window" in causes:
        client["embed_chars"] = [8192, 32768]
        load["embed_share"] = max(load["embed_share"], 0.3)
        sysctls["server"] = {"net.ipv4.tcp_rmem": "4096 16384 16384"}
    bulk: list[list[float]] = []
    if cross == "window" and not windows:
        cross = "off"
    if cross == "run":
        bulk = [[0.0, round(duration, 3)]]
    else:
        for w in windows:
            queue = any(m["kind"] == "queue" for m in w.get("models", ()))
            if queue or cross == "window":
                bulk.append([round(w["start_s"], 3), round(w["end_s"], 3)])
                if not queue:
                    w["also"] = [{"cause": "queueing", "kind": "cross_traffic"}]
    return SweepRun(index, seed, split, "+".join(causes) or "clean", round(duration, 1), round(floor, 3), link,
                    point, load, server, windows, ranges=2, cross_traffic=cross, link_buffer_bytes=buffer,
                    bulk_windows=bulk, client=client, sysctls=sysctls)


def _zero_window(rng: random.Random, start: float, length: float) -> dict[str, Any]:
    return {"name": "zero_window", "layer": "server", "cause": "throttling", "kind": "zero_window",
            "params": {"kind": "slow_read", "freeze_ms": round(rng.uniform(150, 300)), "run_ms": round(rng.uniform(150, 400))},
            "start_s": start, "end_s": start + length, "settle_s": 1.0, "also": [{"cause": "server", "kind": "paused"}]}


def scenario_of(run: SweepRun) -> sc.Scenario:
    """The lab scenario a drawn run is."""
    specs = []
    for w in run.windows:
        frac = (w["start_s"] / run.duration_s, w["end_s"] / run.duration_s)
        specs.append(sc.WindowSpec(
            w["name"], w["layer"], frac[0], frac[1], w["cause"], w["kind"], direction=w.get("direction"),
            models=tuple(w.get("models", ())), params=dict(w.get("params", {})), settle_s=w["settle_s"],
            also=tuple((a["cause"], a["kind"]) for a in w.get("also", ()))))
    half = max(run.rtt_floor_ms / 2 - 0.05, 0.0)  # the bridge itself adds ~0.05 ms each way
    path: dict[str, list[dict[str, Any]]] = {d: [] for d in ("to_server", "to_client")}
    for models in path.values():
        if half > 0:
            models.append({"kind": "delay", "delay_ms": round(half, 3), "jitter_ms": 0.0, "match": "all"})
        if run.link_mbps:
            models.append({"kind": "queue", "rate_bps": int(run.link_mbps * 1e6),
                           "limit_bytes": run.link_buffer_bytes or 400_000, "match": "all"})
    client = {**run.load, "embed_chars": [64, 2048], **run.client}
    if run.impairment == "flow_control":
        client["channel_options"] = [["grpc.http2.lookahead_bytes", 256], ["grpc.http2.bdp_probe", 0]]
    return sc.Scenario(
        run.name, f"sweep run {run.index} of seed {run.seed}: {run.impairment}", tuple(specs), run.duration_s,
        client=client, server=dict(run.server), bulk=run.ranges == 1 and run.impairment == "queueing", path=path,
        sysctls=run.sysctls, bulk_windows=tuple((a / run.duration_s, b / run.duration_s) for a, b in run.bulk_windows))


STALL_MIN_LATE_MS = 20.0  # a lab process this late (labels.json "disturbed") may have slowed requests


def host_stalls(labels: dict[str, Any], min_late_ms: float = STALL_MIN_LATE_MS) -> list[dict[str, Any]]:
    """The periods in which a lab process ran ``min_late_ms`` or more late. With the small
    HTTP/2 windows of a slow-reader run the server's token timers run late whenever its
    writes wait for the client's WINDOW_UPDATE, the injected cause itself: its lateness
    says nothing about the host there."""
    small_windows = any(o[0] == "grpc.http2.lookahead_bytes" for o in labels.get("load", {}).get("channel_options", []))
    return [d for d in labels.get("disturbed", [])
            if d.get("max_late_ms", 0) >= min_late_ms and not (small_windows and d.get("source") == "server")]


def disturbed_in_windows(labels: dict[str, Any], min_late_ms: float = STALL_MIN_LATE_MS) -> list[dict[str, Any]]:
    """Scheduling stalls of a lab process (>= min_late_ms) inside a window's effect: such a
    run's labels may not say what happened there."""
    return [d for d in host_stalls(labels, min_late_ms)
            if any(d["start_ns"] < w["effect_end_ns"] and d["end_ns"] > w["start_ns"] for w in labels["windows"])]


def run_sweep(seed: int, runs: int, out: Path, start: int = 0, attempts: int = 2, log: Any = print,
              ranges: int = 1, realtime: bool = False, split: str | None = None) -> list[dict[str, Any]]:
    """Run (or resume) runs ``start .. start + runs - 1`` of the sweep into ``out/<name>/``.
    A run disturbed inside its windows is run again (up to ``attempts`` times) and kept
    marked ``disturbed`` if it stays so. ``realtime``: the lab's server, client and
    tcpdump run under ``chrt -r 10`` like its bridge (fewer scheduling stalls on a busy
    machine). ``split``: only the runs drawn into that split (the others are skipped, so a
    fresh held-out judge of fixed settings costs only its own runs)."""
    from telemetry.lab.runner import run_scenario

    done = []
    for index in range(start, start + runs):
        run = draw(seed, index, ranges)
        if split is not None and run.split != split:
            continue
        folder = out / run.name
        meta_path = folder / RUN_META
        if meta_path.exists():
            old = json.loads(meta_path.read_text())
            if old.get("ranges", 1) != ranges:
                raise ValueError(f"{folder} holds a run drawn with --ranges {old.get('ranges', 1)}, not {ranges}")
            if old.get("status") in ("ok", "disturbed"):
                done.append(old)
                continue
        meta: dict[str, Any] = {**asdict(run), "name": run.name}
        for attempt in range(1, attempts + 1):
            started = time.time()
            try:
                labels = run_scenario(run.name, folder, duration=run.duration_s, seed=seed * 1000 + index + 100 * (attempt - 1),
                                      client_capture=run.capture_point == "client", log=log, scenario=scenario_of(run),
                                      **({"realtime": True} if realtime else {}))
            except Exception as exc:  # noqa: BLE001 - a failed run is recorded, the sweep goes on
                meta.update(status="failed", error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:])
                log(f"[{run.name}] failed: {exc}")
                continue
            stalls = disturbed_in_windows(labels)
            meta.update(status="disturbed" if stalls else "ok", attempt=attempt, wall_s=round(time.time() - started, 1),
                        realtime=realtime,
                        capture=("capture_client.pcap" if run.capture_point == "client" else "capture.pcap"),
                        disturbed_in_windows=len(stalls), problems=labels.get("problems", []))
            if not stalls:
                break
            log(f"[{run.name}] disturbed inside its windows ({len(stalls)} stall(s)): attempt {attempt} of {attempts}")
        folder.mkdir(parents=True, exist_ok=True)
        meta_path.write_text(json.dumps(meta, indent=1, default=str) + "\n")
        done.append(meta)
    return done
