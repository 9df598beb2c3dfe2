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
-- depends_on: requests_in_range, messages, tcp_events, client_read
-- materialize: capture
WITH read_gaps AS (
    SELECT conn_id, stream_id,
        max(gap_ms) AS max_gap_client_est_ms
    FROM (
        SELECT conn_id, stream_id,
            (epoch_ns(coalesce(read_ts, ts))
             - lag(epoch_ns(coalesce(read_ts, ts))) OVER (PARTITION BY conn_id, stream_id ORDER BY "index")) / 1e6 AS gap_ms
        FROM client_read
    )
    GROUP BY conn_id, stream_id
),
first_two AS (
    SELECT conn_id, stream_id,
        max(epoch_ns(ts)) FILTER (WHERE "index" = 0) AS t0,
        max(epoch_ns(acked_ts)) FILTER (WHERE "index" = 0) AS a0,
        max(epoch_ns(ts)) FILTER (WHERE "index" = 1) AS t1,
        max(epoch_ns(acked_ts)) FILTER (WHERE "index" = 1) AS a1
    FROM messages
    WHERE direction = 'response' AND "index" < 2
    GROUP BY conn_id, stream_id
),
read_stalls AS (  -- read times of the first and last response message, when stalled
    SELECT conn_id, stream_id,
        max(epoch_ns(read_ts)) FILTER (WHERE "index" = 0 AND read_stalled) AS first_read_ns,
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
held_ack AS (
    SELECT f.conn_id, f.stream_id, f.t0 + greatest(f.a1 - f.t1, 0) AS first_acked_ns
    FROM first_two AS f
    WHERE f.a0 = f.a1 AND f.t1 > f.t0
      AND NOT EXISTS (
          SELECT 1 FROM tcp_events AS e
          WHERE e.conn_id = f.conn_id AND e.direction = 'to_client' AND e.kind = 'dup_ack'
            AND epoch_ns(e.ts) BETWEEN f.t0 AND f.a0)
)
SELECT
    r.capture_id,
    r.conn_id,
    r.stream_id,
    r.method_label AS method,
    r.client_addr,
    r.server_addr,
    r.kind,
    r.grpc_status,
    r.http_status,
    r.app_throttled,
    r.response_messages,
    r.response_bytes,
    r.seen_at AS started_at,
    coalesce(r.end_acked, r."end", r.last_message, r.first_message, r.response_headers, r.seen_at) AS finished_at,
    r.latency_ms,
    r.ttft_ms,
    r.max_gap_ms,
    coalesce(r.latency_client_est_ms, r.latency_ms) + coalesce(w.client_read_wait_ms, 0) AS latency_eff_ms,
    -- first message: read late (slow reader), else reached the client under a held ACK
    CASE WHEN s.first_read_ns IS NOT NULL OR (h.first_acked_ns IS NOT NULL AND r.ttft_client_est_ms IS NOT NULL)
         THEN (coalesce(s.first_read_ns, h.first_acked_ns) - epoch_ns(coalesce(r.request_end, r.request_start))) / 1e6
         ELSE coalesce(r.ttft_client_est_ms, r.ttft_ms) END AS ttft_eff_ms,
    coalesce(g.max_gap_client_est_ms, r.max_gap_ms) AS gap_eff_ms,
    coalesce(w.client_read_wait_ms, 0) AS client_read_wait_ms,
    r.latency_client_est_ms IS NOT NULL AS client_side_estimated
FROM requests_in_range AS r
LEFT JOIN read_gaps AS g USING (conn_id, stream_id)
LEFT JOIN held_ack AS h USING (conn_id, stream_id)
LEFT JOIN read_stalls AS s USING (conn_id, stream_id)
LEFT JOIN read_wait AS w USING (conn_id, stream_id)
WHERE r.seen_at IS NOT NULL
