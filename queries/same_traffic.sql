-- Is a capture in scope the same traffic as another capture of the store? A connection with
-- the same 4-tuple and first packet time in two captures was captured twice (a cut or
-- filtered copy of a file analyzed into the same store, a mirror recorded twice). Each
-- capture's connections have ids of their own (conn_id hashes the capture in), so a report
-- on one of them counts that traffic once; a report over both counts it twice.
-- Columns: capture_id, path (its file), other_capture_id, other_path, connections (the
-- connections both hold), other_in_scope (the other capture is in scope too: this analysis
-- counts those connections twice). One row per capture in scope and other capture.
-- depends_on: connections, captures
SELECT n.capture_id, a.path, o.capture_id AS other_capture_id, b.path AS other_path, count(*) AS connections,
    in_scope(o.capture_id) AS other_in_scope
FROM connections AS n
JOIN connections AS o
  ON o.client_addr = n.client_addr AND o.client_port = n.client_port
 AND o.server_addr = n.server_addr AND o.server_port = n.server_port
 AND o."start" = n."start" AND o.capture_id <> n.capture_id
JOIN captures AS a ON a.capture_id = n.capture_id
JOIN captures AS b ON b.capture_id = o.capture_id
WHERE in_scope(n.capture_id)
GROUP BY ALL
ORDER BY n.capture_id, other_capture_id
