"""The policer's token-bucket test (queries/policer_segments.sql, policer_bucket.sql) and
the loss-gated send log it reads (segment_sends), on the lab's labelled captures.

* segment_sends holds rows only where a path lost segments (nothing on the baseline, nor
  on reorder whose retransmissions are all spurious), and every retransmission;
* the `lost` flag of a send is exactly the bridge's drops (ground truth);
* on throttle_policer the simulated bucket is empty for (nearly) every judged lost segment
  and for few passed ones, with a token rate and depth near the configured ones;
* on random / burst loss (loss_burst, mixed) lost and passed segments find the bucket
  empty about equally often: no verdict;
* no scenario but throttle_policer gets throttling/policer evidence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from telemetry.ingest import ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
NAMES = ("throttle_policer", "loss_burst", "mixed", "queueing", "throttle_shaper", "reorder", "baseline")
pytestmark = pytest.mark.skipif(
    not all((SAMPLES / n / "capture.pcap").exists() for n in NAMES), reason="lab samples missing"
)


@pytest.fixture(scope="module")
def cons(tmp_path_factory):
    out = {}
    for name in NAMES:
        store = Store(tmp_path_factory.mktemp(name))
        ingest_file(SAMPLES / name / "capture.pcap", store)
        out[name] = connect(store)
    return out


def _bucket(con) -> list[dict]:
    cur = con.execute("SELECT * FROM policer_bucket ORDER BY episode")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def test_send_log_is_loss_gated(cons):
    for name in ("baseline", "reorder"):
        assert cons[name].execute("SELECT count(*) FROM segment_sends").fetchall() == [(0,)], name
    con = cons["throttle_policer"]
    kinds = dict(con.execute("SELECT kind, count(*) FROM segment_sends GROUP BY 1").fetchall())
    assert kinds["new"] > 1000 and kinds["retransmission"] > 50
    # every retransmission the TCP analysis reported is a row of the log
    missing = con.execute(
        "SELECT count(*) FROM tcp_events AS e WHERE e.kind IN ('retransmission', 'fast_retransmission', 'rto_retransmission') "
        "AND NOT EXISTS (SELECT 1 FROM segment_sends AS s WHERE s.conn_id = e.conn_id AND s.ts = e.ts "
        "AND s.seq = e.seq AND s.direction = e.direction AND s.kind = 'retransmission')"
    ).fetchall()
    assert missing == [(0,)]
    # new bytes are logged once, in order per connection direction
    dup = con.execute(
        "SELECT count(*) FROM (SELECT conn_id, direction, seq FROM segment_sends WHERE kind = 'new' GROUP BY ALL HAVING count(*) > 1)"
    ).fetchall()
    assert dup == [(0,)]


@pytest.mark.parametrize("name", ["throttle_policer", "loss_burst"])
def test_lost_sends_are_the_bridge_drops(cons, name):
    con = cons[name]
    con.execute(f"CREATE OR REPLACE TEMP TABLE drops AS SELECT dst_port, t_rx_ns, payload_len FROM "
                f"read_parquet('{SAMPLES / name / 'bridge_events.parquet'}') "
                "WHERE direction = 'to_client' AND action = 'drop' AND payload_len > 0")
    con.execute("CREATE OR REPLACE TEMP TABLE lost AS SELECT c.client_port, epoch_ns(p.ts) AS t, p.wire_bytes - 66 AS len "
                "FROM policer_segments AS p JOIN connections AS c USING (conn_id) WHERE p.lost")
    match = "d.dst_port = l.client_port AND d.payload_len = l.len AND abs(d.t_rx_ns - l.t) < 5000000"
    (n_lost, n_drops, lost_ok, drops_ok), = con.execute(
        f"SELECT (SELECT count(*) FROM lost), (SELECT count(*) FROM drops), "
        f"(SELECT count(*) FROM lost AS l WHERE EXISTS (SELECT 1 FROM drops AS d WHERE {match})), "
        f"(SELECT count(*) FROM drops AS d WHERE EXISTS (SELECT 1 FROM lost AS l WHERE {match}))"
    ).fetchall()
    assert n_drops > 50
    assert lost_ok == n_lost and drops_ok == n_drops, (n_lost, n_drops, lost_ok, drops_ok)


def test_policer_losses_come_with_an_empty_bucket(cons):
    (ep,) = _bucket(cons["throttle_policer"])
    labels = json.loads((SAMPLES / "throttle_policer" / "labels.json").read_text())
    (model,) = [m for w in labels["windows"] for m in w.get("models", []) if m["kind"] == "policer"]
    assert ep["judged_losses"] >= 50 and ep["passed_segments"] >= 1000
    # a policer drops only when its bucket is empty: (nearly) every judged loss finds it
    # empty (0.99 measured; the published method tolerates 10 % out of range) ...
    assert ep["lost_empty_share"] >= 0.9
    # ... and most passed segments find tokens (0.16 measured: the token rate is estimated
    # from the goodput, a little under the configured rate when the streams pause)
    assert ep["passed_empty_share"] <= 0.3
    assert ep["lost_empty_share"] - ep["passed_empty_share"] >= 0.6
    assert ep["bucket_consistent"]
    # the token rate is the goodput between the first and the last loss: within 10 % of
    # the configured 300 kbit/s (296 measured)
    assert abs(ep["token_rate_bps"] / model["rate_bps"] - 1) <= 0.10
    # the depth is the one 95 % of the passes need between two losses: the right order of
    # magnitude, on the low side (4.4 KB measured for 6 KB): refills between losses are short
    assert 0.5 * model["burst_bytes"] <= ep["bucket_depth_bytes"] <= 1.5 * model["burst_bytes"]


@pytest.mark.parametrize("name", ["loss_burst", "mixed"])
def test_random_loss_is_not_a_bucket(cons, name):
    (ep,) = _bucket(cons[name])
    assert ep["lost_segments"] >= 50
    # the losses do not depend on the rate: lost and passed segments find the simulated
    # bucket empty about as often (-0.20 and 0.13 measured, 0.83 for the policer)
    assert ep["lost_empty_share"] - ep["passed_empty_share"] < 0.3
    assert not ep["bucket_consistent"]


def test_only_the_policer_is_policed(cons):
    for name, con in cons.items():
        (n,) = con.execute("SELECT count(*) FROM throttle_evidence WHERE throttle_kind = 'policer'").fetchall()[0]
        assert (n > 0) == (name == "throttle_policer"), (name, n)
