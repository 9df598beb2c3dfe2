-- Was a request's path shaped? (policer_evidence: policed; receive windows, HTTP/2 flow
-- control and application throttling are judged in request_evidence.) From its path's
-- timeline while the request was in flight (path_timeline, 1 s buckets):
--   shaper   a delivery-rate ceiling with growing RTT: while a queueing episode of the
--            path built up (seconds with RTT inflation over the floor, at most 1 s
--            apart; from 1 s before it to its peak, leaving out the drain) the inference
--            connections offered more than got delivered (sent >= 1.1 x acknowledged: a
--            backlog builds behind the ceiling), or, 100 ms at a time while queued, their
--            busy deliveries stayed well under their busy sends (90th percentiles, at most
--            0.35: bursts go in, a capped rate comes out; a delay, however jittery, lets the
--            bursts through: 0.64-0.82 on the lab's queue and jitter runs, but 0.39-0.52 on
--            the sweeps' light-load jitter read at the server (seeds 3 and 4), 0.25-0.32 on
--            the lab's shapers), and no cross traffic explains the queue (cross bytes < 1/4 of ours):
--            packets cannot tell a shaper from a bottleneck link saturated by traffic the
--            capture does not see, so request_cause reports the queue too; each request in flight
--            during it with inflated RTT is shaped; delay = the inflation its last
--            bytes met, plus the loss stalls when the shaper's queue overflowed.
--            At a capture point at the client the sends are not seen, only what came out
--            of the queue: there a delay, however jittery, releases the packets it held
--            back to back, while a rate limit spaces them at its rate. So the path's
--            response arrivals over the seconds a queued request was in flight
--            (successive packet times, all its connections) are judged: at most
--            shaper_bunched_max of the gaps within 0.1 ms (on the lab's client-side runs:
--            shapers 0.04-0.06, delays with jitter 0.69-0.82 in their windows), at least 50
--            gaps, no cross traffic as above, and no loss on the request (a queue behind
--            retransmissions comes out spaced too)
-- Columns: capture_id, conn_id, stream_id, started_at, throttle_kind ('shaper'),
-- throttle_detail, throttle_delay_ms.
-- depends_on: request_evidence, path_timeline, path_episodes, flow_rates, connections, messages
-- materialize: capture
WITH req AS (
    SELECT capture_id, started_at, conn_id, stream_id, client_addr, server_addr,
        epoch_ns(started_at) // 1000000000 AS first_second,
        epoch_ns(finished_at) // 1000000000 AS last_second,
        queue_inflation_seen_ms AS queue_inflation_ms, queue_delay_ms,
        path_floor_ms, loss_stall_ms, loss_events
    FROM request_evidence
),
queue_episodes AS (
    SELECT * FROM path_episodes WHERE kind = 'queue'
),
episode_span_q AS (
    SELECT client_addr, server_addr, episode, min(second) AS first_second, max(second) AS last_second,
        -- (the earliest of equal peaks, so that every run names the same second)
        arg_max(second, (inflation_ms, -second)) FILTER (WHERE inflation_ms IS NOT NULL) AS peak_second,
        max(inflation_ms) AS max_inflation_ms
    FROM queue_episodes
    GROUP BY ALL
),
buckets AS (  -- the inference connections' sends and deliveries toward the client per 100 ms
    SELECT c.client_addr, c.server_addr, epoch_ns(f.ts) // 100000000 AS bucket,
        sum(f.bytes_sent + header_bytes() * f.packets_sent) AS sent, sum(f.bytes_acked) AS acked
    FROM connections AS c
    JOIN flow_rates AS f ON f.conn_id = c.conn_id AND f.direction = 'to_client' AND c.requests > 0
    GROUP BY ALL
),
ceiling AS (  -- while queued: the busy 100 ms deliveries against the busy sends (90th
    -- percentiles); a rate limit lets bursts in and a capped rate out
    SELECT e.client_addr, e.server_addr, e.episode,
        quantile_cont(b.acked, 0.9) / nullif(quantile_cont(b.sent, 0.9), 0) AS out_in_ratio
    FROM episode_span_q AS e
    JOIN buckets AS b
      ON b.client_addr = e.client_addr AND b.server_addr = e.server_addr
     AND b.bucket // 10 BETWEEN e.first_second AND e.last_second
    GROUP BY ALL
),
shaped AS (  -- offered vs delivered while the queue built: from 1 s before it to its peak
    SELECT e.client_addr, e.server_addr, e.episode, e.first_second, e.last_second, e.max_inflation_ms,
        sum(p.sent_bytes) AS sent, sum(p.acked_bytes) AS acked, sum(p.cross_bytes) AS cross_bytes,
        count(*) AS seconds, any_value(x.out_in_ratio) AS out_in_ratio
    FROM episode_span_q AS e
    JOIN path_timeline AS p
      ON p.client_addr = e.client_addr AND p.server_addr = e.server_addr
     AND p.second BETWEEN e.first_second - 1 AND greatest(e.peak_second, e.first_second)
    LEFT JOIN ceiling AS x
      ON x.client_addr = e.client_addr AND x.server_addr = e.server_addr AND x.episode = e.episode
    GROUP BY e.client_addr, e.server_addr, e.episode, e.first_second, e.last_second, e.max_inflation_ms
    HAVING (sum(p.sent_bytes) >= 1.1 * sum(p.acked_bytes) OR any_value(x.out_in_ratio) <= 0.35)
       AND sum(p.cross_bytes) < 0.25 * sum(p.acked_bytes)
),
client_paths AS (  -- paths whose capture point sits at the client
    SELECT DISTINCT client_addr, server_addr FROM connections WHERE capture_side = 'client'
),
queued_seconds AS (  -- there: the seconds its queued requests were in flight
    SELECT DISTINCT r.client_addr, r.server_addr, unnest(span_range(r.first_second, r.last_second + 1, 1)) AS second
    FROM req AS r SEMI JOIN client_paths USING (client_addr, server_addr)
    WHERE queued(r.queue_inflation_ms, r.path_floor_ms)
),
arrivals AS (  -- the response packets that reached the client then (one time per packet)
    SELECT DISTINCT c.client_addr, c.server_addr, epoch_ns(m.ts) AS t
    FROM messages AS m
    JOIN connections AS c USING (conn_id)
    SEMI JOIN queued_seconds AS q
      ON q.client_addr = c.client_addr AND q.server_addr = c.server_addr
     AND q.second = epoch_ns(m.ts) // 1000000000
    WHERE m.direction = 'response'
),
paced AS (  -- per second: successive arrivals, and how many came back to back (within 0.1 ms)
    SELECT client_addr, server_addr, t // 1000000000 AS second, count(*) AS gaps,
        count(*) FILTER (WHERE gap <= 100000) AS bunched
    FROM (SELECT client_addr, server_addr, t,
                 t - lag(t) OVER (PARTITION BY client_addr, server_addr ORDER BY t) AS gap
          FROM arrivals)
    WHERE gap > 0
    GROUP BY ALL
),
client_paced AS (  -- each queued request: its path's arrivals over the seconds it was in flight
    SELECT r.conn_id, r.stream_id, any_value(r.client_addr) AS client_addr, any_value(r.server_addr) AS server_addr,
        any_value(r.first_second) AS first_second, any_value(r.last_second) AS last_second,
        sum(p.gaps) AS gaps, sum(p.bunched) / sum(p.gaps) AS bunched_share,
        any_value(r.queue_inflation_ms) AS inflation_ms
    FROM req AS r
    JOIN paced AS p
      ON p.client_addr = r.client_addr AND p.server_addr = r.server_addr
     AND p.second BETWEEN r.first_second AND r.last_second
    -- a request that lost packets is left to the loss: from the client's side a queue
    -- behind retransmissions also comes out spaced
    WHERE queued(r.queue_inflation_ms, r.path_floor_ms) AND coalesce(r.loss_events, 0) = 0
    GROUP BY r.conn_id, r.stream_id
    HAVING sum(p.gaps) >= 50 AND sum(p.bunched) / sum(p.gaps) <= getvariable('shaper_bunched_max')
),
client_shaped AS (  -- ... and no cross traffic explains the queue, over those seconds
    SELECT k.conn_id, k.stream_id, any_value(k.gaps) AS gaps, any_value(k.bunched_share) AS bunched_share,
        any_value(k.inflation_ms) AS inflation_ms
    FROM (SELECT *, unnest(span_range(first_second, last_second + 1, 1)) AS second FROM client_paced) AS k
    LEFT JOIN path_timeline AS t
      ON t.client_addr = k.client_addr AND t.server_addr = k.server_addr AND t.second = k.second
    GROUP BY k.conn_id, k.stream_id
    HAVING coalesce(sum(t.cross_bytes), 0) < 0.25 * coalesce(sum(t.acked_bytes), 0)
),
server_side AS (  -- a capture point that sees the sends (at the server or in the middle)
    SELECT r.capture_id, r.conn_id, r.stream_id, r.started_at,
        'shaper' AS throttle_kind,
        format('delivery ceiling {:.0f} kbit/s under {:.0f} kbit/s offered while the queue built ({} s; busiest 100 ms out/in {:.2f}), RTT up to +{:.0f} ms, no cross traffic',
               e.acked * 8 / 1000 / e.seconds, e.sent * 8 / 1000 / e.seconds,
               e.seconds, coalesce(e.out_in_ratio, 0), e.max_inflation_ms) AS throttle_detail,
        -- drops when the shaper's queue overflowed are part of it too
        r.queue_delay_ms + coalesce(r.loss_stall_ms, 0) AS throttle_delay_ms
    FROM req AS r
    JOIN shaped AS e
      ON e.client_addr = r.client_addr AND e.server_addr = r.server_addr
     AND r.last_second >= e.first_second AND r.first_second <= e.last_second
    WHERE queued(r.queue_inflation_ms, r.path_floor_ms)
)
SELECT * FROM server_side
UNION ALL
SELECT r.capture_id, r.conn_id, r.stream_id, r.started_at,
    'shaper' AS throttle_kind,
    format('response packets paced at the client while queued: {:.0f}% of {} successive arrivals back to back (a delay releases what it held back to back, a rate limit spaces it), RTT +{:.0f} ms, no cross traffic',
           100 * e.bunched_share, e.gaps, e.inflation_ms) AS throttle_detail,
    r.queue_delay_ms + coalesce(r.loss_stall_ms, 0) AS throttle_delay_ms
FROM req AS r
JOIN client_shaped AS e USING (conn_id, stream_id)
ANTI JOIN server_side AS x USING (conn_id, stream_id)
