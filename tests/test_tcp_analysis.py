"""parsers.tcp event classification on hand-built segment sequences (one case per kind)."""

from __future__ import annotations

import pytest
from tcp_builders import Flow, analyze

from parsers.records import TO_CLIENT, TO_SERVER

MS = 1000  # Flow times are in microseconds


def _server_burst(f: Flow, n: int, size: int = 1000, start: int = 1, **kw) -> Flow:
    for i in range(n):
        f.s(start + size * i, 1, "A", size, **kw)
    return f


# ----------------------------------------------------------------------------- retransmissions


def test_fast_retransmission_after_dup_acks_downstream_loss():
    """Capture next to the server: the segment was captured, then lost downstream."""
    f = _server_burst(Flow().handshake(), 4)
    for hi in (2001, 3001, 4001):
        f.c(1, 1, "A", sack=[(1001, hi)])
    f.s(1, 1, "A", 1000)
    f.c(1, 4001, "A")
    r = analyze(f.batch())
    assert r.kinds() == {"dup_ack": 3, "fast_retransmission": 1}
    assert {e.direction for e in r.events} == {TO_CLIENT}
    ev = r.of("fast_retransmission")[0]
    assert (ev.seq, ev.bytes, ev.frame_no) == (0, 1000, 11)
    assert ev.recovery_ms == pytest.approx((f.rows[10]["ts_ns"] - f.rows[3]["ts_ns"]) / 1e6)
    assert ev.burst_id is not None
    assert [e.seq for e in r.of("dup_ack")] == [0, 0, 0]
    s = r.summary()
    assert s.retransmissions == (0, 1) and s.loss_bursts == (0, 1) and s.longest_loss_burst == 1
    assert len(r.data(TO_CLIENT)) == 4000
    assert "t" in s.history


def test_sack_driven_retransmission_above_the_ack_point_is_fast():
    f = _server_burst(Flow().handshake(), 5)
    f.c(1, 1001, "A")
    f.c(1, 1001, "A", sack=[(3001, 4001)])  # 2nd segment [1000, 2000) and 3rd lost downstream
    f.s(1001, 1, "A", 1000)
    f.s(2001, 1, "A", 1000)
    f.c(1, 5001, "A")
    r = analyze(f.batch())
    assert [(e.kind, e.seq) for e in r.events if "retrans" in e.kind] == [
        ("fast_retransmission", 1000),
        ("fast_retransmission", 2000),
    ]
    s = r.summary()
    assert s.loss_bursts == (0, 1) and s.longest_loss_burst == 2


def test_rto_retransmission_after_silence():
    f = _server_burst(Flow().handshake(), 2)
    f.s(1, 1, "A", 1000, dt_us=300 * MS)
    f.c(1, 2001, "A")
    r = analyze(f.batch())
    assert r.kinds() == {"rto_retransmission": 1}
    assert r.events[0].recovery_ms == pytest.approx(300.1)


def test_quick_retransmission_without_dup_acks_is_generic():
    f = _server_burst(Flow().handshake(), 2)
    f.s(1, 1, "A", 1000, dt_us=50 * MS)  # e.g. a tail-loss probe
    f.c(1, 2001, "A")
    assert analyze(f.batch()).kinds() == {"retransmission": 1}


def test_ack_clocked_retransmission_is_not_an_rto():
    """SMTP-like: a retransmission right after an ACK moved forward (PMTU re-segmentation)."""
    f = _server_burst(Flow().handshake(), 3)
    f.c(1, 1001, "A", dt_us=400 * MS)
    f.s(1001, 1, "A", 1000, dt_us=30)
    f.c(1, 3001, "A")
    assert analyze(f.batch()).kinds() == {"retransmission": 1}


def test_spurious_when_already_acked():
    f = _server_burst(Flow().handshake(), 1)
    f.c(1, 1001, "A")
    f.s(1, 1, "A", 1000, dt_us=250 * MS)
    r = analyze(f.batch())
    assert r.kinds() == {"spurious_retransmission": 1}
    s = r.summary()
    assert s.retransmissions == (0, 1) and s.loss_bursts == (0, 0)


