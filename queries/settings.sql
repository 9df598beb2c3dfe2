-- Which settings does this analysis use? One row, the one definition every surface reads
-- (analyze, report, sql, dashboards, daemon): window_s, the window length of the timeline
-- and of spike detection: the variable when it is set, else the shortest of 1, 2, 5, 10,
-- 30 s, 1, 5, 15 min and 1 h that cuts the time span of the requests in scope into at most
-- 20 windows (10 s when they span no time). The engine (telemetry.models.db) sets the variable
-- from this row before any model that reads it runs.
-- depends_on: requests_in_range
WITH span AS (
    SELECT (epoch_ns(max(seen_at)) - epoch_ns(min(seen_at))) / 1e9 AS span_s FROM requests_in_range
)
SELECT
    CAST(coalesce(
        getvariable('window_s'),
        CASE WHEN coalesce(span_s, 0) = 0 THEN 10.0
             ELSE coalesce((SELECT min(w) FROM unnest([1, 2, 5, 10, 30, 60, 300, 900, 3600]) AS t(w) WHERE span_s / w <= 20), 3600)
        END) AS DOUBLE) AS window_s,
    span_s
FROM span
