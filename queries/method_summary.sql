-- Per gRPC method / HTTP path (and model, when the requests name one): how many requests
-- and errors, and how are latency, time-to-first-token and the inter-message (token) gap
-- distributed (p50/p90/p99/max)? Also the tokens generated and the median decode rate
-- where the streams say, and how many of the figures are estimates (TLS without keys).
-- Times are at the capture point; see
-- requests.ttft_client_est_ms for the client side.
-- depends_on: requests_in_range
SELECT
    method_label AS method,
    count(*) AS requests,
    count(*) FILTER (WHERE is_error) AS errors,
    quantile_cont(latency_ms, 0.50) AS latency_p50_ms,
    quantile_cont(latency_ms, 0.90) AS latency_p90_ms,
    quantile_cont(latency_ms, 0.99) AS latency_p99_ms,
    max(latency_ms) AS latency_max_ms,
    quantile_cont(ttft_ms, 0.50) AS ttft_p50_ms,
    quantile_cont(ttft_ms, 0.90) AS ttft_p90_ms,
    quantile_cont(ttft_ms, 0.99) AS ttft_p99_ms,
    max(ttft_ms) AS ttft_max_ms,
    quantile_cont(gap_p50_ms, 0.50) AS gap_p50_ms,
    quantile_cont(gap_p99_ms, 0.90) AS gap_p90_ms,
    quantile_cont(gap_p99_ms, 0.99) AS gap_p99_ms,
    max(max_gap_ms) AS gap_max_ms,
    sum(response_messages) AS response_messages,
    count(*) FILTER (WHERE NOT headers_known AND NOT coalesce(estimated, false)) AS headers_unknown,
    -- TLS requests read without keys: their figures are estimates from record times
    count(*) FILTER (WHERE estimated) AS estimated,
    sum(completion_tokens) AS completion_tokens,
    median(tokens_per_s) AS tokens_per_s_p50
FROM requests_in_range
GROUP BY method_label
ORDER BY requests DESC, method
