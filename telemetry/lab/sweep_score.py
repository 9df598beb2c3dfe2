"""Scores a sweep's runs (telemetry/lab/sweep.py) against the client's own timings.

Ground truth, from the client (client.parquet), per method: a request is slow when its
TTFT or latency is above the p99 of that method's clean requests (outside every
impairment window, not failed) by 10 % and 5 ms, or when it was turned away (grpc-status
RESOURCE_EXHAUSTED / UNAVAILABLE). tailtap's attribution is read as `tailtap sql` reads
it, with the default settings (the ``request_cause`` view), and as ``analyze``'s report
reads it (the capture in scope); both must agree.

Scores, per split (tuning runs may be used to choose thresholds, held-out runs only to
judge them):

* window_ok: of the impairment windows with truth-slow requests, those whose dominant
  primary cause (the most common largest-delay cause of their truth-slow requests) is the
  injected one;
* carry: of the truth-slow requests inside windows, those carrying the injected cause;
* outside_net: of the requests outside every window, those blamed on the network;
* decomp_ok: of the truth-slow requests, those whose latency decomposition adds up to
  within 20 % of the client's latency.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

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


def expected_labels(window: dict[str, Any]) -> set[str]:
    kind = window["kind"] if window["cause"] == "throttling" else None
    out = set(EXPECTED.get((window["cause"], kind), {f"{window['cause']}/{kind}" if kind else window["cause"]}))
    for also in window.get("also", []):
        k = also["kind"] if also["cause"] == "throttling" else None
        out |= EXPECTED.get((also["cause"], k), set())
    return out


def _store(folder: Path, meta: dict[str, Any], reingest: bool) -> Any:
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.store import Store

    store = Store(folder / "store")
    if reingest or not store.capture_ids():
        result = ingest_file(folder / meta["capture"], store, IngestOptions(force=True))
        if result.error:
            raise RuntimeError(result.error)
    return store


_TRUTH = """
CREATE OR REPLACE TABLE truth AS
WITH t AS (SELECT * FROM read_parquet(?)),
clean AS (
    SELECT method, quantile_cont(ttft_ms, 0.99) AS ttft_p99, quantile_cont(latency_ms, 0.99) AS latency_p99
    FROM t WHERE in_window IS NULL AND grpc_status = 0 GROUP BY method
)
SELECT t.*,
    coalesce(t.ttft_ms > greatest(1.1 * c.ttft_p99, c.ttft_p99 + 5), false)
      OR coalesce(t.latency_ms > greatest(1.1 * c.latency_p99, c.latency_p99 + 5), false)
      OR t.grpc_status IN (8, 14) AS slow
