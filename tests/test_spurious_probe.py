"""A spurious retransmission is reordering only when the receiver asked for it.

Linux sends a tail-loss probe (or times out) when ACKs are late: the client delayed its
ACK, or the host stalled. The probe is spurious (the client had the bytes: a D-SACK
follows), and it delayed nothing. A spurious retransmission the receiver asked for (its
duplicate ACKs or SACK blocks reported a hole, then the late original came) is the mark of
reordering. ``tcp_events.prompt`` tells the two apart; request_evidence counts only the
second as reordering.

Two real captures, tshark the reference for what the receiver reported:

* ``samples/sweep/tls_probe``: one connection of ``tailtap lab run queueing --tls`` (gRPC,
  seed 7): a FIFO bottleneck, nothing held back or reordered (the bridge's own log), yet
  six spurious probes, fired on delayed ACKs and on the host's stalls. They once made
  requests outside the queueing window "slow from reordering".
* ``samples/reorder``: 5 % of the server's segments held back 30 ms past the capture point.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from parsers.tls import KeyLog
from telemetry.cli.sql import open_analysis
from telemetry.ingest import IngestOptions, ingest_file
from telemetry.store.parquet import Store

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "samples" / "sweep" / "tls_probe"
REORDER = ROOT / "samples" / "reorder"

pytestmark = pytest.mark.skipif(
    shutil.which("tshark") is None, reason="needs tshark (apt-get install tshark)"
)


def _store(tmp_path: Path, run: Path, keylog: KeyLog | None = None):
    store = Store(tmp_path / run.name)
    result = ingest_file(run / "capture.pcap", store, IngestOptions(keylog=keylog))
    assert result.error is None, result.error
    con = open_analysis(store.root)
    assert not isinstance(con, int)
    return con


def _reports(capture: Path) -> list[tuple[float, int]]:
    """tshark: the ACKs by which a receiver reported a hole, (time, receiver port): a
    duplicate ACK or SACK blocks, not a D-SACK alone (the echo of a duplicate segment)."""
    out = subprocess.run(
        ["tshark", "-r", str(capture), "-Y", "tcp.analysis.duplicate_ack || tcp.options.sack_le", "-T", "fields",
         "-E", "separator=;", "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tcp.options.sack_le",
         "-e", "tcp.options.sack.dsack_le"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    reports = []
    for line in out.splitlines():
        t, port, sack_le, dsack_le = line.split(";")
        blocks = [b for b in sack_le.split(",") if b]
        if dsack_le and len(blocks) <= 1:
            continue  # a D-SACK and nothing else
        reports.append((float(t), int(port)))
    return reports


def _spurious(con) -> list[tuple[float, str, str]]:
    return con.execute("""
        SELECT epoch_ns(e.ts) / 1e9, e.direction, e.prompt
        FROM tcp_events AS e WHERE e.kind = 'spurious_retransmission' ORDER BY e.ts
    """).fetchall()


def test_probes_on_late_acks_are_not_reordering(tmp_path):
    keys = KeyLog()
    keys.add_text((PROBE / "keys.txt").read_text(), "keys.txt")
    con = _store(tmp_path, PROBE, keys)
    bridge = pq.read_table(PROBE / "bridge_events.parquet").column("action").to_pylist()
    assert "hold" not in bridge and len(bridge) > 1000  # the lab held nothing back: no reordering
    spurious = _spurious(con)
    assert len(spurious) == 6, spurious
    reports = _reports(PROBE / "capture.pcap")
    (client_port,) = con.execute("SELECT DISTINCT client_port FROM requests").fetchone()
    for t, direction, prompt in spurious:
        receiver = client_port if direction == "to_client" else 50051  # who ACKs the data
        asked = [r for r in reports if r[1] == receiver and t - 1.0 <= r[0] <= t]
        # tshark: no hole reported by the data's receiver in the second before: a timer sent it
        assert prompt == "timer" and not asked, (t, direction, prompt, asked)
    # decrypted, every request is read; none is slowed by reordering
    assert (
        con.execute("SELECT count(*) FROM requests WHERE protocol = 'h2-tls'").fetchone()[0] == 82
    )
    assert (
        con.execute("SELECT count(*) FROM request_evidence WHERE reorder_events > 0").fetchone()[0]
        == 0
    )
    assert (
        con.execute("SELECT count(*) FROM request_cause WHERE cause = 'reordering'").fetchone()[0]
        == 0
    )
    slow = dict(con.execute("SELECT cause, count(*) FROM request_cause GROUP BY ALL").fetchall())
    assert slow.get("queueing", 0) >= 10, slow  # the window's bottleneck, still read


def test_resends_the_receiver_asked_for_stay_reordering(tmp_path):
    con = _store(tmp_path, REORDER)
    spurious = _spurious(con)
    asked = [s for s in spurious if s[2] == "receiver"]
    assert len(spurious) > 100 and len(asked) >= 0.9 * len(spurious), (len(spurious), len(asked))
    reports = [
        t for t, port in _reports(REORDER / "capture.pcap") if port != 50051
    ]  # the client's ACKs
    for t, direction, _ in asked:  # tshark saw the client report a hole just before each
        assert direction == "to_client" and any(t - 0.2 <= r <= t for r in reports), t
    assert (
        con.execute("SELECT count(*) FROM request_cause WHERE cause = 'reordering'").fetchone()[0]
        >= 10
    )
