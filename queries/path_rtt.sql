-- How did each network path's RTT behave, 100 ms at a time? Per path (client address,
-- server address), direction and 100 ms bucket: the RTT samples of every connection on the
-- path (only those that cross the network: next to a server, or a client, the host itself
-- inflates them: a stalled server delays its ACKs), their minimum, 25th percentile, median
-- and maximum, and the path's floor: the minimum over the trailing 60 seconds (a trailing
-- floor, not the global minimum, so a route change or a long capture does not make
-- everything look queued). The inflation columns are those quantiles over the floor: the
-- queueing delay when the queue sits on that path. Everything that judges queueing reads
-- RTT through this model: a request's lifetime is a run of buckets, so its evidence costs
-- its buckets, not every sample of its path.
-- Columns: client_addr, server_addr, direction, bucket (epoch ns // 100 ms), samples,
-- rtt_min_ms, rtt_p25_ms, rtt_p50_ms, rtt_max_ms, floor_ms, inflation_p25_ms,
-- inflation_p50_ms, inflation_max_ms.
-- depends_on: rtt_samples, connections
-- materialize: session
WITH network AS (
    SELECT c.client_addr, c.server_addr, s.direction, epoch_ns(s.ts) // 100000000 AS bucket, s.rtt_ms
    FROM rtt_samples AS s
    JOIN connections AS c USING (conn_id)
    WHERE c.client_addr IS NOT NULL AND c.server_addr IS NOT NULL
      AND NOT (c.capture_side = 'server' AND s.direction = 'to_server')
      AND NOT (c.capture_side = 'client' AND s.direction = 'to_client')
),
buckets AS (
    SELECT client_addr, server_addr, direction, bucket, samples, rtt_min_ms,
        quartiles[1] AS rtt_p25_ms, quartiles[2] AS rtt_p50_ms, rtt_max_ms
    FROM (
        SELECT client_addr, server_addr, direction, bucket,
            count(*) AS samples,
            min(rtt_ms) AS rtt_min_ms,
            -- both from one aggregate: each quantile_cont keeps every value of its group
            -- (DuckDB cannot spill that), so two of them held the samples twice
            quantile_cont(rtt_ms, [0.25, 0.50]) AS quartiles,
            max(rtt_ms) AS rtt_max_ms
        FROM network
        GROUP BY ALL
    )
),
floored AS (
    SELECT *,
        min(rtt_min_ms) OVER (PARTITION BY client_addr, server_addr, direction ORDER BY bucket
                              RANGE BETWEEN 600 PRECEDING AND CURRENT ROW) AS floor_ms
    FROM buckets
)
SELECT *,
    rtt_p25_ms - floor_ms AS inflation_p25_ms,
    rtt_p50_ms - floor_ms AS inflation_p50_ms,
    rtt_max_ms - floor_ms AS inflation_max_ms
FROM floored
