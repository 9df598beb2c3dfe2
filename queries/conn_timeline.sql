-- How did each connection behave over time? Per connection and time bucket (variable
-- bucket_s seconds, default 1; set it coarser for long captures): retransmissions,
-- loss events, out-of-order segments, duplicate ACKs, zero/full windows, RTT min/p50/max
-- each side, response messages and bytes delivered, and HTTP/2 flow-control blocked time.
-- The network's events (network_events): not the packets the capture point itself missed.
-- depends_on: network_events, rtt_samples, messages, h2_events
WITH params AS (
    SELECT CAST(coalesce(getvariable('bucket_s'), 1) * 1e9 AS BIGINT) AS bucket_ns
),
tcp AS (
    SELECT conn_id, epoch_ns(ts) // (SELECT bucket_ns FROM params) AS bucket,
        count(*) FILTER (WHERE kind LIKE '%retransmission' AND kind <> 'spurious_retransmission') AS retransmissions,
        count(*) FILTER (WHERE kind = 'spurious_retransmission') AS spurious_retransmissions,
        count(*) FILTER (WHERE kind = 'lost_segment') AS lost_segments,
        count(*) FILTER (WHERE kind = 'out_of_order') AS out_of_order,
        count(*) FILTER (WHERE kind = 'dup_ack') AS dup_acks,
        count(*) FILTER (WHERE kind IN ('zero_window', 'window_full')) AS window_stalls
    FROM network_events GROUP BY ALL
),
rtt AS (
    SELECT conn_id, epoch_ns(ts) // (SELECT bucket_ns FROM params) AS bucket,
        min(rtt_ms) FILTER (WHERE direction = 'to_client') AS rtt_min_ms_client_side,
        median(rtt_ms) FILTER (WHERE direction = 'to_client') AS rtt_p50_ms_client_side,
        max(rtt_ms) FILTER (WHERE direction = 'to_client') AS rtt_max_ms_client_side,
        min(rtt_ms) FILTER (WHERE direction = 'to_server') AS rtt_min_ms_server_side,
        median(rtt_ms) FILTER (WHERE direction = 'to_server') AS rtt_p50_ms_server_side,
        max(rtt_ms) FILTER (WHERE direction = 'to_server') AS rtt_max_ms_server_side
    FROM rtt_samples GROUP BY ALL
),
msg AS (
    SELECT conn_id, epoch_ns(ts) // (SELECT bucket_ns FROM params) AS bucket,
        count(*) FILTER (WHERE direction = 'response') AS response_messages,
        sum(size) FILTER (WHERE direction = 'response') AS response_bytes,
        count(*) FILTER (WHERE direction = 'request') AS request_messages
    FROM messages GROUP BY ALL
),
blocked AS (
    SELECT conn_id, epoch_ns(ts) // (SELECT bucket_ns FROM params) AS bucket,
        sum_ms(coalesce(duration_ms, 0)) AS flow_control_blocked_ms
    FROM h2_events WHERE kind = 'flow_control_blocked' GROUP BY ALL
),
keys AS (
    SELECT conn_id, bucket FROM tcp UNION SELECT conn_id, bucket FROM rtt
    UNION SELECT conn_id, bucket FROM msg UNION SELECT conn_id, bucket FROM blocked
)
SELECT
    k.conn_id,
    CAST(make_timestamp_ns(k.bucket * (SELECT bucket_ns FROM params)) AS TIMESTAMPTZ) AS bucket_start,
    coalesce(tcp.retransmissions, 0) AS retransmissions,
    coalesce(tcp.spurious_retransmissions, 0) AS spurious_retransmissions,
    coalesce(tcp.lost_segments, 0) AS lost_segments,
    coalesce(tcp.out_of_order, 0) AS out_of_order,
    coalesce(tcp.dup_acks, 0) AS dup_acks,
    coalesce(tcp.window_stalls, 0) AS window_stalls,
    rtt.rtt_min_ms_client_side, rtt.rtt_p50_ms_client_side, rtt.rtt_max_ms_client_side,
    rtt.rtt_min_ms_server_side, rtt.rtt_p50_ms_server_side, rtt.rtt_max_ms_server_side,
    coalesce(msg.response_messages, 0) AS response_messages,
    coalesce(msg.response_bytes, 0) AS response_bytes,
    coalesce(msg.request_messages, 0) AS request_messages,
    coalesce(blocked.flow_control_blocked_ms, 0) AS flow_control_blocked_ms
FROM keys AS k
LEFT JOIN tcp USING (conn_id, bucket)
LEFT JOIN rtt USING (conn_id, bucket)
LEFT JOIN msg USING (conn_id, bucket)
LEFT JOIN blocked USING (conn_id, bucket)
ORDER BY k.conn_id, bucket_start
