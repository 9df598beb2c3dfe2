-- Which requests does this analysis look at? The requests table restricted to the
-- --since/--until range (variables since_ns/until_ns, null = open) and to the captures
-- in the variable capture_ids (null = all), with a label for the
-- method (gRPC service/method or HTTP path, with the model in brackets when the request
-- names one: each is judged against its own baseline) and an error flag. Every report model reads
-- requests through it; kept for the session (request_metrics alone reads it eight times,
-- and each read of a view binds the Parquet scan beneath it again).
-- depends_on: requests
-- materialize: session
SELECT
    r.*,
    -- the method a request is judged as: gRPC method / HTTP path, and the model when it names
    -- one; a TLS request estimated without keys is judged with its server name and ALPN; a
    -- request whose headers could not be read (a capture that began mid-connection: HPACK
    -- entries indexed before it are unknown) by its shape, streamed (more than one response
    -- message) or not, so a 10 ms unary call is not judged against an 800 ms stream
    coalesce(r.path,
             CASE WHEN r.estimated THEN 'TLS ' || coalesce(r.authority, '?') || ' ' || coalesce(r.method, '') END,
             '(headers unknown) ' || CASE WHEN r.response_messages > 1 THEN 'streaming' ELSE 'unary' END)
        || coalesce(' [' || r.model || ']', '') AS method_label,
    coalesce(r.grpc_status, 0) <> 0
        OR (r.grpc_status IS NULL AND r.http_status >= 400)
        OR r.reset_code IS NOT NULL AS is_error,
    coalesce(r.request_start, r.response_headers, r.first_message, r."end") AS seen_at
FROM requests AS r
WHERE (getvariable('since_ns') IS NULL
       OR epoch_ns(coalesce(r.request_start, r.response_headers, r.first_message, r."end")) >= getvariable('since_ns'))
  AND (getvariable('until_ns') IS NULL
       OR epoch_ns(coalesce(r.request_start, r.response_headers, r.first_message, r."end")) < getvariable('until_ns'))
  AND in_scope(r.capture_id)
