"""TCP signals against the impairment bridge's own log (samples/*/bridge_events.parquet):
what the bridge did to each frame, downstream of the server-side capture point, must show
up in tcp_events / rtt_samples, inferred from the client's ACK stream as well as the data.

* loss_burst: every data segment the bridge dropped is covered by a (non-spurious)
  retransmission event; no retransmission is reported as loss that the bridge did not
  cause; every drop burst is one loss burst, and (44 of 46) of the right size.
* reorder: segments held back (and overtaken) show up as reordering (spurious
  retransmission or out-of-order), never as loss.
* queueing: the delay the bridge's bottleneck added shows up as RTT inflation of about
  the same size toward the client.
* baseline: no loss and no reordering at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from parsers.capture import CaptureDecoder, decode_segments
from parsers.records import SYN, DecodeStats
from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
LOSS = ("retransmission", "fast_retransmission", "rto_retransmission")


def _need(name: str) -> Path:
    run = SAMPLES / name
    if not (run / "bridge_events.parquet").exists():
        pytest.skip(f"no lab sample {name} with bridge_events.parquet")
    return run


def _server_isns(capture: Path) -> dict[int, int]:
    """client port -> the server's ISN, from the SYN/ACKs in the capture."""
    dec = CaptureDecoder()
    batches = dec.feed(capture.read_bytes()) + dec.close()
    isns: dict[int, int] = {}
    for b in batches:
        seg = decode_segments(b, DecodeStats(), [])
        synack = (seg.flags & SYN).astype(bool) & (seg.sport == 50051)
        for i in np.flatnonzero(synack):
            isns[int(seg.dport[i])] = int(seg.seq[i])
    return isns


def _store(tmp_path: Path, run: Path):
    store = Store(tmp_path / run.name)
    assert ingest_file(run / "capture.pcap", store, IngestOptions()).error is None
    return connect(store)


def _bridge(run: Path, action: str, direction: str = "to_client"):
    ev = pq.read_table(run / "bridge_events.parquet").to_pylist()
    return [e for e in ev if e["action"] == action and e["direction"] == direction and e["payload_len"]]


def _events(con, kinds) -> list[tuple]:
    marks = ", ".join("?" * len(kinds))
    return con.execute(
        f"SELECT c.client_port, e.seq, e.bytes, e.burst_id, e.kind FROM tcp_events AS e JOIN connections AS c USING (conn_id) "
        f"WHERE e.direction = 'to_client' AND e.kind IN ({marks})",
        list(kinds),
    ).fetchall()


def _rel(e: dict, isns: dict[int, int]) -> tuple[int, int]:
    port = e["dst_port"]
    return port, (e["tcp_seq"] - isns[port] - 1) % (1 << 32)


def test_every_dropped_segment_is_a_loss_and_nothing_else(tmp_path):
    run = _need("loss_burst")
    isns = _server_isns(run / "capture.pcap")
    drops = [_rel(e, isns) + (e["payload_len"],) for e in _bridge(run, "drop")]
    assert drops, "the bridge dropped nothing"
    con = _store(tmp_path, run)
    losses = _events(con, LOSS)
    covered = [
        any(p == port and s <= seq < s + n for p, s, n, _, _ in losses) for port, seq, _ in drops
    ]
    assert all(covered), f"{covered.count(False)} of {len(drops)} dropped segments not reported as loss"
    false = [
        (p, s, n) for p, s, n, _, _ in losses
        if not any(p == port and seq < s + n and s < seq + ln for port, seq, ln in drops)
    ]
    assert not false, f"losses the bridge did not cause: {false[:5]}"
    # drop bursts: runs of consecutive dropped segments of one connection (a segment the
    # bridge dropped again on retransmission counts once)
    bursts: list[list[int]] = []  # [port, first seq, bytes]
    last: dict[int, int] = {}
    for port, seq, ln in sorted(set(drops)):
        if last.get(port) == seq:
            bursts[-1][2] += ln
        elif last.get(port, -1) < seq + ln:
            bursts.append([port, seq, ln])
        last[port] = max(last.get(port, 0), seq + ln)
    # each drop burst shows up as one loss burst, of the right size: its loss events cover
    # exactly the dropped bytes (the sender may retransmit several small segments as one)
    one, exact = 0, 0
    for port, first, nbytes in bursts:
        ids = {b for p, seq, _, b, _ in losses if p == port and first <= seq < first + nbytes}
        one += len(ids) == 1
        covered: set[int] = set()
        for p, seq, n, b, _ in losses:
            if p == port and b in ids:
                covered.update(range(seq, seq + n))
        exact += covered == set(range(first, first + nbytes))
    assert one == len(bursts), f"only {one} of {len(bursts)} drop bursts map to exactly one loss burst"
    # a loss burst is one recovery episode: two drop runs split by one delivered segment in
    # the same flight (one Gilbert-Elliott bad spell) are one burst, so not always exact
    assert exact >= 0.9 * len(bursts), f"only {exact} of {len(bursts)} loss bursts have the drop burst's size"


def test_held_segments_are_reordering_not_loss(tmp_path):
    run = _need("reorder")
    isns = _server_isns(run / "capture.pcap")
    holds = [_rel(e, isns) for e in _bridge(run, "hold")]
    assert holds, "the bridge held nothing back"
    con = _store(tmp_path, run)
    assert _events(con, LOSS) == [], "reordering reported as loss"
    reorder = _events(con, ("spurious_retransmission", "out_of_order"))
    seen = sum(any(p == port and s <= seq < s + n for p, s, n, _, _ in reorder) for port, seq in holds)
    # a held segment that nothing overtook before it was released leaves no trace at all
    assert seen >= 0.8 * len(holds), f"only {seen} of {len(holds)} held segments seen as reordering"


def test_bottleneck_delay_is_rtt_inflation(tmp_path):
    run = _need("queueing")
    ev = pq.read_table(run / "bridge_events.parquet")
    rows = [e for e in ev.to_pylist() if e["direction"] == "to_client" and e["t_tx_ns"] and e["action"] != "drop"]
    assert rows
    added = np.median([e["t_tx_ns"] - e["t_rx_ns"] for e in rows]) / 1e6
    t0, t1 = min(e["t_rx_ns"] for e in rows), max(e["t_rx_ns"] for e in rows)
    con = _store(tmp_path, run)
    inflation = con.execute(
        "SELECT median(inflation_ms) FROM rtt_floor WHERE direction = 'to_client' AND epoch_ns(ts) BETWEEN ? AND ?",
        [t0, t1],
    ).fetchone()[0]
    assert added > 10, f"the bottleneck added only {added:.1f} ms"
    assert 0.7 * added <= inflation <= 1.3 * added, f"RTT inflation {inflation:.1f} ms vs {added:.1f} ms added by the bridge"


def test_clean_run_has_no_loss_and_no_reordering(tmp_path):
    run = _need("baseline")
    con = _store(tmp_path, run)
    bad = con.execute(
        "SELECT kind, count(*) FROM tcp_events WHERE kind IN ('retransmission', 'fast_retransmission', "
        "'rto_retransmission', 'lost_segment', 'out_of_order', 'spurious_retransmission') GROUP BY kind"
    ).fetchall()
    assert bad == []