def test_spurious_by_dsack_later():
    f = _server_burst(Flow().handshake(), 1)
    f.s(1, 1, "A", 1000, dt_us=250 * MS)  # looks like a timeout...
    f.c(1, 1001, "A", sack=[(1, 1001)])  # ... but the receiver reports it twice (D-SACK)
    r = analyze(f.batch())
    ev = r.events
    assert [(e.kind, e.burst_id) for e in ev] == [("spurious_retransmission", None)]
    assert ev[0].recovery_ms == pytest.approx(250)
    assert r.summary().loss_bursts == (0, 0)


@pytest.mark.parametrize(
    "echo, kind", [(2001, "spurious_retransmission"), (2301, "rto_retransmission")]
)
def test_eifel_timestamp_check(echo, kind):
    f = Flow().handshake(tsval=1000)
    f.s(1, 1, "A", 1000, tsval=2001, tsecr=1001)
    f.s(1, 1, "A", 1000, tsval=2301, tsecr=1001, dt_us=300 * MS)
    f.c(1, 1001, "A", tsval=1301, tsecr=echo)
    r = analyze(f.batch())
    assert [e.kind for e in r.events] == [kind]
    assert r.summary().loss_bursts == (0, 0 if kind.startswith("spurious") else 1)


def _prompts(r) -> list[tuple[str, str | None]]:
    return [(e.kind, e.prompt) for e in r.events if "retrans" in e.kind]


def test_spurious_probe_on_a_delayed_ack_was_the_timer():
    """A tail-loss probe while the client held its ACK (no duplicate ACK, no SACK): the
    ACK then echoes the original's TSval (Eifel). The data was in time: timer, not a
    reordering the receiver reported."""
    f = Flow().handshake(tsval=1000)
    f.s(1, 1, "A", 100, tsval=2001, tsecr=1001)
    f.s(101, 1, "A", 100, tsval=2005, tsecr=1001, dt_us=5 * MS)
    f.s(101, 1, "A", 100, tsval=2025, tsecr=1001, dt_us=19 * MS)  # the probe
    f.c(1, 201, "A", tsval=1030, tsecr=2001)  # the delayed ACK, sent before the probe came
    f.c(1, 201, "A", tsval=1031, tsecr=2025, sack=[(101, 201)])  # the probe's D-SACK
    assert _prompts(analyze(f.batch())) == [("spurious_retransmission", "timer")]


def test_spurious_resend_the_sack_asked_for_was_the_receiver():
    """Reordering past the capture point: the receiver SACKs the segment after a hole, the
    sender resends the hole's bytes, then the original comes (D-SACK): the receiver asked."""
    f = _server_burst(Flow().handshake(), 2)
    f.c(1, 1, "A", sack=[(1001, 2001)])
    f.s(1, 1, "A", 1000, dt_us=1 * MS)
    f.c(1, 2001, "A")
    f.c(1, 2001, "A", sack=[(1, 1001)])
    r = analyze(f.batch())
    assert _prompts(r) == [("spurious_retransmission", "receiver")]


def test_resend_after_the_hole_filled_was_asked_when_reported():
    """Capture next to the client, the server's first segment held back upstream: the
    client SACKs the second, the original comes late, then the resend the SACK asked for
    arrives (already acknowledged). Asked by the receiver."""
    f = Flow().handshake(tsval=1000)
    f.s(1001, 1, "A", 1000, tsval=2002, tsecr=1001)
    f.c(1, 1, "A", tsval=1003, tsecr=2002, sack=[(1001, 2001)])
    f.s(1, 1, "A", 1000, tsval=2001, tsecr=1001, dt_us=2 * MS)  # the original, by its TSval
    f.c(1, 2001, "A", tsval=1005, tsecr=2001)
    f.s(1, 1, "A", 1000, tsval=2006, tsecr=1003, dt_us=1 * MS)
    r = analyze(f.batch())
    assert r.kinds()["out_of_order"] == 1
    assert _prompts(r) == [("spurious_retransmission", "receiver")]


def test_a_dsack_duplicate_ack_reports_no_hole():
    """A needless resend draws a duplicate ACK carrying a D-SACK: the echo of a duplicate,
    not a hole. A second needless resend soon after is still the timer's."""
    f = _server_burst(Flow().handshake(), 1)
    f.c(1, 1001, "A")
    f.s(1, 1, "A", 1000, dt_us=15 * MS)
    f.c(1, 1001, "A", sack=[(1, 1001)])  # duplicate ACK, D-SACK
    f.s(1, 1, "A", 1000, dt_us=5 * MS)
    r = analyze(f.batch())
    assert r.kinds()["dup_ack"] == 1
    assert _prompts(r) == [("spurious_retransmission", "timer")] * 2


