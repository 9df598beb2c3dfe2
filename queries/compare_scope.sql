-- Which of two compared periods does each request fall in? request_metrics with period
-- 'a' or 'b': period a is the requests started in [a_since_ns, a_until_ns) and/or from the
-- captures a_capture_ids (variables; null = no limit), period b likewise; a request in
-- neither is left out (tailtap compare sets them).
-- depends_on: request_metrics
SELECT
    m.*,
    CASE
        WHEN in_period(m.started_at, m.capture_id, getvariable('a_since_ns'), getvariable('a_until_ns'), getvariable('a_capture_ids')) THEN 'a'
        WHEN in_period(m.started_at, m.capture_id, getvariable('b_since_ns'), getvariable('b_until_ns'), getvariable('b_capture_ids')) THEN 'b'
    END AS period
FROM request_metrics AS m
WHERE period IS NOT NULL
