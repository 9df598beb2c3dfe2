-- How did each method change between two periods (compare_scope)? Per method: requests,
-- errors, and p50/p99 of latency, TTFT and the largest token gap in period a and in period
-- b, and the relative change of each p99 (b / a - 1); the methods whose p99 moved most come
-- first.
-- depends_on: compare_scope
WITH per AS (
    SELECT
        method,
        count(*) FILTER (WHERE period = 'a') AS requests_a,
        count(*) FILTER (WHERE period = 'b') AS requests_b,
        count(*) FILTER (WHERE period = 'a' AND (coalesce(grpc_status, 0) <> 0 OR http_status >= 400)) AS errors_a,
        count(*) FILTER (WHERE period = 'b' AND (coalesce(grpc_status, 0) <> 0 OR http_status >= 400)) AS errors_b,
        quantile_cont(latency_eff_ms, 0.5) FILTER (WHERE period = 'a') AS latency_p50_a,
        quantile_cont(latency_eff_ms, 0.5) FILTER (WHERE period = 'b') AS latency_p50_b,
        quantile_cont(latency_eff_ms, 0.99) FILTER (WHERE period = 'a') AS latency_p99_a,
        quantile_cont(latency_eff_ms, 0.99) FILTER (WHERE period = 'b') AS latency_p99_b,
        quantile_cont(ttft_eff_ms, 0.5) FILTER (WHERE period = 'a') AS ttft_p50_a,
        quantile_cont(ttft_eff_ms, 0.5) FILTER (WHERE period = 'b') AS ttft_p50_b,
        quantile_cont(ttft_eff_ms, 0.99) FILTER (WHERE period = 'a') AS ttft_p99_a,
        quantile_cont(ttft_eff_ms, 0.99) FILTER (WHERE period = 'b') AS ttft_p99_b,
        quantile_cont(gap_eff_ms, 0.5) FILTER (WHERE period = 'a') AS gap_p50_a,
        quantile_cont(gap_eff_ms, 0.5) FILTER (WHERE period = 'b') AS gap_p50_b,
        quantile_cont(gap_eff_ms, 0.99) FILTER (WHERE period = 'a') AS gap_p99_a,
        quantile_cont(gap_eff_ms, 0.99) FILTER (WHERE period = 'b') AS gap_p99_b
    FROM compare_scope
    GROUP BY method
)
SELECT
    *,
    latency_p99_b / nullif(latency_p99_a, 0) - 1 AS latency_p99_change,
    ttft_p99_b / nullif(ttft_p99_a, 0) - 1 AS ttft_p99_change,
    gap_p99_b / nullif(gap_p99_a, 0) - 1 AS gap_p99_change
FROM per
ORDER BY greatest(abs(coalesce(latency_p99_change, 0)), abs(coalesce(ttft_p99_change, 0)),
                  abs(coalesce(gap_p99_change, 0))) DESC, method
