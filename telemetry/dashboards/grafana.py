"""Grafana dashboards as code: definitions here, built with Grafana's own builder
(grafana-foundation-sdk), exported JSON and provisioning in dashboards/.

Two kinds, linked both ways:
- live (``tailtap-live``): PromQL over the daemon's /metrics scraped by Prometheus: p50/p99
  of latency, TTFT and token gap by method and model with exemplars (each points at one
  request, ``request="CONN_ID:STREAM_ID"``), request and error rates, slow requests by
  cause, retransmissions, RTT, capture drops and ingest lag;
- drill-down (latency, attribution, network): SQL over the views of queries/ through the
  DuckDB data source plugin (``motherduck-duckdb-datasource``, datasource uid ``tailtap``)
  pointed at the DuckDB file `tailtap dashboards db` writes. Panel SQL uses Grafana's
  ``$__timeFilter(column)`` macro; the attribution dashboard's ``request`` variable takes
  an exemplar's request (the Prometheus data source's exemplar link fills it in).

`tailtap dashboards export` regenerates dashboards/*.json (committed, so provisioning
works without Python); `tailtap dashboards push` uploads them with grafana-client.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from grafana_foundation_sdk.builders import barchart, dashboard, stat, table, timeseries
from grafana_foundation_sdk.builders import prometheus as promql
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DashboardLinkType,
    DataSourceRef,
    GridPos,
)

DUCKDB = DataSourceRef(type_val="motherduck-duckdb-datasource", uid="tailtap")
PROMETHEUS = DataSourceRef(type_val="prometheus", uid="${prometheus}")  # the dashboard's data source variable
DASHBOARDS_DIR = Path(__file__).resolve().parents[2] / "dashboards"
TAG = "tailtap"
SCHEMA_VERSION = 39  # Grafana 11's dashboard JSON


@dataclass(frozen=True)
class Panel:
    title: str
    query: str  # SQL (drill-down) or PromQL (live); a PromQL panel may have more queries in `more`
    kind: str = "timeseries"  # timeseries | table | barchart | stat
    unit: str | None = None
    width: int = 12
    height: int = 8
    description: str = ""
    legend: str = ""  # PromQL legend format
    more: tuple[tuple[str, str], ...] = ()  # further PromQL (query, legend) on the same panel
    exemplars: bool = False

    @property
    def format(self) -> str:
        return "time_series" if self.kind == "timeseries" else "table"

    @property
    def sql(self) -> str:
        return self.query


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)
    live: bool = False  # PromQL over Prometheus, else SQL over the DuckDB file


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
        Panel("The request: causes and evidence", "SELECT c.* FROM request_cause AS c WHERE c.conn_id || ':' || c.stream_id = '$request'", kind="table", width=24,
              description="The request of the `request` variable (CONN_ID:STREAM_ID), as an exemplar of the live dashboard links it: each cause with its evidence. `tailtap explain --request` tells its whole story."),
        Panel("The request: where its time went", "SELECT d.* FROM latency_decomposition AS d WHERE d.conn_id || ':' || d.stream_id = '$request'", kind="table", width=24),
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

# Label matchers of the live dashboard's variables (regex; "All" is .*).
_BY = 'method=~"$method", model=~"$model"'


def _quantiles(metric: str, what: str) -> Panel:
    expr = f'histogram_quantile({{q}}, sum by (le, method) (rate({metric}_bucket{{{{{_BY}}}}}[$__rate_interval])))'
    return Panel(
        f"{what} p50 / p99 by method", expr.format(q=0.99), unit="s", legend="p99 {{method}}",
        more=((expr.format(q=0.5), "p50 {{method}}"),), exemplars=True,
        description=f"From the {metric} histogram. Exemplars (dots) are single requests: their link opens the request on the attribution dashboard.",
    )


LIVE = Dashboard(
    "tailtap-live",
    "tailtap: live",
    "What the daemon sees now, from its Prometheus metrics: tail latency, TTFT and token gaps by method and model with exemplars, rates and errors, slow requests by cause, network and capture health.",
    (
        _quantiles("tailtap_request_latency_seconds", "Latency"),
        _quantiles("tailtap_request_ttft_seconds", "Time to first token"),
        _quantiles("tailtap_request_max_gap_seconds", "Largest token gap"),
        Panel("p99 latency by model", f'histogram_quantile(0.99, sum by (le, model) (rate(tailtap_request_latency_seconds_bucket{{{_BY}}}[$__rate_interval])))',
              unit="s", legend="{{model}}", exemplars=True),
        Panel("Requests per second by method", f'sum by (method) (rate(tailtap_requests_total{{{_BY}}}[$__rate_interval]))', unit="reqps", legend="{{method}}"),
        Panel("Errors per second by method",
              f'sum by (method) (rate(tailtap_requests_total{{{_BY}, grpc_status!~"0|"}}[$__rate_interval])) or sum by (method) (rate(tailtap_requests_total{{{_BY}, http_status=~"5.."}}[$__rate_interval]))',
              unit="reqps", legend="{{method}}", description="gRPC status other than OK, or HTTP 5xx."),
        Panel("Slow requests by cause (recent window)", 'sum by (cause) (tailtap_recent_slow_request_causes)', legend="{{cause}}",
              description="The request_cause model over the daemon's recent window (--metrics-window-seconds), recomputed after each ingest."),
        Panel("Retransmissions per second", 'sum by (kind, direction) (rate(tailtap_tcp_events_total{kind=~".*retransmission"}[$__rate_interval]))',
              unit="pps", legend="{{kind}} {{direction}}"),
        Panel("RTT (recent window)", 'tailtap_recent_rtt_seconds', unit="s", legend="{{percentile}} {{direction}}"),
        Panel("Capture drops", 'rate(tailtap_capture_kernel_drops_total[$__rate_interval])', unit="pps", legend="kernel drops",
              more=(('sum(rate(tailtap_tcp_events_total{kind="capture_loss"}[$__rate_interval]))', "capture loss (bytes ACKed, never seen)"),)),
        Panel("Requests estimated from TLS records (no keys)",
              'sum(rate(tailtap_tls_estimated_requests_total[$__rate_interval])) / clamp_min(sum(rate(tailtap_requests_total[$__rate_interval])), 1e-9)',
              unit="percentunit", legend="share estimated",
              description="Share of the requests whose times are estimates: TLS read without keys (first record, not first token; "
                          "per connection over HTTP/2). Give the daemon --keylog to decrypt them."),
        Panel("Ingest lag", 'tailtap_ingest_lag_seconds', unit="s", legend="lag",
              more=(("tailtap_spool_oldest_pending_age_seconds", "oldest waiting file"),),
              description="From a file's last packet to its rows in the store; and how long the oldest completed capture file has waited."),
        Panel("Capture up", 'tailtap_capture_up', kind="stat", width=6, height=4),
        Panel("Files waiting", 'tailtap_spool_pending_files', kind="stat", width=6, height=4),
        Panel("Ingest and store errors", 'sum(increase(tailtap_ingest_errors_total[1h])) + sum(increase(tailtap_store_write_errors_total[1h]))', kind="stat", width=6, height=4,
              description="Capture files that failed to ingest or to be written, over the last hour."),
        Panel("Store size", 'tailtap_store_bytes', kind="stat", unit="bytes", width=6, height=4),
    ),
    live=True,
)

DRILL_DOWN = (LATENCY, ATTRIBUTION, NETWORK)
DASHBOARDS = (LIVE, *DRILL_DOWN)


class DuckDBQuery(cogvariants.Dataquery):
    """A query of the DuckDB data source plugin (the SDK has builders for the core data
    sources only)."""

    def __init__(self, sql: str, fmt: str) -> None:
        self.sql = sql
        self.format = fmt

    def to_json(self) -> dict[str, object]:
        return {"refId": "A", "datasource": DUCKDB.to_json(), "rawSql": self.sql, "rawQuery": True, "editorMode": "code", "format": self.format}


class DuckDBQueryBuilder(cogbuilder.Builder[DuckDBQuery]):
    def __init__(self, sql: str, fmt: str) -> None:
        self._query = DuckDBQuery(sql, fmt)

    def build(self) -> DuckDBQuery:
        return self._query


_PANEL_BUILDERS = {"timeseries": timeseries.Panel, "table": table.Panel, "barchart": barchart.Panel, "stat": stat.Panel}


def _panel(d: Dashboard, p: Panel, panel_id: int, pos: GridPos) -> cogbuilder.Builder:
    b = _PANEL_BUILDERS[p.kind]().id(panel_id).title(p.title).grid_pos(pos)
    if p.description:
        b = b.description(p.description)
    if p.unit:
        b = b.unit(p.unit)
    if not d.live:
        return b.datasource(DUCKDB).with_target(DuckDBQueryBuilder(p.query, p.format))
    b = b.datasource(PROMETHEUS)
    for ref, (expr, legend) in zip("ABCDEFGH", ((p.query, p.legend), *p.more), strict=False):
        q = promql.Dataquery().ref_id(ref).datasource(PROMETHEUS).expr(expr).legend_format(legend or "__auto")
        b = b.with_target(q.exemplar(True) if p.exemplars else q)
    return b


def _variables(d: Dashboard) -> list[cogbuilder.Builder]:
    if d.live:
        source = dashboard.DatasourceVariable("prometheus").label("Prometheus").type("prometheus")
        by = [
            dashboard.QueryVariable(name).label(name).datasource(PROMETHEUS).query(f"label_values(tailtap_requests_total, {name})")
            .multi(True).include_all(True).all_value(".*").refresh(2)  # fmt: skip
            for name in ("method", "model")
        ]
        return [source, *by]
    if d is ATTRIBUTION:
        return [dashboard.TextBoxVariable("request").label("Request (CONN_ID:STREAM_ID)").default_value("")]
    return []


def _links(d: Dashboard) -> list[cogbuilder.Builder]:
    # every tailtap dashboard links to the others (by tag), keeping the time range
    others = "drill-down (store)" if d.live else "live and drill-down"
    return [dashboard.DashboardLink(f"tailtap: {others}").type(DashboardLinkType.DASHBOARDS).tags([TAG]).as_dropdown(True).keep_time(True)]


def build(d: Dashboard) -> cogbuilder.Builder:
    b = (
        dashboard.Dashboard(d.title).uid(d.uid).description(d.description).tags([TAG]).timezone("utc")
        .time("now-1h" if d.live else "now-6h", "now").refresh("30s" if d.live else "1m").editable()
        .links(_links(d))
    )  # fmt: skip
    for v in _variables(d):
        b = b.with_variable(v)
    x = y = row_h = 0
    for i, p in enumerate(d.panels, start=1):
        if x + p.width > 24:
            x, y, row_h = 0, y + row_h, 0
        b = b.with_panel(_panel(d, p, i, GridPos(h=p.height, w=p.width, x=x, y=y)))
        x += p.width
        row_h = max(row_h, p.height)
    return b


def dashboard_json(d: Dashboard) -> dict:
    """The dashboard as Grafana reads it: the builder's model through the SDK's encoder."""
    j = json.loads(json.dumps(build(d).build(), cls=JSONEncoder))
    j["schemaVersion"] = SCHEMA_VERSION
    j["version"] = 1
    return j


def export(folder: Path = DASHBOARDS_DIR) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in DASHBOARDS:
        path = folder / f"{d.uid}.json"
        path.write_text(json.dumps(dashboard_json(d), indent=2) + "\n")
        paths.append(path)
    return paths


_PROM_VARIABLES = {"$__rate_interval": "1m", "$method": ".*", "$model": ".*"}


def render_promql(expr: str, rate_interval: str = "1m") -> str:
    """Expand the variables a live panel's PromQL uses as Grafana would with "All"
    selected (regex .*) and a rate interval of ``rate_interval``."""
    for name, value in {**_PROM_VARIABLES, "$__rate_interval": rate_interval}.items():
        expr = expr.replace(name, value)
    return expr


_TIME_FILTER = re.compile(r"\$__timeFilter\(([^)]+)\)")


def render_macros(sql: str, from_rfc3339: str, to_rfc3339: str, request: str = "") -> str:
    """Expand the Grafana macros the panels use as the data source plugin does (its sqlds
    default: RFC 3339 UTC string literals, cast by DuckDB to the column's type), and the
    ``request`` variable."""
    sql = sql.replace("$request", request.replace("'", "''"))
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
