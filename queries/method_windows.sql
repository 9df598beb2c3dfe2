-- How did each method do in each window? Per window (window_s seconds) and method (gRPC
-- method / HTTP path): requests, errors, and p50/p99 of latency, time-to-first-token and the
-- largest token gap (client-side estimates where available, see request_metrics). The unit
-- of baselines and spike detection: a 10 ms unary method and an 800 ms streaming one are
-- each judged against what that method was expected to do.
-- depends_on: request_metrics
-- materialize: session
SELECT
    window_of(started_at) AS window_id,
    method,
    count(*) AS requests,
    count(*) FILTER (WHERE coalesce(grpc_status, 0) <> 0 OR http_status >= 400) AS errors,
    quantile_cont(latency_eff_ms, 0.50) AS latency_p50_ms,
    quantile_cont(latency_eff_ms, 0.99) AS latency_p99_ms,
    quantile_cont(ttft_eff_ms, 0.50) AS ttft_p50_ms,
    quantile_cont(ttft_eff_ms, 0.99) AS ttft_p99_ms,
    quantile_cont(gap_eff_ms, 0.50) AS gap_p50_ms,
    quantile_cont(gap_eff_ms, 0.99) AS gap_p99_ms
FROM request_metrics
GROUP BY ALL
