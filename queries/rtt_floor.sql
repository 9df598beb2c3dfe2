-- How inflated was each RTT sample over its path's floor? The floor is the minimum RTT
-- seen on the same path (client address, server address, direction) over the trailing
-- 60 seconds, across all connections on that path: a trailing floor, not the global
-- minimum, so a route change or a long capture does not make everything look queued.
-- inflation_ms = rtt_ms - floor_ms (queueing delay when the queue sits on that path).
-- depends_on: rtt_samples, connections
SELECT
    s.conn_id,
    s.ts,
    s.direction,
    s.rtt_ms,
    s.source,
    c.client_addr,
    c.server_addr,
    min(s.rtt_ms) OVER (
        PARTITION BY c.client_addr, c.server_addr, s.direction
        ORDER BY epoch_ns(s.ts)
        RANGE BETWEEN 60000000000 PRECEDING AND CURRENT ROW
    ) AS floor_ms,
    s.rtt_ms - min(s.rtt_ms) OVER (
        PARTITION BY c.client_addr, c.server_addr, s.direction
        ORDER BY epoch_ns(s.ts)
        RANGE BETWEEN 60000000000 PRECEDING AND CURRENT ROW
    ) AS inflation_ms
FROM rtt_samples AS s
JOIN connections AS c USING (conn_id)
