-- Where did p99 spike? Windows where some method's p99 of latency, TTFT or token gap rose
-- well above that method's baseline (at least spike_factor times it and spike_min_delta_ms
-- more), or above the SLO when one is given, carried by at least two of the method's
-- requests in the window (or 2% of them) so that one outlier does not make a spike; and
-- windows where a method's failed requests jumped (at least 5% of its requests there,
-- 3 times its typical share, two requests). One row per window: the metrics and methods
-- that spiked, and the p99s of the method furthest above its baseline against its
-- baselines.
-- depends_on: method_windows, baseline, request_metrics
-- materialize: session
WITH limits AS (
    SELECT
        w.*,
        b.latency_baseline_p99_ms, b.ttft_baseline_p99_ms, b.gap_baseline_p99_ms, b.error_typical_share,
        coalesce(getvariable('slo_latency_ms'), CASE WHEN b.judged THEN above_baseline(b.latency_baseline_p99_ms) END) AS latency_limit_ms,
        coalesce(getvariable('slo_ttft_ms'), CASE WHEN b.judged THEN above_baseline(b.ttft_baseline_p99_ms) END) AS ttft_limit_ms,
        coalesce(getvariable('slo_gap_ms'), CASE WHEN b.judged THEN above_baseline(b.gap_baseline_p99_ms) END) AS gap_limit_ms
    FROM method_windows AS w
    LEFT JOIN baseline AS b USING (method)
),
counted AS (
    SELECT
        l.*,
        count(*) FILTER (WHERE m.latency_eff_ms > l.latency_limit_ms) AS latency_over,
        count(*) FILTER (WHERE m.ttft_eff_ms > l.ttft_limit_ms) AS ttft_over,
        count(*) FILTER (WHERE m.gap_eff_ms > l.gap_limit_ms) AS gap_over
    FROM limits AS l
    JOIN request_metrics AS m ON m.method = l.method AND window_of(m.started_at) = l.window_id
    GROUP BY ALL
),
flagged AS (
    SELECT
        *,
        list_filter(
            [CASE WHEN latency_p99_ms > latency_limit_ms AND latency_over >= greatest(2, ceil(0.02 * requests)) THEN 'latency' END,
             CASE WHEN ttft_p99_ms > ttft_limit_ms AND ttft_over >= greatest(2, ceil(0.02 * requests)) THEN 'ttft' END,
             CASE WHEN gap_p99_ms > gap_limit_ms AND gap_over >= greatest(2, ceil(0.02 * requests)) THEN 'gap' END,
             CASE WHEN errors >= 2 AND errors >= 0.05 * requests
                   AND errors >= 3 * coalesce(error_typical_share, 0) * requests THEN 'errors' END],
            lambda x: x IS NOT NULL) AS spiked_metrics,
        greatest(latency_p99_ms / nullif(latency_baseline_p99_ms, 0), ttft_p99_ms / nullif(ttft_baseline_p99_ms, 0),
                 gap_p99_ms / nullif(gap_baseline_p99_ms, 0), 0) AS severity
    FROM counted
),
totals AS (
    SELECT window_id, sum(requests) AS requests FROM method_windows GROUP BY window_id
)
SELECT
    f.window_id,
    CAST(make_timestamp_ns(CAST(f.window_id * getvariable('window_s') * 1e9 AS BIGINT)) AS TIMESTAMPTZ) AS window_start,
    any_value(t.requests) AS requests,
    list_sort(list_distinct(flatten(list(f.spiked_metrics)))) AS spiked_metrics,
    list_sort(list(f.method)) AS spiked_methods,
    -- the most severe method and its figures (of equal severities the method named last:
    -- every run, and every figure, the same one)
    arg_max(f.method, (f.severity, f.method)) AS method,
    arg_max(f.latency_p99_ms, (f.severity, f.method)) AS latency_p99_ms,
    arg_max(f.latency_baseline_p99_ms, (f.severity, f.method)) AS latency_baseline_p99_ms,
    arg_max(f.ttft_p99_ms, (f.severity, f.method)) AS ttft_p99_ms,
    arg_max(f.ttft_baseline_p99_ms, (f.severity, f.method)) AS ttft_baseline_p99_ms,
    arg_max(f.gap_p99_ms, (f.severity, f.method)) AS gap_p99_ms,
    arg_max(f.gap_baseline_p99_ms, (f.severity, f.method)) AS gap_baseline_p99_ms,
    sum(f.errors) AS errors,
    round(sum(coalesce(f.error_typical_share, 0) * f.requests), 1) AS errors_expected
FROM flagged AS f
JOIN totals AS t USING (window_id)
WHERE len(f.spiked_metrics) > 0
GROUP BY f.window_id
ORDER BY f.window_id
