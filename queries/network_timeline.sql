-- How did the network behave over the report's windows? Per window of window_s seconds,
-- over every connection: retransmissions, lost segments, out-of-order arrivals, zero or
-- full receive windows, HTTP/2 flow-control blocked time, capture drops (bytes the far
-- end acknowledged that the capture never saw: tcp_events capture_loss), and the highest
-- per-connection median RTT on each side (capture point <-> client, capture point <->
-- server). The network panel of the HTML report, on the same time axis as the windows.
-- depends_on: conn_timeline, tcp_events
WITH drops AS (
    SELECT CAST(make_timestamp_ns(epoch_ns(ts) // CAST(getvariable('bucket_s') * 1e9 AS BIGINT)
                                  * CAST(getvariable('bucket_s') * 1e9 AS BIGINT)) AS TIMESTAMPTZ) AS bucket_start,
           count(*) AS capture_drops, sum(bytes) AS capture_drop_bytes
    FROM tcp_events WHERE kind = 'capture_loss' GROUP BY ALL
),
net AS (
    SELECT
        bucket_start,
        sum(retransmissions) AS retransmissions,
        sum(lost_segments) AS lost_segments,
        sum(out_of_order) AS out_of_order,
        sum(window_stalls) AS window_stalls,
        sum_ms(flow_control_blocked_ms) AS flow_control_blocked_ms,
        max(rtt_p50_ms_client_side) AS rtt_p50_ms_client_side,
        max(rtt_p50_ms_server_side) AS rtt_p50_ms_server_side
    FROM conn_timeline
    GROUP BY bucket_start
)
SELECT
    coalesce(n.bucket_start, d.bucket_start) AS window_start,
    coalesce(n.retransmissions, 0) AS retransmissions,
    coalesce(n.lost_segments, 0) AS lost_segments,
    coalesce(n.out_of_order, 0) AS out_of_order,
    coalesce(n.window_stalls, 0) AS window_stalls,
    coalesce(n.flow_control_blocked_ms, 0) AS flow_control_blocked_ms,
    coalesce(d.capture_drops, 0) AS capture_drops,
    coalesce(d.capture_drop_bytes, 0) AS capture_drop_bytes,
    n.rtt_p50_ms_client_side,
    n.rtt_p50_ms_server_side
FROM net AS n FULL JOIN drops AS d USING (bucket_start)
ORDER BY window_start
