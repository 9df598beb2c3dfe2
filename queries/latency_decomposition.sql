-- Where did each request's time go? Its latency (client-side estimate where available)
-- split into: one path round trip at the floor RTT, queueing (RTT inflation), loss
-- recovery (head-of-line stalls), reordering wait, window / HTTP/2 flow-control wait,
-- the client's own read wait (a slow reader left the end of the response unread after
-- its kernel ACKed it: client_read), and what remains for the server. Network parts can
-- overlap in time (a stall during a queue); when they add up to more than the latency
-- (less the client's read wait, which comes after them) they are scaled down together so
-- that the parts sum to the latency, and `overlap_scaled` says so.
-- depends_on: request_evidence
WITH parts AS (
    SELECT
        conn_id, stream_id, method, started_at, latency_eff_ms AS latency_ms,
        coalesce(path_floor_ms, 0) AS path_rtt_ms,
        CASE WHEN queued(queue_inflation_seen_ms, path_floor_ms) THEN queue_delay_ms ELSE 0 END AS queueing_ms,
        loss_stall_ms AS loss_recovery_ms,
        reorder_wait_ms AS reordering_ms,
        window_wait_ms + flow_control_blocked_ms AS flow_control_ms,
        least(client_read_wait_ms, latency_eff_ms) AS client_read_ms
    FROM request_evidence
    WHERE latency_eff_ms IS NOT NULL
),
summed AS (
    SELECT *, path_rtt_ms + queueing_ms + loss_recovery_ms + reordering_ms + flow_control_ms AS network_ms
    FROM parts
),
scaled AS (
    SELECT *,
        CASE WHEN network_ms > latency_ms - client_read_ms AND network_ms > 0
             THEN (latency_ms - client_read_ms) / network_ms ELSE 1.0 END AS k
    FROM summed
)
SELECT
    conn_id, stream_id, method, started_at, latency_ms,
    round(path_rtt_ms * k, 3) AS path_rtt_ms,
    round(queueing_ms * k, 3) AS queueing_ms,
    round(loss_recovery_ms * k, 3) AS loss_recovery_ms,
    round(reordering_ms * k, 3) AS reordering_ms,
    round(flow_control_ms * k, 3) AS flow_control_ms,
    round(client_read_ms, 3) AS client_read_ms,
    round(greatest(latency_ms - client_read_ms - network_ms * k, 0), 3) AS server_ms,
    round(network_ms * k + client_read_ms + greatest(latency_ms - client_read_ms - network_ms * k, 0), 3) AS total_ms,
    k < 1.0 AS overlap_scaled
FROM scaled
