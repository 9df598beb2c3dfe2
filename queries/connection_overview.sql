-- What kind of connections carried the traffic, and how healthy was TCP on them?
-- Per application protocol: connections, requests, retransmissions, loss bursts,
-- out-of-order segments, zero windows, the median capture-point RTT floors, and the
-- connections the capture saw one way only (only_server_seen: none of the client's packets,
-- so no request's start; only_client_seen: none of the server's, so no response): their
-- requests' latency and TTFT cannot be measured; and the connections whose payload the
-- capture's snap length cut (payload_cut: history C or c; their messages are partly
-- unreadable, requests go missing).
-- depends_on: connections
SELECT
    protocol,
    count(*) AS connections,
    sum(requests) AS requests,
    sum(retransmissions_to_server + retransmissions_to_client) AS retransmissions,
    sum(loss_bursts_to_server + loss_bursts_to_client) AS loss_bursts,
    sum(out_of_order_to_server + out_of_order_to_client) AS out_of_order,
    sum(zero_windows_to_server + zero_windows_to_client) AS zero_windows,
    median(rtt_min_ms_to_server) AS rtt_floor_server_ms,
    median(rtt_min_ms_to_client) AS rtt_floor_client_ms,
    count(*) FILTER (WHERE packets_to_server = 0 AND packets_to_client > 0) AS only_server_seen,
    count(*) FILTER (WHERE packets_to_client = 0 AND packets_to_server > 0) AS only_client_seen,
    count(*) FILTER (WHERE history SIMILAR TO '.*[Cc].*') AS payload_cut
FROM connections
WHERE in_scope(capture_id)
GROUP BY protocol
ORDER BY connections DESC, protocol
