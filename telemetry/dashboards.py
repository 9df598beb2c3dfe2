"""Grafana dashboards as code: definitions here, exported JSON and provisioning in dashboards/.

Panels query the views of queries/ through the DuckDB data source plugin
(``motherduck-duckdb-datasource``, datasource uid ``tailtap``) pointed at a DuckDB file
that `tailtap dashboards db` writes: every store table and every model as a view over the
Parquet store, with the model parameters fixed in it. Panel SQL uses Grafana's
``$__timeFilter(column)`` macro for the dashboard time range.

`tailtap dashboards export` regenerates dashboards/*.json (committed, so provisioning
works without Python); `tailtap dashboards push` uploads them with grafana-client.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

DATASOURCE = {"type": "motherduck-duckdb-datasource", "uid": "tailtap"}
DASHBOARDS_DIR = Path(__file__).resolve().parent.parent / "dashboards"


@dataclass(frozen=True)
class Panel:
    title: str
    sql: str
    kind: str = "timeseries"  # timeseries | table | barchart | stat
    unit: str | None = None
    width: int = 12
    height: int = 8
    description: str = ""

    @property
    def format(self) -> str:
        return "time_series" if self.kind == "timeseries" else "table"


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


LATENCY = Dashboard(
    "tailtap-latency",
    "tailtap: tail latency",
    "p50/p99/p99.9 of latency, time-to-first-token and inter-token gap per window, per method.",
    (
        Panel("Latency percentiles", "SELECT window_start AS time, latency_p50_ms AS p50, latency_p99_ms AS p99, latency_p999_ms AS \"p99.9\" FROM windows WHERE $__timeFilter(window_start) ORDER BY 1", unit="ms"),
        Panel("Time to first token percentiles", "SELECT window_start AS time, ttft_p50_ms AS p50, ttft_p99_ms AS p99, ttft_p999_ms AS \"p99.9\" FROM windows WHERE $__timeFilter(window_start) ORDER BY 1", unit="ms"),
        Panel("Largest inter-token gap percentiles", "SELECT window_start AS time, gap_p50_ms AS p50, gap_p99_ms AS p99, gap_p999_ms AS \"p99.9\" FROM windows WHERE $__timeFilter(window_start) ORDER BY 1", unit="ms"),
        Panel("Requests and errors per window", "SELECT window_start AS time, requests, errors FROM windows WHERE $__timeFilter(window_start) ORDER BY 1"),
        Panel("Per method", "SELECT m.* FROM method_summary AS m", kind="table", width=24,
              description="Whole store (the time range does not apply): requests, errors and percentiles per gRPC method / HTTP path."),
        Panel("Slowest requests and their causes", "SELECT * FROM slowest_with_cause WHERE $__timeFilter(started_at)", kind="table", width=24,
              description="Run `tailtap explain --request CONN_ID:STREAM_ID` for a request's story."),
    ),
)

ATTRIBUTION = Dashboard(
    "tailtap-attribution",
    "tailtap: why p99 went bad",
    "Spikes of p99 over the trailing baseline and the causes of their slow requests.",
    (
        Panel("Spikes", "SELECT window_start, requests, array_to_string(spiked_metrics, ', ') AS spiked, latency_p99_ms, latency_baseline_p99_ms, ttft_p99_ms, ttft_baseline_p99_ms, gap_p99_ms, gap_baseline_p99_ms FROM spikes WHERE $__timeFilter(window_start)", kind="table", width=24),
        Panel("Spike attribution", "SELECT window_start, cause, kind, slow_requests, request_share, delay_ms, delay_share, top_connections, top_clients, top_methods, top_directions FROM spike_attribution WHERE $__timeFilter(window_start)", kind="table", width=24),
        Panel("Causes of slow requests", "SELECT c.cause || coalesce('/' || c.kind, '') AS cause, count(*) AS requests FROM request_cause AS c JOIN slow_requests AS s USING (conn_id, stream_id) WHERE $__timeFilter(s.started_at) GROUP BY 1 ORDER BY 2 DESC", kind="barchart"),
        Panel("Delay explained per cause", "SELECT make_timestamp_ns(CAST(floor(epoch_ns(s.started_at) / 1e10) * 1e10 AS BIGINT)) AS time, sum(c.delay_ms) FILTER (WHERE c.cause = 'loss_burst') AS loss_burst, sum(c.delay_ms) FILTER (WHERE c.cause = 'reordering') AS reordering, sum(c.delay_ms) FILTER (WHERE c.cause = 'queueing') AS queueing, sum(c.delay_ms) FILTER (WHERE c.cause = 'throttling') AS throttling, sum(c.delay_ms) FILTER (WHERE c.cause = 'server') AS server FROM request_cause AS c JOIN slow_requests AS s USING (conn_id, stream_id) WHERE $__timeFilter(s.started_at) GROUP BY 1 ORDER BY 1", unit="ms"),
        Panel("Where the slow requests' time went", "SELECT make_timestamp_ns(CAST(floor(epoch_ns(d.started_at) / 1e10) * 1e10 AS BIGINT)) AS time, avg(d.path_rtt_ms) AS path_rtt, avg(d.queueing_ms) AS queueing, avg(d.loss_recovery_ms) AS loss_recovery, avg(d.reordering_ms) AS reordering, avg(d.flow_control_ms) AS flow_control, avg(d.client_read_ms) AS client_read, avg(d.server_ms) AS server FROM latency_decomposition AS d JOIN slow_requests AS s USING (conn_id, stream_id) WHERE $__timeFilter(d.started_at) GROUP BY 1 ORDER BY 1", unit="ms", width=24,
              description="Mean latency decomposition of the slow requests per 10 s: path round trip, queueing, loss recovery, reordering wait, window / HTTP/2 flow-control wait, the client's own read wait, and the rest (server)."),
    ),
)

NETWORK = Dashboard(
    "tailtap-network",
    "tailtap: network signals",
    "Loss, reordering, RTT and delivery rate over time, from TCP analysis of the capture.",
    (
        Panel("Retransmissions, out-of-order, dup ACKs per second", "SELECT bucket_start AS time, sum(retransmissions) AS retransmissions, sum(out_of_order) AS out_of_order, sum(dup_acks) AS dup_acks, sum(window_stalls) AS window_stalls FROM conn_timeline WHERE $__timeFilter(bucket_start) GROUP BY 1 ORDER BY 1"),
        Panel("RTT, capture point to client", "SELECT bucket_start AS time, min(rtt_min_ms_client_side) AS min, median(rtt_p50_ms_client_side) AS p50, max(rtt_max_ms_client_side) AS max FROM conn_timeline WHERE $__timeFilter(bucket_start) GROUP BY 1 ORDER BY 1", unit="ms"),
        Panel("Delivery rate to clients", "SELECT ts AS time, sum(bytes_acked) * 8000.0 / any_value(bucket_ms) AS delivered_bps, sum(bytes_sent) * 8000.0 / any_value(bucket_ms) AS sent_bps FROM flow_rates WHERE direction = 'to_client' AND $__timeFilter(ts) GROUP BY 1 ORDER BY 1", unit="bps"),
        Panel("HTTP/2 flow-control blocked time", "SELECT bucket_start AS time, sum(flow_control_blocked_ms) AS blocked_ms FROM conn_timeline WHERE $__timeFilter(bucket_start) GROUP BY 1 ORDER BY 1", unit="ms"),
        Panel("Connections", "SELECT * FROM connection_overview", kind="table", width=24),
    ),
)

DASHBOARDS = (LATENCY, ATTRIBUTION, NETWORK)


def dashboard_json(d: Dashboard) -> dict:
    panels = []
    x = y = 0
    row_h = 0
    for i, p in enumerate(d.panels, start=1):
        if x + p.width > 24:
            x, y, row_h = 0, y + row_h, 0
        panel = {
            "id": i,
            "type": p.kind,
            "title": p.title,
            "description": p.description,
            "datasource": DATASOURCE,
            "gridPos": {"x": x, "y": y, "w": p.width, "h": p.height},
            "targets": [{"refId": "A", "datasource": DATASOURCE, "rawSql": p.sql, "rawQuery": True,
                         "editorMode": "code", "format": p.format}],
            "fieldConfig": {"defaults": {"unit": p.unit} if p.unit else {}, "overrides": []},
            "options": {},
        }
        panels.append(panel)
        x += p.width
        row_h = max(row_h, p.height)
    return {
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "tags": ["tailtap"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "panels": panels,
        "templating": {"list": []},
        "annotations": {"list": []},
    }


def export(folder: Path = DASHBOARDS_DIR) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in DASHBOARDS:
        path = folder / f"{d.uid}.json"
        path.write_text(json.dumps(dashboard_json(d), indent=2) + "\n")
        paths.append(path)
    return paths


_TIME_FILTER = re.compile(r"\$__timeFilter\(([^)]+)\)")


def render_macros(sql: str, from_rfc3339: str, to_rfc3339: str) -> str:
    """Expand the Grafana macros the panels use as the data source plugin does (its sqlds
    default: RFC 3339 UTC string literals, cast by DuckDB to the column's type)."""
    return _TIME_FILTER.sub(
        lambda m: f"{m.group(1)} >= '{from_rfc3339}' AND {m.group(1)} <= '{to_rfc3339}'", sql
    )


def push(url: str, token: str | None, folder_uid: str | None = None, timeout: float = 10.0) -> list[str]:
    """Create or update every dashboard on a Grafana server; returns their URLs."""
    from grafana_client import GrafanaApi
    from grafana_client.client import TokenAuth

    api = GrafanaApi.from_url(url, credential=TokenAuth(token) if token else None, timeout=timeout)
    urls = []
    for d in DASHBOARDS:
        body = {"dashboard": dashboard_json(d), "overwrite": True, "message": "tailtap dashboards push"}
        if folder_uid:
            body["folderUid"] = folder_uid
        answer = api.dashboard.update_dashboard(body)
        urls.append(str(answer.get("url", d.uid)))
    return urls
