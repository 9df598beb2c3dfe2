-- Was a request's path policed? (shaper_evidence: shaped; receive windows, HTTP/2 flow
-- control and application throttling are judged in request_evidence.) From its path's
-- loss episodes (path_episodes), the token-bucket test (policer_bucket) and the 100 ms
-- delivery buckets (flow_rates):
--   policer  losses that start above a constant rate, without a queue, as in the
--            published method (Flach et al., SIGCOMM 2016): a loss episode on the path
--            (retransmissions no more than 2 s apart, at least 5) with no RTT inflation
--            before or during it, whose losses a token bucket explains (policer_bucket:
--            token rate = goodput between the first and the last loss; a bucket
--            simulated per segment sent was empty for >= 80 % of the lost segments,
--            and for far fewer of those that passed). Random loss fails the bucket
--            test (lost and passed segments meet an empty bucket about as often); a
--            shaper's or a queue's drops may pass it but come with RTT inflation
--            (the sends they delay pass with an empty bucket too). The detail also
--            gives the delivery rate inside vs around the episode (wire bytes, median
--            of 500 ms windows). delay = the loss stalls
-- Columns: capture_id, conn_id, stream_id, started_at, throttle_kind ('policer'),
-- throttle_detail, throttle_delay_ms.
-- depends_on: request_evidence, path_timeline, path_episodes, flow_rates, connections, policer_bucket
-- materialize: capture
WITH req AS (
    SELECT capture_id, started_at, conn_id, stream_id, client_addr, server_addr,
        epoch_ns(started_at) // 1000000000 AS first_second,
        epoch_ns(finished_at) // 1000000000 AS last_second,
        queue_inflation_seen_ms AS queue_inflation_ms, queue_delay_ms,
        path_floor_ms, loss_stall_ms, loss_events
    FROM request_evidence
),
episodes AS (
    SELECT * FROM path_episodes WHERE kind = 'loss'
),
episode_span AS (
    SELECT client_addr, server_addr, episode, min(second) AS first_loss, max(second) AS last_loss,
        sum(retransmissions) AS losses
    FROM episodes GROUP BY ALL
),
episode_queue AS (
    SELECT e.client_addr, e.server_addr, e.episode, max(p.inflation_ms) AS max_inflation_ms, max(p.floor_ms) AS floor_ms
    FROM episode_span AS e
    JOIN path_timeline AS p
      ON p.client_addr = e.client_addr AND p.server_addr = e.server_addr
     AND p.second BETWEEN e.first_loss - 2 AND e.last_loss
    GROUP BY ALL
),
rates AS (  -- 500 ms delivery and offer rates of the inference connections, wire bytes
    SELECT client_addr, server_addr, bucket,
        sum(delivered + header_bytes() * packets) OVER w AS delivered_500ms,
        sum(sent + header_bytes() * packets) OVER w AS offered_500ms
    FROM (
        SELECT c.client_addr, c.server_addr, epoch_ns(f.ts) // 100000000 AS bucket,
            sum(f.bytes_acked) AS delivered, sum(f.bytes_sent) AS sent, sum(f.packets_sent) AS packets
        FROM connections AS c
        JOIN flow_rates AS f ON f.conn_id = c.conn_id AND f.direction = 'to_client' AND c.requests > 0
        GROUP BY ALL
    )
    WINDOW w AS (PARTITION BY client_addr, server_addr ORDER BY bucket RANGE BETWEEN 4 PRECEDING AND CURRENT ROW)
),
rate_test AS (  -- inside the episode vs the 8 s around it
    SELECT e.client_addr, e.server_addr, e.episode,
        median(r.delivered_500ms) FILTER (WHERE r.bucket // 10 BETWEEN e.first_loss AND e.last_loss) * 16 AS delivered_bps_inside,
        median(r.offered_500ms) FILTER (WHERE r.bucket // 10 BETWEEN e.first_loss AND e.last_loss) * 16 AS offered_bps_inside,
        median(r.delivered_500ms) FILTER (WHERE r.bucket // 10 NOT BETWEEN e.first_loss AND e.last_loss) * 16 AS delivered_bps_around
    FROM episode_span AS e
    JOIN rates AS r
      ON r.client_addr = e.client_addr AND r.server_addr = e.server_addr
     AND r.bucket // 10 BETWEEN e.first_loss - 8 AND e.last_loss + 8
    GROUP BY ALL
),
policed AS (
    SELECT e.*, q.max_inflation_ms, t.delivered_bps_inside, t.offered_bps_inside, t.delivered_bps_around,
        b.token_rate_bps, b.bucket_depth_bytes, b.judged_losses, b.lost_empty_share, b.passed_empty_share
    FROM episode_span AS e
    JOIN episode_queue AS q USING (client_addr, server_addr, episode)
    JOIN policer_bucket AS b USING (client_addr, server_addr, episode)
    LEFT JOIN rate_test AS t USING (client_addr, server_addr, episode)
    WHERE NOT queued(coalesce(q.max_inflation_ms, 0), q.floor_ms)
      AND e.losses >= 5
      AND b.bucket_consistent
)
SELECT r.capture_id, r.conn_id, r.stream_id, r.started_at,
    'policer' AS throttle_kind,
    format('{} losses without queueing, as a token bucket drops them: ~{:.0f} kbit/s (goodput between first and last loss), depth ~{:.0f} B; {:.0f}% of {} lost segments vs {:.0f}% of the passed ones sent with the bucket empty; delivery {:.0f} kbit/s under {:.0f} kbit/s offered, {:.0f} kbit/s around the episode',
           p.losses, p.token_rate_bps / 1000, p.bucket_depth_bytes, 100 * p.lost_empty_share, p.judged_losses,
           100 * p.passed_empty_share, coalesce(p.delivered_bps_inside, 0) / 1000,
           coalesce(p.offered_bps_inside, 0) / 1000, coalesce(p.delivered_bps_around, 0) / 1000) AS throttle_detail,
    r.loss_stall_ms AS throttle_delay_ms
FROM req AS r
JOIN policed AS p
  ON p.client_addr = r.client_addr AND p.server_addr = r.server_addr
 AND r.last_second >= p.first_loss AND r.first_second <= p.last_loss
WHERE r.loss_events > 0
