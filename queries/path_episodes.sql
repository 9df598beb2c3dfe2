-- When was a path queued, and when was it losing packets? Episodes per path (client
-- address <-> server address): runs of seconds with RTT inflation over the floor (kind
-- 'queue', seconds at most 1 s apart) or with retransmissions toward the client (kind
-- 'loss', at most 2 s apart). One row per path-second inside an episode, with the
-- path_timeline columns and the episode's number (per path and kind).
-- depends_on: path_timeline
-- materialize: session
WITH marked AS (
    SELECT 'queue' AS kind, 1 AS max_gap_s, *
    FROM path_timeline
    WHERE queued(inflation_ms, floor_ms)
    UNION ALL
    SELECT 'loss', 2, *
    FROM path_timeline
    WHERE retransmissions > 0
),
spaced AS (
    SELECT *,
        second - lag(second) OVER (PARTITION BY kind, client_addr, server_addr ORDER BY second) AS since_prev
    FROM marked
)
SELECT * EXCLUDE (since_prev, max_gap_s),
    sum(CASE WHEN since_prev IS NULL OR since_prev > max_gap_s THEN 1 ELSE 0 END)
        OVER (PARTITION BY kind, client_addr, server_addr ORDER BY second) AS episode
FROM spaced
