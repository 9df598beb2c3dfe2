-- What does each request look like from the client, and which window is it in? The
-- metrics attribution judges a request by: client-side estimates where the ACKs gave
-- them (a server-side capture point sees responses leave, not arrive), else the
-- capture-point values; the client-side largest token gap from the read times of its
-- messages (client_read: the ACK times, or later for a slow reader); when it started and finished
-- (the report window a request falls in is window_of(started_at)).
-- A held ACK is undone for TTFT: when one ACK covers both of a stream's first two
-- response messages and the client sent no duplicate ACK in between (nothing was late or
-- lost), the client held its ACK for the second segment (ACK every second segment); the
-- first message reached it when it would have been ACKed: its capture time plus the
-- delay the second message's ACK shows.
-- A slow reader is undone too (client_read): when the first or last response message sat
-- unread in the client's buffers, TTFT and latency run to when the client read it;
-- client_read_wait_ms is what the end of the response added that way.
-- A delayed ACK is undone too: a client ACKs what it received at once or holds the ACK
-- (Linux: 40 ms and more, until more data comes), so an ACK bounds the arrival from above
-- only. Where nothing went wrong toward the client between the bytes passing the capture
-- point and their ACK (no retransmission, lost segment, out-of-order arrival or duplicate
-- ACK) and the path was not queued (path_rtt: 25th percentile of its inflation toward the
-- client from 250 ms before they passed to their ACK; or, where a queue was forming as they
-- passed, of its 100 ms buckets from then to the ACK that hold at least
-- queue_onset_min_samples samples, so that the request's own held ACK cannot make a quiet
-- path look queued), they arrived one path delay after they passed (the RTT floor plus
-- that inflation): the rest of the wait, up to the longest a client holds an ACK, was the
-- held ACK (ack_held_ms).
-- A request lost before the capture point is undone too. When its first bytes filled a
-- hole in the client's bytes (a later packet showed them missing), the client had sent
-- them before the hole showed, after its last packet seen before (an ACK that gave an RTT
-- sample) and at most a retransmission timeout (200 ms, Linux's floor, plus the path's
-- RTT) earlier. When client packets went missing since its previous request on the
-- connection (upstream_loss: the client numbers its packets one by one and some numbers
-- never passed) and it came at least a retransmission timeout after the first of them could
-- have left, it was among them, resent until a copy passed: the client began then (a lost
-- ACK followed by a fresh request looks the same from here). Not on a capture that dropped
-- packets itself (capture_drops): there a missing IP id may be one more packet it missed.
-- Requests that left in the flush right after such a hold (or after the client's data was
-- resent on timeouts past the capture point) waited in the client's socket behind it,
-- issued at some time during it: spread evenly over it in issue order (an estimate).
-- upstream_delay_ms is that wait (the largest, if several); client_started_at (started_at
-- less it) is when the client began.
-- A request with no answer at all (no response headers, message, end or reset) on a
-- connection that went on for a second or more after it (and whose server packets the
-- capture saw: one captured one way says nothing of answers) is unanswered: it failed, and its
-- TTFT and latency run at least to the connection's last packet (finished_at); unless the
-- capture missed bytes toward the client on that connection after it was sent (capture_loss:
-- the client acknowledged them), among which its answer may have been: its times unknown.
-- depends_on: requests_in_range, messages, tcp_events, network_events, rtt_samples, client_read, path_rtt, connections, capture_gaps
-- materialize: capture
WITH read_times AS (  -- the token messages, keyed by a number for the window below (text
    -- keys: several times slower, and millions of rows wider than memory)
    SELECT hash(conn_id, stream_id) AS k, token_index, epoch_ns(coalesce(read_ts, ts)) AS t
    FROM client_read
    WHERE token_index IS NOT NULL  -- gaps between tokens, not to a role or usage chunk
),
read_gaps AS (  -- each token message and the one before it (the index before: none across a
    -- hole); per stream key, joined to the requests by the same key. A window, not a join on
    -- the next index: DuckDB sorts millions of messages faster than it probes a hash table
    -- of them (15-20 % less at 10M and 20M packets, as fast at 1M). Ordered by time within an
    -- index too: a message that shows twice gives one answer, from the later copy
    SELECT k, max(t - prev_t) / 1e6 AS max_gap_client_est_ms
    FROM (SELECT k, t, token_index, lag(t) OVER w AS prev_t, lag(token_index) OVER w AS prev_index
          FROM read_times WINDOW w AS (PARTITION BY k ORDER BY token_index, t))
    WHERE prev_index = token_index - 1
    GROUP BY k
),
response_holes AS (  -- when the capture showed bytes toward the client that it missed, or
    -- client packets (its ACKs) missing by their IP ids on a capture that dropped packets
    SELECT conn_id, epoch_ns(ts) AS hole_ns, direction = 'to_client' AS data FROM capture_gaps
    WHERE (direction = 'to_client' AND shown_by IN ('lost_segment', 'capture_loss'))
       OR (direction = 'to_server' AND shown_by = 'upstream_loss')
),
holed_gaps AS (  -- the same on the connections with such holes, less the gaps across one
    -- (from the message before's capture to this one's capture, read or ACK, whichever is
    -- later: a missing ACK makes the read late): tokens or ACKs the capture missed are no wait.
    -- Another pass over those connections only: a capture that missed nothing pays nothing
    SELECT k, max(t - prev_t) / 1e6 AS max_gap_client_est_ms
    FROM (SELECT conn_id, k, t, last_ns, token_index, lag(t) OVER w AS prev_t, lag(token_index) OVER w AS prev_index,
                 lag(seen_ns) OVER w AS prev_seen_ns
          FROM (SELECT conn_id, hash(conn_id, stream_id) AS k, token_index, epoch_ns(coalesce(read_ts, ts)) AS t,
                       epoch_ns(ts) AS seen_ns, greatest(epoch_ns(ts), epoch_ns(read_ts), epoch_ns(acked_ts)) AS last_ns
                FROM client_read
                WHERE token_index IS NOT NULL AND conn_id IN (SELECT conn_id FROM response_holes))
          WINDOW w AS (PARTITION BY k ORDER BY token_index, t)) AS p
    ASOF LEFT JOIN response_holes AS h ON h.conn_id = p.conn_id AND h.hole_ns <= p.last_ns
    WHERE p.prev_index = p.token_index - 1 AND NOT coalesce(h.hole_ns > p.prev_seen_ns, false)
    GROUP BY k
),
holed AS (  -- per request on such a connection: a hole toward the client after it was sent
    -- (its answer may have been in it), one after it began by its first token's capture or
    -- ACK (the first token may have been in it), and its gaps less those across one
    SELECT r.conn_id, r.stream_id,
        coalesce(max(h.hole_ns) FILTER (WHERE h.data) > epoch_ns(any_value(r.seen_at)), false) AS answer_holed,
        coalesce(bool_or(h.hole_ns > epoch_ns(r.request_start)
                         AND h.hole_ns <= greatest(epoch_ns(r.first_message), epoch_ns(r.first_message_acked))), false) AS first_holed,
        any_value(g.max_gap_client_est_ms) AS max_gap_ms
    FROM requests_in_range AS r
    JOIN response_holes AS h USING (conn_id)
    LEFT JOIN holed_gaps AS g ON g.k = hash(r.conn_id, r.stream_id)
    GROUP BY r.conn_id, r.stream_id
),
first_two AS (  -- the first two messages carrying tokens
    SELECT conn_id, stream_id,
        max(epoch_ns(ts)) FILTER (WHERE token_index = 0) AS t0,
        max(epoch_ns(acked_ts)) FILTER (WHERE token_index = 0) AS a0,
        max(epoch_ns(ts)) FILTER (WHERE token_index = 1) AS t1,
        max(epoch_ns(acked_ts)) FILTER (WHERE token_index = 1) AS a1
    FROM client_read
    WHERE token_index < 2
    GROUP BY conn_id, stream_id
),
read_stalls AS (  -- read times of the first and last response message, when stalled
    SELECT conn_id, stream_id,
        max(epoch_ns(read_ts)) FILTER (WHERE token_index = 0 AND read_stalled) AS first_read_ns,
        max(epoch_ns(read_ts)) FILTER (WHERE read_stalled) AS last_read_ns
    FROM client_read
    GROUP BY conn_id, stream_id
    HAVING bool_or(read_stalled)
),
read_wait AS (  -- what a stalled last read added to the client-side latency
    SELECT r.conn_id, r.stream_id,
        greatest((s.last_read_ns - epoch_ns(r.request_start)) / 1e6
                 - coalesce(r.latency_client_est_ms, r.latency_ms), 0) AS client_read_wait_ms
    FROM requests_in_range AS r
    JOIN read_stalls AS s USING (conn_id, stream_id)
),
acks AS (  -- the first and the last response byte: when they passed, when they were ACKed
    SELECT r.conn_id, r.stream_id, hash(r.conn_id, r.stream_id) AS rk, r.client_addr, r.server_addr, 'first' AS which,
        epoch_ns(r.first_message) AS t, epoch_ns(r.first_message_acked) AS a
    FROM requests_in_range AS r WHERE r.first_message_acked > r.first_message
    UNION ALL
    SELECT r.conn_id, r.stream_id, hash(r.conn_id, r.stream_id), r.client_addr, r.server_addr, 'end',
        epoch_ns(coalesce(r."end", r.last_message)), epoch_ns(r.end_acked)
    FROM requests_in_range AS r WHERE r.end_acked > coalesce(r."end", r.last_message)
),
path_queue AS (  -- the path's RTT inflation toward the client around each (path_rtt buckets;
    -- grouped by a numeric request key: text keys make a long capture's groups spill): from
    -- 250 ms before (a queue only starting then does not count), or, the greater, from the
    -- bytes passing on, in buckets with enough samples (a queue forming as they passed)
    SELECT k.rk, k.which,
        greatest(quantile_cont(p.inflation_p25_ms, 0.25),
                 quantile_cont(p.inflation_p25_ms, 0.25)
                     FILTER (WHERE p.bucket >= k.t // 100000000
                               AND p.samples >= getvariable('queue_onset_min_samples'))) AS inflation_ms
    FROM (SELECT rk, which, client_addr, server_addr, t,
                 unnest(span_range((t - 250000000) // 100000000, a // 100000000 + 1, 10)) AS bucket
          FROM acks) AS k
    JOIN path_rtt AS p
      ON p.client_addr = k.client_addr AND p.server_addr = k.server_addr AND p.bucket = k.bucket
     AND p.direction = 'to_client'
    GROUP BY k.rk, k.which, k.t
),
troubled AS (  -- something went wrong toward the client before the ACK: the ACK time stands
    SELECT DISTINCT k.conn_id, k.stream_id, k.which
    FROM (SELECT *, unnest(span_range(t // 1000000000, a // 1000000000 + 1, 1)) AS sec FROM acks) AS k
    JOIN (SELECT conn_id, epoch_ns(ts) AS t_ns, epoch_ns(ts) // 1000000000 AS sec FROM tcp_events
          WHERE direction = 'to_client'
            AND troubled_kind(kind)) AS e
      ON e.conn_id = k.conn_id AND e.sec = k.sec AND e.t_ns BETWEEN k.t AND k.a
),
ack_held AS (  -- how long the client held each ACK beyond the path delay (0 when troubled)
    SELECT k.conn_id, k.stream_id,
        max(CASE WHEN k.which = 'first' THEN held_ms END) AS first_held_ms,
        max(CASE WHEN k.which = 'end' THEN held_ms END) AS end_held_ms
    FROM (
        SELECT k.conn_id, k.stream_id, k.which,
            CASE WHEN x.conn_id IS NULL AND NOT coalesce(queued(q.inflation_ms, c.rtt_min_ms_to_client), false)
                 THEN least(greatest((k.a - k.t) / 1e6 - coalesce(c.rtt_min_ms_to_client, 0) - coalesce(q.inflation_ms, 0), 0),
                            delayed_ack_max_ms())
                 ELSE 0 END AS held_ms
        FROM acks AS k
        JOIN connections AS c USING (conn_id)
        LEFT JOIN path_queue AS q USING (rk, which)
        LEFT JOIN troubled AS x USING (conn_id, stream_id, which)
    ) AS k
    GROUP BY ALL
),
upstream_gaps AS (  -- (the network's: not those the capture may have missed itself)
    SELECT conn_id, epoch_ns(ts) AS gap_ns, recovery_ms, bytes AS lost_packets
    FROM network_events
    WHERE kind = 'upstream_loss' AND direction = 'to_server'
),
client_acks AS (  -- when the client's ACKs passed (those that gave an RTT sample), on the
    -- connections whose client bytes had holes
    SELECT conn_id, epoch_ns(ts) AS ack_ns FROM rtt_samples
    WHERE direction = 'to_client'
      AND conn_id IN (SELECT conn_id FROM tcp_events WHERE kind = 'lost_segment' AND direction = 'to_server')
),
filled_holes AS (  -- holes in the client's bytes, when they showed and when resent bytes filled them
    SELECT e.conn_id, epoch_ns(e.ts) AS shown_ns, epoch_ns(e.ts) + CAST(round(e.recovery_ms * 1e6) AS BIGINT) AS filled_ns,
        e.recovery_ms, a.ack_ns AS before_ns
    FROM tcp_events AS e
    ASOF LEFT JOIN client_acks AS a ON a.conn_id = e.conn_id AND a.ack_ns < epoch_ns(e.ts)
    WHERE e.kind = 'lost_segment' AND e.direction = 'to_server' AND e.recovery_ms IS NOT NULL
),
upstream AS (
    -- its first bytes filled a hole: they were sent before the hole showed, after the
    -- client's last packet seen before it, at most a retransmission timeout earlier
    SELECT r.conn_id, r.stream_id, 1 AS lost_packets,
        max(h.recovery_ms + least(coalesce(h.shown_ns - h.before_ns, 0) / 1e6,
                                  200 + coalesce(c.rtt_min_ms_to_server, 0) + coalesce(c.rtt_min_ms_to_client, 0))) AS upstream_delay_ms
    FROM requests_in_range AS r
    JOIN connections AS c USING (conn_id)
    JOIN filled_holes AS h
      ON h.conn_id = r.conn_id AND abs(h.filled_ns - epoch_ns(r.request_start)) <= 1000000
    GROUP BY ALL
    UNION ALL
    -- client packets went missing since the client's previous request on the connection,
    -- and this one came at least a retransmission timeout (200 ms, Linux's floor) after
    -- the first of them could have been sent: it was (among) what went missing, resent
    -- until a copy passed. It began when that first lost packet could have left: after the
    -- client's packet before it (a lost ACK followed by a fresh request looks the same
    -- from here: the window's requests are then judged by the loss either way)
    SELECT conn_id, stream_id, lost_packets, (start_ns - lost_from_ns) / 1e6
    FROM (
        SELECT r.conn_id, r.stream_id, epoch_ns(r.request_start) AS start_ns,
            sum(g.lost_packets) AS lost_packets,
            greatest(min(g.gap_ns - CAST(round(g.recovery_ms * 1e6) AS BIGINT)), any_value(r.prev_ns)) AS lost_from_ns
        FROM (SELECT *, lag(epoch_ns(request_start)) OVER (PARTITION BY conn_id ORDER BY request_start) AS prev_ns
              FROM requests_in_range WHERE request_start IS NOT NULL) AS r
        JOIN upstream_gaps AS g
          ON g.conn_id = r.conn_id AND g.gap_ns <= epoch_ns(r.request_start)
         AND g.gap_ns > coalesce(r.prev_ns, epoch_ns(r.request_start) - 3000000000)
        GROUP BY ALL
    )
    WHERE start_ns - lost_from_ns BETWEEN 200000000 AND 3000000000
),
own_upstream AS (  -- per request: the largest of its own upstream waits
    SELECT conn_id, stream_id, max(upstream_delay_ms) AS upstream_delay_ms, max(lost_packets) AS lost_packets
    FROM upstream GROUP BY ALL
),
holds AS (  -- the client's sending held up for a retransmission timeout or more: a request
    -- whose own first bytes were resent until a copy passed (upstream, 200 ms or more), or
    -- client data resent on timeouts after the capture point saw it leave (a chain of
    -- rto_retransmission of the same bytes)
    SELECT u.conn_id, u.stream_id, epoch_ns(r.request_start) - CAST(round(u.upstream_delay_ms * 1e6) AS BIGINT) AS from_ns,
        epoch_ns(r.request_start) AS to_ns
    FROM own_upstream AS u
    JOIN requests_in_range AS r USING (conn_id, stream_id)
    WHERE u.upstream_delay_ms >= 200
    UNION ALL
    SELECT conn_id, NULL, min(epoch_ns(ts) - CAST(round(recovery_ms * 1e6) AS BIGINT)), max(epoch_ns(ts))
    FROM tcp_events
    WHERE kind = 'rto_retransmission' AND direction = 'to_server' AND recovery_ms >= 200
    GROUP BY conn_id, seq
),
arrivals AS (  -- each request's arrival and the gap since the connection's previous one
    SELECT conn_id, stream_id, epoch_ns(request_start) AS start_ns,
        epoch_ns(request_start) - lag(epoch_ns(request_start)) OVER (PARTITION BY conn_id ORDER BY request_start, stream_id) AS gap_ns
    FROM requests_in_range WHERE request_start IS NOT NULL
),
flushes AS (  -- the requests that left after a hold ended, back to back: while each came
    -- within a round trip and 50 ms of the one before (slow start after a timeout sends what
    -- waited in bursts a round trip apart, or a delayed ACK, 40 ms, apart while the window
    -- is one segment), at most as many as the connection's request rate over the 10 s
    -- before the hold would have issued during it (and one more)
    SELECT a.conn_id, a.stream_id, a.start_ns, h.from_ns, h.to_ns,
        row_number() OVER (PARTITION BY h.conn_id, h.from_ns, h.to_ns ORDER BY a.start_ns, a.stream_id) AS i,
        sum(CASE WHEN a.start_ns > h.to_ns + rt.ns AND a.gap_ns > rt.ns THEN 1 ELSE 0 END)
            OVER (PARTITION BY h.conn_id, h.from_ns, h.to_ns ORDER BY a.start_ns, a.stream_id) AS breaks,
        ceil(rate.n * (h.to_ns - h.from_ns) / 10e9) + 1 AS cap
    FROM holds AS h
    JOIN (SELECT conn_id, CAST(round((coalesce(rtt_min_ms_to_server, 0) + coalesce(rtt_min_ms_to_client, 0) + 50) * 1e6) AS BIGINT) AS ns
          FROM connections) AS rt USING (conn_id)
    JOIN arrivals AS a
      ON a.conn_id = h.conn_id AND a.stream_id IS DISTINCT FROM h.stream_id
     AND a.start_ns >= h.to_ns AND a.start_ns <= h.to_ns + 30000000000
    JOIN LATERAL (SELECT count(*) AS n FROM arrivals AS b
                  WHERE b.conn_id = h.conn_id AND b.start_ns >= h.from_ns - 10000000000 AND b.start_ns < h.from_ns) AS rate ON true
),
held AS (
    -- they were issued during the hold and waited in the client's socket behind the held
    -- bytes, unseen. When in it, packets cannot say: spread evenly over it in the order the
    -- client issued them (an estimate, what upstream_delay_ms carries)
    SELECT conn_id, stream_id, 0 AS lost_packets, max((start_ns - (from_ns + (to_ns - from_ns) * i / (k + 1))) / 1e6) AS upstream_delay_ms
    FROM (SELECT *, count(*) OVER (PARTITION BY conn_id, from_ns, to_ns) AS k
          FROM flushes WHERE breaks = 0 AND i <= cap)
    GROUP BY ALL
),
held_ack AS (
    SELECT f.conn_id, f.stream_id, f.t0 + greatest(f.a1 - f.t1, 0) AS first_acked_ns
    FROM first_two AS f
    ANTI JOIN (  -- a duplicate ACK from the client between them: something was late or lost
        SELECT DISTINCT f.conn_id, f.stream_id
        FROM (SELECT conn_id, stream_id, t0, a0, unnest(span_range(t0 // 1000000000, a0 // 1000000000 + 1, 1)) AS sec
              FROM first_two WHERE a0 = a1 AND t1 > t0) AS f
        JOIN (SELECT conn_id, epoch_ns(ts) AS t_ns, epoch_ns(ts) // 1000000000 AS sec FROM tcp_events
              WHERE direction = 'to_client' AND kind = 'dup_ack') AS e
          ON e.conn_id = f.conn_id AND e.sec = f.sec AND e.t_ns BETWEEN f.t0 AND f.a0
    ) AS d USING (conn_id, stream_id)
    WHERE f.a0 = f.a1 AND f.t1 > f.t0
)
SELECT
    r.capture_id,
    r.conn_id,
    r.stream_id,
    r.method_label AS method,
    r.model,
    r.client_addr,
    r.server_addr,
    r.kind,
    r.grpc_status,
    r.http_status,
    r.app_throttled,
    r.response_messages,
    r.response_bytes,
    r.seen_at AS started_at,
    -- no answer at all, on a connection that went on (or ended) a second or more after it
    -- was sent: the request failed; its latency is at least the rest of the connection
    -- (unless the capture missed bytes toward the client after it: its answer among them?)
    r.response_headers IS NULL AND r.first_message IS NULL AND r."end" IS NULL AND r.reset_code IS NULL
        AND epoch_ns(c."end") - epoch_ns(r.seen_at) >= 1000000000 AND c.packets_to_client > 0
        AND NOT coalesce(hr.answer_holed, false) AS unanswered,
    CASE WHEN unanswered THEN c."end"
         ELSE coalesce(r.end_acked, r."end", r.last_message, r.first_message, r.response_headers, r.seen_at) END AS finished_at,
    r.latency_ms,
    r.ttft_ms,
    r.max_gap_ms,
    CASE WHEN unanswered THEN (epoch_ns(c."end") - epoch_ns(r.seen_at)) / 1e6
         ELSE coalesce(r.latency_client_est_ms - coalesce(k.end_held_ms, 0), r.latency_ms) + coalesce(w.client_read_wait_ms, 0) END
        + coalesce(u.upstream_delay_ms, 0) AS latency_eff_ms,
    -- first message: read late (slow reader), else reached the client under a held ACK
    CASE WHEN unanswered THEN (epoch_ns(c."end") - epoch_ns(r.seen_at)) / 1e6
         WHEN hr.first_holed THEN NULL
         WHEN s.first_read_ns IS NOT NULL OR (h.first_acked_ns IS NOT NULL AND r.ttft_client_est_ms IS NOT NULL)
         THEN (coalesce(s.first_read_ns, h.first_acked_ns) - epoch_ns(coalesce(r.request_end, r.request_start))) / 1e6
         ELSE coalesce(r.ttft_client_est_ms - coalesce(k.first_held_ms, 0), r.ttft_ms) END
        + coalesce(u.upstream_delay_ms, 0) AS ttft_eff_ms,
    CASE WHEN hr.conn_id IS NULL THEN coalesce(g.max_gap_client_est_ms, r.max_gap_ms)
         WHEN g.k IS NOT NULL THEN hr.max_gap_ms END AS gap_eff_ms,
    coalesce(w.client_read_wait_ms, 0) AS client_read_wait_ms,
    coalesce(k.end_held_ms, 0) AS ack_held_ms,
    coalesce(u.upstream_delay_ms, 0) AS upstream_delay_ms,
    coalesce(u.lost_packets, 0) AS upstream_lost_packets,
    CAST(make_timestamp_ns(epoch_ns(r.seen_at) - CAST(round(coalesce(u.upstream_delay_ms, 0) * 1e6) AS BIGINT)) AS TIMESTAMPTZ_NS) AS client_started_at,
    r.latency_client_est_ms IS NOT NULL AS client_side_estimated,
    -- TLS read without keys: every figure of the request is an estimate from record times
    coalesce(r.estimated, false) AS tls_estimated
FROM requests_in_range AS r
JOIN connections AS c USING (conn_id)
LEFT JOIN holed AS hr USING (conn_id, stream_id)
LEFT JOIN read_gaps AS g ON g.k = hash(r.conn_id, r.stream_id)
LEFT JOIN held_ack AS h USING (conn_id, stream_id)
LEFT JOIN read_stalls AS s USING (conn_id, stream_id)
LEFT JOIN read_wait AS w USING (conn_id, stream_id)
LEFT JOIN ack_held AS k USING (conn_id, stream_id)
LEFT JOIN (SELECT conn_id, stream_id, max(upstream_delay_ms) AS upstream_delay_ms, max(lost_packets) AS lost_packets
           FROM (FROM own_upstream UNION ALL BY NAME FROM held) GROUP BY ALL) AS u USING (conn_id, stream_id)
WHERE r.seen_at IS NOT NULL
