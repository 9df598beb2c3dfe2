-- Which requests were slow? A request is slow when its latency, TTFT or largest token
-- gap exceeds the user's SLO for that metric (variables slo_latency_ms, slo_ttft_ms,
-- slo_gap_ms) or, without an SLO, the p99 its window was expected to have (the
-- baseline p99: judging a window by its own p99 would hide most requests of a spike)
-- by a margin (10% and 5 ms: a p99 estimated from a few windows is noisy),
-- or when it was turned away by throttling (HTTP 429/503, RESOURCE_EXHAUSTED,
-- UNAVAILABLE): a fast rejection is still a failed request, its caller retries later.
-- excess_ms is how far the worst metric went above its typical median: the delay the
-- causes must explain.
-- depends_on: request_metrics, baseline
-- materialize: session
WITH judged AS (
    SELECT
        m.*,
        -- a baseline p99 estimated from a few windows is noisy: a request must clear it by
        -- a margin (10%, and 5 ms) to count as slow; an SLO is taken as given
        coalesce(getvariable('slo_latency_ms'), greatest(1.1 * b.latency_baseline_p99_ms, b.latency_baseline_p99_ms + 5)) AS latency_threshold_ms,
        coalesce(getvariable('slo_ttft_ms'), greatest(1.1 * b.ttft_baseline_p99_ms, b.ttft_baseline_p99_ms + 5)) AS ttft_threshold_ms,
        coalesce(getvariable('slo_gap_ms'), greatest(1.1 * b.gap_baseline_p99_ms, b.gap_baseline_p99_ms + 5)) AS gap_threshold_ms,
        b.latency_typical_p50_ms,
        b.ttft_typical_p50_ms,
        b.gap_typical_p50_ms
    FROM (SELECT *, window_of(started_at) AS window_id FROM request_metrics) AS m
    JOIN baseline AS b USING (window_id)
)
SELECT
    *,
    list_filter(
        [CASE WHEN latency_eff_ms > latency_threshold_ms THEN 'latency' END,
         CASE WHEN ttft_eff_ms > ttft_threshold_ms THEN 'ttft' END,
         CASE WHEN gap_eff_ms > gap_threshold_ms THEN 'gap' END,
         CASE WHEN app_throttled THEN 'throttled' END],
        lambda x: x IS NOT NULL) AS slow_metrics,
    greatest(
        CASE WHEN latency_eff_ms > latency_threshold_ms THEN latency_eff_ms - latency_typical_p50_ms END,
        CASE WHEN ttft_eff_ms > ttft_threshold_ms THEN ttft_eff_ms - ttft_typical_p50_ms END,
        CASE WHEN gap_eff_ms > gap_threshold_ms THEN gap_eff_ms - gap_typical_p50_ms END,
        0) AS excess_ms
FROM judged
WHERE latency_eff_ms > latency_threshold_ms
   OR ttft_eff_ms > ttft_threshold_ms
   OR gap_eff_ms > gap_threshold_ms
   OR app_throttled
