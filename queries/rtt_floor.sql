-- How inflated was each RTT sample over its path's floor? Every RTT sample with its path
-- (client address, server address) and the floor of that path and direction at the time
-- (path_rtt: the minimum over the trailing 60 seconds, across all connections on the
-- path, by 100 ms buckets); inflation_ms = rtt_ms - floor_ms. For drilling down into one
-- connection; the analysis reads path_rtt.
-- depends_on: rtt_samples, connections, path_rtt
SELECT
    s.conn_id,
    s.ts,
    s.direction,
    s.rtt_ms,
    s.source,
    c.client_addr,
    c.server_addr,
    p.floor_ms,
    s.rtt_ms - p.floor_ms AS inflation_ms
FROM rtt_samples AS s
JOIN connections AS c USING (conn_id)
LEFT JOIN path_rtt AS p
  ON p.client_addr = c.client_addr AND p.server_addr = c.server_addr AND p.direction = s.direction
 AND p.bucket = epoch_ns(s.ts) // 100000000
