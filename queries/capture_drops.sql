-- Did the capture itself drop packets? Bytes a receiver acknowledged that the capture never
-- saw (tcp_events capture_loss) reached it: the capture point missed them, the network did
-- not lose them. A pcapng file may also carry the count of packets its capturing kernel
-- dropped (captures.kernel_drops). On a capture that dropped packets, a packet missing by
-- its sender's IP id (upstream_loss) may be one more it missed, no evidence of a network
-- loss: request_metrics and request_evidence do not count those (a mirror port or a busy
-- tcpdump dropping 1 packet in 200 had requests blamed on loss bursts that never were).
-- Columns: capture_id, missed_gaps (capture_loss events: one a missing range), missed_bytes, missed_connections,
-- kernel_drops (null when the file does not say); one row per capture that dropped packets.
-- A connection captured one way (a mirror of one direction) has every byte of the other
-- acknowledged unseen: that is not counted as dropped (connection_overview says it).
-- depends_on: tcp_events, captures, connections
SELECT c.capture_id, coalesce(m.missed_gaps, 0) AS missed_gaps, coalesce(m.missed_bytes, 0) AS missed_bytes,
    coalesce(m.missed_connections, 0) AS missed_connections, c.kernel_drops
FROM captures AS c
LEFT JOIN (SELECT e.capture_id, count(*) AS missed_gaps, sum(e.bytes) AS missed_bytes,
                  count(DISTINCT e.conn_id) AS missed_connections
           FROM tcp_events AS e
           JOIN connections AS n USING (conn_id)
           WHERE e.kind = 'capture_loss'  -- (not a direction it never saw: captured one way)
             AND CASE WHEN e.direction = 'to_server' THEN n.packets_to_server ELSE n.packets_to_client END > 0
           GROUP BY ALL) AS m USING (capture_id)
WHERE m.missed_gaps > 0 OR c.kernel_drops > 0
