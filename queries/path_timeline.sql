-- How did each network path (client address <-> server address) behave second by
-- second? Per path and 1-second bucket, toward the client: bytes the inference
-- connections (those that carried requests) sent and got acknowledged, packets sent,
-- bytes acknowledged on the path's other connections (cross traffic seen at the capture
-- point), retransmissions, and the RTT inflation over the path floor (path_rtt: the 25th
-- percentile of the second's 100 ms buckets' 25th percentiles, robust to delayed ACKs). The input of shaper / policer detection.
-- depends_on: flow_rates, connections, path_rtt, tcp_events
-- materialize: session
WITH conns AS (
    SELECT conn_id, client_addr, server_addr, requests > 0 AS inference FROM connections
),
rates AS (
    SELECT c.client_addr, c.server_addr, epoch_ns(f.ts) // 1000000000 AS second,
        sum(f.bytes_sent) FILTER (WHERE c.inference) AS sent_bytes,
        sum(f.bytes_acked) FILTER (WHERE c.inference) AS acked_bytes,
        sum(f.packets_sent) FILTER (WHERE c.inference) AS sent_packets,
        sum(f.bytes_acked) FILTER (WHERE NOT c.inference) AS cross_bytes
    FROM flow_rates AS f JOIN conns AS c USING (conn_id)
    WHERE f.direction = 'to_client'
    GROUP BY ALL
),
rtt AS (
    SELECT client_addr, server_addr, bucket // 10 AS second,
        quantile_cont(inflation_p25_ms, 0.25) AS inflation_ms,
        min(floor_ms) AS floor_ms
    FROM path_rtt
    WHERE direction = 'to_client'
    GROUP BY ALL
),
loss AS (
    SELECT c.client_addr, c.server_addr, epoch_ns(e.ts) // 1000000000 AS second,
        count(*) AS retransmissions
    FROM tcp_events AS e JOIN conns AS c USING (conn_id)
    WHERE e.direction = 'to_client' AND resent(e.kind)
    GROUP BY ALL
)
SELECT
    client_addr,
    server_addr,
    second,
    to_timestamp(second) AS ts,
    coalesce(r.sent_bytes, 0) AS sent_bytes,
    coalesce(r.acked_bytes, 0) AS acked_bytes,
    coalesce(r.sent_packets, 0) AS sent_packets,
    coalesce(r.cross_bytes, 0) AS cross_bytes,
    coalesce(l.retransmissions, 0) AS retransmissions,
    t.inflation_ms,
    t.floor_ms
FROM rates AS r
FULL JOIN rtt AS t USING (client_addr, server_addr, second)
FULL JOIN loss AS l USING (client_addr, server_addr, second)
