"""parsers.tcp reassembly and connection identity on hand-built segment sequences."""

from __future__ import annotations

import numpy as np
import pytest
from tcp_builders import Flow, analyze

from parsers.records import TO_CLIENT, TO_SERVER
from parsers.tcp import _analysis


def _check_continuity(chunks) -> None:
    """Each direction's chunks tile the stream: offset = previous end + gap_before."""
    pos: dict = {}
    for c in chunks:
        k = (c.conn_key, c.direction)
        if k in pos:
            assert c.stream_offset == pos[k] + c.gap_before, (k, c)
        pos[k] = c.stream_offset + len(c.data)


def test_handshake_in_order_both_directions():
    f = Flow().handshake()
    f.c(1, 1, "AP", b"hello")
    f.s(1, 6, "AP", b"world!!")
    f.c(6, 8, "A")
    r = analyze(f.batch())
    assert r.data(TO_SERVER) == b"hello" and r.data(TO_CLIENT) == b"world!!"
    c0, c1 = r.dir_chunks(0)[0], r.dir_chunks(1)[0]
    assert (c0.stream_offset, c0.gap_before, c0.frame_no) == (0, 0, 4)
    assert (c1.stream_offset, c1.frame_no, c1.ts_ns) == (0, 5, f.rows[4]["ts_ns"])
    s = r.summary()
    assert (s.client_port, s.server_port, s.client_known, s.syn_seen) == (40000, 50051, True, True)
    assert s.packets == (4, 2) and s.bytes == (5, 7)
    assert s.history == "ShADd"
    assert s.handshake_rtt_ms == pytest.approx(0.2)
    assert s.conn_id.startswith("C") and len(s.conn_id) == 17
    assert r.events == []
    ts, off = s.ack_progress[TO_SERVER]
    assert off.tolist() == [5] and ts.tolist() == [f.rows[4]["ts_ns"]]
    assert s.ack_progress[TO_CLIENT][1].tolist() == [7]


def test_synless_midstream_guesses_server_by_service_port():
    f = Flow(cisn=77_000, sisn=9_000_000)
    f.s(0, 0, "A", 100)  # capture starts inside a response
    f.c(0, 100, "A")
    f.s(100, 0, "AP", 50)
    f.c(0, 150, "AP", b"next request")
    r = analyze(f.batch())
    s = r.summary()
    assert (s.client_port, s.server_port, s.client_known, s.syn_seen) == (
        40000,
        50051,
        False,
        False,
    )
    assert s.history.startswith("^~")
    assert [c.stream_offset for c in r.dir_chunks(TO_CLIENT)] == [0, 100]
    assert r.dir_chunks(TO_SERVER)[0].stream_offset == 0
    assert s.ack_progress[TO_CLIENT][1].tolist() == [100, 150]
    assert s.ack_progress[TO_SERVER][1].tolist() == []


@pytest.mark.parametrize(
    "first, second, server",
    [
        ((("10.0.0.1", 45000)), (("10.0.0.2", 40000)), 40000),  # lower port
        ((("10.0.0.1", 2000)), (("10.0.0.2", 3000)), 3000),  # service port beats lower
        ((("10.0.0.9", 443)), (("10.0.0.2", 51000)), 443),  # first packet from the server
        ((("::1", 60000)), (("::1", 8080)), 8080),
    ],
)
def test_server_port_heuristic(first, second, server):
    f = Flow(client=first, server=second)
    f.c(0, 0, "A", 10)
    f.s(0, 10, "A")
    s = analyze(f.batch()).summary()
    assert s.server_port == server and not s.client_known