FROM t LEFT JOIN clean AS c USING (method)
"""


def _causes(con: Any) -> dict[tuple[str, int], list[tuple[str, float]]]:
    out: dict[tuple[str, int], list[tuple[str, float]]] = {}
    for conn_id, stream_id, cause, kind, delay in con.execute(
        "SELECT conn_id, stream_id, cause, kind, delay_ms FROM request_cause"
    ).fetchall():
        label = f"{cause}/{kind}" if cause == "throttling" and kind else cause
        out.setdefault((conn_id, stream_id), []).append((label, delay or 0.0))
    return out


def _rounded(causes: dict[tuple[str, int], list[tuple[str, float]]]) -> dict[tuple[str, int], list[tuple[str, float]]]:
    return {k: sorted((lab, round(d, 1)) for lab, d in v) for k, v in causes.items()}


def score_run(folder: Path, reingest: bool = False, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run's scores; ``params``: settings other than the defaults (for choosing
    thresholds on the tuning runs)."""
    from telemetry.db import connect

    meta = json.loads((folder / "sweep.json").read_text())
    labels = json.loads((folder / "labels.json").read_text())
    store = _store(folder, meta, reingest)
    con = connect(store, params)  # what `tailtap sql --store S` reads
    report_con = connect(store, {**(params or {}), "capture_ids": store.capture_ids()})  # what analyze's report reads
    con.execute(_TRUTH, [str(folder / "client.parquet")])
    matched = con.execute("""
        SELECT r.conn_id, r.stream_id, t.method, t.in_window, t.slow, t.latency_ms, t.grpc_status
        FROM requests AS r
        JOIN truth AS t ON t.conn_local_port = r.client_port AND t.stream_id = r.stream_id
    """).fetchall()
    causes, report_causes = _causes(con), _causes(report_con)
    decomp = dict(((c, s), total) for c, s, total in con.execute(
        "SELECT conn_id, stream_id, total_ms FROM latency_decomposition").fetchall())
    truth_rows = con.execute("SELECT count(*) FROM truth").fetchone()[0]
    windows = {w["name"]: w for w in labels["windows"]}
    per_window: dict[str, list[str]] = {name: [] for name in windows}
    carry = [0, 0]
    outside = [0, 0]
    dec = [0, 0]
    request_confusion: Counter[tuple[str, str]] = Counter()
    for conn_id, stream_id, _method, in_window, slow, client_latency, _status in matched:
        found = causes.get((conn_id, stream_id), [])
        found_labels = {lab for lab, _ in found}
        primary = max(found, key=lambda x: x[1])[0] if found else "none"
        if in_window is None:
            outside[0] += 1
            outside[1] += bool(found_labels & set(NETWORK_LABELS))
        elif slow:
            want = expected_labels(windows[in_window])
            per_window[in_window].append(primary)
            carry[0] += 1
            carry[1] += bool(found_labels & want)
            request_confusion[("/".join(sorted(want)), primary)] += 1
        if slow and client_latency and (conn_id, stream_id) in decomp:
            dec[0] += 1
            dec[1] += abs(decomp[(conn_id, stream_id)] - client_latency) <= 0.2 * client_latency
    window_rows = []
    for name, w in windows.items():
        prim = per_window[name]
        want = expected_labels(w)
        dominant = Counter(prim).most_common(1)[0][0] if prim else None
        window_rows.append({"window": name, "injected": "/".join(sorted(want)), "slow": len(prim),
                            "dominant": dominant, "ok": dominant in want if dominant else None})
    return {
        "run": meta["name"], "split": meta["split"], "status": meta["status"], "impairment": meta["impairment"],
        "capture_point": meta["capture_point"], "rtt_floor_ms": meta["rtt_floor_ms"], "duration_s": meta["duration_s"],
        "connections": meta["load"]["connections"], "rate": meta["load"]["rate"],
        "requests": truth_rows, "matched": len(matched),
        "windows": window_rows, "carry": carry, "outside": outside, "decomp": dec,
        "request_confusion": [[a, b, n] for (a, b), n in request_confusion.items()],
        # the same causes and delays (to 0.1 ms: DuckDB sums in parallel, in no fixed order)
        "report_agrees": _rounded(causes) == _rounded(report_causes),
    }


def _share(pair: list[int]) -> float | None:
    return pair[1] / pair[0] if pair[0] else None


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def summarize(scores: list[dict[str, Any]], split: str) -> dict[str, Any]:
    runs = [s for s in scores if s["split"] == split and "error" not in s]
    wins = [w for s in runs for w in s["windows"] if w["ok"] is not None]
    tot = {k: [sum(s[k][0] for s in runs), sum(s[k][1] for s in runs)] for k in ("carry", "outside", "decomp")}
    return {
        "split": split, "runs": len(runs),
        "windows": len(wins), "window_ok": _share([len(wins), sum(w["ok"] for w in wins)]),
        "carry": _share(tot["carry"]), "slow_in_windows": tot["carry"][0],
        "outside_net": _share(tot["outside"]), "decomp_ok": _share(tot["decomp"]),
        "report_agrees": all(s["report_agrees"] for s in runs),
    }


