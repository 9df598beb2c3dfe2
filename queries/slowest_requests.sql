-- Which requests were the slowest, and where do I find them? The top N (variable
-- slowest_n) by latency, with their connection and stream ids, client, TTFT, largest
-- token gap and status.
-- depends_on: requests_in_range
SELECT
    conn_id,
    stream_id,
    method_label AS method,
    client_addr,
    client_port,
    seen_at AS request_start,
    latency_ms,
    ttft_ms,
    max_gap_ms,
    response_messages,
    grpc_status,
    http_status,
    headers_known
FROM requests_in_range
WHERE latency_ms IS NOT NULL
QUALIFY row_number() OVER (ORDER BY latency_ms DESC, conn_id, stream_id) <= getvariable('slowest_n')
ORDER BY latency_ms DESC, conn_id, stream_id
