-- Where did p99 spike? Windows whose p99 of latency, TTFT or token gap rose well above
-- its baseline (at least spike_factor times it and spike_min_delta_ms more), or above
-- the SLO when one is given, carried by at least two requests (or 2% of the window) so
-- that one outlier does not make a spike; and windows where failed requests jumped
-- (at least 5% of the window, 3 times the baseline share, two requests). One row per
-- window, with the metrics that spiked.
-- depends_on: baseline, request_metrics
-- materialize: session
WITH limits AS (
    SELECT
        b.*,
        coalesce(getvariable('slo_latency_ms'),
                 greatest(latency_baseline_p99_ms * getvariable('spike_factor'), latency_baseline_p99_ms + getvariable('spike_min_delta_ms'))) AS latency_limit_ms,
        coalesce(getvariable('slo_ttft_ms'),
                 greatest(ttft_baseline_p99_ms * getvariable('spike_factor'), ttft_baseline_p99_ms + getvariable('spike_min_delta_ms'))) AS ttft_limit_ms,
        coalesce(getvariable('slo_gap_ms'),
                 greatest(gap_baseline_p99_ms * getvariable('spike_factor'), gap_baseline_p99_ms + getvariable('spike_min_delta_ms'))) AS gap_limit_ms
    FROM baseline AS b
    WHERE b.requests >= getvariable('min_window_requests')
),
counted AS (
    SELECT
        l.*,
        count(*) FILTER (WHERE m.latency_eff_ms > l.latency_limit_ms) AS latency_over,
        count(*) FILTER (WHERE m.ttft_eff_ms > l.ttft_limit_ms) AS ttft_over,
        count(*) FILTER (WHERE m.gap_eff_ms > l.gap_limit_ms) AS gap_over
    FROM limits AS l
    JOIN (SELECT *, window_of(started_at) AS window_id FROM request_metrics) AS m USING (window_id)
    GROUP BY ALL
),
flagged AS (
    SELECT
        *,
        greatest(2, ceil(0.02 * requests)) AS min_over,
        list_filter(
            [CASE WHEN latency_p99_ms > latency_limit_ms AND latency_over >= greatest(2, ceil(0.02 * requests)) THEN 'latency' END,
             CASE WHEN ttft_p99_ms > ttft_limit_ms AND ttft_over >= greatest(2, ceil(0.02 * requests)) THEN 'ttft' END,
             CASE WHEN gap_p99_ms > gap_limit_ms AND gap_over >= greatest(2, ceil(0.02 * requests)) THEN 'gap' END,
             CASE WHEN errors >= 2 AND errors >= 0.05 * requests
                   AND errors >= 3 * coalesce(error_baseline_share, 0) * requests THEN 'errors' END],
            lambda x: x IS NOT NULL) AS spiked_metrics
    FROM counted
)
SELECT
    window_id,
    window_start,
    requests,
    spiked_metrics,
    latency_p99_ms, latency_baseline_p99_ms,
    ttft_p99_ms, ttft_baseline_p99_ms,
    gap_p99_ms, gap_baseline_p99_ms,
    errors, round(coalesce(error_baseline_share, 0) * requests, 1) AS errors_expected
FROM flagged
WHERE len(spiked_metrics) > 0
ORDER BY window_id
