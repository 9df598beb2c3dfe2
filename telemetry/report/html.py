"""The report as one self-contained HTML file: plots and tables, no network when opened.

Plotly draws the plots: its JavaScript (``plotly.offline.get_plotlyjs``, ~4.6 MB) is
embedded in the file, so the page opens offline, on a laptop or attached to a ticket, and
its plots zoom and show values on hover; the figures are built in Python and handed to the
page as JSON. Every number comes from the same SQL models as the terminal report
(``telemetry.report.sections``): this module only draws what they return.

Values from the capture (paths, addresses, header values, SNI) reach the page as escaped
text (``html.escape``) or inside JSON whose ``<``, ``>`` and ``&`` are escaped, so a capture
cannot inject markup or script."""

from __future__ import annotations

import datetime as dt
import html
import json
from typing import Any

from telemetry.report import render

CAUSE_COLOURS = {
    "loss_burst": "#d62728", "reordering": "#ff7f0e", "queueing": "#9467bd", "throttling": "#8c564b",
    "server": "#1f77b4", "client_read": "#17becf", "flow_control": "#bcbd22", "app_throttled": "#e377c2",
    "failure": "#7f7f7f",
}  # fmt: skip
_OTHER = "#aaaaaa"

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.verdict { font-size: 1.05em; background: #f6f6f6; padding: .6em .8em; border-left: 4px solid #d62728; }
.caveat { background: #fff8e1; padding: .4em .8em; border-left: 4px solid #f0a000; margin: .3em 0; }
table { border-collapse: collapse; font-size: .82em; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: .2em .45em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.plot { width: 100%; min-height: 320px; }
.note { color: #666; font-size: .85em; }
@media print { .plot { page-break-inside: avoid; } body { max-width: none; } }
"""


def _json_for_script(value: Any) -> str:
    """JSON safe inside a <script> element: no '</script>', '<!--' or line separators."""
    text = json.dumps(value, default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))  # fmt: skip


def _table(rows: render.Rows, columns: list[str] | None = None, limit: int = 50) -> str:
    if not rows:
        return '<p class="note">none</p>'
    cols = columns or list(rows[0].keys())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for r in rows[:limit]:
        cells = []
        for c in cols:
            v = r.get(c)
            cls = ' class="num"' if isinstance(v, int | float) and not isinstance(v, bool) else ""
            cells.append(f"<td{cls}>{html.escape(render._cell(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = f'<p class="note">{len(rows) - limit} more rows not shown</p>' if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def _iso(v: Any) -> Any:
    return v.astimezone(dt.UTC).isoformat() if isinstance(v, dt.datetime) else v


def _spike_shapes(spikes: render.Rows, attribution: render.Rows, window_s: float) -> tuple[list, list]:
    """A shaded band per spike window, coloured by its leading cause, and its label."""
    lead: dict[Any, tuple[str, float]] = {}
    for a in attribution:
        best = lead.get(a["window_id"])
        if best is None or (a["request_share"] or 0) > best[1]:
            lead[a["window_id"]] = (a["cause"], a["request_share"] or 0)
    shapes, notes = [], []
    previous: tuple[Any, str] | None = None
    for s in sorted(spikes, key=lambda r: r["window_id"]):
        start = s["window_start"]
        end = start + dt.timedelta(seconds=window_s)
        cause = lead.get(s["window_id"], ("unattributed", 0))[0]
        adjacent = previous is not None and previous == (s["window_id"] - 1, cause)
        previous = (s["window_id"], cause)
        colour = CAUSE_COLOURS.get(cause, _OTHER)
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": _iso(start), "x1": _iso(end), "y0": 0, "y1": 1,
                       "fillcolor": colour, "opacity": 0.18, "line": {"width": 0}, "layer": "below",
                       "name": f"spike {s['window_id']}"})  # fmt: skip
        if adjacent:
            continue  # one label per run of windows with the same cause
        notes.append({"x": _iso(start), "y": 1, "xref": "x", "yref": "paper", "text": html.escape(cause),
                      "showarrow": False, "xanchor": "left", "yanchor": "bottom", "font": {"size": 10, "color": colour}})  # fmt: skip
    return shapes, notes


def _mid(v: Any, window_s: float) -> Any:
    """A window's middle: bars are drawn over the window they count."""
    return _iso(v + dt.timedelta(seconds=window_s / 2)) if isinstance(v, dt.datetime) else v


def _figures(s: dict[str, Any], window_s: float) -> dict[str, dict]:
    timeline, spikes, attribution = s["timeline"], s["spikes"], s["spike_attribution"]
    x = [_iso(r["window_start"]) for r in timeline]
    shapes, notes = _spike_shapes(spikes, attribution, window_s)
    figs: dict[str, dict] = {}
    traces = []
    for axis, metric, label in (("y", "latency", "latency"), ("y2", "ttft", "TTFT"), ("y3", "gap", "token gap")):
        for q, dash in (("p50", "dot"), ("p99", "solid")):
            traces.append({"type": "scatter", "mode": "lines+markers", "x": x, "y": [r[f"{metric}_{q}_ms"] for r in timeline],
                           "name": f"{label} {q}", "yaxis": axis, "line": {"dash": dash}})  # fmt: skip
    figs["timeline"] = {"data": traces, "layout": {
        "height": 620, "shapes": shapes, "annotations": notes, "hovermode": "x unified", "margin": {"t": 30},
        "yaxis": {"title": "latency ms", "domain": [0.69, 1]}, "yaxis2": {"title": "TTFT ms", "domain": [0.36, 0.64]},
        "yaxis3": {"title": "gap ms", "domain": [0, 0.31]}, "legend": {"orientation": "h"}}}  # fmt: skip
    causes = sorted({a["cause"] for a in attribution})
    figs["causes"] = {"data": [
        {"type": "bar", "name": c, "marker": {"color": CAUSE_COLOURS.get(c, _OTHER)},
         "x": [_mid(a["window_start"], window_s) for a in attribution if a["cause"] == c], "width": window_s * 900,
         "y": [a["slow_requests"] for a in attribution if a["cause"] == c]} for c in causes],
        "layout": {"barmode": "stack", "height": 300, "margin": {"t": 30}, "yaxis": {"title": "slow requests"},
                   "xaxis": {"range": [x[0], x[-1]] if x else None}, "shapes": shapes}}  # fmt: skip
    net = s["network"]
    nx = [_iso(r["window_start"]) for r in net]
    bx = [_mid(r["window_start"], window_s) for r in net]
    figs["network"] = {"data": [
        *({"type": "bar", "name": name, "x": bx, "width": window_s * 900, "y": [r[col] for r in net], "yaxis": "y"}
          for col, name in (("retransmissions", "retransmissions"), ("lost_segments", "lost segments"),
                            ("out_of_order", "out-of-order"), ("window_stalls", "zero / full windows"),
                            ("capture_drops", "capture drops"))),
        {"type": "scatter", "mode": "lines", "name": "flow-control blocked ms", "x": nx,
         "y": [r["flow_control_blocked_ms"] for r in net], "yaxis": "y2"},
        {"type": "scatter", "mode": "lines", "name": "RTT p50 client side ms", "x": nx,
         "y": [r["rtt_p50_ms_client_side"] for r in net], "yaxis": "y3"},
        {"type": "scatter", "mode": "lines", "name": "RTT p50 server side ms", "x": nx,
         "y": [r["rtt_p50_ms_server_side"] for r in net], "yaxis": "y3"}],
        "layout": {"barmode": "stack", "height": 460, "margin": {"t": 30}, "shapes": shapes, "legend": {"orientation": "h"},
                   "xaxis": {"range": [x[0], x[-1]] if x else None},
                   "yaxis": {"title": "events", "domain": [0.55, 1], "rangemode": "nonnegative"},
                   "yaxis2": {"title": "blocked ms", "domain": [0.28, 0.5], "rangemode": "nonnegative"},
                   "yaxis3": {"title": "RTT ms", "domain": [0, 0.23], "rangemode": "nonnegative"}}}  # fmt: skip
    heat = s["ttft_heatmap"]
    bands = sorted({r["ttft_band_ms"] for r in heat})
    windows = sorted({_iso(r["window_start"]) for r in heat})
    z: list[list[int | None]] = [[None] * len(windows) for _ in bands]
    for r in heat:
        z[bands.index(r["ttft_band_ms"])][windows.index(_iso(r["window_start"]))] = r["requests"]
    figs["ttft_heatmap"] = {"data": [{"type": "heatmap", "x": windows, "y": [f"≥{b:g} ms" for b in bands], "z": z,
                                      "colorscale": "Blues", "reversescale": True, "zmin": 0, "colorbar": {"title": "requests"}}],
                            "layout": {"height": 320, "margin": {"t": 30}, "yaxis": {"title": "TTFT band"}}}  # fmt: skip
    return figs


def report_html(s: dict[str, Any], window_s: float, title: str = "tailtap report") -> str:
    """The report's sections (telemetry.report.sections.report_sections plus ``network`` and
    ``ttft_heatmap``) as one HTML page."""
    from plotly.offline import get_plotlyjs

    figs = _figures(s, window_s)
    sections = [
        f"<h1>{html.escape(title)}</h1>",
        *(f'<p class="caveat">caveat: {html.escape(c)}</p>' for c in s.get("caveats", [])),
        f'<p class="verdict">{html.escape(str(s["verdict"]))}</p>',
        f'<p class="note">{len(s["spikes"])} spike window(s) of {window_s:g} s shaded, coloured by the cause that '
        "explains most of their slow requests.</p>",
        "<h2>Latency, TTFT and token gap over time</h2>", '<div id="plot-timeline" class="plot"></div>',
        "<h2>Causes of slow requests over time</h2>", '<div id="plot-causes" class="plot"></div>',
        "<h2>Network signals</h2>", '<div id="plot-network" class="plot"></div>',
        "<h2>TTFT heatmap</h2>", '<div id="plot-ttft_heatmap" class="plot"></div>',
        "<h2>Spikes</h2>", _table(s["spikes"]),
        "<h2>Where each spike concentrates</h2>",
        _table(s["spike_attribution"], ["window_start", "cause", "kind", "slow_requests", "request_share", "delay_ms",
                                        "top_connections", "top_clients", "top_methods", "top_directions"]),
        "<h2>Slowest requests</h2>", _table(s["slowest_requests"]),
        "<h2>Baselines per method</h2>", _table(s["baselines"]),
    ]  # fmt: skip
    return _page(title, "".join(sections), figs, get_plotlyjs())


def explain_html(s: dict[str, Any], title: str) -> str:
    """One request (telemetry.report.sections.explain_sections): its waterfall with its
    connection's network events, its causes and its latency decomposition."""
    from plotly.offline import get_plotlyjs

    timeline = s["timeline"]
    layers = sorted({r["layer"] for r in timeline})
    figs = {"waterfall": {"data": [
        {"type": "scatter", "mode": "markers", "name": layer, "x": [r["t_ms"] for r in timeline if r["layer"] == layer],
         "y": [r["layer"] for r in timeline if r["layer"] == layer],
         "text": [f"{r['event']}: {r['detail'] or ''}" for r in timeline if r["layer"] == layer],
         "hoverinfo": "x+text", "marker": {"size": 9, "symbol": "line-ns-open"}} for layer in layers],
        "layout": {"height": 300, "margin": {"t": 30}, "xaxis": {"title": "ms since the request started"}}}}  # fmt: skip
    parts = ["path_rtt_ms", "queueing_ms", "loss_recovery_ms", "reordering_ms", "flow_control_ms", "client_read_ms", "server_ms"]
    dec = s["decomposition"][0] if s["decomposition"] else {}
    figs["decomposition"] = {"data": [
        {"type": "bar", "orientation": "h", "name": p.removesuffix("_ms").replace("_", " "), "x": [dec.get(p) or 0], "y": ["latency"]}
        for p in parts], "layout": {"barmode": "stack", "height": 200, "margin": {"t": 30}, "xaxis": {"title": "ms"}}}  # fmt: skip
    causes = s["causes"]
    body = "".join([
        f"<h1>{html.escape(title)}</h1>", _table(s["request"]),
        "<h2>Waterfall: the request's events and its connection's network events</h2>", '<div id="plot-waterfall" class="plot"></div>',
        "<h2>Latency decomposition</h2>", '<div id="plot-decomposition" class="plot"></div>', _table(s["decomposition"]),
        "<h2>Causes</h2>", _table(causes) if isinstance(causes, list) else f'<p class="note">{html.escape(causes)}</p>',
        "<h2>Timeline</h2>", _table(timeline, limit=500),
    ])  # fmt: skip
    return _page(title, body, figs, get_plotlyjs())


def _page(title: str, body: str, figs: dict[str, dict], plotly_js: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{_CSS}</style>
<script>{plotly_js}</script></head>
<body>{body}
<p class="note">Made by tailtap from packets alone; every figure comes from the store's SQL models (queries/).</p>
<script type="application/json" id="tailtap-figures">{_json_for_script(figs)}</script>
<script>
const figures = JSON.parse(document.getElementById("tailtap-figures").textContent);
for (const [name, fig] of Object.entries(figures)) {{
  const el = document.getElementById("plot-" + name);
  if (el) Plotly.newPlot(el, fig.data, fig.layout, {{responsive: true, displaylogo: false}});
}}
</script></body></html>
"""


def compare_html(s: dict[str, Any], title: str) -> str:
    """Two periods (telemetry.report.sections.compare_sections): p99s per method side by side, the
    cause mix of slow requests and the network in each."""
    from plotly.offline import get_plotlyjs

    methods = s["methods"]
    figs = {}
    for metric, label in (("latency", "latency"), ("ttft", "TTFT"), ("gap", "token gap")):
        figs[metric] = {"data": [
            {"type": "bar", "name": f"{label} p99, period {p}", "x": [m["method"] for m in methods],
             "y": [m[f"{metric}_p99_{p}"] for m in methods]} for p in ("a", "b")],
            "layout": {"barmode": "group", "height": 300, "margin": {"t": 30}, "yaxis": {"title": f"{label} p99 ms"}}}  # fmt: skip
    causes = s["causes"]
    figs["causes"] = {"data": [
        {"type": "bar", "name": f"period {p}", "x": [f"{c['cause']}{'/' + c['kind'] if c['kind'] else ''}" for c in causes],
         "y": [c[f"share_{p}"] for c in causes]} for p in ("a", "b")],
        "layout": {"barmode": "group", "height": 280, "margin": {"t": 30}, "yaxis": {"title": "share of slow requests", "tickformat": ".0%"}}}  # fmt: skip
    body = "".join([
        f"<h1>{html.escape(title)}</h1>", f'<p class="verdict">{html.escape(str(s["summary"]))}</p>',
        "<h2>p99 per method, period a and period b</h2>",
        '<div id="plot-latency" class="plot"></div><div id="plot-ttft" class="plot"></div><div id="plot-gap" class="plot"></div>',
        _table(methods),
        "<h2>Why requests were slow in each</h2>", '<div id="plot-causes" class="plot"></div>', _table(causes),
        "<h2>The network in each</h2>", _table(s["network"]),
    ])  # fmt: skip
    return _page(title, body, figs, get_plotlyjs())
