"""Reports: run the queries/ models and render them. No analysis happens here."""

from __future__ import annotations

from rich.console import Console

from telemetry.models.db import Analysis, connect
from telemetry.report import render
from telemetry.store.layout import StoreLayout


def analyze_sections(
    store: StoreLayout, capture_ids: list[str] | None = None, params: dict | None = None, con: Analysis | None = None
) -> dict[str, render.Rows | str]:
    """The `tailtap analyze` report: captures, connections, per-method percentiles, errors, slowest."""
    con = con or connect(store, {**(params or {}), "capture_ids": capture_ids or None}, sized_by_requests=True)
    return {
        "captures": render.rows_of(con, "SELECT * FROM capture_overview"),
        "connections": render.rows_of(con, "SELECT * FROM connection_overview"),
        "methods": render.rows_of(con, "SELECT * FROM method_summary"),
        "errors": render.rows_of(con, "SELECT * FROM errors_by_status"),
        "slowest_requests": render.rows_of(con, "SELECT * FROM slowest_requests"),
    }


def analyze_report(
    store: StoreLayout, fmt: str, console: Console, capture_ids: list[str] | None = None, window_s: float | None = None
) -> None:
    """Per-method summary, then the spike report, for the captures just analyzed. The
    window is the analysis' own (queries/settings.sql) unless ``window_s`` is given."""
    con = connect(store, {"capture_ids": capture_ids or None, "window_s": window_s}, sized_by_requests=True)
    sections = analyze_sections(store, con=con)
    report = report_sections(store, con=con, connections=sections["connections"])  # type: ignore[arg-type]
    window_s = con.window_s()
    if fmt == "table":
        print_analyze(console, sections)
        console.print(f"\n[bold]why p99 went bad[/bold] ({window_s:g} s windows; `tailtap report --window` to change)")
        print_report(console, report)
    else:
        render.emit(console, fmt, {**sections, "window_s": window_s, **{f"report_{k}": v for k, v in report.items()}},
                    title="tailtap analyze")


def report_sections(
    store: StoreLayout, params: dict | None = None, con: Analysis | None = None, connections: render.Rows | None = None
) -> dict[str, render.Rows | str]:
    """The `tailtap report`: timeline, spikes, their attribution, slowest requests with cause
    (``connections``: connection_overview's rows, when they were read already)."""
    con = con or connect(store, params, sized_by_requests=True)
    conns = connections if connections is not None else render.rows_of(con, "SELECT * FROM connection_overview")
    spikes = render.rows_of(con, "SELECT * FROM spikes")
    return {
        "timeline": render.rows_of(
            con,
            "SELECT window_start, requests, errors, latency_p50_ms, latency_p99_ms, latency_p999_ms, "
            "ttft_p50_ms, ttft_p99_ms, ttft_p999_ms, gap_p50_ms, gap_p99_ms, gap_p999_ms FROM windows",
        ),
        "baselines": render.rows_of(con, "SELECT * FROM baseline ORDER BY method"),
        "spikes": spikes,
        "spike_attribution": render.rows_of(con, "SELECT * FROM spike_attribution"),
        "slowest_requests": render.rows_of(con, "SELECT * FROM slowest_with_cause"),
        "caveats": _caveats(con, conns),
        "verdict": _verdict(con, spikes, sum(c["payload_cut"] for c in conns)),
    }


