"""Score tailtap's attribution against the lab's ground truth.

For each lab run folder (capture.pcap + labels.json + client.parquet, e.g. samples/*):
ingest the capture, run the attribution views, match every request to the client's own
record (client port + HTTP/2 stream id) and compute:

  dominant      the most frequent primary cause of the slow requests inside the
                impairment windows (cause, and kind for throttling) - must be an injected one
  carry_share   of the slow requests inside the windows, the share carrying an injected cause
  outside_net   of the requests outside every window, the share blamed on the network
  server_share  (server windows) share of slow requests in the window attributed to the server
  spikes_in     impaired windows with a spike overlapping them / impaired windows
  spikes_out    spikes that overlap no window (must be 0, and none on the baseline);
                spikes over periods the lab itself recorded as disturbed (its server or
                bridge ran late: a real server-side event on a noisy host) are counted
                apart as spikes_disturbed, with what they were attributed to
  decomp_ok     of the requests slow in time (latency, TTFT or gap), the share whose
                decomposition total is within 20% of the latency the client measured

Usage: python bench/score_attribution.py [RUN_DIR ...] [--window 2s] [--json out.json]
(the window defaults to the analysis' own, as `tailtap sql` and `report` read it)
(default: every folder under samples/). Prints one row per run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from telemetry.ingest import IngestOptions, ingest_file  # noqa: E402
from telemetry.models.db import connect  # noqa: E402
from telemetry.store.parquet import Store  # noqa: E402

NETWORK_CAUSES = ("loss_burst", "reordering", "queueing", "throttling")


@dataclass
class Score:
    run: str
    scenario: str
    injected: list[str] = field(default_factory=list)
    requests: int = 0
    matched: int = 0
    slow_in_window: int = 0
    dominant: str | None = None
    dominant_ok: bool | None = None
    carry_share: float | None = None
    outside_requests: int = 0
    outside_net: float | None = None
    server_share: float | None = None
    server_net_blamed: int | None = None
    spikes_in: str = "-"
    spikes_in_ok: bool | None = None
    spikes_out: int = 0
    spikes_disturbed: int = 0  # spikes over periods the lab recorded as disturbed (host stalls)
    decomp_ok: float | None = None
    notes: list[str] = field(default_factory=list)


# The lab names some throttling kinds after its mechanism; attribution uses the
# kinds of the issue (DESIGN.md): RESOURCE_EXHAUSTED is application throttling, a slow
# reader's zero window is receive-window throttling.
KIND_SYNONYMS = {"resource_exhausted": "application", "zero_window": "receive_window"}


def _label(cause: str, kind: str | None) -> str:
    if cause == "throttling" and kind:
        return f"{cause}/{KIND_SYNONYMS.get(kind, kind)}"
    return cause


def score_run(run: Path, window_s: float | None = None, workdir: Path | None = None) -> Score:
    labels = json.loads((run / "labels.json").read_text())
    scenario = labels.get("scenario", run.name)
    windows = labels.get("windows", [])
    # a window's injected causes: its cause, plus any `also` (one impairment, several causes)
    expected = {
        w["name"]: [_label(c["cause"], c["kind"] if c["cause"] == "throttling" else None)
                    for c in [w, *w.get("also", [])]]
        for w in windows
    }
    score = Score(run=str(run), scenario=scenario, injected=sorted({"+".join(v) for v in expected.values()}))
    tmp = Path(workdir or tempfile.mkdtemp(prefix="tailtap-score-"))
    store = Store(tmp / f"store-{run.name}")
    result = ingest_file(run / "capture.pcap", store, IngestOptions(force=True))
    if result.error:
        score.notes.append(result.error)
        return score
    con = connect(store, {"window_s": window_s})
    window_s = float(con.execute("SELECT window_s FROM settings").fetchone()[0])
    con.execute(f"CREATE TABLE truth AS SELECT * FROM read_parquet('{run / 'client.parquet'}')")
    con.execute("CREATE TABLE windows_truth (name VARCHAR, cause VARCHAR, kind VARCHAR, label VARCHAR[], start_ns BIGINT, effect_end_ns BIGINT)")
    for w in windows:
        con.execute("INSERT INTO windows_truth VALUES (?, ?, ?, ?, ?, ?)",
                    [w["name"], w["cause"], w["kind"], expected[w["name"]], w["start_ns"], w["effect_end_ns"]])
    # our requests matched to the client's records
    con.execute("""
        CREATE TABLE matched AS
        SELECT m.conn_id, m.stream_id, t.request_id, t.in_window, t.latency_ms AS client_latency_ms,
               t.ttft_ms AS client_ttft_ms, s.conn_id IS NOT NULL AS slow
        FROM request_metrics AS m
        JOIN requests AS r USING (conn_id, stream_id)
        JOIN truth AS t ON t.conn_local_port = r.client_port AND t.stream_id = r.stream_id
        LEFT JOIN slow_requests AS s USING (conn_id, stream_id)
    """)
    score.requests = con.execute("SELECT count(*) FROM truth").fetchone()[0]
    score.matched = con.execute("SELECT count(*) FROM matched").fetchone()[0]
    con.execute("""
        CREATE TABLE causes AS
        SELECT m.*, c.cause, c.kind, c.delay_ms,
               CASE WHEN c.cause = 'throttling' THEN c.cause || '/' || c.kind ELSE c.cause END AS label
        FROM matched AS m JOIN request_cause AS c USING (conn_id, stream_id)
    """)
    con.execute("""
        CREATE TABLE primary_cause AS
        SELECT conn_id, stream_id, arg_max(label, delay_ms) AS label FROM causes GROUP BY ALL
    """)
    in_win = con.execute("""
        SELECT m.conn_id, m.stream_id, w.name, w.label AS expected, p.label AS primary_label,
               list(c.label) FILTER (WHERE c.label IS NOT NULL) AS labels
        FROM matched AS m
        JOIN windows_truth AS w ON w.name = m.in_window
        LEFT JOIN primary_cause AS p USING (conn_id, stream_id)
        LEFT JOIN causes AS c USING (conn_id, stream_id)
        WHERE m.slow
        GROUP BY ALL
    """).fetchall()
    score.slow_in_window = len(in_win)
    if windows:
        if in_win:
            # judged per window: each must be dominated by its own injected cause
            dominants, oks = [], []
            for w in windows:
                rows = [r for r in in_win if r[2] == w["name"]]
                if not rows:
                    score.notes.append(f"no slow request inside window {w['name']}")
                    oks.append(False)
                    continue
                counts: dict[str, int] = {}
                for r in rows:
                    counts[r[4] or "none"] = counts.get(r[4] or "none", 0) + 1
                dom = max(counts, key=lambda k: (counts[k], k))
                dominants.append(dom)
                oks.append(dom in expected[w["name"]])
            score.dominant = ",".join(dominants)
            score.dominant_ok = all(oks)
            carried = sum(1 for r in in_win if set(r[3]) & set(r[5] or []))
            score.carry_share = carried / len(in_win)
            if any(w["cause"] == "server" for w in windows):
                srv = [r for r in in_win if r[3] == ["server"]]
                if srv:
                    score.server_share = sum(1 for r in srv if "server" in (r[5] or [])) / len(srv)
                    score.server_net_blamed = sum(
                        1 for r in srv if any(lab.split("/")[0] in NETWORK_CAUSES for lab in (r[5] or []))
                    )
        else:
            score.notes.append("no slow request inside the windows")
    outside = con.execute("""
        SELECT count(DISTINCT (m.conn_id, m.stream_id)),
               count(DISTINCT (m.conn_id, m.stream_id)) FILTER (WHERE split_part(c.label, '/', 1) IN ('loss_burst', 'reordering', 'queueing', 'throttling'))
        FROM matched AS m LEFT JOIN causes AS c USING (conn_id, stream_id)
        WHERE m.in_window IS NULL
    """).fetchone()
    score.outside_requests = outside[0]
    score.outside_net = outside[1] / outside[0] if outside[0] else None
    # spikes against the windows
    # a spike spans from its window's start to the last finish of the requests started in
    # it: requests keep streaming after the window they started in
    spikes = con.execute("""
        SELECT sp.window_start, epoch_ns(sp.window_start) AS s,
               greatest(epoch_ns(sp.window_start) + CAST(? * 1e9 AS BIGINT), max(epoch_ns(m.finished_at))) AS e
        FROM spikes AS sp JOIN request_metrics AS m ON window_of(m.started_at) = sp.window_id
        GROUP BY sp.window_start
    """, [window_s]).fetchall()
    hit = 0
    for w in windows:
        if any(s < w["effect_end_ns"] and e > w["start_ns"] for _, s, e in spikes):
            hit += 1
    score.spikes_in = f"{hit}/{len(windows)}"
    score.spikes_in_ok = hit == len(windows) if windows else None
    disturbed = [(d["start_ns"], d["end_ns"]) for d in labels.get("disturbed", []) if d.get("max_late_ms", 0) >= 10]
    for _, s, e in spikes:
        if any(s < w["effect_end_ns"] and e > w["start_ns"] for w in windows):
            continue
        if any(s <= de and e >= ds for ds, de in disturbed):
            score.spikes_disturbed += 1
        else:
            score.spikes_out += 1
    # requests slow in time (not those only turned away by throttling: a 4 ms rejection has
    # no latency to decompose)
    dec = con.execute("""
        SELECT count(*), count(*) FILTER (WHERE abs(d.total_ms - m.client_latency_ms) <= 0.2 * m.client_latency_ms)
        FROM matched AS m
        JOIN latency_decomposition AS d USING (conn_id, stream_id)
        JOIN slow_requests AS s USING (conn_id, stream_id)
        WHERE m.client_latency_ms IS NOT NULL AND len(list_filter(s.slow_metrics, lambda x: x <> 'throttled')) > 0
    """).fetchone()
    score.decomp_ok = dec[1] / dec[0] if dec[0] else None
    return score


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--window", default=None, help="e.g. 2s (default: the analysis' own)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    window_s = float(args.window.rstrip("s")) if args.window else None
    runs = args.runs or sorted(p for p in (ROOT / "samples").iterdir() if (p / "labels.json").exists())
    not_runs = [r for r in runs if not (r / "labels.json").is_file()]
    for r in not_runs:
        print(f"skipping {r}: not a lab run folder (no labels.json)", file=sys.stderr)
    runs = [r for r in runs if r not in not_runs]
    scores = []
    cols = ("scenario", "injected", "matched", "slow_in_window", "dominant", "dominant_ok", "carry_share",
            "outside_net", "server_share", "server_net_blamed", "spikes_in", "spikes_out", "spikes_disturbed", "decomp_ok")
    print(" | ".join(cols))
    for run in runs:
        try:
            s = score_run(run, window_s)
        except duckdb.Error as exc:
            s = Score(run=str(run), scenario=run.name, notes=[str(exc)])
        scores.append(s)
        print(" | ".join(_fmt(getattr(s, c) if c != "injected" else ",".join(s.injected) or "none") for c in cols))
        for note in s.notes:
            print(f"  note: {note}")
    if args.json:
        args.json.write_text(json.dumps([asdict(s) for s in scores], indent=2))


if __name__ == "__main__":
    main()
