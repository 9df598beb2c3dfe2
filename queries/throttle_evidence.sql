-- Was a request's path throttled by a rate limiter on it? The verdicts of
-- shaper_evidence (a delivery-rate ceiling while a queue builds) and policer_evidence
-- (losses a token bucket explains), one row per verdict.
-- Columns: capture_id, conn_id, stream_id, started_at, throttle_kind (shaper | policer),
-- throttle_detail, throttle_delay_ms.
-- depends_on: shaper_evidence, policer_evidence
SELECT * FROM shaper_evidence
UNION ALL
SELECT * FROM policer_evidence
