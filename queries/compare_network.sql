-- How did the network differ between two compared periods (compare_scope)? Over the
-- connections that carried each period's requests, during the period's span: TCP events
-- by kind (retransmissions, lost segments, out-of-order, zero/full windows) per 1,000
-- requests, and the median RTT on each side, in period a and in period b (the network's
-- events: network_events, not the packets the capture point itself missed).
-- depends_on: compare_scope, network_events, rtt_samples
WITH spans AS (
    SELECT period, conn_id, min(started_at) AS t0, max(coalesce(finished_at, started_at)) AS t1, count(*) AS requests
    FROM compare_scope GROUP BY ALL
),
ev AS (
    SELECT s.period,
        count(*) FILTER (WHERE e.kind LIKE '%retransmission' AND e.kind <> 'spurious_retransmission') AS retransmissions,
        count(*) FILTER (WHERE e.kind = 'lost_segment') AS lost_segments,
        count(*) FILTER (WHERE e.kind = 'out_of_order') AS out_of_order,
        count(*) FILTER (WHERE e.kind IN ('zero_window', 'window_full')) AS window_stalls
    FROM spans AS s JOIN network_events AS e ON e.conn_id = s.conn_id AND e.ts BETWEEN s.t0 AND s.t1
    GROUP BY ALL
),
rtt AS (
    SELECT s.period,
        median(r.rtt_ms) FILTER (WHERE r.direction = 'to_client') AS rtt_p50_ms_client_side,
        median(r.rtt_ms) FILTER (WHERE r.direction = 'to_server') AS rtt_p50_ms_server_side
    FROM spans AS s JOIN rtt_samples AS r ON r.conn_id = s.conn_id AND r.ts BETWEEN s.t0 AND s.t1
    GROUP BY ALL
),
req AS (SELECT period, sum(requests) AS requests FROM spans GROUP BY ALL)
SELECT
    q.period,
    q.requests,
    1000.0 * coalesce(ev.retransmissions, 0) / q.requests AS retransmissions_per_1k,
    1000.0 * coalesce(ev.lost_segments, 0) / q.requests AS lost_segments_per_1k,
    1000.0 * coalesce(ev.out_of_order, 0) / q.requests AS out_of_order_per_1k,
    1000.0 * coalesce(ev.window_stalls, 0) / q.requests AS window_stalls_per_1k,
    rtt.rtt_p50_ms_client_side,
    rtt.rtt_p50_ms_server_side
FROM req AS q LEFT JOIN ev USING (period) LEFT JOIN rtt USING (period)
ORDER BY q.period
