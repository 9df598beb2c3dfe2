-- Did the capture itself drop packets? Bytes a receiver acknowledged that the capture never
-- saw (tcp_events capture_loss) reached it: the capture point missed them, the network did
-- not lose them. A pcapng file may also carry the count of packets its capturing kernel
-- dropped (captures.kernel_drops). On a capture that dropped packets, a packet missing by
-- its sender's IP id (upstream_loss) may be one more it missed, no evidence of a network
-- loss: request_metrics and request_evidence do not count those (a mirror port or a busy
-- tcpdump dropping 1 packet in 200 had requests blamed on loss bursts that never were).
-- Columns: capture_id, missed_gaps (capture_loss events), missed_bytes, missed_connections,
-- kernel_drops (null when the file does not say); one row per capture that dropped packets.
-- depends_on: tcp_events, captures
SELECT c.capture_id, coalesce(m.missed_gaps, 0) AS missed_gaps, coalesce(m.missed_bytes, 0) AS missed_bytes,
    coalesce(m.missed_connections, 0) AS missed_connections, c.kernel_drops
FROM captures AS c
LEFT JOIN (SELECT capture_id, count(*) AS missed_gaps, sum(bytes) AS missed_bytes,
                  count(DISTINCT conn_id) AS missed_connections
           FROM tcp_events WHERE kind = 'capture_loss' GROUP BY ALL) AS m USING (capture_id)
WHERE m.missed_gaps > 0 OR c.kernel_drops > 0
