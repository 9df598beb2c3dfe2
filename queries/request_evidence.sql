-- What happened on each request's connection while it was in flight? For every request
-- (request_metrics), the network and HTTP/2 evidence between its start (client_started_at:
-- before a first packet lost upstream of the capture point) and its finish (client ACK of
-- its last byte when seen), both directions: loss events and bursts with the head-of-line
-- stall they caused (and its own first bytes lost before the capture point; a server
-- retransmission the client did not need, after client packets were lost upstream, is a
-- lost ACK: ack_loss, toward the server), reordering (out-of-order arrivals, spurious
-- retransmissions the receiver asked for, not those a timer sent while ACKs were late
-- (tcp_events.prompt), holes the receiver's duplicate ACKs reported (not the ACK a
-- duplicate segment draws) that filled without a resend: late_arrival, a segment overtaken past the capture point, and holes at the
-- capture point whose original came after the resend that filled them: late_arrival too,
-- held back before the capture point, the resend no loss) and how late it was,
-- the time its response direction went dark (no new data toward the client acknowledged
-- for 200 ms or more while that data was being lost: resent, a hole, or lost whole before
-- the capture point and resent on timeouts, which leaves no hole where the client
-- captures; the server's data stuck behind a backed-off timeout where the server captures),
-- duplicate ACKs, receive-window stalls, HTTP/2
-- flow-control blocked time on its stream or the connection, RTT inflation over the
-- path floor (path_rtt's 100 ms buckets in flight: the 25th percentile of their 25th
-- percentiles, robust to delayed ACKs; the largest inflation over its final 500 ms,
-- the queue its last bytes met; the median toward the client from its first response
-- message passing the capture point to the client's ACK of it, the queue its first token
-- met (one that came and went early in a long stream); queue_inflation_seen_ms, the
-- largest of the three, is what says whether it was queued; and the inflation in the
-- second before its first loss, queue_before_loss_ms: a queue that overflowed was there
-- before its drops), and whether the capture saw both directions. What the capture itself
-- missed (capture_gaps: a hole the receiver acknowledged without a resend; on a capture that
-- dropped packets, a packet missing by its sender's IP id) is no loss: capture_gap, counted
-- nowhere.
-- depends_on: request_metrics, requests_in_range, tcp_events, network_events, path_rtt, h2_events, connections, flow_rates, capture_gaps
-- materialize: capture
WITH missed AS (  -- packets the capture missed, the network did not lose (capture_gaps)
    SELECT conn_id, direction, shown_by AS kind, frame_no, seq FROM capture_gaps
    WHERE shown_by IN ('lost_segment', 'upstream_loss')
),
upstream_gaps AS (  -- client packets lost before the capture point (not those it missed)
    SELECT conn_id, epoch_ns(ts) AS gap_ns FROM network_events WHERE kind = 'upstream_loss' AND direction = 'to_server'
),
dup_runs AS (  -- the receiver's duplicate ACKs for each hole (its next expected byte)
    SELECT conn_id, direction, seq, min(frame_no) AS first_frame,
        epoch_ns(min(ts)) AS first_ns, epoch_ns(max(ts)) AS last_ns
    FROM tcp_events WHERE kind = 'dup_ack'
    GROUP BY ALL
),
resends AS (
    SELECT conn_id, direction, seq, bytes, epoch_ns(ts) AS t_ns FROM tcp_events
    WHERE any_resend(kind)
),
holes AS (  -- the runs that report a hole: not the duplicate ACK a resent segment the
    -- receiver already had drew (at once, RFC 5681; a D-SACK), its bytes below the run's
    -- next expected byte, resent in the second before the run began
    SELECT d.* FROM dup_runs AS d
    ASOF LEFT JOIN resends AS r ON r.conn_id = d.conn_id AND r.direction = d.direction AND r.t_ns <= d.first_ns
    WHERE r.t_ns IS NULL OR d.first_ns - r.t_ns > 1000000000 OR r.seq + greatest(r.bytes, 1) > d.seq
),
late_arrivals AS (  -- holes the receiver reported that filled without a resend: the segment
    -- came late past the capture point (reordering downstream of it); how late: from the
    -- first duplicate ACK to the last
    SELECT e.* REPLACE ('late_arrival' AS kind, (d.last_ns - d.first_ns) / 1e6 AS recovery_ms)
    FROM holes AS d
    ANTI JOIN resends AS r
      ON r.conn_id = d.conn_id AND r.direction = d.direction AND r.seq = d.seq
     AND r.t_ns BETWEEN d.first_ns AND d.last_ns + 1000000000
    JOIN tcp_events AS e ON e.conn_id = d.conn_id AND e.frame_no = d.first_frame AND e.kind = 'dup_ack'
),
held_holes AS (  -- holes at the capture point whose original copy came after all, after
    -- the resend that filled them (a spurious retransmission of the hole's bytes within
    -- 3 s): the bytes were held back before the capture point (reordering), not lost
    SELECT DISTINCT h.conn_id, h.direction, h.seq
    FROM (SELECT *, unnest(seconds_between(ts, ts + INTERVAL 3 SECOND)) AS sec
          FROM tcp_events WHERE kind = 'lost_segment') AS h
    JOIN (SELECT *, epoch_ns(ts) // 1000000000 AS sec FROM tcp_events WHERE kind = 'spurious_retransmission') AS c
      ON c.conn_id = h.conn_id AND c.direction = h.direction AND c.sec = h.sec
     AND c.seq >= h.seq AND c.seq < h.seq + greatest(h.bytes, 1)
     AND c.ts > h.ts AND epoch_ns(c.ts) - epoch_ns(h.ts) <= 3000000000
),
events AS (  -- a server retransmission the client did not need, after the client's packets
    -- were lost before the capture point (upstream_loss in the 2 s before): its ACKs were
    -- lost (ack_loss, a loss toward the server), not its data held back (reordering).
    -- A held hole is a late arrival (reordering), and the resend that filled it no loss.
    SELECT e.* REPLACE (
        CASE WHEN e.kind = 'spurious_retransmission' AND e.direction = 'to_client'
                  AND epoch_ns(e.ts) - g.gap_ns <= 2000000000 THEN 'ack_loss'
             WHEN m.kind IS NOT NULL THEN 'capture_gap'
             WHEN x.seq IS NOT NULL AND e.kind = 'lost_segment' THEN 'late_arrival'
             WHEN x.seq IS NOT NULL AND resent(e.kind) THEN 'held_resend'
             -- one the receiver did not ask for went on a timer while ACKs were late (a
             -- delayed ACK; the host or the ACK's path stalled): the data was in time
             WHEN e.kind = 'spurious_retransmission' AND e.prompt = 'timer' THEN 'spurious_timeout'
             ELSE e.kind END AS kind,
        CASE WHEN e.kind = 'spurious_retransmission' AND e.direction = 'to_client'
                  AND epoch_ns(e.ts) - g.gap_ns <= 2000000000 THEN 'to_server' ELSE e.direction END AS direction)
    FROM tcp_events AS e
    ASOF LEFT JOIN upstream_gaps AS g ON g.conn_id = e.conn_id AND g.gap_ns <= epoch_ns(e.ts)
    LEFT JOIN held_holes AS x ON x.conn_id = e.conn_id AND x.direction = e.direction AND x.seq = e.seq
    LEFT JOIN missed AS m
      ON m.conn_id = e.conn_id AND m.direction = e.direction AND m.kind = e.kind AND m.frame_no = e.frame_no AND m.seq = e.seq
    UNION ALL
    SELECT * FROM late_arrivals
),
ev AS (  -- from when the client began (before a lost first packet) to its finish; joined by
    -- the seconds each request spans (a range join alone pairs every request of a
    -- connection with every event of it: quadratic in a long capture)
    SELECT s.conn_id, s.stream_id, e.* EXCLUDE (sec)
    FROM (SELECT conn_id, stream_id, client_started_at AS lo, finished_at AS hi,
                 unnest(seconds_between(client_started_at, finished_at)) AS sec
          FROM request_metrics) AS s
    JOIN (SELECT *, epoch_ns(ts) // 1000000000 AS sec FROM events) AS e
      ON e.conn_id = s.conn_id AND e.sec = s.sec AND e.ts BETWEEN s.lo AND s.hi
),
acked_buckets AS (  -- the 100 ms buckets in which the client acknowledged new data
    SELECT conn_id, epoch_ns(ts) AS from_ns, epoch_ns(ts) + bucket_ms * 1000000 AS to_ns
    FROM flow_rates WHERE direction = 'to_client' AND bytes_acked > 0
),
silences AS (  -- no new data toward the client acknowledged for 200 ms (Linux's shortest
    -- retransmission timeout) or more: none delivered, or none sent; the last one runs to
    -- the connection's end
    SELECT * FROM (
        SELECT a.conn_id, a.to_ns AS from_ns,
            coalesce(lead(a.from_ns) OVER (PARTITION BY a.conn_id ORDER BY a.from_ns), epoch_ns(c."end")) AS to_ns
        FROM acked_buckets AS a JOIN connections AS c USING (conn_id)
    ) WHERE to_ns - from_ns >= 200000000
),
dark AS (  -- silences in which the server's data toward the client was being lost: resent,
    -- a hole, or its packets missing before the capture point (upstream_loss: lost whole,
    -- no hole to see where the client captures), up to the bucket delivery came back in.
    -- Dark from the first of those losses (a resend's original send, a hole's first sight,
    -- the packet before an IP id gap): a server that merely had nothing to send loses nothing
    SELECT s.conn_id, greatest(s.from_ns, min(e.lost_ns)) AS from_ns, s.to_ns,
        list({'t': e.t_ns, 'n': e.n}) AS gaps
    FROM silences AS s
    JOIN (SELECT conn_id, epoch_ns(ts) AS t_ns,
                 CASE WHEN kind = 'lost_segment' THEN epoch_ns(ts)
                      ELSE epoch_ns(ts) - CAST(round(coalesce(recovery_ms, 0) * 1e6) AS BIGINT) END AS lost_ns,
                 CASE WHEN kind = 'upstream_loss' THEN bytes ELSE 1 END AS n
          FROM network_events
          WHERE direction = 'to_client' AND (kind = 'upstream_loss' OR loss_kind(kind))) AS e
      ON e.conn_id = s.conn_id AND e.t_ns > s.from_ns AND e.t_ns < s.to_ns + 100000000
    GROUP BY s.conn_id, s.from_ns, s.to_ns
    HAVING s.to_ns - greatest(s.from_ns, min(e.lost_ns)) >= 200000000
),
dark_waits AS (  -- how long each request in flight waited through a dark stretch
    SELECT m.conn_id, m.stream_id, d.from_ns,
        -- the packets missing in it, less those its own span counts already (ev)
        coalesce(list_sum(list_transform(list_filter(d.gaps, lambda g: g.t < epoch_ns(m.client_started_at)
                                                              OR g.t > epoch_ns(m.finished_at)), lambda g: g.n)), 0) AS missing,
        (least(epoch_ns(m.finished_at), d.to_ns) - greatest(epoch_ns(m.client_started_at), d.from_ns)) / 1e6 AS wait_ms
    FROM request_metrics AS m
    JOIN dark AS d
      ON d.conn_id = m.conn_id AND d.from_ns < epoch_ns(m.finished_at) AND d.to_ns > epoch_ns(m.client_started_at)
),
loss_bursts AS (
    SELECT conn_id, stream_id, direction, coalesce(burst_id, -frame_no) AS burst,
        count(*) AS segments,
        max(coalesce(recovery_ms, 0)) AS stall_ms, false AS dark
    FROM ev WHERE loss_kind(kind)
    GROUP BY ALL
    UNION ALL  -- packets lost before the capture point while it waited: counted, no stall of their own
    SELECT conn_id, stream_id, direction, -frame_no, sum(bytes), 0, false
    FROM ev WHERE kind = 'upstream_loss'
    GROUP BY ALL
    UNION ALL  -- its own first bytes, lost before the capture point and resent
    SELECT conn_id, stream_id, 'to_server', -1, upstream_lost_packets, upstream_delay_ms, false
    FROM request_metrics WHERE upstream_delay_ms > 0
    UNION ALL  -- its response direction dark while the server's data was being lost
    SELECT conn_id, stream_id, 'to_client', -2 - from_ns // 1000000, missing, wait_ms, true
    FROM dark_waits WHERE wait_ms > 0
),
loss AS (
    SELECT conn_id, stream_id,
        sum(segments) AS loss_events,
        count(*) AS loss_bursts,
        max(segments) AS longest_burst,
        -- a dark stretch's wait and the stalls of the bursts inside it are the same time:
        -- the larger of the two, not their sum
        greatest(coalesce(sum_ms(CASE WHEN NOT dark THEN stall_ms END), 0),
                 coalesce(sum_ms(CASE WHEN dark THEN stall_ms END), 0)) AS loss_stall_ms,
        coalesce(sum_ms(CASE WHEN dark THEN stall_ms END), 0) AS dark_wait_ms,
        string_agg(DISTINCT direction, ',' ORDER BY direction) AS loss_directions
    FROM loss_bursts GROUP BY ALL
),
other AS (
    SELECT conn_id, stream_id,
        count(*) FILTER (WHERE kind IN ('out_of_order', 'spurious_retransmission', 'late_arrival')) AS reorder_events,
        string_agg(DISTINCT direction, ',' ORDER BY direction) FILTER (WHERE kind IN ('out_of_order', 'spurious_retransmission', 'late_arrival')) AS reorder_directions,
        sum_ms(CASE WHEN kind IN ('out_of_order', 'spurious_retransmission', 'late_arrival') THEN coalesce(recovery_ms, 0) END) AS reorder_wait_ms,
        count(*) FILTER (WHERE kind = 'dup_ack') AS dup_acks,
        count(*) FILTER (WHERE kind IN ('zero_window', 'window_full')) AS window_events,
        sum_ms(CASE WHEN kind IN ('zero_window', 'window_full') THEN coalesce(recovery_ms, 0) END) AS window_wait_ms,
        string_agg(DISTINCT direction, ',' ORDER BY direction) FILTER (WHERE kind IN ('zero_window', 'window_full')) AS window_directions,
        count(*) FILTER (WHERE kind = 'capture_loss') AS capture_loss_events
    FROM ev GROUP BY ALL
),
flow AS (
    SELECT m.conn_id, m.stream_id,
        count(*) AS flow_control_blocks,
        sum_ms(coalesce(h.duration_ms, 0)) AS flow_control_blocked_ms,
        string_agg(DISTINCT h.direction, ',' ORDER BY h.direction) AS flow_control_directions
    FROM (SELECT conn_id, stream_id, started_at, finished_at,
                 unnest(seconds_between(started_at, finished_at)) AS sec
          FROM request_metrics) AS m
    JOIN (SELECT *, epoch_ns(ts) // 1000000000 AS sec FROM h2_events WHERE kind = 'flow_control_blocked') AS h
      ON h.conn_id = m.conn_id AND h.sec = m.sec
     AND h.stream_id IN (0, m.stream_id)
     AND h.ts BETWEEN m.started_at AND m.finished_at
    GROUP BY ALL
),
-- a queue belongs to the path: judge it on every connection's RTT samples between the
-- same client and server while the request was in flight (path_rtt, by 100 ms buckets; a
-- request's own few samples can be a delayed ACK's)
spans AS (
    SELECT conn_id, stream_id, client_addr, server_addr,
        epoch_ns(started_at) // 100000000 AS first_bucket,
        epoch_ns(finished_at) // 100000000 AS last_bucket
    FROM request_metrics
    WHERE client_addr IS NOT NULL AND server_addr IS NOT NULL AND finished_at >= started_at
),
in_flight AS (
    SELECT conn_id, stream_id, client_addr, server_addr, unnest(span_range(first_bucket, last_bucket + 1, 10)) AS bucket
    FROM spans
),
rtt_dir AS (  -- per direction: the typical inflation in flight (25th percentile of the buckets' 25th percentiles)
    SELECT f.conn_id, f.stream_id, p.direction,
        sum(p.samples) AS samples,
        quantile_cont(p.inflation_p25_ms, 0.25) AS inflation_p25_ms,
        median(p.floor_ms) AS floor_ms
    FROM in_flight AS f
    JOIN path_rtt AS p USING (client_addr, server_addr, bucket)
    GROUP BY ALL
),
rtt_end AS (  -- the queue its last bytes went through: inflation on the path over its final 500 ms
    SELECT f.conn_id, f.stream_id, max(p.inflation_max_ms) AS inflation_ms, median(p.inflation_p50_ms) AS inflation_p50_ms
    FROM (SELECT conn_id, stream_id, client_addr, server_addr, unnest(range(last_bucket - 5, last_bucket + 1)) AS bucket
          FROM spans) AS f
    JOIN path_rtt AS p USING (client_addr, server_addr, bucket)
    GROUP BY ALL
),
rtt_first AS (  -- the queue its first response message went through: the median inflation
    -- toward the client from its passing the capture point to the client's ACK of it
    SELECT f.conn_id, f.stream_id, median(p.inflation_p50_ms) AS inflation_ms
    FROM (SELECT r.conn_id, r.stream_id, s.client_addr, s.server_addr,
                 unnest(span_range(epoch_ns(r.first_message) // 100000000, epoch_ns(r.first_message_acked) // 100000000 + 1, 10)) AS bucket
          FROM requests_in_range AS r JOIN spans AS s USING (conn_id, stream_id)
          WHERE r.first_message_acked > r.first_message) AS f
    JOIN path_rtt AS p USING (client_addr, server_addr, bucket)
    WHERE p.direction = 'to_client'
    GROUP BY ALL
),
before_loss AS (  -- the path's typical inflation over the second before the request's first
    -- loss (per direction, the median of the 100 ms buckets' 25th percentiles; the larger
    -- direction): a queue that overflowed was there before its drops, while the RTT samples
    -- a loss disturbs (resends, lost ACKs) come with or after it. Chosen on the sweep's
    -- tuning runs (seed 3, run 9: loss on a 0.7 ms path read at the client, where lost
    -- ACKs inflated the RTT and the queue took the loss's stall); on samples/queueing, 12
    -- of the 60 requests whose largest cause was the queue now have the loss first (the
    -- queue's own drops in its first second: the queue row stays, without their stall)
    SELECT conn_id, stream_id, max(inflation_ms) AS queue_before_loss_ms
    FROM (
        SELECT l.conn_id, l.stream_id, p.direction, median(p.inflation_p25_ms) AS inflation_ms
        FROM (SELECT conn_id, stream_id, min(epoch_ns(ts)) // 100000000 AS loss_bucket FROM ev
              WHERE loss_kind(kind) GROUP BY ALL) AS l
        JOIN spans AS s USING (conn_id, stream_id)
        JOIN path_rtt AS p
          ON p.client_addr = s.client_addr AND p.server_addr = s.server_addr
         AND p.bucket BETWEEN l.loss_bucket - 10 AND l.loss_bucket - 1
        GROUP BY ALL
    )
    GROUP BY ALL
),
rtt AS (
    SELECT conn_id, stream_id,
        sum(samples) AS rtt_samples,
        max(inflation_p25_ms) AS queue_inflation_ms,
        -- (as much both ways: toward the client, so that every run names the same one)
        arg_max(direction, (inflation_p25_ms, direction = 'to_client')) FILTER (WHERE inflation_p25_ms IS NOT NULL) AS queue_direction,
        sum(floor_ms) AS path_floor_ms
    FROM rtt_dir GROUP BY ALL
)
SELECT
    m.*,
    coalesce(loss.loss_events, 0) AS loss_events,
    coalesce(loss.loss_bursts, 0) AS loss_bursts,
    coalesce(loss.longest_burst, 0) AS longest_burst,
    coalesce(loss.loss_stall_ms, 0) AS loss_stall_ms,
    -- of which waited with its response direction dark (no new data toward the client
    -- acknowledged while that data was being lost)
    coalesce(loss.dark_wait_ms, 0) AS dark_wait_ms,
    loss.loss_directions,
    coalesce(other.reorder_events, 0) AS reorder_events,
    coalesce(other.reorder_wait_ms, 0) AS reorder_wait_ms,
    other.reorder_directions,
    coalesce(other.dup_acks, 0) AS dup_acks,
    coalesce(other.window_events, 0) AS window_events,
    coalesce(other.window_wait_ms, 0) AS window_wait_ms,
    other.window_directions,
    coalesce(other.capture_loss_events, 0) AS capture_loss_events,
    coalesce(flow.flow_control_blocks, 0) AS flow_control_blocks,
    coalesce(flow.flow_control_blocked_ms, 0) AS flow_control_blocked_ms,
    flow.flow_control_directions,
    coalesce(rtt.rtt_samples, 0) AS rtt_samples,
    coalesce(rtt.queue_inflation_ms, 0) AS queue_inflation_ms,
    -- the queue its last bytes met (median over its final 500 ms): a queue that built up
    -- late in its life shows here and not in the lifetime percentile
    coalesce(rtt_end.inflation_p50_ms, 0) AS queue_inflation_end_ms,
    coalesce(rtt_first.inflation_ms, 0) AS queue_inflation_first_ms,
    greatest(coalesce(rtt.queue_inflation_ms, 0), coalesce(rtt_end.inflation_p50_ms, 0), coalesce(rtt_first.inflation_ms, 0))
        AS queue_inflation_seen_ms,
    -- delay a queue added to the request: the inflation its last bytes met (a growing queue
    -- delays the end more than the median), or its first token, at least the typical
    -- inflation in flight
    greatest(coalesce(rtt.queue_inflation_ms, 0), coalesce(least(rtt_end.inflation_ms, m.latency_eff_ms), 0),
             coalesce(rtt_first.inflation_ms, 0)) AS queue_delay_ms,
    rtt.queue_direction,
    bl.queue_before_loss_ms,
    coalesce(rtt.path_floor_ms, c.rtt_min_ms_to_client + c.rtt_min_ms_to_server, c.handshake_rtt_ms, 0) AS path_floor_ms,
    c.packets_to_client = 0 OR c.packets_to_server = 0 AS one_sided,
    c.rtt_min_ms_to_client IS NULL AND c.rtt_min_ms_to_server IS NULL AS no_rtt
FROM request_metrics AS m
JOIN connections AS c USING (conn_id)
LEFT JOIN loss USING (conn_id, stream_id)
LEFT JOIN other USING (conn_id, stream_id)
LEFT JOIN flow USING (conn_id, stream_id)
LEFT JOIN rtt USING (conn_id, stream_id)
LEFT JOIN rtt_end USING (conn_id, stream_id)
LEFT JOIN rtt_first USING (conn_id, stream_id)
LEFT JOIN before_loss AS bl USING (conn_id, stream_id)
