"""Prometheus metrics of the daemon: prometheus-client metrics in a registry of the
daemon's own, the recomputed "recent" gauges as a collector over a snapshot, the store
queries behind them, and an HTTP endpoint (stdlib http.server) that speaks OpenMetrics (with
exemplars) or the classic text format, as the scraper asks.

Scrapes only read the registry; the expensive work (DuckDB over the store) runs in the
ingest worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from parsers.records import TcpEventKind
from telemetry import __version__
from telemetry.store.parquet import NS_PER_HOUR, Store

log = logging.getLogger("tailtap.daemon")

# no `_created` series beside each counter and histogram: nothing here reads them, and
# they double what Prometheus stores
disable_created_metrics()

# Seconds; covers sub-ms loopback TTFTs up to minute-long generations.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
OTHER = "(other)"  # method label once max_methods distinct values were seen
NO_MODEL = ""  # model label of requests that name no model
# the causes request_cause.sql attributes (DESIGN.md): each has a series from the start, at
# 0 while no slow request carries it, so that a dashboard's query is never empty
CAUSES = ("loss_burst", "reordering", "queueing", "throttling", "server")
DIRECTIONS = ("to_server", "to_client")


class SnapshotGauges(Collector):
    """Gauges recomputed as a whole (the recent window): each refresh swaps every series at
    once, so a label set that vanished from the window vanishes from /metrics too."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._series: dict[str, dict[tuple[str, ...], float]] = {}
        self._registry = registry

    def gauge(self, name: str, doc: str, labelnames: Sequence[str] = ()) -> str:
        self._families[name] = (doc, tuple(labelnames))
        self._series[name] = {}
        return name

    def register(self) -> None:
        self._registry.register(self)

    def replace(self, name: str, series: Iterable[tuple[dict[str, str], float]]) -> None:
        labelnames = self._families[name][1]
        new: dict[tuple[str, ...], float] = {}
        for labels, value in series:
            if set(labels) != set(labelnames):
                raise ValueError(f"{name}: labels {sorted(labels)} != {sorted(labelnames)}")
            # several methods may fold into (other): the first value stays
            new.setdefault(tuple(str(labels[n]) for n in labelnames), float(value))
        with self._lock:
            self._series[name] = new

    def value(self, name: str, **labels: str) -> float | None:
        key = tuple(labels[n] for n in self._families[name][1])
        with self._lock:
            return self._series[name].get(key)

    def describe(self) -> Iterator[Metric]:
        for name, (doc, labelnames) in self._families.items():
            yield GaugeMetricFamily(name, doc, labels=labelnames)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snapshot = {name: dict(series) for name, series in self._series.items()}
        for name, (doc, labelnames) in self._families.items():
            family = GaugeMetricFamily(name, doc, labels=labelnames)
            for key, value in sorted(snapshot[name].items()):
                family.add_metric(list(key), value)
            yield family


