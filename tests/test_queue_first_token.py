"""A queue that delayed a request's first token, and was gone by the end of its stream.

samples/queueing captures at the server, upstream of a bottleneck toward the client. A
stream whose first message met the queue leaves the capture point on time (a normal
TTFT there), reaches the client late (its TTFT is slow at the client: the ACK of that
message says so), and may end after the queue drained: the RTT over its lifetime (25th
percentile) and over its final 500 ms stays at the floor. request_evidence reads the
queue the first message went through (queue_inflation_first_ms: the path's inflation
toward the client from the message passing the capture point to its ACK), so such a
request carries queueing instead of being left to the server.
"""

from __future__ import annotations

import pytest
from lab_samples import RUNS, analyzed


@pytest.mark.skipif("queueing" not in RUNS, reason="no queueing sample")
def test_a_queued_first_token_is_queueing(tmp_path):
    con = analyzed(tmp_path, "queueing")
    rows = con.execute("""
        SELECT e.queue_inflation_first_ms AS first_ms,
               t.ttft_ms - r.ttft_ms AS client_wait_ms,  -- the client's TTFT past the capture point's
               list(c.cause) AS causes
        FROM slow_requests AS s
        JOIN request_evidence AS e USING (conn_id, stream_id)
        JOIN requests AS r USING (conn_id, stream_id)
        JOIN truth AS t ON t.conn_local_port = r.client_port AND t.stream_id = r.stream_id
        JOIN request_cause AS c USING (conn_id, stream_id)
        WHERE t.in_window = 'queueing' AND s.slow_metrics = ['ttft']
          AND NOT queued(greatest(e.queue_inflation_ms, e.queue_inflation_end_ms), e.path_floor_ms)
        GROUP BY ALL
    """).fetchall()  # fmt: skip
    assert len(rows) >= 5, (
        rows
    )  # slow on the first token only; no queue over the lifetime or at the end
    for first_ms, client_wait_ms, causes in rows:
        assert causes == ["queueing"], (first_ms, client_wait_ms, causes)
        # the queue it reads is the wait the client saw (the path's median, not its own)
        assert 0.5 * client_wait_ms <= first_ms <= 1.5 * client_wait_ms, (first_ms, client_wait_ms)
