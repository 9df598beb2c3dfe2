-- Why was each slow request slow? One row per cause of a slow request (a request may
-- have several), with the delay in ms each cause explains, the evidence, and the
-- direction it acted on (to_client: the server's data toward the client, or the capture
-- point-to-client side of the path; to_server the other way; both comma-separated; null
-- for server, application and unknown):
--   loss_burst   retransmissions / lost segments on its connection while in flight;
--                delay = head-of-line stall until each burst's hole was filled, the time
--                its response direction was dark (the server's data lost whole before the
--                capture point, resent on timeouts), and its own wait before the capture
--                point saw it (its bytes resent, or held in the client behind bytes resent
--                on a timeout: upstream_delay_ms) (for a request never answered, the whole wait)
--   reordering   out-of-order arrivals, or spurious retransmissions the receiver asked for
--                (duplicate ACKs or SACK reporting a hole the original then filled; not
--                those a timer sent while ACKs were late: tcp_events.prompt); delay = how late
--   queueing     RTT above the path's trailing floor (>= queue_min_ms and >= queue_floor_share
--                of the floor) while in flight (25th percentile), when its last bytes went
--                (median of its final 500 ms) or while its first response message went to
--                the client (median toward the client until its ACK: a queue that delayed
--                the first token and was gone by the end of a long stream);
--                delay = the inflation its last bytes or its first message met,
--                plus the stall of losses while it was queued, when the path was queued
--                in the second before them too (the queue overflowing; an inflation that
--                came only with the losses, from resends and lost ACKs, is the loss's)
--   throttling   kind receive_window (zero window / window full), h2_flow_control
--                (sender blocked on WINDOW_UPDATE, plus the time the client left the
--                end of the response unread: client_read), application (429/503,
--                RESOURCE_EXHAUSTED, UNAVAILABLE), shaper or policer (shaper_evidence, policer_evidence)
--   server       the network explains less than half of the excess (or nothing):
--                delay = the excess it does not explain
--   unknown      the capture cannot tell (one direction only, no RTT at all)
-- depends_on: slow_requests, request_evidence, throttle_evidence, requests
-- materialize: session
WITH s AS (
    SELECT
        e.*,
        sr.slow_metrics,
        sr.excess_ms,
        t.throttle_kind,
        t.throttle_detail,
        t.throttle_delay_ms
    FROM slow_requests AS sr
    JOIN request_evidence AS e USING (conn_id, stream_id)
    LEFT JOIN throttle_evidence AS t USING (conn_id, stream_id)
),
net AS (
    SELECT
        *,
        coalesce(queued(queue_inflation_seen_ms, path_floor_ms), false) AS queued,
        -- a policer's drops, and a shaper's when its queue overflows, are the throttling
        loss_events > 0 AND coalesce(throttle_kind, '') NOT IN ('policer', 'shaper') AS lossy,
        coalesce(queued(queue_before_loss_ms, path_floor_ms), false) AS queued_before_loss,
        reorder_events > 0 AS reordered
    FROM s
),
causes AS (
    SELECT conn_id, stream_id, 'loss_burst' AS cause, NULL AS kind, loss_directions AS direction,
        -- never answered while its connection lost packets: stuck behind them to the end
        CASE WHEN unanswered THEN greatest(loss_stall_ms, excess_ms) ELSE loss_stall_ms END AS delay_ms,
        format('{} lost segment(s) in {} burst(s) (longest {}), {}, stall {:.1f} ms',
               loss_events, loss_bursts, longest_burst, loss_directions, loss_stall_ms)
        || CASE WHEN dark_wait_ms > 0
                THEN format('; {:.1f} ms of it with no data toward the client delivered while it was being lost', dark_wait_ms)
                ELSE '' END
        || CASE WHEN upstream_delay_ms > 0
                THEN format('; {:.1f} ms before the capture point saw it (its bytes resent, or held in the client behind a resend)', upstream_delay_ms)
                ELSE '' END AS evidence
    FROM net WHERE lossy
    UNION ALL
    SELECT conn_id, stream_id, 'reordering', NULL, reorder_directions, reorder_wait_ms,
        format('{} out-of-order/spurious-retransmission event(s), {} dup ACK(s), {:.1f} ms late',
               reorder_events, dup_acks, reorder_wait_ms)
    FROM net WHERE reordered
    UNION ALL
    -- losses while the path was queued, already in the second before them, are the queue
    -- overflowing (tail drops): their stall is the queue's too (the loss_burst row stays,
    -- with its own evidence); an inflation that came only with the losses is theirs
    SELECT conn_id, stream_id, 'queueing', NULL, queue_direction,
        queue_delay_ms + CASE WHEN lossy AND queued_before_loss THEN loss_stall_ms ELSE 0 END,
        format('RTT {:.1f} ms above the {:.2f} ms path floor ({} samples, {} side)',
               queue_inflation_seen_ms, path_floor_ms, rtt_samples, queue_direction)
        || CASE WHEN lossy AND queued_before_loss
                THEN format('; {} segment(s) lost while it was queued ({:.1f} ms stall)', loss_events, loss_stall_ms)
                ELSE '' END
    FROM net WHERE queued AND coalesce(throttle_kind, '') <> 'shaper'
    UNION ALL
    -- a shaper's queue and a bottleneck link saturated by traffic the capture does not see
    -- look the same in packets: the queue is reported too, its delay counted once (the
    -- shaper's)
    SELECT conn_id, stream_id, 'queueing', NULL, queue_direction, 0,
        format('RTT {:.1f} ms above the {:.2f} ms path floor: the shaper''s queue, or a bottleneck link at that rate with competing traffic the capture does not see (delay counted under throttling/shaper)',
               queue_inflation_seen_ms, path_floor_ms)
    FROM net WHERE queued AND throttle_kind = 'shaper'
    UNION ALL
    SELECT conn_id, stream_id, 'throttling', 'receive_window', window_directions, window_wait_ms,
        format('{} zero-window / window-full event(s), {:.1f} ms waiting', window_events, window_wait_ms)
    FROM net WHERE window_events > 0
    UNION ALL
    SELECT conn_id, stream_id, 'throttling', 'h2_flow_control', coalesce(flow_control_directions, 'to_client'),
        flow_control_blocked_ms + client_read_wait_ms,
        format('HTTP/2 sender blocked {} time(s) for {:.1f} ms', flow_control_blocks, flow_control_blocked_ms)
        || CASE WHEN client_read_wait_ms > 0
                THEN format('; the client read the end of the response {:.1f} ms after its ACK (slow reader)', client_read_wait_ms)
                ELSE '' END
    FROM net WHERE flow_control_blocks > 0 OR client_read_wait_ms > 0
    UNION ALL
    SELECT conn_id, stream_id, 'throttling', 'application', NULL, greatest(excess_ms, coalesce(latency_eff_ms, 0)),
        format('status: grpc {} / http {}', coalesce(CAST(grpc_status AS VARCHAR), '-'), coalesce(CAST(http_status AS VARCHAR), '-'))
    FROM net WHERE app_throttled
    UNION ALL
    SELECT conn_id, stream_id, 'throttling', throttle_kind,
        CASE throttle_kind WHEN 'shaper' THEN queue_direction ELSE loss_directions END, throttle_delay_ms, throttle_detail
    FROM net WHERE throttle_kind IS NOT NULL
),
explained AS (
    SELECT conn_id, stream_id, sum_ms(delay_ms) AS network_ms FROM causes GROUP BY ALL
)
SELECT conn_id, stream_id, cause, kind, direction, round(delay_ms, 3) AS delay_ms, evidence FROM causes
UNION ALL
SELECT n.conn_id, n.stream_id, 'server', NULL, NULL,
    round(greatest(n.excess_ms - coalesce(x.network_ms, 0), 0), 3),
    format('{} high with {}; network explains {:.1f} of {:.1f} ms excess{}',
           array_to_string(n.slow_metrics, '/'),
           CASE WHEN x.network_ms IS NULL THEN 'a clean network (no loss, reordering, queueing or stalls)' ELSE 'some network delay' END,
           coalesce(x.network_ms, 0), n.excess_ms,
           -- a TLS request read without keys: its TTFT is the first response record's,
           -- which may be headers rather than a token, and over HTTP/2 the connection's
           CASE WHEN q.estimated THEN '; estimated from TLS records without keys (first record, not first token'
                || CASE WHEN q.kind = 'tls_burst' THEN '; per connection, streams may overlap' ELSE '' END
                || '): the server''s share is uncertain' ELSE '' END)
FROM net AS n
LEFT JOIN explained AS x USING (conn_id, stream_id)
LEFT JOIN (SELECT conn_id, stream_id, bool_or(estimated) AS estimated, any_value(kind) AS kind
           FROM requests GROUP BY ALL) AS q USING (conn_id, stream_id)
WHERE NOT n.one_sided AND NOT n.no_rtt
  AND (x.network_ms IS NULL OR x.network_ms < 0.5 * n.excess_ms)
UNION ALL
SELECT n.conn_id, n.stream_id, 'unknown', NULL, NULL, round(n.excess_ms, 3),
    CASE WHEN n.one_sided THEN 'the capture saw only one direction of the connection'
         ELSE 'no RTT sample on the connection: queueing cannot be judged' END
FROM net AS n
LEFT JOIN explained AS x USING (conn_id, stream_id)
WHERE (n.one_sided OR n.no_rtt) AND x.network_ms IS NULL