# ----------------------------------------------------------------------------- late or lost upstream


def _hole(f: Flow, **late) -> Flow:
    """Segment [0, 1000) is missing when [1000, 3000) arrives; then it comes."""
    f.s(1001, 1, "A", 1000, **late.pop("b_kw", {}))
    f.s(2001, 1, "A", 1000, **late.pop("c_kw", {}))
    f.s(1, 1, "A", 1000, **late)
    f.c(1, 3001, "A")
    return f


def test_out_of_order_by_tsval_even_when_very_late():
    f = Flow().handshake(tsval=1000)
    _hole(f, tsval=2003, dt_us=50 * MS, b_kw={"tsval": 2004}, c_kw={"tsval": 2004})
    r = analyze(f.batch())
    assert r.kinds() == {"lost_segment": 1, "out_of_order": 1}
    ooo = r.of("out_of_order")[0]
    assert ooo.recovery_ms == pytest.approx(50.1) and ooo.burst_id is None
    s = r.summary()
    assert s.out_of_order == (0, 1) and s.retransmissions == (0, 0) and s.loss_bursts == (0, 0)
    assert "o" in s.history and "l" in s.history


def test_upstream_loss_by_tsval_even_when_quick():
    f = Flow().handshake(tsval=1000)
    _hole(f, tsval=2005, dt_us=300, b_kw={"tsval": 2004}, c_kw={"tsval": 2004})
    r = analyze(f.batch())
    assert r.kinds() == {"lost_segment": 1, "retransmission": 1}
    lost, retx = r.of("lost_segment")[0], r.of("retransmission")[0]
    assert lost.burst_id == retx.burst_id is not None
    assert lost.recovery_ms == pytest.approx(0.4) and (lost.seq, lost.bytes) == (0, 1000)
    s = r.summary()
    assert s.retransmissions == (0, 1) and s.loss_bursts == (0, 1) and s.out_of_order == (0, 0)


@pytest.mark.parametrize(
    "late_id, dt_us, kind", [(30010, 20 * MS, "out_of_order"), (30013, 50, "retransmission")]
)
def test_ip_id_tells_late_original_from_retransmission(late_id, dt_us, kind):
    f = Flow().handshake()
    for k in range(10):
        f.s(1 + 1000 * k, 1, "A", 1000, ip_id=30000 + k)
        f.c(1, 1001 + 1000 * k, "A")
    # segment 10 lost (or delayed) before the capture point
    f.s(11001, 1, "A", 1000, ip_id=30011)
    f.s(12001, 1, "A", 1000, ip_id=30012)
    f.s(10001, 1, "A", 1000, ip_id=late_id, dt_us=dt_us)
    f.c(1, 13001, "A")
    r = analyze(f.batch())
    assert r.kinds() == {"lost_segment": 1, kind: 1}


@pytest.mark.parametrize("dt_us, kind", [(20, "out_of_order"), (5 * MS, "retransmission")])
def test_timing_decides_without_tsval_or_ip_id(dt_us, kind):
    f = Flow(client=("fd00::1", 40000), server=("fd00::2", 50051)).handshake()  # RTT 0.2 ms
    _hole(f, dt_us=dt_us)
    assert analyze(f.batch()).kinds() == {"lost_segment": 1, kind: 1}


def test_loss_bursts_group_one_flight():
    f = Flow().handshake(tsval=1000)
    tv = 2000
    for k in range(10):  # segments 3, 4 and 5 lost upstream in one flight
        if k not in (3, 4, 5):
            f.s(1 + 1000 * k, 1, "A", 1000, tsval=tv)
    for k in (3, 4, 5):
        f.s(1 + 1000 * k, 1, "A", 1000, tsval=tv + 10)
    f.c(1, 10001, "A", tsval=1100, tsecr=tv + 10)
    f.s(10001, 1, "A", 1000, tsval=tv + 500, dt_us=500 * MS)
    f.s(12001, 1, "A", 1000, tsval=tv + 501)  # [11000, 12000) lost: a new episode
    f.s(11001, 1, "A", 1000, tsval=tv + 520)
    f.c(1, 13001, "A", tsval=1600, tsecr=tv + 520)
    r = analyze(f.batch())
    retx = r.of("retransmission")
    assert [e.seq for e in retx] == [3000, 4000, 5000, 11000]
    assert len({e.burst_id for e in retx[:3]}) == 1 and retx[3].burst_id != retx[0].burst_id
    lost = r.of("lost_segment")
    assert [(e.seq, e.bytes, e.burst_id) for e in lost] == [
        (3000, 3000, retx[2].burst_id),
        (11000, 1000, retx[3].burst_id),
    ]
    s = r.summary()
    assert s.loss_bursts == (0, 2) and s.longest_loss_burst == 3 and s.retransmissions == (0, 4)