def test_sequence_wraparound_with_handshake():
    f = Flow(cisn=2**32 - 12, sisn=2**32 - 1).handshake()
    for i in range(4):  # client seq crosses 2**32 inside the second segment
        f.c(1 + 8 * i, 1, "AP", bytes([65 + i]) * 8)
        f.s(1, 9 + 8 * i, "A")
    f.s(1, 33, "AP", b"r" * 5)  # server data starts right at the wrap (ISN = 2**32 - 1)
    f.c(33, 6, "A")
    r = analyze(f.batch())
    assert r.data(TO_SERVER) == b"A" * 8 + b"B" * 8 + b"C" * 8 + b"D" * 8
    assert [c.stream_offset for c in r.dir_chunks(TO_SERVER)] == [0, 8, 16, 24]
    assert r.data(TO_CLIENT) == b"rrrrr"
    s = r.summary()
    assert s.ack_progress[TO_SERVER][1].tolist() == [8, 16, 24, 32]
    assert s.ack_progress[TO_CLIENT][1].tolist() == [5]
    assert r.events == [] and s.bytes == (32, 5)


def test_sequence_wraparound_synless():
    f = Flow(cisn=2**32 - 100, sisn=5)
    for i in range(5):
        f.c(50 * i, 0, "A", 50)
        f.s(0, 50 * (i + 1), "A")
    r = analyze(f.batch(), batch_size=3)
    assert [c.stream_offset for c in r.dir_chunks(TO_SERVER)] == [0, 50, 100, 150, 200]
    assert r.summary().ack_progress[TO_SERVER][1].tolist() == [50, 100, 150, 200, 250]
    assert r.events == []


def test_overlap_and_retransmission_delivered_once():
    payload = bytes(range(40))
    f = Flow().handshake()
    f.c(1, 1, "A", payload[0:10])
    f.c(6, 1, "A", payload[5:15])  # overlaps 5 bytes
    f.c(1, 1, "A", payload[0:10])  # full retransmission
    f.c(16, 1, "A", payload[15:25])
    f.c(11, 1, "A", payload[10:40])  # overlaps and extends
    f.s(1, 41, "A")
    r = analyze(f.batch())
    assert r.data(TO_SERVER) == payload
    assert [(c.stream_offset, len(c.data)) for c in r.dir_chunks(0)] == [
        (0, 10),
        (10, 5),
        (15, 10),
        (25, 15),
    ]
    _check_continuity(r.chunks)
    assert r.summary().retransmissions == (3, 0)


def test_out_of_order_waits_for_the_hole_and_takes_the_fill_time():
    f = Flow().handshake()
    f.c(1, 1, "A", b"a" * 10)
    f.c(21, 1, "A", b"c" * 10)  # hole [10, 20)
    f.c(31, 1, "A", b"d" * 10, dt_us=40)
    f.c(11, 1, "A", b"b" * 10, dt_us=40)  # the late original (later by less than the RTT)
    r = analyze(f.batch())
    ch = r.dir_chunks(0)
    assert [(c.stream_offset, c.data[:1], c.frame_no) for c in ch] == [(0, b"a", 4), (10, b"b", 7)]
    assert ch[1].data == b"b" * 10 + b"c" * 10 + b"d" * 10
    assert ch[1].ts_ns == f.rows[6]["ts_ns"]
    assert r.kinds() == {"lost_segment": 1, "out_of_order": 1}
    lost = r.of("lost_segment")[0]
    assert (lost.seq, lost.bytes, lost.frame_no, lost.burst_id) == (10, 10, 5, None)
    assert lost.ts_ns == f.rows[4]["ts_ns"] and lost.recovery_ms == pytest.approx(0.08)
    assert r.summary().out_of_order == (1, 0)
    assert r.summary().history == "ShADLO"


def test_snaplen_truncation_reports_gap():
    f = Flow().handshake()
    f.c(1, 1, "A", b"x" * 40, wire_len=100)
    f.c(101, 1, "A", b"y" * 40, wire_len=100)
    f.s(1, 201, "A")
    r = analyze(f.batch())
    ch = r.dir_chunks(0)
    assert [(c.stream_offset, len(c.data), c.gap_before) for c in ch] == [(0, 40, 0), (100, 40, 60)]
    assert r.events == []
    s = r.summary()
    assert "C" in s.history and s.bytes == (200, 0) and s.capture_loss_bytes == (0, 0)


