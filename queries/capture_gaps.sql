-- Where did the capture miss packets the network delivered? A hole in a direction's bytes
-- that the receiver acknowledged with no resend seen (lost_segment never filled, then
-- capture_loss at its bytes); bytes acknowledged that the capture never saw with no hole
-- before them (capture_loss alone: the last packet of a flight); and, on a capture that
-- dropped packets (capture_drops), a packet missing by its sender's IP id (upstream_loss):
-- one more the capture may have missed. None of them is a network loss (request_evidence
-- does not count them), and a time measured across one of a response's holes (a gap
-- between tokens, the first token) is not measured (request_metrics).
-- Columns: capture_id, conn_id, direction (of the missing packet), shown_by (the tcp_events
-- kind it came as), frame_no, seq, ts (when the capture showed it: the hole's first sight,
-- the ACK of bytes never seen, the packet after the missing IP ids).
-- depends_on: tcp_events, capture_drops
-- materialize: session
WITH acked_unseen AS (
    SELECT capture_id, conn_id, direction, frame_no, seq, ts FROM tcp_events WHERE kind = 'capture_loss'
)
SELECT e.capture_id, e.conn_id, e.direction, e.kind AS shown_by, e.frame_no, e.seq, e.ts
FROM tcp_events AS e
SEMI JOIN acked_unseen AS m ON m.conn_id = e.conn_id AND m.direction = e.direction AND m.seq = e.seq
WHERE e.kind = 'lost_segment' AND e.recovery_ms IS NULL
UNION ALL
SELECT m.capture_id, m.conn_id, m.direction, 'capture_loss', m.frame_no, m.seq, m.ts
FROM acked_unseen AS m
ANTI JOIN (SELECT conn_id, direction, seq FROM tcp_events WHERE kind = 'lost_segment') AS h
  ON h.conn_id = m.conn_id AND h.direction = m.direction AND h.seq = m.seq
UNION ALL
SELECT capture_id, conn_id, direction, kind, frame_no, seq, ts FROM tcp_events
WHERE kind = 'upstream_loss' AND capture_id IN (SELECT capture_id FROM capture_drops)
