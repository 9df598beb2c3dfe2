-- Which captures are in scope (variable capture_ids, null = all), and what was in them?
-- One row per capture: packets, connections, requests, time span and problems found.
-- depends_on: captures
SELECT
    path,
    format,
    packets,
    connections,
    requests,
    first_ts,
    last_ts,
    round(epoch_ns(last_ts) / 1e9 - epoch_ns(first_ts) / 1e9, 3) AS seconds,
    issues
FROM captures
WHERE in_scope(capture_id)
ORDER BY first_ts, path
