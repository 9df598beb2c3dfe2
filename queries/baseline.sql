-- What should each method's p99 be? Per method (gRPC method / HTTP path), for latency,
-- TTFT and the largest token gap: the p99 and the median of what the method did when
-- nothing was wrong: over its requests in its calm windows, those whose p99 stayed within
-- calm_factor (and 5 ms) of the method's typical window p99 (the 25th percentile of its
-- windows' p99s: robust even when most of the windows are bad, e.g. a capture that starts
-- inside an incident), and of those the ones the network left alone (no loss, reordering
-- or queueing: request_evidence) when there are enough of them (a mild impairment raises a
-- window's p99 less than the calm limit; the peers' own windows and flow control are how
-- the service runs, not an impairment). Taken over the whole
-- scope, not over trailing windows: a short capture has few windows, and its first ones
-- may already be bad. baseline_requests counts the requests it was taken over; with fewer
-- than baseline_min_requests the baseline is too thin to judge by (judged = false): the
-- method's requests are then slow only by an SLO or a throttling status. Also the
-- method's typical share of failed requests.
-- depends_on: method_windows, request_evidence
-- materialize: session
WITH typical AS (
    SELECT method,
        quantile_cont(latency_p99_ms, 0.25) AS latency_typical_p99_ms,
        quantile_cont(ttft_p99_ms, 0.25) AS ttft_typical_p99_ms,
        quantile_cont(gap_p99_ms, 0.25) AS gap_typical_p99_ms,
        median(errors / requests) AS error_typical_share,
        count(*) AS windows
    FROM method_windows
    GROUP BY method
),
calm_windows AS (
    SELECT w.window_id, w.method
    FROM method_windows AS w
    JOIN typical AS t USING (method)
    WHERE coalesce(calm(w.latency_p99_ms, t.latency_typical_p99_ms), true)
      AND coalesce(calm(w.ttft_p99_ms, t.ttft_typical_p99_ms), true)
      AND coalesce(calm(w.gap_p99_ms, t.gap_typical_p99_ms), true)
),
in_calm AS (  -- the calm windows' requests, and whether the network was clean for each
    SELECT e.*,
        e.loss_events = 0 AND e.reorder_events = 0
            AND NOT coalesce(queued(e.queue_inflation_seen_ms, e.path_floor_ms), false)
            AS network_clean
    FROM request_evidence AS e
    JOIN calm_windows AS c ON c.method = e.method AND c.window_id = window_of(e.started_at)
),
clean_enough AS (  -- methods with enough network-clean requests to judge by those alone
    SELECT method FROM in_calm WHERE network_clean GROUP BY method
    HAVING count(*) >= getvariable('baseline_min_requests')
),
calm AS (
    SELECT i.* FROM in_calm AS i
    LEFT JOIN clean_enough AS k USING (method)
    WHERE i.network_clean OR k.method IS NULL
)
SELECT
    t.method,
    t.windows,
    count(c.method) AS baseline_requests,
    count(c.method) >= getvariable('baseline_min_requests') AS judged,
    quantile_cont(c.latency_eff_ms, 0.99) AS latency_baseline_p99_ms,
    quantile_cont(c.ttft_eff_ms, 0.99) AS ttft_baseline_p99_ms,
    quantile_cont(c.gap_eff_ms, 0.99) AS gap_baseline_p99_ms,
    quantile_cont(c.latency_eff_ms, 0.50) AS latency_typical_p50_ms,
    quantile_cont(c.ttft_eff_ms, 0.50) AS ttft_typical_p50_ms,
    quantile_cont(c.gap_eff_ms, 0.50) AS gap_typical_p50_ms,
    t.error_typical_share
FROM typical AS t
LEFT JOIN calm AS c USING (method)
GROUP BY t.method, t.windows, t.error_typical_share