def _caveats(con, conns: render.Rows) -> list[str]:
    """What the capture did not hold, said before the verdict (terminal, HTML, JSON alike):
    packets it dropped, connections it saw one way, payloads its snap length cut (``conns``:
    connection_overview's rows); and the same traffic in another capture of the store."""
    out = []
    # (a store of one capture has no other: the query is left out)
    twins = con.execute("SELECT * FROM same_traffic").fetchall() if len(con.store.capture_ids()) > 1 else []
    for capture_id, path, other_id, other_path, n, other_in_scope in twins:
        if not other_in_scope:
            out.append(f"{n} connection(s) of {path} were captured in {other_path} too (already in the store): "
                       "this report counts them once; a report over the whole store counts them twice")
        elif capture_id < other_id:  # (each pair is two rows)
            out.append(f"{path} and {other_path} hold the same traffic ({n} connection(s)): this report counts it "
                       "twice; report on one of them (tailtap analyze FILE --out NEW_STORE)")
    for missed, nbytes, missed_conns, kernel in con.execute(
        # (capture_drops holds every capture whose rows the models read: capture_gaps needs
        # the drops of a capture overlapping this one too)
        "SELECT missed_gaps, missed_bytes, missed_connections, kernel_drops FROM capture_drops WHERE in_scope(capture_id)"
    ).fetchall():
        said = f"{nbytes:,} bytes in {missed:,} gaps on {missed_conns} connection(s) were acknowledged by their receiver but never captured"
        if kernel:
            said = (said + "; " if missed else "") + f"its kernel reported {kernel:,} packets dropped"
        out.append(f"the capture dropped packets: {said}. They are not counted as network loss, and token gaps "
                   "and first tokens across them are not measured")
    for c in conns:
        for count, seen, unseen in ((c["only_server_seen"], "server's", "no request's start"),
                                    (c["only_client_seen"], "client's", "no response")):
            if count:
                out.append(f"{count} {c['protocol']} connection(s) captured one way (only the {seen} packets: {unseen}): "
                           "their requests' latency and TTFT cannot be measured; capture both directions")
        if c["payload_cut"]:
            out.append(f"{c['payload_cut']} {c['protocol']} connection(s) had payloads cut by the capture's snap length: "
                       "their messages are partly unreadable, requests may be missing and untimed; capture whole packets "
                       "(tcpdump -s 0)")
    return out


def plot_sections(store: StoreLayout, params: dict | None = None, con: Analysis | None = None) -> dict[str, render.Rows]:
    """What the HTML report draws beside the report's sections: the network signals and
    the TTFT bands per window (the windows the report uses)."""
    con = con or connect(store, params)
    con.execute(f"SET VARIABLE bucket_s = {con.window_s()!r}")  # conn_timeline's buckets = the windows
    return {
        "network": render.rows_of(con, "SELECT * FROM network_timeline"),
        "ttft_heatmap": render.rows_of(con, "SELECT * FROM ttft_heatmap"),
    }


def _verdict(con, spikes: render.Rows, payload_cut: int = 0) -> str:
    """The report's one line; ``payload_cut``: connections whose payload the snap length cut."""
    if not spikes:
        requests, timed, gaps = con.execute(
            "SELECT count(*), count(latency_eff_ms) + count(ttft_eff_ms), count(gap_eff_ms) FROM request_metrics").fetchone()
        if requests and not timed:  # (a capture of one direction, say): a quiet report would be a false one
            return ("nothing to judge on latency or TTFT: no request's could be measured"
                    + ("; token gaps stayed near their baseline" if gaps else ""))
        if payload_cut:  # the requests that could be read: a part, maybe a small one
            return (f"no p99 spike among the requests that could be read ({payload_cut} connection(s) had payloads cut "
                    "by the snap length)")
        return "no p99 spike: every window stayed near its baseline"
    parts = []
    for _window, start, cause, kind, share in con.execute(
        "SELECT window_id, any_value(window_start), cause, kind, request_share FROM spike_attribution "
        "GROUP BY window_id, cause, kind, request_share "
        "QUALIFY row_number() OVER (PARTITION BY window_id ORDER BY request_share DESC, cause) = 1 "
        "ORDER BY window_id"
    ).fetchall():
        label = cause + (f" ({kind})" if kind else "")
        parts.append(f"{start:%H:%M:%S}: {label} ({share:.0%} of slow requests)")
    return f"{len(spikes)} spike(s): " + "; ".join(parts)


def compare_sections(store: StoreLayout, params: dict, con: Analysis | None = None) -> dict[str, render.Rows | str]:
    """`tailtap compare`: two periods (``params``: a_/b_ since_ns, until_ns, capture_ids)
    side by side: per method, the cause mix of slow requests, the network."""
    con = con or connect(store, params)
    methods = render.rows_of(con, "SELECT * FROM compare_periods")
    causes = render.rows_of(con, "SELECT * FROM compare_causes")
    network = render.rows_of(con, "SELECT * FROM compare_network")
    return {"summary": _compare_summary(methods, causes), "methods": methods, "causes": causes, "network": network}


