"""Attribution scored on the lab's labelled captures (samples/), as bench/score_attribution.py
prints it: for every scenario the dominant cause of the slow requests inside the impairment
window is the injected one, at least 85% of them carry it, fewer than 5% of the requests
outside the windows are blamed on the network, the server stall is blamed on the server
(90%+) and never on the network, every impaired window has a spike and nothing else does,
and the latency decomposition adds up to the latency the client measured (within 20%).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lab_samples import RUNS, SAMPLES, analyzed, labels

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from score_attribution import score_run  # noqa: E402


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    work = tmp_path_factory.mktemp("score")
    return {name: score_run(SAMPLES / name, 2.0, work) for name in RUNS}


@pytest.mark.skipif(not RUNS, reason="no lab samples in samples/ (make them with `tailtap lab run`)")
@pytest.mark.parametrize("name", RUNS)
def test_scenario_scores(scores, name):
    s = scores[name]
    assert not s.notes or s.scenario == "baseline", s.notes
    assert s.matched >= 0.95 * s.requests, f"only {s.matched} of {s.requests} client requests found in the capture"
    assert s.outside_net is not None and s.outside_net < 0.05, f"{s.outside_net:.0%} of requests outside windows blamed on the network"
    assert s.spikes_out == 0, f"{s.spikes_out} spike(s) outside the impairment windows"
    if s.injected:
        assert s.dominant_ok, f"dominant cause {s.dominant}, injected {s.injected}"
        assert s.carry_share >= 0.85, f"only {s.carry_share:.0%} of slow requests in the window carry the injected cause"
        assert s.spikes_in_ok, f"spikes in {s.spikes_in} impaired windows"
    if s.server_share is not None:
        assert s.server_share >= 0.90 and s.server_net_blamed == 0
    if s.decomp_ok is not None:
        assert s.decomp_ok >= 0.90, f"decomposition within 20% of the client's latency for only {s.decomp_ok:.0%}"


@pytest.mark.skipif("server_slow_read" not in RUNS, reason="no server_slow_read sample")
def test_frozen_server_blamed_per_mechanism(tmp_path):
    """server_slow_read injects two causes at once (a frozen server stops generating and
    stops reading): the slow requests inside its window whose connection met the server's
    zero window / full window while they were in flight carry receive_window, and those
    that did not carry server."""
    (w,) = labels("server_slow_read")["windows"]
    con = analyzed(tmp_path, "server_slow_read", {"window_s": 2.0})
    met, met_rw, clear, clear_server = con.execute("""
        WITH c AS (
            SELECT conn_id, stream_id,
                   bool_or(cause = 'throttling' AND kind = 'receive_window') AS rw, bool_or(cause = 'server') AS srv
            FROM request_cause GROUP BY ALL
        )
        SELECT count(*) FILTER (WHERE e.window_events > 0), count(*) FILTER (WHERE e.window_events > 0 AND c.rw),
               count(*) FILTER (WHERE e.window_events = 0), count(*) FILTER (WHERE e.window_events = 0 AND c.srv)
        FROM truth AS t
        JOIN requests AS q ON q.client_port = t.conn_local_port AND q.stream_id = t.stream_id
        JOIN slow_requests AS s ON s.conn_id = q.conn_id AND s.stream_id = q.stream_id
        JOIN request_evidence AS e ON e.conn_id = q.conn_id AND e.stream_id = q.stream_id
        JOIN c ON c.conn_id = q.conn_id AND c.stream_id = q.stream_id
        WHERE t.in_window = ?
    """, [w["name"]]).fetchone()
    assert met >= 10 and clear >= 5, (met, clear)
    assert met_rw >= 0.9 * met, f"{met_rw} of {met} slow requests that met the zero window carry receive_window"
    assert clear_server >= 0.9 * clear, f"{clear_server} of {clear} other slow requests carry server"


DIRECTED = [n for n in RUNS if n in ("loss_burst", "reorder", "queueing", "throttle_shaper", "throttle_policer")]


@pytest.mark.parametrize("name", DIRECTED)
def test_injected_cause_points_at_the_impaired_direction(tmp_path, name):
    """The bridge impaired one direction (labels.json): the injected cause of the slow
    requests in its window names that direction (request_cause.direction), which is what
    spike_attribution's top_directions concentrates."""
    (w,) = labels(name)["windows"]
    cause, kind = w["cause"], (w["kind"] if w["cause"] == "throttling" else None)
    con = analyzed(tmp_path, name, {"window_s": 2.0})
    n, right = con.execute("""
        SELECT count(*), count(*) FILTER (WHERE c.direction = ?)
        FROM truth AS t
        JOIN requests AS q ON q.client_port = t.conn_local_port AND q.stream_id = t.stream_id
        JOIN request_cause AS c ON c.conn_id = q.conn_id AND c.stream_id = q.stream_id
        WHERE t.in_window = ? AND c.cause = ? AND c.kind IS NOT DISTINCT FROM ?
    """, [w["direction"], w["name"], cause, kind]).fetchone()
    assert n >= 5, f"only {n} requests carry {cause}/{kind}"
    assert right >= 0.9 * n, f"{right} of {n} name the impaired direction {w['direction']}"
