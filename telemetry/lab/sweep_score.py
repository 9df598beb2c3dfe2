"""Scores a sweep's runs (telemetry/lab/sweep.py) against the client's own timings.

Ground truth, from the client (client.parquet), per method: a request is slow when its
TTFT or latency is above the p99 of that method's clean requests (outside every
impairment window, not failed) by 10 % and 5 ms, or when it was turned away (grpc-status
RESOURCE_EXHAUSTED / UNAVAILABLE). Calls on a channel that reconnected are left out (their
port and stream id, by which they are matched to the capture, are not trustworthy).

tailtap's attribution is read two ways, and both are scored:

* ``sql``: as ``tailtap sql --store S`` reads it (telemetry.cli.sql.open_analysis: the
  default settings), the ``request_cause`` view;
* ``report``: as ``tailtap analyze``'s report reads it (the captures just analyzed in
  scope, the window the analysis picks), through telemetry.report.sections; the report's own
  verdict per impairment window (the causes of the spikes overlapping it) is kept too.

Scores, per split (tuning runs may be used to choose thresholds, held-out runs only to
judge them). The lab records when one of its processes ran late (labels.json
``disturbed``); a request overlapping such a stall of STALL_MIN_LATE_MS or more is left
out (its slowness may be the host's), and a run that loses more than MAX_STALLED of its
windows' requests that way is scored but left out of the split totals (the sweep already
ran it twice):

* window_ok: of the impairment windows with at least MIN_WINDOW_SLOW truth-slow requests,
  those whose dominant primary cause (the most common largest-delay cause of their
  truth-slow requests; ``none`` when tailtap did not judge one slow) is the injected one;
* carry: of the truth-slow requests inside windows, those carrying the injected cause;
* outside_net: of the requests outside every window, those blamed on the network;
* decomp_ok: of the truth-slow requests, those whose latency decomposition adds up to
  within 20 % of the client's latency (no decomposition counts as a miss).

Every miss is kept with its request (``conn_id:stream_id``, for ``tailtap explain``) and
why it missed (``reason``): not judged slow because tailtap's estimate of the metric stayed
under the truth threshold (``not_slow:estimate_low``) or it had none (``no_estimate``),
because its baseline threshold was above the client's (``not_slow:threshold_high``) or
too thin to judge by (``not_slow:baseline_thin``), or a failed call it did not see
(``not_slow:failure_unseen``); or judged slow with another cause (``other:<cause>``).

Stores are kept per run (``<stores>/<run>/``) and re-ingested only when the parsers or the
ingest changed (a fingerprint of their source): after a change of queries/ only the SQL
runs again.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from telemetry.lab.sweep import STALL_MIN_LATE_MS, host_stalls

NETWORK_LABELS = ("loss_burst", "reordering", "queueing", "throttling/shaper", "throttling/policer",
                  "throttling/receive_window", "throttling/h2_flow_control")  # fmt: skip
EXPECTED = {  # injected (cause, kind) -> the labels that count as carrying it
    ("loss_burst", None): {"loss_burst"},
    ("reordering", None): {"reordering"},
    ("queueing", None): {"queueing"},
    ("throttling", "shaper"): {"throttling/shaper"},
    ("throttling", "policer"): {"throttling/policer"},
    ("throttling", "h2_flow_control"): {"throttling/h2_flow_control"},
    ("throttling", "resource_exhausted"): {"throttling/application"},
    ("throttling", "zero_window"): {"throttling/receive_window"},
    ("server", None): {"server"},
}
MARK_BEGIN, MARK_END = "<!-- sweep:begin -->", "<!-- sweep:end -->"
MIN_WINDOW_SLOW = 3  # truth-slow requests a window needs for its dominant cause to be judged
MAX_STALLED = 0.25  # a run whose stalls take out more of its windows' requests is left out
PATHS = ("sql", "report")
BARS = {"window_ok": 0.95, "carry": 0.90, "outside_net": 0.02, "decomp_ok": 0.90}
ROOT = Path(__file__).resolve().parents[2]
INGEST_SOURCES = ("parsers", "telemetry/ingest", "telemetry/store/schema.py", "telemetry/store/parquet.py")


def expected_labels(window: dict[str, Any]) -> set[str]:
    kind = window["kind"] if window["cause"] == "throttling" else None
    out = set(EXPECTED.get((window["cause"], kind), {f"{window['cause']}/{kind}" if kind else window["cause"]}))
    for also in window.get("also", []):
        k = also["kind"] if also["cause"] == "throttling" else None
        out |= EXPECTED.get((also["cause"], k), set())
    return out


def ingest_fingerprint() -> str:
    """What the stored rows depend on: the source of the parsers and the ingest."""
    h = hashlib.sha256()
    for src in INGEST_SOURCES:
        path = ROOT / src
        files = sorted(p for p in path.rglob("*") if p.suffix in (".py", ".c")) if path.is_dir() else [path]
        for f in files:
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _store(folder: Path, meta: dict[str, Any], reingest: bool, store_dir: Path | None = None) -> Any:
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.store.parquet import Store

    root = store_dir or folder / "store"
    key_file = root / ".ingest-fingerprint"
    key = ingest_fingerprint()
    store = Store(root)
    stale = not key_file.exists() or key_file.read_text().strip() != key
    if reingest or stale or not store.capture_ids():
        result = ingest_file(folder / meta["capture"], store, IngestOptions(force=True))
        if result.error:
            raise RuntimeError(result.error)
        key_file.write_text(key + "\n")
    return store


_TRUTH = """
WITH t AS (SELECT * FROM calls),
clean AS (
    SELECT method, quantile_cont(ttft_ms, 0.99) AS ttft_p99, quantile_cont(latency_ms, 0.99) AS latency_p99
    FROM t WHERE in_window IS NULL AND grpc_status = 0 GROUP BY method
),
judged AS (
    SELECT t.*, greatest(1.1 * c.ttft_p99, c.ttft_p99 + 5) AS ttft_thr,
        greatest(1.1 * c.latency_p99, c.latency_p99 + 5) AS latency_thr
    FROM t LEFT JOIN clean AS c USING (method)
)
SELECT conn_local_port, stream_id, request_id, method, in_window, conn_reconnected, start_ns, end_ns,
    ttft_ms, latency_ms, grpc_status, grpc_status_name, ttft_thr, latency_thr,
    list_filter([CASE WHEN ttft_ms > ttft_thr THEN 'ttft' END,
                 CASE WHEN latency_ms > latency_thr THEN 'latency' END,
                 CASE WHEN grpc_status IN (8, 14) THEN 'rejected' END], lambda x: x IS NOT NULL) AS slow_on
