"""Reports: run the queries/ models and render them. No analysis happens here."""

from __future__ import annotations

from rich.console import Console

from telemetry import render
from telemetry.db import connect
from telemetry.store import Store


def analyze_sections(store: Store, capture_ids: list[str] | None = None, params: dict | None = None) -> dict[str, render.Rows | str]:
    """The `tailtap analyze` report: captures, connections, per-method percentiles, errors, slowest."""
    con = connect(store, {**(params or {}), "capture_ids": capture_ids or None})
    return {
        "captures": render.rows_of(con, "SELECT * FROM capture_overview"),
        "connections": render.rows_of(con, "SELECT * FROM connection_overview"),
        "methods": render.rows_of(con, "SELECT * FROM method_summary"),
        "errors": render.rows_of(con, "SELECT * FROM errors_by_status"),
        "slowest_requests": render.rows_of(con, "SELECT * FROM slowest_requests"),
    }


def analyze_report(store: Store, fmt: str, console: Console, capture_ids: list[str] | None = None) -> None:
    render.emit(console, fmt, analyze_sections(store, capture_ids), title="tailtap analyze")


def report_sections(store: Store, params: dict | None = None) -> dict[str, render.Rows | str]:
    """The `tailtap report`: timeline, spikes, their attribution, slowest requests with cause."""
    con = connect(store, params)
    spikes = render.rows_of(con, "SELECT * FROM spikes")
    return {
        "timeline": render.rows_of(
            con,
            "SELECT window_start, requests, errors, latency_p50_ms, latency_p99_ms, latency_p999_ms, "
            "ttft_p50_ms, ttft_p99_ms, ttft_p999_ms, gap_p50_ms, gap_p99_ms, gap_p999_ms FROM windows",
        ),
        "spikes": spikes,
        "spike_attribution": render.rows_of(con, "SELECT * FROM spike_attribution"),
        "slowest_requests": render.rows_of(con, "SELECT * FROM slowest_with_cause"),
        "verdict": _verdict(con, spikes),
    }


def _verdict(con, spikes: render.Rows) -> str:
    if not spikes:
        return "no p99 spike: every window stayed near its baseline"
    parts = []
    for _window, start, cause, kind, share in con.execute(
        "SELECT window_id, any_value(window_start), cause, kind, request_share FROM spike_attribution "
        "GROUP BY window_id, cause, kind, request_share "
        "QUALIFY row_number() OVER (PARTITION BY window_id ORDER BY request_share DESC, cause) = 1 "
        "ORDER BY window_id"
    ).fetchall():
        label = cause + (f" ({kind})" if kind else "")
        parts.append(f"{render._plain(start)}: {label} ({share:.0%} of slow requests)")
    return f"{len(spikes)} spike(s): " + "; ".join(parts)


class RequestNotFound(LookupError):
    pass


def explain_sections(store: Store, conn_id: str, stream_id: int, params: dict | None = None) -> dict[str, render.Rows | str]:
    """One request's story: what it was, its timeline with network events, causes, decomposition."""
    con = connect(store, params)
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
            con, "SELECT cause, kind, delay_ms, evidence FROM request_cause WHERE conn_id = ? AND stream_id = ? ORDER BY delay_ms DESC", key
        ) or "not slow: it stayed within its window's expected p99 (or the SLO)",
        "decomposition": render.rows_of(
            con,
            "SELECT latency_ms, path_rtt_ms, queueing_ms, loss_recovery_ms, reordering_ms, flow_control_ms, server_ms, "
            "total_ms, overlap_scaled FROM latency_decomposition WHERE conn_id = ? AND stream_id = ?",
            key,
        ),
    }
