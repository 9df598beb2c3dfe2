-- What made the slowest requests slow? The slowest_n slow requests by excess delay, each
-- with its causes (largest explained delay first) and the ids to `tailtap explain` it.
-- depends_on: slow_requests, request_cause
WITH per_request AS (
    SELECT
        sr.conn_id,
        sr.stream_id,
        any_value(sr.method) AS method,
        any_value(sr.client_addr) AS client_addr,
        any_value(sr.started_at) AS started_at,
        round(any_value(sr.latency_eff_ms), 1) AS latency_ms,
        round(any_value(sr.ttft_eff_ms), 1) AS ttft_ms,
        round(any_value(sr.gap_eff_ms), 1) AS max_gap_ms,
        array_to_string(any_value(sr.slow_metrics), '/') AS slow_on,
        string_agg(c.cause || coalesce('/' || c.kind, '') || ' ' || CAST(round(c.delay_ms) AS BIGINT) || ' ms', ', '
                   ORDER BY c.delay_ms DESC, c.cause, c.kind) AS causes,
        -- ties broken by name: the same answer on every run
        (list(c.cause ORDER BY c.delay_ms DESC, c.cause, c.kind))[1] AS primary_cause,
        any_value(sr.excess_ms) AS excess_ms
    FROM slow_requests AS sr
    LEFT JOIN request_cause AS c USING (conn_id, stream_id)
    GROUP BY sr.conn_id, sr.stream_id
)
SELECT * EXCLUDE (excess_ms)
FROM per_request
QUALIFY row_number() OVER (ORDER BY excess_ms DESC, conn_id, stream_id) <= getvariable('slowest_n')
ORDER BY excess_ms DESC, conn_id, stream_id
