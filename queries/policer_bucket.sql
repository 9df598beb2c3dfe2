-- Were a path's losses those of a token-bucket policer? The bucket test of the published
-- method (Flach et al., "An Internet-Wide Analysis of Traffic Policing", SIGCOMM 2016),
-- per loss episode of a path toward the client (path_episodes), over every data segment
-- the server put on the path from the episode's first loss to its last (policer_segments,
-- from segment_sends: all the path's connections, wire bytes = payload + 66 header
-- bytes, as a policer meters them):
--   lost       a send whose bytes were next sent by a (non-spurious) retransmission
--              (on the lab captures this flags exactly the segments the bridge dropped).
--   rate       the token rate: goodput between the first and the last loss (wire bytes
--              that passed, over that time).
--   bucket     a policer drops a packet only when its bucket is empty, so the bucket was
--              empty at every loss: the simulation restarts empty at each lost send,
--              fills at the rate, capped at the depth, and every send that passes spends
--              its size. Restarting at each loss keeps an error in the estimated rate
--              (the goodput is below the token rate when the sender does not always
--              fill it) from piling up over the episode. A send finds the bucket empty
--              when the tokens left are below its size.
--   depth      not known in advance: the smallest depth that gives enough tokens to
--              95 % of the passed sends some depth can explain (unexplained: fewer
--              tokens than its size even without a depth limit).
--   judged     every passed send after the first loss, and the lost sends that follow
--              at least one passed send since the previous loss (a loss right after a
--              loss finds an empty bucket whatever drops packets: burst loss would
--              count for a policer).
--   verdict    bucket_consistent: at least 10 judged losses and 15 passes, at least
--              80 % of the judged lost sends found the bucket empty, and that share is at
--              least 0.4 above the share of passed sends that found it empty. A policer
--              drops exactly when the bucket is empty (share near 1 vs near 0; the
--              published method allows 10 % of losses and 3 % of passes out of range,
--              with RTT-sized tolerances). Loss that does not depend on the rate (random
--              or burst loss) is independent of the bucket: lost and passed sends find it
--              empty about equally often. On the lab runs (3 seeds each) the difference
--              is 0.64-0.83 for the policer, -0.20-0.13 for loss_burst and mixed. A
--              shaper's or a bottleneck queue's drops also come when its bucket is empty
--              (0.35-0.50 there): they are told apart by the RTT inflation before the
--              losses, judged in policer_evidence.
-- Sends are as seen at the capture point: meaningful for a capture on the sender's side
-- of the policer (server-side capture, responses toward the client).
-- Columns: client_addr, server_addr, episode, first_loss_ts, last_loss_ts, lost_segments,
-- judged_losses, passed_segments, token_rate_bps, bucket_depth_bytes (wire bytes),
-- unexplained_pass_share, lost_empty_share (of the judged losses), passed_empty_share,
-- loss_lift (P(loss | empty) / P(loss | tokens) over judged sends; null when no judged
-- loss found tokens), bucket_consistent.
-- depends_on: policer_segments
SELECT client_addr, server_addr, episode,
    min(ts) FILTER (WHERE lost) AS first_loss_ts,
    max(ts) FILTER (WHERE lost) AS last_loss_ts,
    count(*) FILTER (WHERE lost) AS lost_segments,
    count(*) FILTER (WHERE lost AND judged) AS judged_losses,
    count(*) FILTER (WHERE NOT lost AND judged) AS passed_segments,
    any_value(token_rate_bps) AS token_rate_bps,
    any_value(bucket_depth_bytes) AS bucket_depth_bytes,
    avg(CASE WHEN explained THEN 0.0 ELSE 1.0 END) FILTER (WHERE NOT lost AND judged) AS unexplained_pass_share,
    avg(CASE WHEN empty THEN 1.0 ELSE 0.0 END) FILTER (WHERE lost AND judged) AS lost_empty_share,
    avg(CASE WHEN empty THEN 1.0 ELSE 0.0 END) FILTER (WHERE NOT lost AND judged) AS passed_empty_share,
    avg(CASE WHEN lost THEN 1.0 ELSE 0.0 END) FILTER (WHERE judged AND empty)
        / nullif(avg(CASE WHEN lost THEN 1.0 ELSE 0.0 END) FILTER (WHERE judged AND NOT empty), 0) AS loss_lift,
    coalesce(count(*) FILTER (WHERE lost AND judged) >= 10
        AND count(*) FILTER (WHERE NOT lost AND judged) >= 15
        AND any_value(bucket_depth_bytes) IS NOT NULL
        AND avg(CASE WHEN empty THEN 1.0 ELSE 0.0 END) FILTER (WHERE lost AND judged) >= 0.8
        AND avg(CASE WHEN empty THEN 1.0 ELSE 0.0 END) FILTER (WHERE lost AND judged)
            - avg(CASE WHEN empty THEN 1.0 ELSE 0.0 END) FILTER (WHERE NOT lost AND judged) >= 0.4, false) AS bucket_consistent
FROM policer_segments
GROUP BY ALL