# ----------------------------------------------------------------------------- ACK side


def test_dup_acks_window_updates_and_keepalives():
    f = _server_burst(Flow().handshake(), 1)
    f.c(1, 1001, "A")
    f.c(1, 1001, "A")  # dup ACK
    f.c(1, 1001, "A", win=30000)  # window update: not a dup
    f.s(1000, 1, "A", 1, dt_us=30_000 * MS)  # keep-alive probe: one old byte
    f.c(1, 1001, "A", win=30000)  # its ACK: not a dup
    r = analyze(f.batch())
    assert r.kinds() == {"dup_ack": 1}
    d = r.events[0]
    assert (d.direction, d.seq, d.frame_no) == (TO_CLIENT, 1000, 6)
    assert r.summary().retransmissions == (0, 0)
    assert len(r.data(TO_CLIENT)) == 1000


def test_zero_window_episode_has_a_duration():
    f = _server_burst(Flow().handshake(), 1)
    f.c(1, 1001, "A", win=0)
    f.c(1, 1001, "A", win=0, dt_us=20 * MS)
    f.c(1, 1001, "A", win=8000, dt_us=30 * MS)
    r = analyze(f.batch())
    assert r.kinds() == {"zero_window": 1}
    z = r.events[0]
    assert (z.direction, z.seq, z.frame_no, z.ts_ns) == (TO_CLIENT, 1000, 5, f.rows[4]["ts_ns"])
    assert z.recovery_ms == pytest.approx(50)
    s = r.summary()
    assert s.zero_windows == (0, 1) and "W" in s.history


def test_window_full_needs_the_scale_from_the_handshake():
    f = Flow().handshake(ws=2)
    f.c(1, 1, "A", win=500)  # 500 << 2 = 2000 bytes
    _server_burst(f, 3)
    f.c(1, 3001, "A", win=500)
    r = analyze(f.batch())
    wf = r.of("window_full")
    assert [(e.direction, e.seq, e.bytes) for e in wf] == [
        (TO_CLIENT, 1000, 1000),
        (TO_CLIENT, 2000, 1000),
    ]

    g = Flow()  # same without the handshake: the scale is unknown, no window_full
    g.c(1, 1, "A", win=500)
    _server_burst(g, 3)
    r2 = analyze(g.batch())
    assert r2.of("window_full") == [] and "~" in r2.summary().history


def test_rst_closes_at_once():
    f = Flow().handshake()
    f.c(1, 1, "AP", b"x")
    f.s(1, 2, "R")
    from parsers.tcp import TcpAnalyzer

    an = TcpAnalyzer()
    an.feed(f.batch())
    closed = an.take_closed()
    assert len(closed) == 1 and closed[0].history == "ShADr"
    ev, _ = an.take_events()
    assert [(e.kind, e.direction) for e in ev] == [("rst", TO_CLIENT)]
    assert an.finish() == []


# ----------------------------------------------------------------------------- capture artefacts


def test_capture_duplicates_are_not_retransmissions():
    f = Flow().handshake().dup()  # the third ACK captured twice
    f.s(1, 1, "A", 1000).dup(dt_us=3).dup(dt_us=40_000)  # a data segment three times (same IP ID)
    f.c(1, 1001, "A").dup()
    f.s(1, 1, "A", 1000, dt_us=20)  # a real retransmission: new IP ID
    r = analyze(f.batch())
    assert r.kinds() == {"spurious_retransmission": 1}
    s = r.summary()
    assert s.packets == (3, 3) and s.retransmissions == (0, 1)
    assert "X" in s.history and "x" in s.history
    assert r.an.stats["duplicates"] == 4
    assert len(r.data(TO_CLIENT)) == 1000


