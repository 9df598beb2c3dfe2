-- Which requests were slow? A request is slow when its latency, TTFT or largest token gap
-- exceeds the user's SLO for that metric (variables slo_latency_ms, slo_ttft_ms,
-- slo_gap_ms) or, without an SLO, the p99 its own method was expected to have (baseline:
-- per method, from its calm windows) by a margin (10% and 5 ms: slow_threshold), or when it
-- was turned away by throttling (HTTP 429/503, RESOURCE_EXHAUSTED, UNAVAILABLE): a fast
-- rejection is still a failed request, its caller retries later. A method whose baseline is
-- too thin (baseline.judged = false) is judged by SLOs and throttling only. excess_ms is how
-- far the worst metric went above its method's median: the delay the causes must explain.
-- window_id is the window it started in.
-- depends_on: request_metrics, baseline
-- materialize: session
WITH judged AS (
    SELECT
        m.*,
        window_of(m.started_at) AS window_id,
        coalesce(getvariable('slo_latency_ms'), CASE WHEN b.judged THEN slow_threshold(b.latency_baseline_p99_ms) END) AS latency_threshold_ms,
        coalesce(getvariable('slo_ttft_ms'), CASE WHEN b.judged THEN slow_threshold(b.ttft_baseline_p99_ms) END) AS ttft_threshold_ms,
        coalesce(getvariable('slo_gap_ms'), CASE WHEN b.judged THEN slow_threshold(b.gap_baseline_p99_ms) END) AS gap_threshold_ms,
        b.latency_typical_p50_ms,
        b.ttft_typical_p50_ms,
        b.gap_typical_p50_ms
    FROM request_metrics AS m
    LEFT JOIN baseline AS b USING (method)
)
SELECT
    *,
    list_filter(
        [CASE WHEN latency_eff_ms > latency_threshold_ms THEN 'latency' END,
         CASE WHEN ttft_eff_ms > ttft_threshold_ms THEN 'ttft' END,
         CASE WHEN gap_eff_ms > gap_threshold_ms THEN 'gap' END,
         CASE WHEN app_throttled THEN 'throttled' END,
         CASE WHEN unanswered THEN 'unanswered' END],
        lambda x: x IS NOT NULL) AS slow_metrics,
    greatest(
        CASE WHEN latency_eff_ms > latency_threshold_ms THEN latency_eff_ms - coalesce(latency_typical_p50_ms, 0) END,
        CASE WHEN ttft_eff_ms > ttft_threshold_ms THEN ttft_eff_ms - coalesce(ttft_typical_p50_ms, 0) END,
        CASE WHEN gap_eff_ms > gap_threshold_ms THEN gap_eff_ms - coalesce(gap_typical_p50_ms, 0) END,
        0) AS excess_ms
FROM judged
WHERE latency_eff_ms > latency_threshold_ms
   OR ttft_eff_ms > ttft_threshold_ms
   OR gap_eff_ms > gap_threshold_ms
   OR app_throttled
   OR unanswered
