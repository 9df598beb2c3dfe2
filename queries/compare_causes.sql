-- Why were requests slow in each of two compared periods (compare_scope)? Per cause and
-- kind: slow requests carrying it and the delay it explains in period a and in period b,
-- and each as a share of the period's slow requests; the causes whose share moved most
-- come first.
-- depends_on: compare_scope, request_cause, slow_requests
WITH slow AS (
    SELECT s.conn_id, s.stream_id, c.period
    FROM slow_requests AS s JOIN compare_scope AS c USING (conn_id, stream_id)
),
counts AS (
    SELECT
        rc.cause,
        rc.kind,
        count(DISTINCT (rc.conn_id, rc.stream_id)) FILTER (WHERE s.period = 'a') AS slow_requests_a,
        count(DISTINCT (rc.conn_id, rc.stream_id)) FILTER (WHERE s.period = 'b') AS slow_requests_b,
        sum_ms(CASE WHEN s.period = 'a' THEN rc.delay_ms END) AS delay_ms_a,
        sum_ms(CASE WHEN s.period = 'b' THEN rc.delay_ms END) AS delay_ms_b
    FROM request_cause AS rc JOIN slow AS s USING (conn_id, stream_id)
    GROUP BY ALL
),
totals AS (
    SELECT count(*) FILTER (WHERE period = 'a') AS slow_a, count(*) FILTER (WHERE period = 'b') AS slow_b FROM slow
)
SELECT
    c.*,
    c.slow_requests_a / nullif(t.slow_a, 0) AS share_a,
    c.slow_requests_b / nullif(t.slow_b, 0) AS share_b
FROM counts AS c, totals AS t
ORDER BY abs(coalesce(share_b, 0) - coalesce(share_a, 0)) DESC, c.cause