FROM judged
"""


def truth_of(client_parquet: Path, windows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The client's calls with what made each slow (``slow_on``: ttft, latency, rejected);
    ``windows``: the windows to place them in (their effect_end as recovered), else as the
    lab placed them."""
    import duckdb
    import pyarrow.parquet as pq

    from telemetry.lab.truth import assign_windows

    calls = pq.read_table(client_parquet)
    if windows is not None:
        calls = assign_windows(calls, windows)
    con = duckdb.connect()
    con.register("calls", calls)
    cur = con.execute(_TRUTH)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


# tailtap's side of each request: what it measured and judged. The first query reads
# diagnostic columns of request_metrics/baseline that may change with queries/; the second
# reads only the contract columns (DESIGN.md), so scoring survives such a change.
_SIDE = """
SELECT r.conn_id, r.stream_id, r.client_port, m.latency_eff_ms, m.ttft_eff_ms,
    slow_threshold(b.latency_baseline_p99_ms) AS latency_thr, slow_threshold(b.ttft_baseline_p99_ms) AS ttft_thr,
    b.judged AS baseline_judged, s.slow_metrics, d.total_ms
FROM requests AS r
LEFT JOIN request_metrics AS m USING (conn_id, stream_id)
LEFT JOIN baseline AS b ON b.method = m.method
LEFT JOIN slow_requests AS s USING (conn_id, stream_id)
LEFT JOIN latency_decomposition AS d USING (conn_id, stream_id)
"""
_SIDE_CONTRACT = """
SELECT r.conn_id, r.stream_id, r.client_port, NULL AS latency_eff_ms, NULL AS ttft_eff_ms, NULL AS latency_thr,
    NULL AS ttft_thr, NULL AS baseline_judged, s.slow_metrics, d.total_ms
FROM requests AS r
LEFT JOIN slow_requests AS s USING (conn_id, stream_id)
LEFT JOIN latency_decomposition AS d USING (conn_id, stream_id)
"""


