-- What should each window's p99 have been? For every window, the baseline of each
-- metric: the 25th percentile of the p99s of the trailing baseline_windows windows that
-- had at least min_window_requests requests (a low quantile, so that a spike a few
-- windows back does not raise the bar for the next one), or, when fewer than two such
-- windows precede it, the
-- median p99 over all such windows of the capture (the typical p99). Also the typical
-- median (p50) of each metric, the reference for "excess" delay, and the baseline share
-- of failed requests.
-- depends_on: windows
-- materialize: session
WITH eligible AS (
    SELECT * FROM windows WHERE requests >= getvariable('min_window_requests')
),
typical AS (
    SELECT
        median(latency_p99_ms) AS latency_typical_p99_ms,
        median(ttft_p99_ms) AS ttft_typical_p99_ms,
        median(gap_p99_ms) AS gap_typical_p99_ms,
        median(latency_p50_ms) AS latency_typical_p50_ms,
        median(ttft_p50_ms) AS ttft_typical_p50_ms,
        median(gap_p50_ms) AS gap_typical_p50_ms,
        median(errors / requests) AS error_typical_share
    FROM eligible
),
trail AS (
    SELECT
        w.window_id,
        count(b.window_id) AS trailing_windows,
        quantile_cont(b.latency_p99_ms, 0.25) AS latency_trailing_p99_ms,
        quantile_cont(b.ttft_p99_ms, 0.25) AS ttft_trailing_p99_ms,
        quantile_cont(b.gap_p99_ms, 0.25) AS gap_trailing_p99_ms,
        median(b.errors / b.requests) AS error_trailing_share
    FROM windows AS w
    LEFT JOIN eligible AS b
        ON b.window_id BETWEEN w.window_id - getvariable('baseline_windows') AND w.window_id - 1
    GROUP BY w.window_id
)
SELECT
    w.*,
    t.trailing_windows,
    CASE WHEN t.trailing_windows >= 2 THEN t.latency_trailing_p99_ms ELSE ty.latency_typical_p99_ms END AS latency_baseline_p99_ms,
    CASE WHEN t.trailing_windows >= 2 THEN t.ttft_trailing_p99_ms ELSE ty.ttft_typical_p99_ms END AS ttft_baseline_p99_ms,
    CASE WHEN t.trailing_windows >= 2 THEN t.gap_trailing_p99_ms ELSE ty.gap_typical_p99_ms END AS gap_baseline_p99_ms,
    ty.latency_typical_p50_ms,
    ty.ttft_typical_p50_ms,
    ty.gap_typical_p50_ms,
    CASE WHEN t.trailing_windows >= 2 THEN t.error_trailing_share ELSE ty.error_typical_share END AS error_baseline_share
FROM windows AS w
JOIN trail AS t USING (window_id)
CROSS JOIN typical AS ty
ORDER BY w.window_id