@pytest.mark.parametrize("dt_us, kinds", [(5, {}), (2000, {"retransmission": 1})])
def test_ipv6_duplicates_need_to_be_microseconds_apart(dt_us, kinds):
    f = Flow(client=("fd00::1", 40000), server=("fd00::2", 50051)).handshake(tsval=7)
    f.s(1, 1, "A", 1000, tsval=2000, tsecr=8)
    f.dup(dt_us=dt_us)
    f.c(1, 1001, "A", tsval=9, tsecr=2000, dt_us=10 * MS)
    assert analyze(f.batch()).kinds() == kinds


def test_direction_conventions_for_client_data():
    f = Flow().handshake()
    f.c(1, 1, "A", 500)
    f.c(501, 1, "A", 500, dt_us=300 * MS)
    f.c(1, 1, "A", 500, dt_us=300 * MS)  # RTO retransmission of the client's first segment
    f.s(1, 1001, "A", win=0)
    f.s(1, 1001, "A", win=100, dt_us=MS)
    r = analyze(f.batch())
    assert {(e.kind, e.direction) for e in r.events} == {
        ("rto_retransmission", TO_SERVER),
        ("zero_window", TO_SERVER),
    }
    s = r.summary()
    assert s.retransmissions == (1, 0) and s.zero_windows == (1, 0) and "w" in s.history


def test_stray_packets_far_outside_the_window_are_ignored():
    f = Flow().handshake(ws=2)
    _server_burst(f, 2)
    f.s(1 + (1 << 28), 1, "A", 100)  # a corrupt sequence number: 256 MB ahead
    f.c(1, 2001 + (1 << 28), "A")  # a corrupt ACK
    f.c(1 + (1 << 27), 0, "R")  # a RST that is not this connection's
    _server_burst(f, 2, start=2001)
    f.c(1, 4001, "A")
    r = analyze(f.batch())
    assert r.events == [] and r.an.stats["out_of_window"] == 3
    s = r.summary()
    assert s.bytes == (0, 4000) and s.capture_loss_bytes == (0, 0) and "R" not in s.history
    assert len(r.data(TO_CLIENT)) == 4000


def test_reordering_past_the_capture_point_is_not_loss():
    """A segment held back downstream: the receiver SACKs past it, the sender fast-
    retransmits, the retransmission wins the race (the ACK echoes its TSval, so Eifel alone
    says "genuine"), then the late original arrives and the receiver D-SACKs it. The
    retransmission was spurious: reordering, no loss burst. (Seen in the lab's reorder run.)"""
    f = Flow().handshake(tsval=1000)
    for i in range(4):
        f.s(1 + 100 * i, 1, "A", 100, tsval=2000 + i, tsecr=1001)
    f.c(1, 101, "A", tsval=1100, tsecr=2000, sack=[(201, 301)])
    f.c(1, 101, "A", tsval=1101, tsecr=2000, sack=[(201, 401)])
    f.s(101, 1, "A", 100, tsval=2010, tsecr=1101)  # fast retransmission of the held segment
    f.c(1, 401, "A", tsval=1102, tsecr=2010)  # answers the retransmission
    f.c(1, 401, "A", tsval=1125, tsecr=2010, sack=[(101, 201)], dt_us=25 * MS)  # D-SACK: the original came late
    r = analyze(f.batch())
    assert [e.kind for e in r.events if "retransmission" in e.kind] == ["spurious_retransmission"]
    assert r.summary().loss_bursts == (0, 0)


def test_genuine_fast_retransmission_without_dsack():
    """The same exchange without the late D-SACK stays a genuine fast retransmission."""
    f = Flow().handshake(tsval=1000)
    for i in range(4):
        f.s(1 + 100 * i, 1, "A", 100, tsval=2000 + i, tsecr=1001)
    f.c(1, 101, "A", tsval=1100, tsecr=2000, sack=[(201, 301)])
    f.c(1, 101, "A", tsval=1101, tsecr=2000, sack=[(201, 401)])
    f.s(101, 1, "A", 100, tsval=2010, tsecr=1101)
    f.c(1, 401, "A", tsval=1102, tsecr=2010)
    f.s(401, 401, "A", 100, tsval=2400, tsecr=1102, dt_us=300 * MS)
    r = analyze(f.batch())
    assert [e.kind for e in r.events if "retransmission" in e.kind] == ["fast_retransmission"]
    assert r.summary().loss_bursts == (0, 1)
