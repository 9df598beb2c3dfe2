"""Reordering before the capture point (queries/request_evidence.sql, held holes).

At a capture point at the client, a segment held back on the way (reordering) leaves a hole;
the receiver's duplicate ACKs make the server resend it at once on a short path, and the
held original arrives after that resend, as a spurious retransmission. The hole is then a
late arrival, not a loss. The capture is 10 s of a real sweep run (seed 2, run 23: 9.3% of
the server -> client segments held 36.5 ms on a 0.15 ms path, captured at the client; cut
from 3 s before the window to 7 s into it, samples/sweep/client_reorder). Before held holes
were told apart, 50 of its 76 requests with a cause had loss as their largest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

CAPTURE = Path(__file__).resolve().parents[1] / "samples" / "sweep" / "client_reorder" / "capture.pcap"


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    if not CAPTURE.exists():
        pytest.fail(f"{CAPTURE} is missing: the sample is committed with the repository")
    store = Store(tmp_path_factory.mktemp("store"))
    assert ingest_file(CAPTURE, store, IngestOptions()).error is None
    return connect(store)


def test_the_holes_were_filled_by_resends_and_their_originals_came_later(con):
    held = con.sql("""
        SELECT count(*) FROM tcp_events AS h
        WHERE h.kind = 'lost_segment' AND EXISTS (
            SELECT 1 FROM tcp_events AS c
            WHERE c.conn_id = h.conn_id AND c.direction = h.direction AND c.kind = 'spurious_retransmission'
              AND c.seq = h.seq AND c.ts > h.ts AND epoch_ns(c.ts) - epoch_ns(h.ts) < 3e9)
    """).fetchall()[0][0]
    holes = con.sql("SELECT count(*) FROM tcp_events WHERE kind = 'lost_segment'").fetchall()[0][0]
    assert holes > 100 and held >= 0.8 * holes, (held, holes)


def test_held_holes_are_reordering_not_loss(con):
    primaries = dict(con.sql("""
        SELECT primary_cause, count(*) FROM (
            SELECT conn_id, stream_id, (list(cause ORDER BY delay_ms DESC, cause))[1] AS primary_cause
            FROM request_cause GROUP BY ALL)
        GROUP BY ALL
    """).fetchall())
    assert sum(primaries.values()) >= 50
    assert primaries.get("reordering", 0) >= 0.9 * sum(primaries.values()), primaries
    assert primaries.get("loss_burst", 0) == 0, primaries
    # the holes' wait is counted as how late the held segments were
    stall, wait = con.sql("SELECT sum(loss_stall_ms), sum(reorder_wait_ms) FROM request_evidence").fetchall()[0]
    assert (stall or 0) < 1 and wait > 1000
