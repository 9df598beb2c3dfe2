-- When did the client application read each response message? Its ACK only says when the
-- bytes reached the client's kernel: a slow reader (a busy or paused client process) lets
-- them sit unread in its buffers. HTTP/2 shows the difference: a receiver returns
-- flow-control window as its application consumes data, so while the server sits blocked
-- on an exhausted window (h2_events flow_control_blocked, on the message's stream or the
-- connection) the client has not read what it already ACKed. A message is read-stalled
-- when such a blocked episode overlaps the time from its ACK to the client's next
-- WINDOW_UPDATE on the connection; its read time is that WINDOW_UPDATE (the first sign
-- the application is consuming again). Otherwise the message was read when it arrived: at
-- its ACK, unless the client held that ACK (delayed ACK: one ACK for two segments, or
-- after a timer): when one ACK covers several messages and nothing went wrong toward the
-- client in between (no retransmission, lost segment, out-of-order arrival or duplicate
-- ACK), each arrived as long after it passed the capture point as the last of them did
-- before the ACK. No shift for the capture-point-to-client half RTT is needed: both
-- times are the client's packets as the capture point saw them, like the request they are
-- compared with.
-- Columns: conn_id, stream_id, index, ts (capture time), acked_ts, arrival_ts (when it
-- reached the client, in the ACK's clock: acked_ts less a held ACK's wait), read_ts
-- (estimated client read time: arrival_ts, or the WINDOW_UPDATE after it when
-- read-stalled; null without ACK), read_stalled, token_index (0, 1, ... over the messages
-- that carry tokens: every gRPC message, an LLM stream's content events; null for a role
-- chunk, a usage chunk, a ping...).
-- depends_on: messages, h2_events, tcp_events
-- materialize: session
WITH responses AS (  -- numeric keys only (ids as text make the per-message joins several
    -- times slower, and wide rows of millions of messages spill to disk); the times as read,
    -- numbers where arithmetic needs them (epoch_ns is free; making a TIMESTAMPTZ_NS of a
    -- number costs ~90 ns a value, as much as the rest of the model)
    SELECT hash(conn_id) AS ck, hash(conn_id, stream_id) AS sk, stream_id, "index", ts, acked_ts,
        event IS NULL OR event IN ('content', 'data') AS carries_tokens
    FROM messages
    WHERE direction = 'response'
),
conns AS (  -- the connection id behind each key, given back to the rows at the end
    SELECT DISTINCT conn_id, hash(conn_id) AS ck FROM messages WHERE direction = 'response'
),
non_tokens AS (  -- a stream's events that carry no tokens (an LLM stream's role chunk, usage...)
    -- (read from messages here and below, not from responses: a CTE read more than once
    -- is held whole, millions of rows that spill on a long capture; these reads are filtered)
    SELECT hash(conn_id, stream_id) AS sk, "index" FROM messages
    WHERE direction = 'response' AND NOT (event IS NULL OR event IN ('content', 'data'))
),
token_shift AS (  -- how many of those come before each token message of the same stream
    SELECT r.sk, r."index", count(*) AS before
    FROM (SELECT hash(conn_id, stream_id) AS sk, "index" FROM messages
          WHERE direction = 'response' AND (event IS NULL OR event IN ('content', 'data'))) AS r
    JOIN non_tokens AS n ON n.sk = r.sk AND n."index" < r."index"
    GROUP BY ALL
),
sent AS (
    SELECT r.*, CASE WHEN r.carries_tokens THEN r."index" - coalesce(t.before, 0) END AS token_index
    FROM responses AS r
    LEFT JOIN token_shift AS t USING (sk, "index")
),
ack_groups AS (  -- the messages one ACK covered: the last of them shows the path's delay then
    SELECT ck, acked_ts, max(ts) AS last_sent
    FROM sent WHERE acked_ts IS NOT NULL
    GROUP BY ALL
),
trouble AS (  -- (keyed by connection and second: a hash join below, not a sort of every message)
    SELECT hash(conn_id) AS ck, ts AS trouble_ts, epoch_ns(ts) // 1000000000 AS sec
    FROM tcp_events
    WHERE direction = 'to_client'
      AND troubled_kind(kind)
),
spans AS (  -- the seconds from each acked message's send to its ACK: the one it was sent in,
    -- then any later ones (the few messages whose ACK came in a later second)
    SELECT ck, ts, acked_ts, epoch_ns(ts) // 1000000000 AS sec FROM sent WHERE acked_ts IS NOT NULL
    UNION ALL
    SELECT ck, ts, acked_ts, unnest(span_range(epoch_ns(ts) // 1000000000 + 1, epoch_ns(acked_ts) // 1000000000 + 1, 1))
    FROM sent WHERE epoch_ns(acked_ts) // 1000000000 > epoch_ns(ts) // 1000000000
),
troubled AS (  -- something went wrong toward the client between a send and its ACK
    SELECT DISTINCT s.ck, s.ts, s.acked_ts
    FROM spans AS s
    JOIN trouble AS t ON t.ck = s.ck AND t.sec = s.sec AND t.trouble_ts BETWEEN s.ts AND s.acked_ts
),
arrived AS (
    SELECT s.*, g.last_sent, x.ck IS NOT NULL AS troubled
    FROM sent AS s
    LEFT JOIN ack_groups AS g USING (ck, acked_ts)
    LEFT JOIN troubled AS x USING (ck, ts, acked_ts)
),
response AS (
    SELECT ck, stream_id, "index", token_index, ts, acked_ts,
        CASE WHEN acked_ts IS NULL OR troubled THEN epoch_ns(acked_ts)
             ELSE epoch_ns(ts) + greatest(epoch_ns(acked_ts) - epoch_ns(last_sent), 0) END AS arrival_ns
    FROM arrived
),
client_window_updates AS (
    SELECT hash(conn_id) AS ck, epoch_ns(ts) AS wu_ns, ts AS wu_ts
    FROM h2_events
    WHERE kind = 'window_update' AND direction = 'to_server'
),
blocked AS (
    SELECT hash(conn_id) AS ck, stream_id, epoch_ns(ts) AS blocked_from,
        epoch_ns(ts) + CAST(round(coalesce(duration_ms, 0) * 1e6) AS BIGINT) AS blocked_until
    FROM h2_events
    WHERE kind = 'flow_control_blocked' AND direction = 'to_client'
),
wu_gaps AS (  -- each client WINDOW_UPDATE on a connection where a sender was blocked, and
    -- the one before it: a message ACKed in between (after the one before, at or before
    -- this one) was read, at the latest, at this one
    SELECT ck, wu_ns, wu_ts, lag(wu_ns) OVER (PARTITION BY ck ORDER BY wu_ns) AS prev_ns
    FROM client_window_updates
    WHERE ck IN (SELECT ck FROM blocked)
),
blocked_reach AS (  -- the latest end of a blocked episode that began by each start: a
    -- blocked episode began by X and still on at Y exists when the latest end of those
    -- begun by X is Y or later (an as-of lookup, not a join of every pair)
    SELECT ck, blocked_from, max(blocked_until) OVER (PARTITION BY ck ORDER BY blocked_from) AS until_ns
    FROM blocked
),
stream_reach AS (  -- the same per stream (0: the connection's window)
    SELECT ck, stream_id, blocked_from,
        max(blocked_until) OVER (PARTITION BY ck, stream_id ORDER BY blocked_from) AS until_ns
    FROM blocked
),
open_gaps AS (  -- the gaps a blocked episode reaches into (with the test's 1 ms below): only
    -- a message ACKed in one can have been read late; the first gap from the connection's
    -- first ACK on
    SELECT g.ck, g.wu_ns, g.wu_ts,
        coalesce(g.prev_ns, (SELECT min(epoch_ns(acked_ts)) - 1 FROM sent AS s WHERE s.ck = g.ck)) AS lo_ns
    FROM wu_gaps AS g
    ASOF JOIN blocked_reach AS b ON b.ck = g.ck AND b.blocked_from <= g.wu_ns
    WHERE g.prev_ns IS NULL OR b.until_ns >= g.prev_ns - 1000000
),
next_update AS (  -- the messages ACKed in those gaps, with the WINDOW_UPDATE that ends theirs
    -- (a hash join by connection and second, not an as-of join of every message; from
    -- sent, the same messages, so that response is read once and never held whole)
    SELECT r.ck, r.stream_id, r."index", r.acked_ns, g.wu_ns, g.wu_ts
    FROM (SELECT *, epoch_ns(acked_ts) AS acked_ns, epoch_ns(acked_ts) // 1000000000 AS sec
          FROM sent WHERE acked_ts IS NOT NULL) AS r
    JOIN (SELECT *, unnest(span_range(lo_ns // 1000000000, wu_ns // 1000000000 + 1, 1)) AS sec FROM open_gaps) AS g
      ON g.ck = r.ck AND g.sec = r.sec AND r.acked_ns > g.lo_ns AND r.acked_ns <= g.wu_ns
),
stalled AS (  -- read late: a blocked episode of the message's stream or the connection's
    -- window between its ACK and that WINDOW_UPDATE, or any blocked episode from before its
    -- ACK to (1 ms before) the WINDOW_UPDATE
    SELECT DISTINCT n.ck, n.stream_id, n."index", n.wu_ts
    FROM next_update AS n
    ASOF LEFT JOIN blocked_reach AS a ON a.ck = n.ck AND a.blocked_from <= n.acked_ns
    ASOF LEFT JOIN (SELECT * FROM stream_reach WHERE stream_id = 0) AS c
      ON c.ck = n.ck AND c.blocked_from <= n.wu_ns
    ASOF LEFT JOIN stream_reach AS s ON s.ck = n.ck AND s.stream_id = n.stream_id AND s.blocked_from <= n.wu_ns
    WHERE a.until_ns >= n.wu_ns - 1000000 OR c.until_ns >= n.acked_ns OR s.until_ns >= n.acked_ns
)
SELECT c.conn_id, r.stream_id, r."index", r.ts, r.acked_ts,
    CASE WHEN r.arrival_ns IS NOT DISTINCT FROM epoch_ns(r.acked_ts) THEN r.acked_ts
         ELSE CAST(make_timestamp_ns(r.arrival_ns) AS TIMESTAMPTZ_NS) END AS arrival_ts,
    CASE WHEN s.ck IS NOT NULL THEN s.wu_ts ELSE arrival_ts END AS read_ts,
    s.ck IS NOT NULL AS read_stalled, r.token_index
FROM response AS r
JOIN conns AS c USING (ck)
LEFT JOIN stalled AS s USING (ck, stream_id, "index")