def tailtap_side(con: Any) -> dict[tuple[int, int], dict[str, Any]]:
    """Per (client port, stream id): tailtap's metrics, thresholds, slowness, decomposition
    total and causes (label, delay ms, direction)."""
    import duckdb

    try:
        cur = con.execute(_SIDE)
    except duckdb.Error:
        cur = con.execute(_SIDE_CONTRACT)
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    causes: dict[tuple[str, int], list[tuple[str, float, str | None]]] = defaultdict(list)
    for conn_id, stream_id, cause, kind, direction, delay in con.execute(
        "SELECT conn_id, stream_id, cause, kind, direction, delay_ms FROM request_cause"
    ).fetchall():
        label = f"{cause}/{kind}" if cause == "throttling" and kind else cause
        causes[(conn_id, stream_id)].append((label, float(delay or 0.0), direction))
    out = {}
    for r in rows:
        r["causes"] = sorted(causes.get((r["conn_id"], r["stream_id"]), []), key=lambda c: (-c[1], c[0]))
        out[(r["client_port"], r["stream_id"])] = r
    return out


def _miss_reason(t: dict[str, Any], s: dict[str, Any]) -> str:
    """Why a truth-slow request does not carry its injected cause."""
    if s["causes"]:
        return f"other:{s['causes'][0][0]}"
    metric = "ttft" if "ttft" in t["slow_on"] else "latency" if "latency" in t["slow_on"] else None
    if metric is None:
        return "not_slow:failure_unseen"  # turned away (RESOURCE_EXHAUSTED / UNAVAILABLE) unseen
    if s["baseline_judged"] is False:
        return "not_slow:baseline_thin"
    est, thr = s[f"{metric}_eff_ms"], s[f"{metric}_thr"]
    if est is None:
        return "not_slow:no_estimate"  # e.g. no first message seen: no TTFT to judge
    if thr is None:
        return "not_slow"
    return "not_slow:estimate_low" if est <= t[f"{metric}_thr"] else "not_slow:threshold_high"


def _r(v: Any) -> Any:
    return round(v, 1) if isinstance(v, float) else v


