-- How did the network behave over the report's windows? Per window of window_s seconds,
-- over every connection: retransmissions, lost segments, out-of-order arrivals, zero or
-- full receive windows, HTTP/2 flow-control blocked time, and the highest per-connection
-- median RTT on each side (capture point <-> client, capture point <-> server). The
-- network panel of the HTML report, on the same time axis as the windows.
-- depends_on: conn_timeline
SELECT
    bucket_start AS window_start,
    sum(retransmissions) AS retransmissions,
    sum(lost_segments) AS lost_segments,
    sum(out_of_order) AS out_of_order,
    sum(window_stalls) AS window_stalls,
    sum(flow_control_blocked_ms) AS flow_control_blocked_ms,
    max(rtt_p50_ms_client_side) AS rtt_p50_ms_client_side,
    max(rtt_p50_ms_server_side) AS rtt_p50_ms_server_side
FROM conn_timeline
GROUP BY bucket_start
ORDER BY bucket_start
