-- Which TCP events are the network's? tcp_events less what the capture point itself
-- missed: capture_loss (bytes the far end acknowledged that the capture never saw) and the
-- events those gaps also showed as (capture_gaps): a hole in a direction's bytes that the
-- receiver acknowledged with no resend seen is a packet the capture dropped, not one the
-- network lost (tcp_events has it as a lost_segment too); on a capture that dropped
-- packets, a packet missing by its sender's IP id (upstream_loss) may be one more it
-- dropped. What counts losses reads these: the timelines and comparisons (conn_timeline, so
-- network_timeline, and compare_network), so that a capture's drops count once, as capture
-- drops (network_timeline), never as network losses too; request_metrics and
-- request_evidence for the client packets lost upstream and the server's dark stretches
-- (request_evidence shows the capture's own gaps as a request's capture_gap events).
-- Columns: those of tcp_events.
-- depends_on: tcp_events, capture_gaps
SELECT e.*
FROM tcp_events AS e
ANTI JOIN (SELECT conn_id, direction, shown_by AS kind, frame_no, seq FROM capture_gaps
           WHERE shown_by IN ('lost_segment', 'upstream_loss')) AS m
  ON m.conn_id = e.conn_id AND m.direction = e.direction AND m.kind = e.kind
 AND m.frame_no = e.frame_no AND m.seq IS NOT DISTINCT FROM e.seq
WHERE e.kind <> 'capture_loss'
