-- Where did time-to-first-token fall, window by window? Per window of window_s seconds
-- and TTFT band (powers of two of a millisecond: 1, 2, 4, ... ms), how many requests
-- (client-side TTFT where known, as request_metrics defines it). The heatmap of the
-- HTML report.
-- depends_on: request_metrics
SELECT
    CAST(make_timestamp_ns(CAST(window_of(started_at) * getvariable('window_s') * 1e9 AS BIGINT)) AS TIMESTAMPTZ) AS window_start,
    CAST(pow(2, floor(log2(greatest(ttft_eff_ms, 1)))) AS DOUBLE) AS ttft_band_ms,
    count(*) AS requests
FROM request_metrics
WHERE ttft_eff_ms IS NOT NULL
GROUP BY ALL
ORDER BY window_start, ttft_band_ms
