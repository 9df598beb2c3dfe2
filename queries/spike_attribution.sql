-- Why did each spike happen? For every spike window: each cause of its slow requests
-- with the share of slow requests that carry it, the delay it explains (and its share of
-- all explained delay), and where it concentrates: the top connections, client
-- addresses, methods and directions (value and number of slow requests with that cause).
-- depends_on: spikes, slow_requests, request_cause
-- materialize: session
WITH slow AS (
    SELECT sp.window_id, sp.window_start, sr.conn_id, sr.stream_id, sr.client_addr, sr.method
    FROM spikes AS sp
    JOIN slow_requests AS sr USING (window_id)
),
caused AS (
    SELECT s.*, c.cause, coalesce(c.kind, '') AS kind, c.direction, c.delay_ms
    FROM slow AS s
    JOIN request_cause AS c USING (conn_id, stream_id)
),
totals AS (
    SELECT window_id, count(*) AS slow_requests FROM slow GROUP BY window_id
),
delay_totals AS (
    SELECT window_id, sum_ms(delay_ms) AS total_delay_ms FROM caused GROUP BY window_id
),
concentration AS (
    SELECT window_id, cause, kind, dimension, string_agg(value || ' (' || n || ')', ', ' ORDER BY n DESC, value) AS top
    FROM (
        SELECT window_id, cause, kind, dimension, value, n,
            row_number() OVER (PARTITION BY window_id, cause, kind, dimension ORDER BY n DESC, value) AS rank
        FROM (
            SELECT window_id, cause, kind, 'conn_id' AS dimension, conn_id AS value, count(*) AS n FROM caused GROUP BY ALL
            UNION ALL
            SELECT window_id, cause, kind, 'client_addr', client_addr, count(*) FROM caused GROUP BY ALL
            UNION ALL
            SELECT window_id, cause, kind, 'method', method, count(*) FROM caused GROUP BY ALL
            UNION ALL
            SELECT window_id, cause, kind, 'direction', direction, count(*) FROM caused WHERE direction IS NOT NULL GROUP BY ALL
        )
    )
    WHERE rank <= 3
    GROUP BY ALL
)
SELECT
    c.window_id,
    any_value(c.window_start) AS window_start,
    c.cause,
    nullif(c.kind, '') AS kind,
    count(*) AS slow_requests,
    round(count(*) / any_value(t.slow_requests), 3) AS request_share,
    round(sum_ms(c.delay_ms), 1) AS delay_ms,
    round(sum_ms(c.delay_ms) / nullif(any_value(d.total_delay_ms), 0), 3) AS delay_share,
    any_value(cc.top) AS top_connections,
    any_value(ca.top) AS top_clients,
    any_value(cm.top) AS top_methods,
    any_value(cd.top) AS top_directions
FROM caused AS c
JOIN totals AS t USING (window_id)
JOIN delay_totals AS d USING (window_id)
LEFT JOIN concentration AS cc ON cc.window_id = c.window_id AND cc.cause = c.cause AND cc.kind = c.kind AND cc.dimension = 'conn_id'
LEFT JOIN concentration AS ca ON ca.window_id = c.window_id AND ca.cause = c.cause AND ca.kind = c.kind AND ca.dimension = 'client_addr'
LEFT JOIN concentration AS cm ON cm.window_id = c.window_id AND cm.cause = c.cause AND cm.kind = c.kind AND cm.dimension = 'method'
LEFT JOIN concentration AS cd ON cd.window_id = c.window_id AND cd.cause = c.cause AND cd.kind = c.kind AND cd.dimension = 'direction'
GROUP BY c.window_id, c.cause, c.kind
ORDER BY c.window_id, slow_requests DESC, delay_ms DESC
