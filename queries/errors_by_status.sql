-- Which errors did each method return? Requests per method and status: grpc-status
-- (with its name), HTTP status for non-gRPC traffic, and resets (RST_STREAM code).
-- depends_on: requests_in_range
SELECT
    method_label AS method,
    grpc_status,
    CASE grpc_status
        WHEN 0 THEN 'OK' WHEN 1 THEN 'CANCELLED' WHEN 2 THEN 'UNKNOWN'
        WHEN 3 THEN 'INVALID_ARGUMENT' WHEN 4 THEN 'DEADLINE_EXCEEDED' WHEN 5 THEN 'NOT_FOUND'
        WHEN 6 THEN 'ALREADY_EXISTS' WHEN 7 THEN 'PERMISSION_DENIED' WHEN 8 THEN 'RESOURCE_EXHAUSTED'
        WHEN 9 THEN 'FAILED_PRECONDITION' WHEN 10 THEN 'ABORTED' WHEN 11 THEN 'OUT_OF_RANGE'
        WHEN 12 THEN 'UNIMPLEMENTED' WHEN 13 THEN 'INTERNAL' WHEN 14 THEN 'UNAVAILABLE'
        WHEN 15 THEN 'DATA_LOSS' WHEN 16 THEN 'UNAUTHENTICATED'
    END AS grpc_status_name,
    http_status,
    reset_code,
    count(*) AS requests
FROM requests_in_range
WHERE is_error
GROUP BY ALL
ORDER BY requests DESC, method