def test_capture_loss_is_skipped_and_never_a_network_loss():
    f = Flow().handshake()
    f.c(1, 1, "A", b"a" * 10)
    # [10, 20) was on the wire but the capture missed it
    f.c(21, 1, "A", b"c" * 10)
    f.s(1, 31, "A")  # the server has everything
    f.s(1, 41, "A")  # ... even bytes the capture never saw at all
    f.c(41, 1, "A", b"e" * 5)
    r = analyze(f.batch())
    ch = r.dir_chunks(0)
    assert [(c.stream_offset, len(c.data), c.gap_before) for c in ch] == [
        (0, 10, 0),
        (20, 10, 10),
        (40, 5, 10),
    ]
    # the receiver had the hole, so nothing held what came after it: its own packet's time
    assert (ch[1].ts_ns, ch[1].frame_no) == (f.rows[4]["ts_ns"], 5)
    cl = r.of("capture_loss")
    assert [(e.direction, e.seq, e.bytes) for e in cl] == [(0, 10, 10), (0, 30, 10)]
    lost = r.of("lost_segment")
    assert [(e.seq, e.bytes, e.recovery_ms, e.burst_id) for e in lost] == [(10, 10, None, None)]
    s = r.summary()
    assert s.capture_loss_bytes == (20, 0)
    assert s.retransmissions == (0, 0) and s.loss_bursts == (0, 0)
    assert "G" in s.history
    assert s.ack_progress[0][1].tolist() == [30, 40]
    _check_continuity(r.chunks)


def test_bytes_behind_a_hole_the_capture_missed_keep_their_own_times():
    f = Flow().handshake()
    f.s(1, 1, "A", b"a" * 10)
    # [10, 20) passed the capture point unseen; three more segments wait behind the hole
    f.s(21, 1, "A", b"c" * 10)
    f.s(31, 1, "A", b"d" * 10)
    f.s(41, 1, "AP", b"e" * 10)
    f.c(1, 51, "A")  # the client ACKs it all: it had the hole
    r = analyze(f.batch())
    ch = r.dir_chunks(TO_CLIENT)
    assert [(c.stream_offset, len(c.data), c.gap_before) for c in ch] == [(0, 10, 0), (20, 10, 10), (30, 10, 0), (40, 10, 0)]
    assert [(c.ts_ns, c.frame_no) for c in ch[1:]] == [(f.rows[i]["ts_ns"], i + 1) for i in (4, 5, 6)]
    assert [(e.seq, e.bytes) for e in r.of("capture_loss")] == [(10, 10)]
    _check_continuity(r.chunks)


def test_two_holes_acked_at_once_are_two_capture_losses_at_their_holes():
    """One ACK past two holes the capture missed: one capture_loss a hole, each at the seq
    of the lost_segment it showed as (queries/capture_gaps pairs them by seq: one event
    for both, at the first, left the second looking like network loss)."""
    f = Flow().handshake()
    f.s(1, 1, "A", b"a" * 10)
    f.s(21, 1, "A", b"c" * 10)  # [10, 20) passed unseen
    f.s(41, 1, "A", b"e" * 10)  # [30, 40) passed unseen
    f.c(1, 51, "A")  # the client ACKs it all
    r = analyze(f.batch())
    assert [(e.seq, e.bytes, e.recovery_ms) for e in r.of("lost_segment")] == [(10, 10, None), (30, 10, None)]
    assert [(e.seq, e.bytes) for e in r.of("capture_loss")] == [(10, 10), (30, 10)]
    assert r.summary().capture_loss_bytes == (0, 20)
    _check_continuity(r.chunks)


def test_bytes_behind_a_resent_hole_wait_for_the_resend():
    f = Flow().handshake()
    f.s(1, 1, "A", b"a" * 10)
    f.s(21, 1, "A", b"c" * 10)  # [10, 20) lost upstream of the capture point
    f.s(31, 1, "A", b"d" * 10)
    f.s(11, 1, "A", b"b" * 10)  # the resend fills the hole: the client reads on only now
    r = analyze(f.batch())
    ch = r.dir_chunks(TO_CLIENT)
    assert r.data(TO_CLIENT) == b"a" * 10 + b"b" * 10 + b"c" * 10 + b"d" * 10
    assert {c.ts_ns for c in ch[1:]} == {f.rows[6]["ts_ns"]}
    assert r.of("capture_loss") == []
    _check_continuity(r.chunks)


