-- How did latency, time-to-first-token and the inter-token gap evolve? Per window of
-- window_s seconds: requests, errors and p50/p99/p99.9 of each metric (client-side
-- estimates where available, see request_metrics).
-- depends_on: request_metrics
-- materialize: session
SELECT
    window_of(started_at) AS window_id,
    CAST(make_timestamp_ns(CAST(window_id * getvariable('window_s') * 1e9 AS BIGINT)) AS TIMESTAMPTZ) AS window_start,
    count(*) AS requests,
    count(*) FILTER (WHERE coalesce(grpc_status, 0) <> 0 OR http_status >= 400) AS errors,
    count(*) FILTER (WHERE app_throttled) AS throttled,
    quantile_cont(latency_eff_ms, 0.50) AS latency_p50_ms,
    quantile_cont(latency_eff_ms, 0.99) AS latency_p99_ms,
    quantile_cont(latency_eff_ms, 0.999) AS latency_p999_ms,
    quantile_cont(ttft_eff_ms, 0.50) AS ttft_p50_ms,
    quantile_cont(ttft_eff_ms, 0.99) AS ttft_p99_ms,
    quantile_cont(ttft_eff_ms, 0.999) AS ttft_p999_ms,
    quantile_cont(gap_eff_ms, 0.50) AS gap_p50_ms,
    quantile_cont(gap_eff_ms, 0.99) AS gap_p99_ms,
    quantile_cont(gap_eff_ms, 0.999) AS gap_p999_ms
FROM request_metrics
GROUP BY ALL
ORDER BY window_id
