-- Was a request's path shaped? (policer_evidence: policed; receive windows, HTTP/2 flow
-- control and application throttling are judged in request_evidence.) From its path's
-- timeline while the request was in flight (path_timeline, 1 s buckets):
--   shaper   a delivery-rate ceiling with growing RTT: while a queueing episode of the
--            path built up (seconds with RTT inflation over the floor, at most 1 s
--            apart; from 1 s before it to its peak, leaving out the drain) the inference
--            connections offered more than got delivered (sent >= 1.1 x acknowledged: a
--            backlog builds behind the ceiling), or, 100 ms at a time while queued, their
--            busy deliveries stayed well under their busy sends (90th percentiles, at most
--            0.4: bursts go in, a capped rate comes out; a delay, however jittery, lets the
--            bursts through: 0.64-0.82 on the lab's queue and jitter runs, 0.25-0.32 on its
--            shapers), and no cross traffic explains the queue (cross bytes < 1/4 of ours):
--            packets cannot tell a shaper from a bottleneck link saturated by traffic the
--            capture does not see, so request_cause reports the queue too; each request in flight
--            during it with inflated RTT is shaped; delay = the inflation its last
--            bytes met, plus the loss stalls when the shaper's queue overflowed
-- Columns: capture_id, conn_id, stream_id, started_at, throttle_kind ('shaper'),
-- throttle_detail, throttle_delay_ms.
-- depends_on: request_evidence, path_timeline, path_episodes, flow_rates, connections
-- materialize: capture
WITH req AS (
    SELECT capture_id, started_at, conn_id, stream_id, client_addr, server_addr,
        epoch_ns(started_at) // 1000000000 AS first_second,
        epoch_ns(finished_at) // 1000000000 AS last_second,
        greatest(queue_inflation_ms, queue_inflation_end_ms) AS queue_inflation_ms, queue_delay_ms,
        path_floor_ms, loss_stall_ms, loss_events
    FROM request_evidence
),
queue_episodes AS (
    SELECT * FROM path_episodes WHERE kind = 'queue'
),
episode_span_q AS (
    SELECT client_addr, server_addr, episode, min(second) AS first_second, max(second) AS last_second,
        arg_max(second, inflation_ms) AS peak_second, max(inflation_ms) AS max_inflation_ms
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
    HAVING (sum(p.sent_bytes) >= 1.1 * sum(p.acked_bytes) OR any_value(x.out_in_ratio) <= 0.4)
       AND sum(p.cross_bytes) < 0.25 * sum(p.acked_bytes)
)
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