def test_old_hole_is_given_up_after_timeout():
    f = Flow().handshake()
    f.c(1, 1, "A", b"a" * 10)
    f.c(21, 1, "A", b"c" * 10)
    f.s(1, 11, "A", t_us=4_000_000)  # 4 s later the hole is still open
    r = analyze(f.batch())
    ch = r.dir_chunks(0)
    assert [(c.stream_offset, c.gap_before) for c in ch] == [(0, 0), (20, 10)]
    skip = r.of("reassembly_skip")
    assert [(e.seq, e.bytes) for e in skip] == [(10, 10)]
    assert r.of("lost_segment")[0].recovery_ms is None
    assert "K" in r.summary().history


def test_buffer_limit_skips_the_hole(monkeypatch):
    monkeypatch.setattr(_analysis, "MAX_BUF_BYTES", 250)
    f = Flow().handshake()
    f.c(1, 1, "A", 100)
    for i in range(3):  # hole [100, 200), then 300 bytes buffered
        f.c(201 + 100 * i, 1, "A", 100)
    r = analyze(f.batch())
    assert [(c.stream_offset, len(c.data), c.gap_before) for c in r.dir_chunks(0)] == [
        (0, 100, 0),
        (200, 300, 100),
    ]
    assert [(e.seq, e.bytes) for e in r.of("reassembly_skip")] == [(100, 100)]


def test_buffered_data_after_an_unfilled_hole_is_flushed_at_rst():
    f = Flow().handshake()
    f.c(1, 1, "A", b"a" * 10)
    f.c(21, 1, "A", b"c" * 10)
    f.s(1, 11, "R")
    r = analyze(f.batch())
    assert [(c.stream_offset, c.gap_before) for c in r.dir_chunks(0)] == [(0, 0), (20, 10)]
    assert r.kinds()["rst"] == 1 and r.kinds()["reassembly_skip"] == 1


def _mixed_flow() -> Flow:
    f = Flow(cisn=2**32 - 3000).handshake(ws=2, tsval=1000)
    tv = 1002
    for i in range(40):
        tv += 1
        if i == 12:
            continue  # lost upstream
        f.s(1 + 100 * i, 1, "A", 100, tsval=tv + 500, tsecr=tv)
        if i % 2:
            sack = [(1301, 101 + 100 * i)] if i > 12 else None
            f.c(1, 1201 if 12 < i < 30 else 101 + 100 * i, "A", tsval=tv, tsecr=tv + 500, sack=sack)
        if i == 29:
            f.s(1201, 1, "A", 100, tsval=tv + 501, tsecr=tv)  # the retransmission
    f.c(1, 4001, "AP", b"q" * 30, tsval=tv + 2, tsecr=tv + 501)
    f.s(4001, 31, "AF", tsval=tv + 503, tsecr=tv + 2)
    f.c(31, 4002, "AF", tsval=tv + 3, tsecr=tv + 503)
    f.s(4002, 32, "A", tsval=tv + 504, tsecr=tv + 3)
    return f


@pytest.mark.parametrize("batch_size", [1, 3, 17, None])
def test_batch_boundaries_do_not_change_anything(batch_size):
    f = _mixed_flow()
    whole = analyze(f.batch())
    cut = analyze(f.batch(), batch_size=batch_size)

    def norm(r):
        ch = [
            (c.direction, c.stream_offset, c.data, c.ts_ns, c.frame_no, c.gap_before)
            for c in r.chunks
        ]
        ev = sorted((e.ts_ns, e.kind, e.seq, e.bytes, e.recovery_ms, e.burst_id) for e in r.events)
        rt = sorted((s.ts_ns, s.direction, s.source, s.rtt_ms) for s in r.rtts)
        s = r.summary()
        acks = [a.tolist() for p in s.ack_progress for a in p]
        return ch, ev, rt, (s.history, s.packets, s.bytes, s.retransmissions, s.conn_id), acks

    assert norm(whole) == norm(cut)
    assert whole.data(TO_CLIENT) == b"".join(
        bytes((j * 7 + 1 + 100 * i) & 0xFF for j in range(100)) for i in range(40)
    )
    _check_continuity(whole.chunks)
    assert whole.summary().history.startswith("ShA")


