-- Which segments did a path send in a loss episode, which were lost, and did each find
-- the simulated policer's token bucket empty? The per-segment half of the policer bucket
-- test (policer_bucket gives the per-episode verdict and describes the method). One row
-- per data segment the server sent toward the client on the path (all its connections)
-- from the episode's first lost segment to its last one, for the loss episodes that lost at
-- least 1% of the path's sends.
-- Columns: client_addr, server_addr, episode, conn_id, ts, seq, wire_bytes (payload + 66
-- header bytes), lost (its bytes were next sent by a non-spurious retransmission),
-- resent_ts (that next send), token_rate_bps and bucket_depth_bytes (the episode's),
-- tokens_uncapped (tokens before the send in a bucket empty at the previous loss, no
-- depth limit; null for the first loss), tokens (the same, capped at the depth),
-- explained (tokens_uncapped >= its size: some depth lets it pass), judged (counted in
-- the verdict), empty (tokens < its size: a policer would drop it).
-- depends_on: segment_sends, connections, path_episodes
WITH candidates AS (  -- loss episodes that lost at least 1% of what the path sent: a policer
    -- drops the excess of the offered rate over its own; a fraction of a percent of
    -- background loss is not that (and testing it would cost every send of the path)
    SELECT client_addr, server_addr, min(second) AS first_s, max(second) AS last_s
    FROM path_episodes
    WHERE kind = 'loss'
    GROUP BY client_addr, server_addr, episode
    HAVING sum(retransmissions) >= 0.01 * sum(sent_packets)
),
sends AS (  -- the path's sends around its candidate episodes (their resends come within seconds)
    SELECT DISTINCT s.conn_id, c.client_addr, c.server_addr, s.ts, epoch_ns(s.ts) AS t_ns, s.seq, s.bytes, s.kind,
        s.bytes + header_bytes() AS wire_bytes
    FROM segment_sends AS s
    JOIN connections AS c USING (conn_id)
    JOIN candidates AS e
      ON e.client_addr = c.client_addr AND e.server_addr = c.server_addr
     AND epoch_ns(s.ts) // 1000000000 BETWEEN e.first_s - 5 AND e.last_s + 5
    WHERE s.direction = 'to_client' AND s.bytes > 0
),
resends AS (  -- keyed by the 64 KiB blocks of sequence space they cover: the join below
    -- then pairs a send only with the resends of its block, not of its whole connection
    SELECT conn_id, t_ns, ts, seq, bytes, kind,
        unnest(range(seq // 65536, (seq + bytes - 1) // 65536 + 1)) AS block
    FROM sends WHERE kind <> 'new'
),
resent AS (  -- the first later resend covering each send's first byte
    SELECT a.conn_id, a.t_ns, a.seq,
        arg_min(b.kind, b.t_ns) AS next_kind, min(b.t_ns) AS resent_ns, min(b.ts) AS resent_ts
    FROM sends AS a
    JOIN resends AS b
      ON b.conn_id = a.conn_id AND b.block = a.seq // 65536 AND b.t_ns > a.t_ns
     AND b.seq <= a.seq AND a.seq < b.seq + b.bytes
    GROUP BY ALL
),
marked AS (
    SELECT s.*, coalesce(r.next_kind = 'retransmission', false) AS lost, r.resent_ns, r.resent_ts
    FROM sends AS s
    LEFT JOIN resent AS r USING (conn_id, t_ns, seq)
),
episode_span AS (  -- the episode's lost sends: those resent in its seconds
    SELECT e.client_addr, e.server_addr, e.episode,
        min(m.t_ns) AS first_ns, max(m.t_ns) AS last_ns, count(*) AS lost_segments
    FROM (SELECT client_addr, server_addr, episode, min(second) AS first_s, max(second) AS last_s
          FROM path_episodes WHERE kind = 'loss' GROUP BY ALL) AS e
    JOIN marked AS m
      ON m.client_addr = e.client_addr AND m.server_addr = e.server_addr AND m.lost
     AND m.resent_ns // 1000000000 BETWEEN e.first_s AND e.last_s
    GROUP BY ALL
    HAVING max(m.t_ns) > min(m.t_ns)
),
inside AS (  -- every send of the path from the first loss to the last
    SELECT e.client_addr, e.server_addr, e.episode, e.first_ns, e.last_ns,
        m.conn_id, m.ts, m.t_ns, m.seq, m.wire_bytes, m.lost, m.resent_ts
    FROM episode_span AS e
    JOIN marked AS m
      ON m.client_addr = e.client_addr AND m.server_addr = e.server_addr
     AND m.t_ns BETWEEN e.first_ns AND e.last_ns
),
rate AS (  -- token rate: goodput between the first and the last loss, bytes/s
    SELECT client_addr, server_addr, episode,
        sum(wire_bytes) FILTER (WHERE NOT lost AND t_ns < last_ns) * 1e9 / any_value(last_ns - first_ns) AS rate_Bps
    FROM inside GROUP BY ALL
),
anchored AS (  -- per send: the previous lost send (the bucket was empty then) and what passed since
    SELECT i.*, r.rate_Bps,
        coalesce(sum(CASE WHEN i.lost THEN 1 ELSE 0 END) OVER w_before, 0) AS interval_no,
        max(i.t_ns) FILTER (WHERE i.lost) OVER w_before AS anchor_ns
    FROM inside AS i JOIN rate AS r USING (client_addr, server_addr, episode)
    WINDOW w_before AS (PARTITION BY i.client_addr, i.server_addr, i.episode ORDER BY i.t_ns, i.seq
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
uncapped AS (  -- tokens before each send of a bucket empty at the previous loss, no depth limit
    SELECT *,
        rate_Bps * (t_ns - anchor_ns) / 1e9
          - coalesce(sum(CASE WHEN lost THEN 0 ELSE wire_bytes END) OVER w_since, 0) AS a,
        coalesce(count(*) FILTER (WHERE NOT lost) OVER w_since, 0) AS passed_since
    FROM anchored
    WINDOW w_since AS (PARTITION BY client_addr, server_addr, episode, interval_no ORDER BY t_ns, seq
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
peaks AS (
    SELECT *,
        greatest(0, max(a) OVER (PARTITION BY client_addr, server_addr, episode, interval_no ORDER BY t_ns, seq
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) AS a_peak
    FROM uncapped
),
depth AS (  -- the depth 95 % of the passes that some depth explains need
    SELECT client_addr, server_addr, episode,
        quantile_cont(wire_bytes + a_peak - a, 0.95) FILTER (WHERE NOT lost AND a >= wire_bytes) AS depth_bytes
    FROM peaks GROUP BY ALL
)
SELECT p.client_addr, p.server_addr, p.episode, p.conn_id, p.ts, p.seq, p.wire_bytes, p.lost,
    p.resent_ts,
    p.rate_Bps * 8 AS token_rate_bps,
    d.depth_bytes AS bucket_depth_bytes,
    p.a AS tokens_uncapped,
    least(p.a, coalesce(d.depth_bytes, 'Infinity'::DOUBLE) + p.a - p.a_peak) AS tokens,
    p.a >= p.wire_bytes AS explained,
    p.anchor_ns IS NOT NULL AND (NOT p.lost OR p.passed_since > 0) AS judged,
    least(p.a, coalesce(d.depth_bytes, 'Infinity'::DOUBLE) + p.a - p.a_peak) < p.wire_bytes AS empty
FROM peaks AS p JOIN depth AS d USING (client_addr, server_addr, episode)
