"""Prometheus metrics of the daemon: a small registry, the text exposition format, an
HTTP endpoint (stdlib http.server), and the store queries behind the "recent" gauges.

No client library: the exposition format is a few lines of text, and owning it keeps the
daemon's dependencies to what tailtap already has. Scrapes only read a rendered snapshot
under a lock; the expensive work (DuckDB over the store) runs in the ingest worker.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from telemetry import __version__
from telemetry.store import NS_PER_HOUR, Store

log = logging.getLogger("tailtap.daemon")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds; covers sub-ms loopback TTFTs up to minute-long generations.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
OTHER = "(other)"  # method label once max_methods distinct values were seen


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2**53):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class _Metric:
    kind = "untyped"

    def __init__(self, registry: Registry, name: str, doc: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self._lock = registry.lock
        registry.add(self)

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name}: labels {sorted(labels)} != {sorted(self.labelnames)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def header(self) -> list[str]:
        doc = self.doc.replace("\\", "\\\\").replace("\n", "\\n")
        return [f"# HELP {self.name} {doc}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    """Monotonic; only ever incremented."""

    kind = "counter"

    def __init__(self, registry: Registry, name: str, doc: str, labelnames: Sequence[str] = ()) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        super().__init__(registry, name, doc, labelnames)
        self._values: dict[tuple[str, ...], float] = {} if labelnames else {(): 0.0}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: counters only go up")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def lines(self) -> list[str]:
        return [f"{self.name}{_labels(self.labelnames, k)} {_fmt(v)}" for k, v in sorted(self._values.items())]


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, registry: Registry, name: str, doc: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(registry, name, doc, labelnames)
        self._values: dict[tuple[str, ...], float] = {}

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def replace(self, series: Iterable[tuple[dict[str, str], float]]) -> None:
        """Swap every series at once (recomputed gauges: vanished label sets disappear)."""
        new = {self._key(labels): float(v) for labels, v in series}
        with self._lock:
            self._values = new

    def value(self, **labels: str) -> float | None:
        with self._lock:
            return self._values.get(self._key(labels))

    def lines(self) -> list[str]:
        return [f"{self.name}{_labels(self.labelnames, k)} {_fmt(v)}" for k, v in sorted(self._values.items())]


class Histogram(_Metric):
    """Cumulative buckets; observations come in batches (one capture's requests)."""

    kind = "histogram"

    def __init__(
        self, registry: Registry, name: str, doc: str, labelnames: Sequence[str] = (), buckets: Sequence[float] = LATENCY_BUCKETS
    ) -> None:
        super().__init__(registry, name, doc, labelnames)
        self.bounds = np.asarray(sorted(buckets), dtype="float64")
        self._series: dict[tuple[str, ...], tuple[np.ndarray, list[float]]] = {}

    def observe_many(self, values: Iterable[float | None], **labels: str) -> None:
        arr = np.asarray([v for v in values if v is not None], dtype="float64")
        arr = arr[~np.isnan(arr)]
        if arr.size == 0:
            return
        # bucket i counts values <= bounds[i] (Prometheus `le`); last slot is +Inf
        counts = np.bincount(np.searchsorted(self.bounds, arr, side="left"), minlength=len(self.bounds) + 1)
        key = self._key(labels)
        with self._lock:
            buckets, total = self._series.setdefault(key, (np.zeros(len(self.bounds) + 1, dtype="int64"), [0.0]))
            buckets += counts
            total[0] += float(arr.sum())

    def lines(self) -> list[str]:
        out = []
        for key, (buckets, total) in sorted(self._series.items()):
            cumulative = np.cumsum(buckets)
            les = [_fmt(b) for b in self.bounds.tolist()] + ["+Inf"]
            for le, count in zip(les, cumulative.tolist(), strict=True):
                le_label = 'le="' + le + '"'
                out.append(f"{self.name}_bucket{_labels(self.labelnames, key, le_label)} {count}")
            out.append(f"{self.name}_sum{_labels(self.labelnames, key)} {_fmt(total[0])}")
            out.append(f"{self.name}_count{_labels(self.labelnames, key)} {int(cumulative[-1])}")
        return out


class Registry:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._metrics: list[_Metric] = []

    def add(self, metric: _Metric) -> None:
        if any(m.name == metric.name for m in self._metrics):
            raise ValueError(f"metric {metric.name} registered twice")
        self._metrics.append(metric)

    def render(self) -> str:
        with self.lock:
            out: list[str] = []
            for m in self._metrics:
                out += m.header()
                out += m.lines()
        return "\n".join(out) + "\n"


class DaemonMetrics:
    """Every metric the daemon exposes, with their documentation."""

    def __init__(self, max_methods: int = 200) -> None:
        r = self.registry = Registry()
        self.max_methods = max_methods
        self._methods: set[str] = set()
        self.build_info = Gauge(r, "tailtap_build_info", "tailtap version running this daemon (always 1).", ["version"])
        self.build_info.set(1, version=__version__)
        self.start_time = Gauge(r, "tailtap_daemon_start_time_seconds", "Unix time the daemon started.")
        self.start_time.set(time.time())
        # capture
        self.capture_up = Gauge(r, "tailtap_capture_up", "1 while the capture process (tcpdump/dumpcap) is running, else 0.")
        self.capture_restarts = Counter(r, "tailtap_capture_restarts_total", "Times the capture process died unexpectedly and was restarted.")
        self.capture_packets = Counter(r, "tailtap_capture_packets_total", "Packets received by the capture filter, as reported by the capture tool.")
        self.kernel_drops = Counter(r, "tailtap_capture_kernel_drops_total", "Packets the kernel dropped before the capture tool could read them (capture tool statistics).")
        # spool
        self.spool_pending = Gauge(r, "tailtap_spool_pending_files", "Completed capture files waiting to be ingested.")
        self.spool_oldest_age = Gauge(r, "tailtap_spool_oldest_pending_age_seconds", "Age of the oldest completed capture file waiting to be ingested (0: none).")
        self.spool_dropped = Counter(r, "tailtap_spool_dropped_files_total", "Capture files deleted unread because more than --max-files were waiting (ingest too slow).")
        self.spool_failed = Gauge(r, "tailtap_spool_failed_files", "Capture files in spool/failed (could not be ingested; kept for inspection).")
        self.spool_empty = Counter(r, "tailtap_spool_empty_files_total", "Completed capture files without packets, deleted without ingest.")
        # ingest
        self.captures_ingested = Counter(r, "tailtap_captures_ingested_total", "Capture files ingested into the store.")
        self.ingest_errors = Counter(r, "tailtap_ingest_errors_total", "Capture files that failed to ingest (moved to spool/failed).")
        self.packets = Counter(r, "tailtap_ingested_packets_total", "Packets read from ingested capture files.")
        self.bytes = Counter(r, "tailtap_ingested_bytes_total", "Captured bytes of the packets read from ingested capture files.")
        self.connections = Counter(r, "tailtap_ingested_connections_total", "TCP connections found in ingested capture files.")
        self.ingest_seconds = Counter(r, "tailtap_ingest_seconds_total", "Time spent ingesting capture files.")
        self.last_ingest = Gauge(r, "tailtap_last_ingest_timestamp_seconds", "Unix time the last capture file was ingested.")
        self.ingest_lag = Gauge(r, "tailtap_ingest_lag_seconds", "For the last ingested file: time from its last packet to its rows being in the store.")
        self.requests = Counter(
            r, "tailtap_requests_total",
            "Requests (HTTP/2 streams, gRPC calls, HTTP/1.1 exchanges) ingested, by method (gRPC path) and status (empty: not seen).",
            ["method", "grpc_status", "http_status"],
        )
        self.latency = Histogram(r, "tailtap_request_latency_seconds", "Request latency (client-side estimate where available), by method.", ["method"])
        self.ttft = Histogram(r, "tailtap_request_ttft_seconds", "Time to first response message (client-side estimate where available), by method.", ["method"])
        self.max_gap = Histogram(r, "tailtap_request_max_gap_seconds", "Largest gap between consecutive response messages of a request, by method.", ["method"], GAP_BUCKETS)
        # recent window (recomputed with DuckDB over the store)
        self.recent_requests = Gauge(r, "tailtap_recent_requests", "Requests in the recent window (--metrics-window-seconds), by method.", ["method"])
        self.recent_latency = Gauge(r, "tailtap_recent_request_latency_seconds", "Latency percentiles (p50, p99) over the recent window, by method.", ["method", "percentile"])
        self.recent_ttft = Gauge(r, "tailtap_recent_request_ttft_seconds", "TTFT percentiles (p50, p99) over the recent window, by method.", ["method", "percentile"])
        self.recent_gap = Gauge(r, "tailtap_recent_request_max_gap_seconds", "Percentiles (p50, p99) of the per-request largest token gap over the recent window, by method.", ["method", "percentile"])
        self.recent_spikes = Gauge(r, "tailtap_recent_spike_windows", "Windows of the recent window whose p99 spiked (spikes view), by spiked metric.", ["metric"])
        self.recent_slow = Gauge(r, "tailtap_recent_slow_requests", "Slow requests in the recent window (slow_requests view).")
        self.recent_causes = Gauge(r, "tailtap_recent_slow_request_causes", "Slow requests of the recent window per cause (request_cause view); kind empty when none.", ["cause", "kind"])
        self.recent_cause_delay = Gauge(r, "tailtap_recent_slow_request_cause_delay_seconds", "Delay the cause explains, summed over the recent window's slow requests.", ["cause", "kind"])
        self.refresh_errors = Counter(r, "tailtap_metrics_refresh_errors_total", "Failed recomputations of the recent-window gauges.")
        self.refresh_duration = Gauge(r, "tailtap_metrics_refresh_duration_seconds", "Time the last recomputation of the recent-window gauges took.")
        self.last_refresh = Gauge(r, "tailtap_metrics_refresh_timestamp_seconds", "Unix time of the last successful recomputation of the recent-window gauges.")
        # retention
        self.retention_removed = Counter(r, "tailtap_retention_removed_partitions_total", "Store partitions (table/date=/hour=) deleted by retention.")
        self.store_bytes = Gauge(r, "tailtap_store_bytes", "Size of the Parquet store on disk.")

    def method_label(self, method: str) -> str:
        """Bound the label's cardinality: HTTP/1.1 paths can be unbounded."""
        with self.registry.lock:
            if method in self._methods:
                return method
            if len(self._methods) < self.max_methods:
                self._methods.add(method)
                return method
        return OTHER

    def observe_capture(self, store: Store, capture_id: str) -> tuple[float | None, int | None]:
        """Fold one ingested capture's requests into the counters and histograms.

        Returns (last packet time in s, kernel drops) from its `captures` row.
        """
        import duckdb

        con = duckdb.connect()
        try:
            # the capture's request_metrics, as stored with it at ingest: the one definition
            # of each request's method, latency, TTFT and gap the report and gauges read too
            rel = _request_metrics_of(store, capture_id, con)
            if rel is not None:
                for method, grpc_status, http_status, n in con.execute(
                    f"SELECT method, coalesce(CAST(grpc_status AS VARCHAR), ''), "
                    f"coalesce(CAST(http_status AS VARCHAR), ''), count(*) FROM {rel} GROUP BY ALL"
                ).fetchall():
                    self.requests.inc(n, method=self.method_label(method), grpc_status=grpc_status, http_status=http_status)
                for method, lat, ttft, gap in con.execute(
                    f"SELECT method, list(latency_eff_ms / 1e3), list(ttft_eff_ms / 1e3), list(gap_eff_ms / 1e3) "
                    f"FROM {rel} GROUP BY ALL"
                ).fetchall():
                    label = self.method_label(method)
                    self.latency.observe_many(lat, method=label)
                    self.ttft.observe_many(ttft, method=label)
                    self.max_gap.observe_many(gap, method=label)
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
        from telemetry.db import connect

        started = time.perf_counter()
        now = time.time() if now is None else now
        since_ns = int((now - window_s) * 1e9)
        try:
            con = connect(RecentStore(store.root, since_ns), {"since_ns": since_ns, "window_s": bucket_s})
            try:
                self._query_recent(con)
            finally:
                con.close()
        except Exception as exc:  # a refresh must never take the daemon down
            self.refresh_errors.inc()
            log.warning("recent-window metrics not refreshed: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return
        self.refresh_duration.set(time.perf_counter() - started)
        self.last_refresh.set(time.time())

    def _query_recent(self, con) -> None:
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
        spikes = con.execute("SELECT m, count(*) FROM spikes, unnest(spiked_metrics) AS t(m) GROUP BY m").fetchall()
        slow = con.execute("SELECT count(*) FROM slow_requests WHERE len(slow_metrics) > 0").fetchone()[0]
        causes = con.execute(
            "SELECT cause, coalesce(kind, ''), count(DISTINCT (conn_id, stream_id)), coalesce(sum(delay_ms), 0) "
            "FROM request_cause GROUP BY ALL"
        ).fetchall()
        # (other) may collect several methods: keep the first value rather than fail on duplicates
        self.recent_requests.replace(_dedupe(counts))
        self.recent_latency.replace(_dedupe(lat))
        self.recent_ttft.replace(_dedupe(ttft))
        self.recent_gap.replace(_dedupe(gap))
        self.recent_spikes.replace([({"metric": m}, n) for m, n in spikes] or [({"metric": "any"}, 0)])
        self.recent_slow.set(slow)
        self.recent_causes.replace([({"cause": c, "kind": k}, n) for c, k, n, _ in causes])
        self.recent_cause_delay.replace([({"cause": c, "kind": k}, d / 1e3) for c, k, _, d in causes])


def _dedupe(series: list[tuple[dict[str, str], float]]) -> list[tuple[dict[str, str], float]]:
    seen: set[tuple] = set()
    out = []
    for labels, v in series:
        key = tuple(sorted(labels.items()))
        if key not in seen:
            seen.add(key)
            out.append((labels, v))
    return out


def _list(paths: Iterable[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def _request_metrics_of(store: Store, capture_id: str, con) -> str | None:
    """The capture's request_metrics as a relation of ``con``: the file stored with the
    capture, or (a store written without its models) the rows computed now; None when the
    capture has no request."""
    from telemetry.db import DEFAULT_PARAMS
    from telemetry.models import load_models, stored_key

    models = {m.name: m for m in load_models()}
    path = store.model_file(stored_key(models, "request_metrics", DEFAULT_PARAMS), "request_metrics", capture_id)
    if path.exists():
        return f"read_parquet({_list([path])})"
    if not _capture_files(store, "requests", capture_id):
        return None
    import warnings

    from telemetry.db import connect

    with warnings.catch_warnings():  # a few hundred rows: the extra copy does not matter
        warnings.simplefilter("ignore", UserWarning)
        rows = connect(store, {"capture_ids": [capture_id]}).execute(
            "SELECT method, grpc_status, http_status, latency_eff_ms, ttft_eff_ms, gap_eff_ms FROM request_metrics"
        ).to_arrow_table()
    con.register("capture_request_metrics", rows)
    return "capture_request_metrics"


def _capture_files(store: Store, table: str, capture_id: str) -> list[Path]:
    return sorted(store.table_dir(table).glob(f"**/{capture_id}-*.parquet"))


# Tables read whole by the recent view: one row per connection/capture, and connections
# that opened long before the window still carry the window's requests.
_WHOLE_TABLES = ("captures", "connections")


class RecentStore(Store):
    """The store seen through its recent partitions only, so that the metric refresh costs
    the window, not the whole retention. telemetry.db.connect passes table_glob to
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
            self._send(200, self.server.registry.render().encode(), CONTENT_TYPE)
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

    def __init__(self, addr: tuple[str, int], registry: Registry, healthy: Callable[[], bool] = lambda: True) -> None:
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