def test_port_reuse_new_isn_makes_a_new_connection_and_stragglers_are_absorbed():
    f = Flow(cisn=1000, sisn=5000).handshake()
    f.c(1, 1, "AP", b"one")
    f.s(1, 4, "AP", b"1")
    f.c(4, 2, "AF")
    f.s(2, 5, "AF")
    f.c(5, 3, "A")
    f.c(5, 3, "A", ip_id=4242)  # a late copy of the final ACK
    f.cisn, f.sisn = 900_000, 700_000
    f.handshake()
    f.c(1, 1, "AP", b"two")
    r = analyze(f.batch())
    assert len(r.summaries) == 2
    a, b = sorted(r.summaries, key=lambda s: s.start_ns)
    assert a.conn_key != b.conn_key and a.conn_id != b.conn_id
    assert a.history == "ShADdFf" and b.history == "ShAD"
    assert r.data(0, a.conn_key) == b"one" and r.data(0, b.conn_key) == b"two"
    assert r.an.stats["stragglers"] == 1


def test_synack_without_syn_knows_the_client():
    f = Flow()
    f.s(0, 1, "SA", ws=3)
    f.c(1, 1, "A")
    f.c(1, 1, "AP", b"req")
    r = analyze(f.batch())
    s = r.summary()
    assert s.client_known and s.syn_seen and s.client_port == 40000
    assert r.data(0) == b"req" and r.dir_chunks(0)[0].stream_offset == 0


def test_ack_progress_is_monotonic_and_prunable():
    f = Flow().handshake()
    for i in range(6):
        f.s(1 + 10 * i, 1, "A", 10)
        f.c(1, 11 + 10 * i, "A")
    f.c(1, 31, "A")  # an old ACK (reordered): ignored
    from parsers.tcp import TcpAnalyzer

    an = TcpAnalyzer()
    an.feed(f.batch())
    assert an.take_closed() == []
    ts, off = an.ack_progress(1, TO_CLIENT)
    assert off.tolist() == [10, 20, 30, 40, 50, 60]
    assert np.all(np.diff(ts) > 0)
    an.prune_acks(1, TO_CLIENT, 35)
    assert an.ack_progress(1, TO_CLIENT)[1].tolist() == [40, 50, 60]
    assert an.ack_progress(99, TO_CLIENT)[0].size == 0


def test_one_sided_capture_keeps_memory_bounded(monkeypatch):
    """Only the server's packets were captured (asymmetric routing): nothing is ever
    ACKed or echoed, yet the logs stay bounded and the payload is complete."""
    from parsers.tcp import _logs

    monkeypatch.setattr(_logs, "MAX_ENTRIES", 64)
    f = Flow()
    for i in range(1000):
        f.s(1 + 100 * i, 1, "A", 100, tsval=5000 + i)
    r = analyze(f.batch(), finish=False)
    conn = r.an._by_key[1]
    d = conn.dirs[TO_CLIENT]
    assert len(d.segs) <= 64 and len(d.tsq.tv) - d.tsq.h <= 64
    assert len(b"".join(c.data for c in r.chunks)) == 100_000
    assert r.events == [] and r.rtts == []
    (s,) = r.an.finish()
    assert s.packets == (0, 1000) and s.bytes == (0, 100_000)


def test_fast_open_payload_in_the_syn():
    f = Flow()
    f.c(0, 0, "S", b"GET / HTTP/1.1\r\n", mss=1460)
    f.s(0, 17, "SA", b"")
    f.c(17, 1, "A", b"Host: x\r\n\r\n")
    f.s(1, 28, "A")
    r = analyze(f.batch())
    assert r.data(TO_SERVER) == b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    assert [c.stream_offset for c in r.dir_chunks(TO_SERVER)] == [0, 16]
    assert r.events == [] and r.summary().ack_progress[TO_SERVER][1].tolist() == [16, 27]