def _compare_summary(methods: render.Rows, causes: render.Rows) -> str:
    if not methods:
        return "no request in either period"
    parts = []
    m = methods[0]
    moved = sorted(((abs(m.get(f"{k}_p99_change") or 0), k) for k in ("latency", "ttft", "gap")), reverse=True)
    for size, metric in moved:
        if size >= 0.1:
            parts.append(f"{m['method']} {metric} p99 {m[f'{metric}_p99_a']:.1f} -> {m[f'{metric}_p99_b']:.1f} ms "
                         f"({m[f'{metric}_p99_change']:+.0%})")
    if causes:
        c = causes[0]
        parts.append(f"slow requests from {c['cause']}: {c['share_a'] or 0:.0%} -> {c['share_b'] or 0:.0%}")
    return "what changed most: " + ("; ".join(parts) if parts else "nothing by 10% or more")


class RequestNotFound(LookupError):
    pass


def explain_sections(
    store: StoreLayout, conn_id: str, stream_id: int, params: dict | None = None, con: Analysis | None = None
) -> dict[str, render.Rows | str]:
    """One request's story: what it was, its timeline with network events, causes, decomposition."""
    con = con or connect(store, params)
    key = [conn_id, stream_id]
    request = render.rows_of(
        con,
        "SELECT conn_id, stream_id, method, client_addr, server_addr, kind, started_at, finished_at, "
        "latency_eff_ms AS latency_ms, ttft_eff_ms AS ttft_ms, gap_eff_ms AS max_gap_ms, client_side_estimated, "
        "latency_ms AS latency_at_capture_ms, ttft_ms AS ttft_at_capture_ms, response_messages, grpc_status, http_status "
        "FROM request_metrics WHERE conn_id = ? AND stream_id = ?",
        key,
    )
    if not request:
        raise RequestNotFound(f"no request {conn_id}:{stream_id} in the store")
    return {
        "request": request,
        "timeline": render.rows_of(
            con, "SELECT t_ms, ts, layer, event, detail FROM request_timeline WHERE conn_id = ? AND stream_id = ?", key
        ),
        "causes": render.rows_of(
            con, "SELECT cause, kind, direction, delay_ms, evidence FROM request_cause WHERE conn_id = ? AND stream_id = ? ORDER BY delay_ms DESC", key
        ) or "not slow: it stayed within its window's expected p99 (or the SLO)",
        "decomposition": render.rows_of(
            con,
            "SELECT latency_ms, path_rtt_ms, queueing_ms, loss_recovery_ms, reordering_ms, flow_control_ms, client_read_ms, "
            "server_ms, total_ms, overlap_scaled FROM latency_decomposition WHERE conn_id = ? AND stream_id = ?",
            key,
        ),
    }


# -- terminal layouts: short headers, one block per method, ids kept on one line ----------
def _num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return str(v)


def _add(t, *cells) -> None:
    """A table row whose text cells are shown as they are (render.as_is)."""
    t.add_row(*(render.as_is(c) if isinstance(c, str) else c for c in cells))