def judge(truth: list[dict[str, Any]], side: dict[tuple[int, int], dict[str, Any]],
          windows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The figures of one run as one path (sql or report) reads it."""
    per_window: dict[str, list[str]] = {name: [] for name in windows}
    carry, outside, dec = [0, 0], [0, 0], [0, 0]
    confusion: Counter[tuple[str, str]] = Counter()
    misses, blamed, dec_off = [], [], []
    for t in truth:
        s = side.get((t["conn_local_port"], t["stream_id"]))
        if s is None or t["conn_reconnected"] or t.get("stalled"):
            continue
        labels = {c[0] for c in s["causes"]}
        primary = s["causes"][0][0] if s["causes"] else "none"
        rid = f"{s['conn_id']}:{s['stream_id']}"
        slow = bool(t["slow_on"])
        if t["in_window"] is None:
            outside[0] += 1
            net = sorted(labels & set(NETWORK_LABELS))
            if net:
                outside[1] += 1
                blamed.append({"request": rid, "method": t["method"], "truth_slow": slow, "causes": net,
                               "client_latency_ms": _r(t["latency_ms"]), "client_ttft_ms": _r(t["ttft_ms"])})
        elif slow:
            want = expected_labels(windows[t["in_window"]])
            per_window[t["in_window"]].append(primary)
            carry[0] += 1
            confusion[(" + ".join(sorted(want)), primary)] += 1
            if labels & want:
                carry[1] += 1
            else:
                misses.append({
                    "request": rid, "window": t["in_window"], "method": t["method"], "slow_on": list(t["slow_on"]),
                    "reason": _miss_reason(t, s), "client_status": t["grpc_status_name"], "causes": [[c[0], _r(c[1]), c[2]] for c in s["causes"]],
                    "client_ttft_ms": _r(t["ttft_ms"]), "truth_ttft_thr_ms": _r(t["ttft_thr"]),
                    "est_ttft_ms": _r(s["ttft_eff_ms"]), "ttft_thr_ms": _r(s["ttft_thr"]),
                    "client_latency_ms": _r(t["latency_ms"]), "truth_latency_thr_ms": _r(t["latency_thr"]),
                    "est_latency_ms": _r(s["latency_eff_ms"]), "latency_thr_ms": _r(s["latency_thr"]),
                })
        if slow and t["latency_ms"]:
            dec[0] += 1
            total = s["total_ms"]
            if total is not None and abs(total - t["latency_ms"]) <= 0.2 * t["latency_ms"]:
                dec[1] += 1
            else:
                dec_off.append({"request": rid, "window": t["in_window"], "method": t["method"],
                                "client_latency_ms": _r(t["latency_ms"]), "decomposition_ms": _r(total)})
    window_rows = []
    for name, w in windows.items():
        prim = per_window[name]
        want = expected_labels(w)
        counts = Counter(prim)
        dominant = max(counts, key=lambda k: (counts[k], k)) if prim else None
        judged = len(prim) >= MIN_WINDOW_SLOW
        window_rows.append({"window": name, "injected": " + ".join(sorted(want)), "expected": sorted(want), "slow": len(prim),
                            "dominant": dominant, "primaries": dict(counts.most_common()),
                            "ok": (dominant in want) if judged else None})
    return {"windows": window_rows, "carry": carry, "outside": outside, "decomp": dec,
            "request_confusion": [[a, b, n] for (a, b), n in sorted(confusion.items())],
            "misses": misses, "outside_blamed": blamed, "decomp_off": dec_off}


def _report_verdicts(con: Any, store: Any, windows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the report itself says about each impairment window: the causes of the spikes
    overlapping it (weighted by their slow requests), and its window length."""
    from telemetry.report.sections import report_sections

    sections = report_sections(store, con=con)
    window_s = con.window_s()
    spikes = {sp["window_id"]: sp for sp in sections["spikes"]}
    out: dict[str, Any] = {"window_s": window_s, "spikes": len(spikes), "windows": {}}
    for name, w in windows.items():
        weight: Counter[str] = Counter()
        hit = 0
        for wid, sp in spikes.items():
            s = int(sp["window_start"].timestamp() * 1e9)
            if s < w["effect_end_ns"] and s + window_s * 1e9 > w["start_ns"]:
                hit += 1
                for a in sections["spike_attribution"]:
                    if a["window_id"] == wid:
                        label = f"{a['cause']}/{a['kind']}" if a["cause"] == "throttling" and a["kind"] else a["cause"]
                        weight[label] += a["slow_requests"]
        out["windows"][name] = {"spikes": hit, "cause": weight.most_common(1)[0][0] if weight else None}
    return out


def params_summary(meta: dict[str, Any]) -> str:
    """The drawn parameters of a run in one short line."""
    parts = []
    for w in meta.get("windows", []):
        p = dict(w.get("params", {}))
        for m in w.get("models", []):
            p.update({f"{m['kind'][:3]}.{k}": v for k, v in m.items() if k not in ("kind", "match", "loss_good")})
        p.pop("kind", None)
        mags = " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in p.items())
        parts.append(f"{w['name']} {w['end_s'] - w['start_s']:.0f}s {w.get('direction') or w['layer']} {mags}".strip())
    load = meta.get("load", {})
    srv = meta.get("server", {})
    link = f"link {meta['link_mbps']:g} Mbit/s" if meta.get("link_mbps") else "link unlimited"
    if meta.get("link_mbps") and meta.get("link_buffer_bytes"):
        link += f" ({meta['link_buffer_bytes'] // 1000} KB buffer)"
    if meta.get("cross_traffic", "off") != "off":
        link += f", cross traffic {'in the windows' if meta['cross_traffic'] == 'window' else 'all run'}"
    return (f"{'; '.join(parts) or 'clean'}; {load.get('rate')}/s x{load.get('connections')} embed "
            f"{load.get('embed_share')}, tok {srv.get('token_interval_ms')} ms; {link}")


def score_run(folder: Path, reingest: bool = False, params: dict[str, Any] | None = None,
              store_dir: Path | None = None) -> dict[str, Any]:
    """One run's scores, read the ``sql`` way (top-level keys) and the ``report`` way
    (``report``); ``params``: settings other than the defaults (for choosing thresholds on
    the tuning runs); ``store_dir``: where its store lives (default: the run's folder)."""
    from telemetry.cli.sql import open_analysis
    from telemetry.lab.truth import recovered_effect_ends
    from telemetry.models.db import connect

    meta = json.loads((folder / "sweep.json").read_text())
    labels = json.loads((folder / "labels.json").read_text())
    store = _store(folder, meta, reingest, store_dir)
    if params:
        sql_con = connect(store, params)
    else:
        sql_con = open_analysis(Path(store.root))  # exactly what `tailtap sql --store S` reads
        if isinstance(sql_con, int):
            raise RuntimeError(f"tailtap sql cannot open {store.root} (exit {sql_con})")
    # what `tailtap analyze`'s report reads (telemetry.report.sections.analyze_report)
    report_con = connect(store, {**(params or {}), "capture_ids": store.capture_ids(), "window_s": None})
    # a loss window lasts until its drops were recovered (a backed-off retransmission
    # timeout outlasts the lab's fixed settle time)
    recovered = recovered_effect_ends(folder, labels["windows"])
    for w in labels["windows"]:
        w["effect_end_ns"] = max(w["effect_end_ns"], recovered.get(w["name"], 0))
    truth = truth_of(folder / "client.parquet", labels["windows"])
    windows = {w["name"]: w for w in labels["windows"]}
    stalls = [(d["start_ns"], d["end_ns"]) for d in host_stalls(labels)]
    for t in truth:  # a request a lab process's stall may have slowed is left out
        end = t["end_ns"] or t["start_ns"]
        t["stalled"] = any(t["start_ns"] < b and end > a for a, b in stalls)
    in_windows = sum(1 for t in truth if t["in_window"])
    stalled_in_windows = sum(1 for t in truth if t["in_window"] and t["stalled"])
    sides = {"sql": tailtap_side(sql_con), "report": tailtap_side(report_con)}
    figures = {p: judge(truth, sides[p], windows) for p in PATHS}
    verdicts = _report_verdicts(report_con, store, windows)
    for w in figures["report"]["windows"]:
        w.update({f"report_{k}": v for k, v in verdicts["windows"][w["window"]].items()})

    def causes_of(side: dict) -> dict:  # to 0.1 ms: DuckDB sums in parallel, in no fixed order
        return {k: sorted((c[0], round(c[1], 1)) for c in v["causes"]) for k, v in side.items()}

    for key in ("misses", "outside_blamed", "decomp_off"):  # kept once when the two ways agree
        if figures["report"][key] == figures["sql"][key]:
            figures["report"][key] = "same as sql"
    excluded = sum(1 for t in truth if t["conn_reconnected"])
    matched = sum(1 for t in truth if (t["conn_local_port"], t["stream_id"]) in sides["sql"] and not t["conn_reconnected"])
    return {
        "run": meta["name"], "split": meta["split"], "status": meta["status"], "impairment": meta["impairment"],
        "capture_point": meta["capture_point"], "rtt_floor_ms": meta["rtt_floor_ms"], "duration_s": meta["duration_s"],
        "link_mbps": meta.get("link_mbps"), "connections": meta["load"]["connections"], "rate": meta["load"]["rate"],
        "window_s": [round(w["end_s"] - w["start_s"], 1) for w in meta.get("windows", [])],
        "params": params_summary(meta), "folder": str(folder),
        "requests": len(truth), "matched": matched, "reconnected_excluded": excluded,
        "disturbed_periods": len(stalls), "stalled_excluded": sum(t["stalled"] for t in truth),
        "stalled_in_windows": stalled_in_windows, "in_window_requests": in_windows,
        # counted in the split's totals unless stalls took out more than MAX_STALLED of its windows' requests
        "counted": stalled_in_windows <= MAX_STALLED * in_windows,
        "problems": labels.get("problems", []),
        **figures["sql"],
        "report": figures["report"], "report_window_s": verdicts["window_s"], "report_spikes": verdicts["spikes"],
        "report_agrees": causes_of(sides["sql"]) == causes_of(sides["report"]),
    }


def _share(pair: list[int]) -> float | None:
    return pair[1] / pair[0] if pair[0] else None


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _figures(s: dict[str, Any], path: str) -> dict[str, Any]:
    return s if path == "sql" else s["report"]


def scored(scores: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """The runs of a split that count: scored without error and not too disturbed."""
    return [s for s in scores if s.get("split") == split and "error" not in s and s.get("counted")]


def summarize(scores: list[dict[str, Any]], split: str, path: str = "sql") -> dict[str, Any]:
    runs = [_figures(s, path) for s in scored(scores, split)]
    wins = [w for s in runs for w in s["windows"] if w["ok"] is not None]
    all_wins = [w for s in runs for w in s["windows"]]
    tot = {k: [sum(s[k][0] for s in runs), sum(s[k][1] for s in runs)] for k in ("carry", "outside", "decomp")}
    spike_verdicts = [w.get("report_cause") in w["expected"] for w in wins if "report_spikes" in w]
    m = {
        "split": split, "path": path, "runs": len(runs), "windows": len(all_wins),
        "spike_verdict_ok": _share([len(spike_verdicts), sum(spike_verdicts)]),
        "windows_judged": len(wins), "windows_thin": sum(1 for w in all_wins if 0 < w["slow"] < MIN_WINDOW_SLOW),
        "windows_no_slow": sum(1 for w in all_wins if w["slow"] == 0),
        "window_ok": _share([len(wins), sum(w["ok"] for w in wins)]),
        "carry": _share(tot["carry"]), "slow_in_windows": tot["carry"][0],
        "outside_net": _share(tot["outside"]), "outside_requests": tot["outside"][0],
        "decomp_ok": _share(tot["decomp"]), "slow": tot["decomp"][0],
        "report_agrees": all(s["report_agrees"] for s in scored(scores, split)),
        "disturbed_runs": sum(1 for s in scores if s.get("split") == split and "error" not in s and not s["counted"]),
        "stalled_requests": sum(s["stalled_excluded"] for s in scored(scores, split)),
        "error_runs": sum(1 for s in scores if s.get("split") == split and "error" in s),
    }
    m["bars_met"] = [k for k, bar in BARS.items() if m[k] is not None and (m[k] < bar if k == "outside_net" else m[k] >= bar)]
    return m


def _confusion(scores: list[dict[str, Any]], split: str, per: str, path: str = "sql") -> str:
    counts: Counter[tuple[str, str]] = Counter()
    for s in scored(scores, split):
        f = _figures(s, path)
        if per == "window":
            for w in f["windows"]:
                if w["ok"] is not None:
                    counts[(w["injected"], w["dominant"])] += 1
        else:
            for a, b, n in f["request_confusion"]:
                counts[(a, b)] += n
    rows = sorted({a for a, _ in counts})
    cols = sorted({b for _, b in counts})
    lines = ["| injected \\ attributed | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for r in rows:
        lines.append(f"| {r} | " + " | ".join(str(counts.get((r, c), "")) for c in cols) + " |")
    return "\n".join(lines)


def _run_row(s: dict[str, Any]) -> str:
    if "error" in s:
        return f"| {s['run']} | {s.get('split', '')} | {s.get('impairment', '')} | error: {s['error'][:80]} |" + " |" * 8
    def right(f: dict) -> str:
        wins = [w for w in f["windows"] if w["ok"] is not None]
        return f"{sum(w['ok'] for w in wins)}/{len(wins)}" if wins else "-"
    doms = ", ".join(f"{w['dominant'] or '-'} ({w['slow']})" for w in s["windows"]) or "-"
    status = "" if s["counted"] else f" (left out: {s['stalled_in_windows']} of {s['in_window_requests']} stalled)"
    return (f"| {s['run']} | {s['split']}{status} | {s['impairment']} | {s['capture_point']} | {s['rtt_floor_ms']:g} | "
            f"{s['duration_s']:g} | {s['params']} | {doms} | {right(s)} / {right(s['report'])} | "
            f"{_pct(_share(s['carry']))} / {_pct(_share(s['report']['carry']))} | "
            f"{_pct(_share(s['outside']))} | {_pct(_share(s['decomp']))} |")


def markdown(scores: list[dict[str, Any]]) -> str:
    out = ["Scores (bars for the held-out split: dominant cause right in "
           ">= 95% of windows, injected cause carried by >= 90% of truth-slow requests in windows, < 2% of requests "
           "outside windows blamed on the network, decomposition within 20% for >= 90% of truth-slow requests). "
           f"A window is judged when it holds at least {MIN_WINDOW_SLOW} truth-slow requests; requests overlapping a "
           f"stall of a lab process ({STALL_MIN_LATE_MS:g} ms or more late) are left out, and runs that lose more than "
           f"{MAX_STALLED:.0%} of their windows' requests that way. "
           "`sql`: `tailtap sql` with the default settings; `report`: `tailtap analyze`'s report.", "",
           "| split | read by | runs | windows judged (thin, none slow) | dominant right | truth-slow in windows | "
           "carry injected | outside blamed on network | decomposition within 20% | sql = report | disturbed runs left out "
           "(requests left out) | "
           "report's spike verdict right |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    # a split with no runs (a held-out-only sweep: `tailtap lab sweep --split heldout`) is left out
    splits = [sp for sp in ("tuning", "heldout") if any(s.get("split") == sp for s in scores)]
    for split in splits:
        for path in PATHS:
            m = summarize(scores, split, path)
            out.append(f"| {split} | {path} | {m['runs']} | {m['windows_judged']} ({m['windows_thin']}, {m['windows_no_slow']}) | "
                       f"{_pct(m['window_ok'])} | {m['slow_in_windows']} | {_pct(m['carry'])} | {_pct(m['outside_net'])} | "
                       f"{_pct(m['decomp_ok'])} | {'yes' if m['report_agrees'] else 'NO'} | {m['disturbed_runs']} ({m['stalled_requests']}) | "
                       f"{_pct(m['spike_verdict_ok']) if path == 'report' else ''} |")
    for split in reversed(splits):
        out += ["", f"Confusion per window ({split}, sql: injected x dominant attributed cause):", "",
                _confusion(scores, split, "window"),
                "", f"Confusion per truth-slow request ({split}, sql: injected x primary attributed cause):", "",
                _confusion(scores, split, "request")]
    out += ["", "Per run (`a / b`: sql / report; dominant: per window, with its truth-slow requests):", "",
            "| run | split | impairment | capture | RTT floor ms | s | drawn parameters | dominant (slow) | windows right | carry | outside net | decomp |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    out += [_run_row(s) for s in sorted(scores, key=lambda s: s["run"])]
    return "\n".join(out)


def csv_rows(scores: list[dict[str, Any]]) -> str:
    """One row per run: parameters and scores, both paths."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["run", "split", "status", "impairment", "capture_point", "rtt_floor_ms", "link_mbps", "duration_s",
                "connections", "rate", "window_s", "requests", "matched", "stalled_excluded", "counted", "windows_judged", "windows_ok",
                "slow_in_windows", "carried", "outside", "outside_net", "slow", "decomp_ok",
                "report_windows_ok", "report_carried", "report_agrees", "params", "error"])
    for s in sorted(scores, key=lambda s: s["run"]):
        if "error" in s:
            w.writerow([s["run"], s.get("split"), s.get("status"), s.get("impairment")] + [""] * 22 + [s["error"]])
            continue
        wins = [x for x in s["windows"] if x["ok"] is not None]
        rwins = [x for x in s["report"]["windows"] if x["ok"] is not None]
        w.writerow([s["run"], s["split"], s["status"], s["impairment"], s["capture_point"], s["rtt_floor_ms"],
                    s["link_mbps"] or "", s["duration_s"], s["connections"], s["rate"],
                    "+".join(f"{x:g}" for x in s["window_s"]), s["requests"], s["matched"], s["stalled_excluded"],
                    s["counted"], len(wins),
                    sum(x["ok"] for x in wins), *s["carry"], *s["outside"], *s["decomp"],
                    sum(x["ok"] for x in rwins), s["report"]["carry"][1], s["report_agrees"], s["params"], ""])
    return buf.getvalue()


def score_all(folder: Path | list[Path], reingest: bool = False, log: Any = print, stores: Path | None = None,
              only: list[str] | None = None, split: str | None = None,
              params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Score the runs of sweep folders (``split``: only those of one split, e.g. ``tuning``
    while choosing settings; ``params``: settings other than the defaults)."""
    scores = []
    folders = folder if isinstance(folder, list) else [folder]
    runs = sorted((p for f in folders for p in f.iterdir() if (p / "sweep.json").exists()), key=lambda p: p.name)
    for i, run in enumerate(runs):
        meta = json.loads((run / "sweep.json").read_text())
        if meta.get("status") not in ("ok", "disturbed") or (only and meta["name"] not in only):
            continue
        if split and meta["split"] != split:
            continue
        log(f"[{i + 1}/{len(runs)}] scoring {meta['name']} ({meta['impairment']}, {meta['duration_s']:g} s)")
        try:
            scores.append(score_run(run, reingest, params, store_dir=stores / meta["name"] if stores else None))
        except Exception as exc:  # noqa: BLE001 - one broken run is reported, the rest scored
            scores.append({"run": meta["name"], "split": meta["split"], "impairment": meta["impairment"],
                           "status": meta["status"],
                           "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
            log(f"{meta['name']}: {scores[-1]['error']}")
    return scores


def write_readme(readme: Path, text: str) -> None:
    """Put ``text`` between the sweep markers of ``readme`` (appended when it has none)."""
    body = readme.read_text()
    block = f"{MARK_BEGIN}\n{text}\n{MARK_END}"
    if MARK_BEGIN in body:
        body = re.sub(re.escape(MARK_BEGIN) + r".*?" + re.escape(MARK_END), lambda _m: block, body, flags=re.S)
    else:
        body += "\n" + block + "\n"
    readme.write_text(body)


def report(folder: Path | list[Path], readme: Path | None = None, json_out: Path | None = None, log: Any = print,
           reingest: bool = False, stores: Path | None = None, csv_out: Path | None = None,
           diagnosis_out: Path | None = None, only: list[str] | None = None, split: str | None = None,
           params: dict[str, Any] | None = None) -> str:
    from telemetry.lab.sweep_diagnose import diagnosis

    scores = score_all(folder, reingest, log, stores, only, split, params)
    if json_out:  # one run per line: diffs of a re-scoring stay readable
        json_out.write_text("[\n" + ",\n".join(json.dumps(s, default=str) for s in scores) + "\n]\n")
    if csv_out:
        csv_out.write_text(csv_rows(scores))
    if diagnosis_out:
        diagnosis_out.write_text(diagnosis(scores) + "\n")
    text = markdown(scores)
    if params:
        text = "Settings other than the defaults: " + ", ".join(f"{k}={v}" for k, v in params.items()) + "\n\n" + text
    if readme:
        write_readme(readme, text)
    return text
