"""Where the attribution fails on a scored sweep (telemetry/lab/sweep_score.py): per injected
cause, why its truth-slow requests miss it, by which parameter ranges it fails, and a few
concrete windows and requests (run folder + ``conn_id:stream_id`` for ``tailtap explain``).

Only the tuning runs are taken apart here: the held-out runs are for judging thresholds,
not for finding them, so of those only the totals and the confusion matrices are shown
(sweep_score.markdown).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from telemetry.lab.sweep_score import _pct, _share, scored, summarize

EXAMPLES = 3


def _bucket_floor(s: dict[str, Any]) -> str:
    f = s["rtt_floor_ms"]
    return "< 1 ms" if f < 1 else "1-10 ms" if f < 10 else "10-80 ms"


def _bucket_window(s: dict[str, Any]) -> str:
    if not s["window_s"]:
        return "no window"
    w = max(s["window_s"])
    return "3-10 s" if w < 10 else "10-30 s" if w < 30 else "30-60 s"


def _bucket_duration(s: dict[str, Any]) -> str:
    d = s["duration_s"]
    return "30-90 s" if d < 90 else "90-240 s" if d < 240 else "240-600 s"


FACTORS: dict[str, Callable[[dict[str, Any]], str]] = {
    "capture point": lambda s: s["capture_point"],
    "RTT floor": _bucket_floor,
    "link rate": lambda s: "limited" if s["link_mbps"] else "unlimited",
    "connections": lambda s: "1-2" if s["connections"] <= 2 else "3-6",
    "request rate": lambda s: "< 10/s" if s["rate"] < 10 else ">= 10/s",
    "window length": _bucket_window,
    "run length": _bucket_duration,
}


def _by_cause(runs: list[dict[str, Any]]) -> list[str]:
    agg: dict[str, dict[str, Any]] = defaultdict(lambda: {"windows": 0, "ok": 0, "slow": 0, "carried": 0,
                                                          "reasons": Counter(), "examples": []})
    for s in runs:
        for w in s["windows"]:
            a = agg[w["injected"]]
            if w["ok"] is not None:
                a["windows"] += 1
                a["ok"] += w["ok"]
            a["slow"] += w["slow"]
        for m in s["misses"]:
            inj = next(w["injected"] for w in s["windows"] if w["window"] == m["window"])
            agg[inj]["reasons"][m["reason"]] += 1
            agg[inj]["examples"].append((s, m))
    lines = ["| injected | windows right | truth-slow in windows | carry | why the rest miss it |", "|---|---|---|---|---|"]
    for inj, a in sorted(agg.items()):
        missed = sum(a["reasons"].values())
        a["carried"] = a["slow"] - missed
        reasons = ", ".join(f"{r} {n}" for r, n in a["reasons"].most_common())
        lines.append(f"| {inj} | {a['ok']}/{a['windows']} | {a['slow']} | {_pct(_share([a['slow'], a['carried']]))} | {reasons or '-'} |")
    lines += ["", "Examples of misses (tuning runs; `tailtap explain --store STORE --request ID`; ms; "
              "client = the client's own, truth thr = its p99 of clean requests +10%/5 ms, est = tailtap's "
              "client-side estimate, thr = tailtap's threshold for the method):", ""]
    for inj, a in sorted(agg.items()):
        shown: Counter[str] = Counter()
        for s, m in sorted(a["examples"], key=lambda e: -(e[1]["client_latency_ms"] or 0)):
            if shown[m["reason"]] >= 1 or sum(shown.values()) >= EXAMPLES:
                continue
            shown[m["reason"]] += 1
            causes = ", ".join(f"{c[0]} {c[1]:g}" + (f" {c[2]}" if c[2] else "") for c in m["causes"]) or "none"
            metric = "ttft" if "ttft" in m["slow_on"] else "latency"
            lines.append(
                f"- {inj}: `{s['folder']}` {m['request']} ({m['method']}, {m['client_status']}, window {m['window']}, {m['reason']}): "
                f"{metric} client {m[f'client_{metric}_ms']} vs truth thr {m[f'truth_{metric}_thr_ms']}, "
                f"est {m[f'est_{metric}_ms']} vs thr {m[f'{metric}_thr_ms']}; causes: {causes}. Run: {s['params']}")
    return lines


def _misses_by_run(runs: list[dict[str, Any]]) -> list[str]:
    """Where the misses concentrate: per run, its truth-slow requests in windows, those
    missing the injected cause, why, and on which method."""
    lines = ["| run | injected | capture | truth-slow in windows | missed | why | on |", "|---|---|---|---|---|---|---|"]
    rows = [s for s in runs if s["misses"]]
    for s in sorted(rows, key=lambda s: -len(s["misses"])):
        reasons = Counter(m["reason"] for m in s["misses"])
        methods = Counter(f"{m['method']} {m['client_status']}" for m in s["misses"])
        injected = ", ".join(sorted({w["injected"] for w in s["windows"]}))
        lines.append(f"| {s['run']} | {injected} | {s['capture_point']} | {s['carry'][0]} | {len(s['misses'])} | "
                     f"{', '.join(f'{r} {n}' for r, n in reasons.most_common())} | "
                     f"{', '.join(f'{k} {n}' for k, n in methods.most_common())} |")
    return lines if rows else ["- none"]


def _failed_windows(runs: list[dict[str, Any]]) -> list[str]:
    lines = []
    for s in runs:
        for w in s["windows"]:
            if w["ok"] is False:
                prim = ", ".join(f"{k} {n}" for k, n in w["primaries"].items())
                rep = next(x for x in s["report"]["windows"] if x["window"] == w["window"])
                lines.append(f"- `{s['folder']}` window {w['window']} (injected {w['injected']}, {w['slow']} truth-slow): "
                             f"dominant {w['dominant']}; primaries {prim}; report's spikes over it: {rep['report_spikes']}, "
                             f"their cause {rep['report_cause']}. Run: {s['params']}")
    return lines or ["- none"]


def _quiet_windows(scores: list[dict[str, Any]]) -> list[str]:
    """Windows the client saw no (or too few) slow requests in: the impairment was too mild
    for this load (a lab fact, not tailtap's answer, so held-out runs are listed too)."""
    lines = []
    for s in sorted(scores, key=lambda s: s["run"]):
        if "error" in s:
            continue
        for w in s["windows"]:
            if w["ok"] is None:
                note = f", {s['reconnected_excluded']} calls left out after a reconnection" if s["reconnected_excluded"] else ""
                status = "" if s["counted"] else ", left out: stalled"
                lines.append(f"- {s['run']} ({s['split']}{status}) window {w['window']}: {w['slow']} truth-slow{note}. "
                             f"Run: {s['params']}")
    return lines or ["- none"]


def _by_factor(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["| factor | range | runs | windows right | carry | outside blamed on network | decomposition within 20% |",
             "|---|---|---|---|---|---|---|"]
    for factor, key in FACTORS.items():
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for s in runs:
            groups[key(s)].append(s)
        for value, group in sorted(groups.items()):
            wins = [w for s in group for w in s["windows"] if w["ok"] is not None]
            tot = {k: [sum(s[k][0] for s in group), sum(s[k][1] for s in group)] for k in ("carry", "outside", "decomp")}
            lines.append(f"| {factor} | {value} | {len(group)} | {sum(w['ok'] for w in wins)}/{len(wins)} | "
                         f"{_pct(_share(tot['carry']))} of {tot['carry'][0]} | {_pct(_share(tot['outside']))} of "
                         f"{tot['outside'][0]} | {_pct(_share(tot['decomp']))} of {tot['decomp'][0]} |")
    return lines


def _outside(runs: list[dict[str, Any]]) -> list[str]:
    by: Counter[str] = Counter()
    slow: Counter[str] = Counter()
    examples = []
    for s in runs:
        for b in s["outside_blamed"]:
            for c in b["causes"]:
                by[c] += 1
            slow["truth-slow" if b["truth_slow"] else "not slow at the client"] += 1
            examples.append((s, b))
    lines = [f"Blamed on the network outside every window: by cause {dict(by.most_common()) or '{}'}; "
             f"of those requests {dict(slow)}.", ""]
    per_run = Counter(s["run"] for s, _ in examples)
    for run, n in per_run.most_common(EXAMPLES):
        s, b = next(e for e in examples if e[0]["run"] == run)
        total = s["outside"][0]
        lines.append(f"- `{s['folder']}`: {n} of {total} outside requests, e.g. {b['request']} ({b['method']}, "
                     f"causes {', '.join(b['causes'])}, client latency {b['client_latency_ms']}). Run: {s['params']}")
    return lines


def _decomp(runs: list[dict[str, Any]]) -> list[str]:
    off = [(s, d) for s in runs for d in s["decomp_off"]]
    missing = sum(1 for _, d in off if d["decomposition_ms"] is None)
    over = sum(1 for _, d in off if d["decomposition_ms"] is not None and d["decomposition_ms"] > d["client_latency_ms"])
    under = len(off) - missing - over
    by_imp = Counter(s["impairment"] for s, _ in off)
    lines = [f"Decomposition off by more than 20%: {len(off)} truth-slow requests ({under} under the client's latency, "
             f"{over} over, {missing} without a decomposition); by impairment {dict(by_imp.most_common())}.", ""]
    for s, d in sorted(off, key=lambda e: -(e[1]["client_latency_ms"] or 0))[:EXAMPLES]:
        lines.append(f"- `{s['folder']}` {d['request']} ({d['method']}, window {d['window']}): client {d['client_latency_ms']} ms, "
                     f"decomposition {d['decomposition_ms']} ms")
    return lines


def diagnosis(scores: list[dict[str, Any]]) -> str:
    tuning = scored(scores, "tuning")
    out = ["# Sweep diagnosis (tuning runs only)", ""]
    for split in ("tuning", "heldout"):
        for path in ("sql", "report"):
            m = summarize(scores, split, path)
            out.append(f"- {split}, read by {path}: {m['runs']} runs, windows right {_pct(m['window_ok'])} of "
                       f"{m['windows_judged']} judged ({m['windows_thin']} thin, {m['windows_no_slow']} without a "
                       f"truth-slow request), carry {_pct(m['carry'])} of {m['slow_in_windows']}, outside blamed "
                       f"{_pct(m['outside_net'])} of {m['outside_requests']}, decomposition {_pct(m['decomp_ok'])} of "
                       f"{m['slow']}; bars met: {', '.join(m['bars_met']) or 'none'}; disturbed runs left out: "
                       f"{m['disturbed_runs']} (and {m['stalled_requests']} stalled requests), errors: {m['error_runs']}")
    differ = [s["run"] for s in scores if "error" not in s and not s["report_agrees"]]
    out += ["", f"Runs where `tailtap sql` and the report give different causes: {', '.join(differ) or 'none'}", "",
            "## Per injected cause", "", *_by_cause(tuning), "", "## Misses by run", "", *_misses_by_run(tuning), "",
            "## Windows whose dominant cause is wrong", "",
            *_failed_windows(tuning), "", "## By parameter range", "", *_by_factor(tuning), "",
            "## Outside the windows", "", *_outside(tuning), "", "## Decomposition", "", *_decomp(tuning), "",
            "## Windows too mild to judge (fewer than 3 truth-slow requests; all runs)", "", *_quiet_windows(scores)]
    errors = [s for s in scores if "error" in s]
    if errors:
        out += ["", "## Runs that could not be scored", ""] + [f"- {s['run']}: {s['error']}" for s in errors]
    return "\n".join(out)