def _table(*headers: str, title: str | None = None):
    from rich import box
    from rich.table import Table

    t = Table(*headers, box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    if headers and headers[0] == "request":
        t.columns[0].no_wrap = True  # ids are copied into `tailtap explain`: never cut them
    elif headers and headers[0] == "window":
        # a window's time and its spike mark, whole on one line at any width: the other
        # columns (numbers) wrap their headers instead
        t.columns[0].no_wrap = True
        t.columns[0].min_width = len("00:00:00 *")
    return t


def print_analyze(console: Console, s: dict) -> None:
    caps = s["captures"]
    packets = sum(c["packets"] or 0 for c in caps)
    conns = ", ".join(f"{c['connections']} {c['protocol']}" for c in s["connections"]) or "none"
    requests = sum(m["requests"] for m in s["methods"])
    console.print(f"[bold]tailtap analyze[/bold]: {len(caps)} capture(s), {packets:,} packets, connections: {conns}, {requests} requests")
    net = [c for c in s["connections"] if c["retransmissions"] or c["out_of_order"] or c["zero_windows"]]
    for c in net:
        console.print(
            f"  network ({c['protocol']}): {c['retransmissions']} retransmissions in {c['loss_bursts']} loss bursts, "
            f"{c['out_of_order']} out-of-order, {c['zero_windows']} zero windows"
        )
    for m in s["methods"]:
        console.print(f"\n[bold]{render.escaped(m['method'])}[/bold]  {m['requests']} requests, {m['errors']} errors"
                      + (f", {m['headers_unknown']} with HPACK context missing" if m["headers_unknown"] else "")
                      + (f", {m['estimated']} estimated from TLS records (no keys)" if m.get("estimated") else ""))
        t = _table("", "p50", "p90", "p99", "max")
        for label, key in (("latency ms", "latency"), ("TTFT ms", "ttft"), ("token gap ms", "gap")):
            _add(t, label, *(_num(m.get(f"{key}_{q}_ms")) for q in ("p50", "p90", "p99", "max")))
        console.print(t)
    if s["errors"]:
        t = _table("method", "grpc-status", "http", "reset", "requests", title="\n[bold]errors[/bold]")
        for e in s["errors"]:
            _add(t, e["method"], f"{_num(e['grpc_status'])} {e['grpc_status_name'] or ''}".strip(), _num(e["http_status"]), _num(e["reset_code"]), str(e["requests"]))
        console.print(t)
    if s["slowest_requests"]:
        t = _table("request", "method", "latency ms", "TTFT ms", "max gap ms", "msgs", "status",
                   title="\n[bold]slowest requests[/bold] (tailtap explain --request ...)")
        for r in s["slowest_requests"]:
            status = f"grpc {r['grpc_status']}" if r["grpc_status"] is not None else f"http {_num(r['http_status'])}"
            _add(t, f"{r['conn_id']}:{r['stream_id']}", r["method"], _num(r["latency_ms"]), _num(r["ttft_ms"]),
                      _num(r["max_gap_ms"]), _num(r["response_messages"]), status)
        console.print(t)


def print_report(console: Console, s: dict) -> None:
    t = _table("window", "reqs", "lat p50", "lat p99", "lat p99.9", "TTFT p50", "TTFT p99", "gap p50", "gap p99",
               title="[bold]timeline[/bold] (ms; client-side estimates where the ACKs give them)")
    spiked = {str(sp["window_start"]) for sp in s["spikes"]}
    for w in s["timeline"]:
        mark = " *" if str(w["window_start"]) in spiked else ""
        _add(t, f"{w['window_start']:%H:%M:%S}{mark}", str(w["requests"]), *(_num(w[k]) for k in (
            "latency_p50_ms", "latency_p99_ms", "latency_p999_ms", "ttft_p50_ms", "ttft_p99_ms", "gap_p50_ms", "gap_p99_ms")))
    console.print(t)
    for b in s.get("baselines", []):
        if not b["judged"]:
            console.print(f"[yellow]{render.escaped(b['method'])}[/yellow]: only {b['baseline_requests']} requests in calm windows, too few "
                          "to judge it by its own p99 (SLOs and throttling still apply)")
    for caveat in s["caveats"]:
        console.print(f"[yellow]caveat[/yellow]: {render.escaped(caveat)}")
    console.print(f"[bold]verdict[/bold]: {render.escaped(s['verdict'])}")
    for sp in s["spikes"]:
        console.print(f"\n[bold]spike at {sp['window_start']:%H:%M:%S}[/bold]: {render.escaped(', '.join(sp['spiked_metrics']))} "
                      f"of {render.escaped(', '.join(sp['spiked_methods']))} ({render.escaped(sp['method'])}: latency p99 {_num(sp['latency_p99_ms'])} vs {_num(sp['latency_baseline_p99_ms'])}, "
                      f"TTFT p99 {_num(sp['ttft_p99_ms'])} vs {_num(sp['ttft_baseline_p99_ms'])}, "
                      f"gap p99 {_num(sp['gap_p99_ms'])} vs {_num(sp['gap_baseline_p99_ms'])} ms baseline)")
        t = _table("cause", "slow reqs", "share", "delay ms", "where")
        for a in s["spike_attribution"]:
            if a["window_id"] != sp["window_id"]:
                continue
            label = a["cause"] + (f" ({a['kind']})" if a["kind"] else "")
            _add(t, label, str(a["slow_requests"]), f"{a['request_share']:.0%}", _num(a["delay_ms"]),
                      f"conns {a['top_connections']}; clients {a['top_clients']}"
                      + (f"; {a['top_directions']}" if a.get("top_directions") else ""))
        console.print(t)
    if s["slowest_requests"]:
        t = _table("request", "method", "latency", "TTFT", "gap", "slow on", "causes",
                   title="\n[bold]slowest requests[/bold] (ms)")
        for r in s["slowest_requests"]:
            _add(t, f"{r['conn_id']}:{r['stream_id']}", r["method"], _num(r["latency_ms"]), _num(r["ttft_ms"]),
                      _num(r["max_gap_ms"]), r["slow_on"], r["causes"] or "-")
        console.print(t)


def print_explain(console: Console, s: dict) -> None:
    (r,) = s["request"]
    console.print(f"[bold]{r['conn_id']}:{r['stream_id']}[/bold] {render.escaped(r['method'])} ({r['kind']}) "
                  f"{r['client_addr']} -> {r['server_addr']}: latency {_num(r['latency_ms'])} ms, TTFT {_num(r['ttft_ms'])} ms, "
                  f"largest gap {_num(r['max_gap_ms'])} ms, {r['response_messages']} messages"
                  + (" (client-side estimates)" if r["client_side_estimated"] else " (at the capture point)"))
    t = _table("+ms", "layer", "event", "detail", title="\n[bold]timeline[/bold]")
    for e in s["timeline"]:
        _add(t, _num(e["t_ms"]), e["layer"], e["event"], e["detail"] or "")
    console.print(t)
    if isinstance(s["causes"], str):
        console.print(f"[bold]causes[/bold]: {render.escaped(s['causes'])}")
    else:
        t = _table("cause", "delay ms", "evidence", title="\n[bold]causes[/bold]")
        for c in s["causes"]:
            _add(t, c["cause"] + (f" ({c['kind']})" if c["kind"] else "") + (f", {c['direction']}" if c.get("direction") else ""),
                      _num(c["delay_ms"]), c["evidence"])
        console.print(t)
    for d in s["decomposition"]:
        parts = ", ".join(f"{k.removesuffix('_ms').replace('_', ' ')} {_num(d[k])}" for k in (
            "path_rtt_ms", "queueing_ms", "loss_recovery_ms", "reordering_ms", "flow_control_ms", "client_read_ms",
            "server_ms"))
        console.print(f"\n[bold]where the {_num(d['latency_ms'])} ms went[/bold]: {parts}"
                      + (" (overlapping network delays scaled down)" if d["overlap_scaled"] else ""))


def print_compare(console: Console, s: dict) -> None:
    """`tailtap compare` in the terminal: one block per method, then causes and network."""
    console.print(f"[bold]{render.escaped(s['summary'])}[/bold]")
    t = _table("method", "metric", "p50 a", "p50 b", "p99 a", "p99 b", "p99 change", title="per method (ms; requests a / b)")
    for m in s["methods"]:
        for i, (metric, label) in enumerate((("latency", "latency"), ("ttft", "TTFT"), ("gap", "token gap"))):
            change = m.get(f"{metric}_p99_change")
            _add(t, f"{m['method']} ({m['requests_a']} / {m['requests_b']})" if i == 0 else "", label,
                      _num(m.get(f"{metric}_p50_a")), _num(m.get(f"{metric}_p50_b")),
                      _num(m.get(f"{metric}_p99_a")), _num(m.get(f"{metric}_p99_b")),
                      "-" if change is None else f"{change:+.0%}")  # fmt: skip
    console.print(t)
    t = _table("cause", "slow a", "slow b", "share a", "share b", "delay ms a", "delay ms b", title="slow requests by cause")
    for c in s["causes"]:
        _add(t, c["cause"] + (f" ({c['kind']})" if c["kind"] else ""), str(c["slow_requests_a"]), str(c["slow_requests_b"]),
                  f"{c['share_a'] or 0:.0%}", f"{c['share_b'] or 0:.0%}", _num(c["delay_ms_a"]), _num(c["delay_ms_b"]))  # fmt: skip
    console.print(t)
    t = _table("period", "requests", "retx / 1k", "lost / 1k", "ooo / 1k", "win stalls / 1k", "RTT p50 client side", "RTT p50 server side",
               title="network")  # fmt: skip
    for n in s["network"]:
        _add(t, n["period"], str(n["requests"]), *(_num(n[k]) for k in ("retransmissions_per_1k", "lost_segments_per_1k",
                  "out_of_order_per_1k", "window_stalls_per_1k", "rtt_p50_ms_client_side", "rtt_p50_ms_server_side")))  # fmt: skip
    console.print(t)