class DaemonMetrics:
    """Every metric the daemon exposes, with their documentation."""

    def __init__(self, max_methods: int = 200) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.max_methods = max_methods
        self._labels_lock = threading.Lock()
        self._methods: set[str] = set()
        self._models: set[str] = set()
        self.build_info = Gauge("tailtap_build_info", "tailtap version running this daemon (always 1).", ["version"], registry=r)
        self.build_info.labels(version=__version__).set(1)
        self.start_time = Gauge("tailtap_daemon_start_time_seconds", "Unix time the daemon started.", registry=r)
        self.start_time.set(time.time())
        # capture
        self.capture_up = Gauge("tailtap_capture_up", "1 while the capture process (tcpdump/dumpcap) is running, else 0.", registry=r)
        self.capture_restarts = Counter("tailtap_capture_restarts", "Times the capture process died unexpectedly and was restarted.", registry=r)
        self.capture_packets = Counter("tailtap_capture_packets", "Packets received by the capture filter, as reported by the capture tool.", registry=r)
        self.kernel_drops = Counter("tailtap_capture_kernel_drops", "Packets the kernel dropped before the capture tool could read them (capture tool statistics).", registry=r)
        # spool
        self.spool_pending = Gauge("tailtap_spool_pending_files", "Completed capture files waiting to be ingested.", registry=r)
        self.spool_oldest_age = Gauge("tailtap_spool_oldest_pending_age_seconds", "Age of the oldest completed capture file waiting to be ingested (0: none).", registry=r)
        self.spool_dropped = Counter("tailtap_spool_dropped_files", "Capture files deleted unread because more than --max-files were waiting (ingest too slow).", registry=r)
        self.spool_failed = Gauge("tailtap_spool_failed_files", "Capture files in spool/failed (could not be ingested; kept for inspection).", registry=r)
        self.spool_empty = Counter("tailtap_spool_empty_files", "Completed capture files without packets, deleted without ingest.", registry=r)
        # ingest
        self.captures_ingested = Counter("tailtap_captures_ingested", "Capture files ingested into the store.", registry=r)
        self.ingest_errors = Counter("tailtap_ingest_errors", "Capture files that failed to ingest (moved to spool/failed).", registry=r)
        self.store_errors = Counter(
            "tailtap_store_write_errors", "Capture files that could not be written to the store (disk full, store not writable); kept in the spool and retried.", registry=r
        )
        self.packets = Counter("tailtap_ingested_packets", "Packets read from ingested capture files.", registry=r)
        self.bytes = Counter("tailtap_ingested_bytes", "Captured bytes of the packets read from ingested capture files.", registry=r)
        self.connections = Counter("tailtap_ingested_connections", "TCP connections found in ingested capture files.", registry=r)
        self.ingest_seconds = Counter("tailtap_ingest_seconds", "Time spent ingesting capture files.", registry=r)
        self.last_ingest = Gauge("tailtap_last_ingest_timestamp_seconds", "Unix time the last capture file was ingested.", registry=r)
        self.ingest_lag = Gauge("tailtap_ingest_lag_seconds", "For the last ingested file: time from its last packet to its rows being in the store.", registry=r)
        by_request = ["method", "model"]
        self.requests = Counter(
            "tailtap_requests",
            "Requests (HTTP/2 streams, gRPC calls, HTTP/1.1 exchanges) ingested, by method (the report's method label), model (empty: none named) and status (empty: not seen).",
            [*by_request, "grpc_status", "http_status"], registry=r,
        )
        self.tls_estimated = Counter(
            "tailtap_tls_estimated_requests",
            "Of tailtap_requests_total, those read from TLS records without keys (request_metrics.tls_estimated): "
            "their times are estimates (first record, not first token; per connection over HTTP/2).",
            registry=r,
        )
        exemplar_note = " Exemplars: request=\"CONN_ID:STREAM_ID\", the request's key in the store (tailtap explain --request)."
        self.latency = Histogram(
            "tailtap_request_latency_seconds", "Request latency (request_metrics.latency_eff_ms: client-side estimate where available), by method and model." + exemplar_note,
            by_request, buckets=LATENCY_BUCKETS, registry=r,
        )
        self.ttft = Histogram(
            "tailtap_request_ttft_seconds", "Time to first response message (request_metrics.ttft_eff_ms), by method and model." + exemplar_note,
            by_request, buckets=LATENCY_BUCKETS, registry=r,
        )
        self.max_gap = Histogram(
            "tailtap_request_max_gap_seconds", "Largest gap between consecutive response messages of a request (request_metrics.gap_eff_ms), by method and model." + exemplar_note,
            by_request, buckets=GAP_BUCKETS, registry=r,
        )
        # network, per ingested capture: one count per event, whatever files a connection spans
        self.tcp_events = Counter(
            "tailtap_tcp_events",
            "TCP events of ingested captures by kind (tcp_events.kind: retransmission, fast_retransmission, rto_retransmission, lost_segment, out_of_order, zero_window, capture_loss, ...) and direction of the data: the network's (queries/network_events: not the holes and IP-id gaps the capture itself missed, as the dashboards and reports count them) and the capture's own drops (capture_loss).",
            ["kind", "direction"], registry=r,
        )
        for kind in TcpEventKind:
            for direction in DIRECTIONS:
                self.tcp_events.labels(kind.value, direction)
        # recent window (recomputed with DuckDB over the store)
        s = self.recent = SnapshotGauges(r)
        self.recent_requests = s.gauge("tailtap_recent_requests", "Requests in the recent window (--metrics-window-seconds), by method.", ["method"])
        self.recent_latency = s.gauge("tailtap_recent_request_latency_seconds", "Latency percentiles (p50, p99) over the recent window, by method.", ["method", "percentile"])
        self.recent_ttft = s.gauge("tailtap_recent_request_ttft_seconds", "TTFT percentiles (p50, p99) over the recent window, by method.", ["method", "percentile"])
        self.recent_gap = s.gauge("tailtap_recent_request_max_gap_seconds", "Percentiles (p50, p99) of the per-request largest token gap over the recent window, by method.", ["method", "percentile"])
        self.recent_rtt = s.gauge(
            "tailtap_recent_rtt_seconds", "RTT sample percentiles (p50, p99) and the floor (min) over the recent window, by direction of the data (rtt_samples).", ["direction", "percentile"]
        )
        self.recent_spikes = s.gauge("tailtap_recent_spike_windows", "Windows of the recent window whose p99 spiked (spikes view), by spiked metric.", ["metric"])
        self.recent_slow = s.gauge("tailtap_recent_slow_requests", "Slow requests in the recent window (slow_requests view).")
        self.recent_causes = s.gauge("tailtap_recent_slow_request_causes", "Slow requests of the recent window per cause (request_cause view); kind empty when none.", ["cause", "kind"])
        self.recent_cause_delay = s.gauge("tailtap_recent_slow_request_cause_delay_seconds", "Delay the cause explains, summed over the recent window's slow requests.", ["cause", "kind"])
        s.register()
        self.refresh_errors = Counter("tailtap_metrics_refresh_errors", "Failed recomputations of the recent-window gauges.", registry=r)
        self.refresh_duration = Gauge("tailtap_metrics_refresh_duration_seconds", "Time the last recomputation of the recent-window gauges took.", registry=r)
        self.last_refresh = Gauge("tailtap_metrics_refresh_timestamp_seconds", "Unix time of the last successful recomputation of the recent-window gauges.", registry=r)
        # retention
        self.retention_removed = Counter("tailtap_retention_removed_partitions", "Store partitions (table/date=/hour=) deleted by retention.", registry=r)
        self.store_bytes = Gauge("tailtap_store_bytes", "Size of the Parquet store on disk.", registry=r)

    def value(self, name: str, **labels: str) -> float | None:
        """A sample's current value, by its exposed name (counters end in _total)."""
        return self.registry.get_sample_value(name, labels)

    def _bounded(self, seen: set[str], value: str) -> str:
        """Bound a label's cardinality: HTTP/1.1 paths and model names can be unbounded."""
        with self._labels_lock:
            if value in seen or len(seen) < self.max_methods:
                seen.add(value)
                return value
        return OTHER

    def method_label(self, method: str) -> str:
        return self._bounded(self._methods, method)

    def model_label(self, model: str | None) -> str:
        return NO_MODEL if model is None else self._bounded(self._models, model)

    def observe_capture(self, store: Store, capture_id: str) -> tuple[float | None, int | None]:
        """Fold one ingested capture's requests and TCP events into the counters and histograms.

        Returns (last packet time in s, kernel drops) from its `captures` row.
        """
        import duckdb

        con = duckdb.connect()
        try:
            # the capture's request_metrics, as stored with it at ingest: the one definition
            # of each request's method, latency, TTFT and gap the report and gauges read too
            rel = _request_metrics_of(store, capture_id, con)
            if rel is not None:
                for method, model, grpc_status, http_status, n, estimated in con.execute(
                    f"SELECT method, model, coalesce(CAST(grpc_status AS VARCHAR), ''), "
                    f"coalesce(CAST(http_status AS VARCHAR), ''), count(*), count(*) FILTER (WHERE tls_estimated) "
                    f"FROM {rel} GROUP BY ALL"
                ).fetchall():
                    self.requests.labels(self.method_label(method), self.model_label(model), grpc_status, http_status).inc(n)
                    self.tls_estimated.inc(estimated)
                rows = con.execute(
                    f"SELECT method, model, conn_id || ':' || stream_id, latency_eff_ms / 1e3, ttft_eff_ms / 1e3, gap_eff_ms / 1e3 "
                    f"FROM {rel} ORDER BY started_at"
                ).fetchall()
                for method, model, key, *values in rows:
                    labels = (self.method_label(method), self.model_label(model))
                    exemplar = {"request": key}
                    for histogram, value in zip((self.latency, self.ttft, self.max_gap), values, strict=True):
                        if value is not None and value == value:  # NaN != NaN
                            histogram.labels(*labels).observe(value, exemplar)
            for kind, direction, n in _tcp_event_counts(store, capture_id):
                self.tcp_events.labels(kind, direction).inc(n)
            cap_files = _capture_files(store, "captures", capture_id)
            if not cap_files:
                return None, None
            row = con.execute(
                f"SELECT epoch_ns(max(last_ts)), max(kernel_drops) FROM read_parquet({_list(cap_files)}, hive_partitioning = false)"
            ).fetchone()
            return (row[0] / 1e9 if row[0] is not None else None), row[1]
        finally:
            con.close()

    def refresh_recent(self, store: Store, window_s: float, bucket_s: float, now: float | None = None) -> None:
        """Recompute the recent-window gauges with the queries/ models (spikes, request_cause)."""
        from telemetry.models.db import connect

        started = time.perf_counter()
        now = time.time() if now is None else now
        since_ns = int((now - window_s) * 1e9)
        try:
            con = connect(RecentStore(store.root, since_ns), {"since_ns": since_ns, "window_s": bucket_s})
            try:
                self._query_recent(con, since_ns)
            finally:
                con.close()
        except Exception as exc:  # a refresh must never take the daemon down
            self.refresh_errors.inc()
            log.warning("recent-window metrics not refreshed: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return
        self.refresh_duration.set(time.perf_counter() - started)
        self.last_refresh.set(time.time())

    def _query_recent(self, con, since_ns: int) -> None:
        per_method = con.execute(
            "SELECT method, count(*), "
            "quantile_cont(latency_eff_ms, [0.5, 0.99]), quantile_cont(ttft_eff_ms, [0.5, 0.99]), "
            "quantile_cont(gap_eff_ms, [0.5, 0.99]) FROM request_metrics GROUP BY ALL"
        ).fetchall()
        counts, lat, ttft, gap = [], [], [], []
        for method, n, lq, tq, gq in per_method:
            label = self.method_label(method)
            counts.append(({"method": label}, n))
            for series, qs in ((lat, lq), (ttft, tq), (gap, gq)):
                # not "quantile": that label belongs to summaries, whose _count/_sum are counters
                for q, v in zip(("p50", "p99"), qs or (None, None), strict=True):
                    if v is not None:
                        series.append(({"method": label, "percentile": q}, v / 1e3))
        rtt = con.execute(
            "SELECT direction, min(rtt_ms), quantile_cont(rtt_ms, [0.5, 0.99]) FROM rtt_samples "
            "WHERE epoch_ns(ts) >= ? GROUP BY ALL",
            [since_ns],
        ).fetchall()
        spikes = con.execute("SELECT m, count(*) FROM spikes, unnest(spiked_metrics) AS t(m) GROUP BY m").fetchall()
        slow = con.execute("SELECT count(*) FROM slow_requests WHERE len(slow_metrics) > 0").fetchone()[0]
        causes = con.execute(
            "SELECT cause, coalesce(kind, ''), count(DISTINCT (conn_id, stream_id)), coalesce(sum(delay_ms), 0) "
            "FROM request_cause GROUP BY ALL"
        ).fetchall()
        s = self.recent
        s.replace(self.recent_requests, counts)
        s.replace(self.recent_latency, lat)
        s.replace(self.recent_ttft, ttft)
        s.replace(self.recent_gap, gap)
        s.replace(
            self.recent_rtt,
            [({"direction": d, "percentile": p}, v / 1e3) for d, lo, qs in rtt for p, v in zip(("min", "p50", "p99"), (lo, *qs), strict=True)],
        )
        s.replace(self.recent_spikes, [({"metric": m}, n) for m, n in spikes] or [({"metric": "any"}, 0)])
        s.replace(self.recent_slow, [({}, slow)])
        zero = [({"cause": c, "kind": ""}, 0.0) for c in CAUSES]
        s.replace(self.recent_causes, [({"cause": c, "kind": k}, n) for c, k, n, _ in causes] + zero)
        s.replace(self.recent_cause_delay, [({"cause": c, "kind": k}, d / 1e3) for c, k, _, d in causes] + zero)


def _list(paths: Iterable[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def _request_metrics_of(store: Store, capture_id: str, con) -> str | None:
    """The capture's request_metrics as a relation of ``con``: the file stored with the
    capture, or (a store written without its models) the rows computed now; None when the
    capture has no request."""
    from telemetry.models.catalogue import load_models, stored_key
    from telemetry.models.db import DEFAULT_PARAMS

    models = {m.name: m for m in load_models()}
    path = store.model_file(stored_key(models, "request_metrics", DEFAULT_PARAMS), "request_metrics", capture_id)
    if path.exists():
        return f"read_parquet({_list([path])})"
    if not _capture_files(store, "requests", capture_id):
        return None
    import warnings

    from telemetry.models.db import connect

    with warnings.catch_warnings():  # a few hundred rows: the extra copy does not matter
        warnings.simplefilter("ignore", UserWarning)
        rows = connect(store, {"capture_ids": [capture_id]}).execute(
            "SELECT * FROM request_metrics"
        ).to_arrow_table()
    con.register("capture_request_metrics", rows)
    return "capture_request_metrics"


def _capture_files(store: Store, table: str, capture_id: str) -> list[Path]:
    return sorted(store.table_dir(table).glob(f"**/{capture_id}-*.parquet"))


def _tcp_event_counts(store: Store, capture_id: str) -> list[tuple[str, str, int]]:
    """(kind, direction, events) of one capture: its network_events (the models over the
    capture's own files) and its capture_loss."""
    from telemetry.models.db import connect
    from telemetry.models.stored import FileStore
    from telemetry.store.schema import TABLES

    files = {table: _capture_files(store, table, capture_id) for table in TABLES}
    if not files["tcp_events"]:
        return []
    con = connect(FileStore(store.root, files), {"capture_ids": [capture_id]}, use_stored=False)
    try:
        return con.execute(
            "SELECT kind, direction, count(*) FROM network_events GROUP BY ALL "
            "UNION ALL SELECT kind, direction, count(*) FROM tcp_events WHERE kind = 'capture_loss' GROUP BY ALL"
        ).fetchall()
    finally:
        con.close()


# Tables read whole by the recent view: one row per connection/capture, and connections
# that opened long before the window still carry the window's requests.
_WHOLE_TABLES = ("captures", "connections")


class RecentStore(Store):
    """The store seen through its recent partitions only, so that the metric refresh costs
    the window, not the whole retention. telemetry.models.db.connect passes table_glob to
    read_parquet, which accepts a list of files as well as a glob."""

    def __init__(self, root: str | Path, since_ns: int) -> None:
        super().__init__(root)
        # one hour of slack: rtt_floor looks back over a trailing window
        self.first_hour = since_ns // NS_PER_HOUR - 1

    def table_files(self, table: str) -> list[Path]:
        files = super().table_files(table)
        if table in _WHOLE_TABLES:
            return files
        return [f for f in files if _hour_of(f) is None or _hour_of(f) >= self.first_hour]

    def table_glob(self, table: str):  # type: ignore[override]
        return [str(p) for p in self.table_files(table)]


def _hour_of(path: Path) -> int | None:
    """Hour bucket (since the epoch) of a file under .../date=YYYY-MM-DD/hour=HH/."""
    try:
        day = path.parent.parent.name.removeprefix("date=")
        hour = int(path.parent.name.removeprefix("hour="))
        return int(np.datetime64(day, "h").astype("int64")) + hour
    except (ValueError, TypeError):
        return None


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            # OpenMetrics (with exemplars) when the scraper asks for it, as Prometheus does
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._send(200, encoder(self.server.registry), content_type)
        elif path in ("/healthz", "/-/healthy"):
            ok = self.server.healthy()
            self._send(200 if ok else 503, b"ok\n" if ok else b"capture not running\n", "text/plain")
        elif path == "/":
            self._send(200, b"tailtap daemon: see /metrics and /healthz\n", "text/plain")
        else:
            self._send(404, b"not found\n", "text/plain")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server API)
        log.debug("metrics http: " + format, *args)


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], registry: CollectorRegistry, healthy: Callable[[], bool] = lambda: True) -> None:
        if ":" in addr[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.registry = registry
        self.healthy = healthy
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, name="metrics-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def parse_addr(text: str) -> tuple[str, int]:
    """'127.0.0.1:9464', '[::1]:9464', ':9464' (all interfaces) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)