def _confusion(scores: list[dict[str, Any]], split: str, per: str) -> str:
    counts: Counter[tuple[str, str]] = Counter()
    for s in scores:
        if s["split"] != split or "error" in s:
            continue
        if per == "window":
            for w in s["windows"]:
                if w["dominant"] is not None:
                    counts[(w["injected"], w["dominant"])] += 1
        else:
            for a, b, n in s["request_confusion"]:
                counts[(a, b)] += n
    rows = sorted({a for a, _ in counts})
    cols = sorted({b for _, b in counts})
    head = "| injected \\ attributed | " + " | ".join(cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for r in rows:
        lines.append(f"| {r} | " + " | ".join(str(counts.get((r, c), "")) for c in cols) + " |")
    return "\n".join(lines)


def markdown(scores: list[dict[str, Any]]) -> str:
    out = ["Scores (bars for the held-out split: dominant cause right in >= 95% of windows, injected cause "
           "carried by >= 90% of truth-slow requests, < 2% of requests outside windows blamed on the network, "
           "decomposition within 20% for >= 90%):", "",
           "| split | runs | windows | dominant right | truth-slow in windows | carry injected | outside blamed on network | decomposition within 20% | sql = report |",
           "|---|---|---|---|---|---|---|---|---|"]
    for split in ("tuning", "heldout"):
        m = summarize(scores, split)
        out.append(f"| {split} | {m['runs']} | {m['windows']} | {_pct(m['window_ok'])} | {m['slow_in_windows']} | "
                   f"{_pct(m['carry'])} | {_pct(m['outside_net'])} | {_pct(m['decomp_ok'])} | {'yes' if m['report_agrees'] else 'NO'} |")
    for split in ("heldout", "tuning"):
        out += ["", f"Confusion per window ({split}: injected x dominant attributed cause):", "",
                _confusion(scores, split, "window"),
                "", f"Confusion per truth-slow request ({split}: injected x primary attributed cause):", "",
                _confusion(scores, split, "request")]
    out += ["", "Per run:", "",
            "| run | split | impairment | capture | RTT floor ms | s | conns | req/s | windows right | carry | outside net | decomp |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in sorted(scores, key=lambda s: s["run"]):
        if "error" in s:
            out.append(f"| {s['run']} | {s.get('split', '')} | {s.get('impairment', '')} | | | | | | error: {s['error'][:60]} | | | |")
            continue
        wins = [w for w in s["windows"] if w["ok"] is not None]
        right = f"{sum(w['ok'] for w in wins)}/{len(wins)}" if wins else "-"
        out.append(f"| {s['run']} | {s['split']} | {s['impairment']} | {s['capture_point']} | {s['rtt_floor_ms']:g} | "
                   f"{s['duration_s']:g} | {s['connections']} | {s['rate']:g} | {right} | {_pct(_share(s['carry']))} | "
                   f"{_pct(_share(s['outside']))} | {_pct(_share(s['decomp']))} |")
    return "\n".join(out)


def score_all(folder: Path, reingest: bool = False, log: Any = print) -> list[dict[str, Any]]:
    scores = []
    for run in sorted(p for p in folder.iterdir() if (p / "sweep.json").exists()):
        meta = json.loads((run / "sweep.json").read_text())
        if meta.get("status") not in ("ok", "disturbed"):
            continue
        try:
            scores.append(score_run(run, reingest))
        except Exception as exc:  # noqa: BLE001 - one broken run is reported, the rest scored
            scores.append({"run": meta["name"], "split": meta["split"], "impairment": meta["impairment"],
                           "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
            log(f"{meta['name']}: {scores[-1]['error']}")
    return scores


def report(folder: Path, readme: Path | None = None, json_out: Path | None = None, log: Any = print,
           reingest: bool = False) -> str:
    scores = score_all(folder, reingest, log)
    if json_out:
        json_out.write_text(json.dumps(scores, indent=1, default=str) + "\n")
    text = markdown(scores)
    if readme:
        body = readme.read_text()
        block = f"{MARK_BEGIN}\n{text}\n{MARK_END}"
        if MARK_BEGIN in body:
            body = re.sub(re.escape(MARK_BEGIN) + r".*?" + re.escape(MARK_END), lambda _m: block, body, flags=re.S)
        else:
            body += "\n" + block + "\n"
        readme.write_text(body)
    return text
