-- What happened to one request, in order? Every event of every request: its HTTP/2
-- milestones (request headers and end, response headers, each message with its ACK and,
-- for a slow reader, when the client read it (client_read), trailers), and the TCP and HTTP/2 events on its connection while it was in flight,
-- with the time since the request started (those the capture missed, not the network,
-- say so: capture_gaps). Filter by conn_id and stream_id.
-- depends_on: request_metrics, requests, messages, tcp_events, h2_events, client_read, capture_gaps
WITH r AS (
    SELECT q.conn_id, q.stream_id, q.request_start, q.request_end, q.response_headers, q."end",
        q.http_status, q.grpc_status, q.grpc_message, m.started_at, m.finished_at
    FROM requests AS q
    JOIN request_metrics AS m USING (conn_id, stream_id)
),
events AS (
    SELECT conn_id, stream_id, request_start AS ts, 'http2' AS layer, 'request headers' AS event, NULL AS detail FROM r WHERE request_start IS NOT NULL
    UNION ALL
    SELECT conn_id, stream_id, request_end, 'http2', 'request end (END_STREAM)', NULL FROM r WHERE request_end IS NOT NULL
    UNION ALL
    SELECT conn_id, stream_id, response_headers, 'http2', 'response headers', 'status ' || coalesce(CAST(http_status AS VARCHAR), '?') FROM r WHERE response_headers IS NOT NULL
    UNION ALL
    SELECT conn_id, stream_id, "end", 'http2', 'response end (trailers / END_STREAM)',
        'grpc-status ' || coalesce(CAST(grpc_status AS VARCHAR), '-') || coalesce(' ' || nullif(grpc_message, ''), '')
    FROM r WHERE "end" IS NOT NULL
    UNION ALL
    SELECT m.conn_id, m.stream_id, m.ts, 'grpc', m.direction || ' message #' || m."index",
        m.size || ' B' || coalesce(', acked +' || CAST(round((epoch_ns(m.acked_ts) - epoch_ns(m.ts)) / 1e6, 2) AS VARCHAR) || ' ms', ', never acked')
            || CASE WHEN c.read_stalled
                    THEN ', read by the client +' || CAST(round((epoch_ns(c.read_ts) - epoch_ns(m.ts)) / 1e6, 2) AS VARCHAR) || ' ms (slow reader)'
                    ELSE '' END
            || coalesce(', gap ' || CAST(round(m.gap_ms, 2) AS VARCHAR) || ' ms', '')
    FROM messages AS m
    LEFT JOIN client_read AS c ON c.conn_id = m.conn_id AND c.stream_id = m.stream_id AND c."index" = m."index"
        AND m.direction = 'response'
    UNION ALL
    SELECT r.conn_id, r.stream_id, e.ts, 'tcp', e.kind,
        e.direction || ' seq ' || e.seq || ', ' || e.bytes || ' B, packet ' || e.frame_no
            || coalesce(', recovered in ' || CAST(round(e.recovery_ms, 2) AS VARCHAR) || ' ms', '')
            || CASE WHEN g.conn_id IS NOT NULL THEN ', missed by the capture, not lost (capture_gaps)' ELSE '' END
    FROM r JOIN tcp_events AS e ON e.conn_id = r.conn_id AND e.ts BETWEEN r.started_at AND r.finished_at
    LEFT JOIN capture_gaps AS g
      ON g.conn_id = e.conn_id AND g.direction = e.direction AND g.shown_by = e.kind AND g.frame_no = e.frame_no AND g.seq = e.seq
    UNION ALL
    SELECT r.conn_id, r.stream_id, h.ts, 'http2', h.kind,
        h.direction || ' stream ' || h.stream_id || coalesce(' value ' || h.value, '') || coalesce(' ' || h.detail, '')
            || coalesce(', ' || CAST(round(h.duration_ms, 2) AS VARCHAR) || ' ms', '')
    FROM r JOIN h2_events AS h ON h.conn_id = r.conn_id AND h.stream_id IN (0, r.stream_id)
        AND h.ts BETWEEN r.started_at AND r.finished_at
        AND h.kind NOT IN ('ping', 'window_update', 'settings')
)
SELECT e.conn_id, e.stream_id, e.ts,
    round((epoch_ns(e.ts) - epoch_ns(r.started_at)) / 1e6, 3) AS t_ms,
    e.layer, e.event, e.detail
FROM events AS e
JOIN r USING (conn_id, stream_id)
ORDER BY e.conn_id, e.stream_id, e.ts,
    -- several events in one packet: in the order HTTP/2 puts them on the wire
    CASE WHEN e.event = 'request headers' THEN 0 WHEN e.event LIKE 'request message%' THEN 1
         WHEN e.event LIKE 'request end%' THEN 2 WHEN e.event = 'response headers' THEN 3
         WHEN e.event LIKE 'response message%' THEN 4 WHEN e.event LIKE 'response end%' THEN 5 ELSE 6 END,
    e.event
