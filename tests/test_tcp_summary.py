"""parsers.tcp connection summaries, ids, closing, history and orientation flips."""

from __future__ import annotations

import dataclasses

import numpy as np
from tcp_builders import Flow, analyze, concat_batches

from parsers.records import TO_CLIENT, TO_SERVER, RttSample, TcpEvent
from parsers.tcp import TcpAnalyzer, flip_event, flip_history, flip_rtt_sample, flip_summary


def _conversation(**kw) -> Flow:
    f = Flow(**kw).handshake()
    f.c(1, 1, "AP", b"GET")
    f.s(1, 4, "AP", b"response")
    f.c(4, 9, "A")
    return f


def test_conn_id_is_stable_across_runs_and_batching():
    ids = {analyze(_conversation().batch(), batch_size=bs).summary().conn_id for bs in (1, 2, None)}
    assert len(ids) == 1
    other = analyze(_conversation(t0_ns=1_700_000_000_000_000_001).batch()).summary().conn_id
    assert other not in ids


def test_summary_fields():
    s = analyze(_conversation().batch()).summary()
    assert (s.client_addr, s.client_port, s.server_addr, s.server_port) == (
        "10.0.0.1",
        40000,
        "10.0.0.2",
        50051,
    )
    assert s.ip_version == 4 and s.start_ns < s.end_ns
    assert s.packets == (4, 2) and s.bytes == (3, 8)
    assert (
        s.retransmissions
        == s.loss_bursts
        == s.out_of_order
        == s.zero_windows
        == s.capture_loss_bytes
        == (0, 0)
    )
    v6 = analyze(
        _conversation(client=("2001:db8::1", 41000), server=("2001:db8::2", 443)).batch()
    ).summary()
    assert (v6.client_addr, v6.server_addr, v6.ip_version) == ("2001:db8::1", "2001:db8::2", 6)


def test_flip_summary_event_and_sample():
    s = analyze(_conversation().batch()).summary()
    s = dataclasses.replace(s, retransmissions=(1, 2), zero_windows=(3, 0), history="^~ShADdTw")
    f = flip_summary(s, client_known=True)
    assert (f.client_port, f.server_port, f.client_addr) == (50051, 40000, "10.0.0.2")
    assert f.packets == (2, 4) and f.bytes == (8, 3) and f.retransmissions == (2, 1)
    assert f.zero_windows == (0, 3) and f.history == "^~sHadDtW" and f.client_known
    assert f.ack_progress[TO_SERVER][1].tolist() == s.ack_progress[TO_CLIENT][1].tolist()
    back = flip_summary(f, client_known=s.client_known)
    assert dataclasses.replace(back, ack_progress=None) == dataclasses.replace(s, ack_progress=None)
    assert flip_history("SHad^") == "shAD^"
    e = TcpEvent(1, 2, TO_SERVER, "dup_ack", 5, 0, 7)
    assert flip_event(e).direction == TO_CLIENT and e.direction == TO_SERVER
    assert flip_rtt_sample(RttSample(1, 2, TO_CLIENT, 1.5, "tsecr")).direction == TO_SERVER


def test_flip_connection_live():
    f = Flow(client=("10.0.0.1", 3000), server=("10.0.0.2", 41000))  # no SYN: guessed wrong
    f.c(1, 1, "AP", b"PRI * HTTP/2.0")  # the real client happens to use port 3000
    f.s(1, 15, "A")
    an = TcpAnalyzer()
    first = an.feed(f.batch())
    assert first[0].direction == TO_CLIENT and an.connection_info(1) == (41000, 3000)
    an.flip_connection(1)
    assert an.connection_info(1) == (3000, 41000)
    g = Flow(client=("10.0.0.1", 3000), server=("10.0.0.2", 41000), t0_ns=f.t0_ns + 10**9)
    g.c(15, 1, "AP", b"more")
    later = an.feed(g.batch())
    assert [(c.direction, c.stream_offset) for c in later] == [(TO_SERVER, 14)]
    (s,) = an.finish()
    assert s.client_port == 3000 and s.client_known and s.history.startswith("^~")
    assert s.packets == (2, 1) and s.bytes == (18, 0)


def test_fin_both_ways_and_acked_closes_in_feed():
    f = _conversation()
    f.c(4, 9, "AF")
    f.s(9, 5, "AF")
    f.c(5, 10, "A")
    an = TcpAnalyzer()
    an.feed(f.batch())
    (s,) = an.take_closed()
    assert s.history == "ShADdFf"
    assert an.connection_info(s.conn_key) == (40000, 50051)
    assert an.ack_progress(s.conn_key, TO_SERVER)[0].size == 0  # forgotten; the summary has it
    assert s.ack_progress[TO_SERVER][1].tolist() == [3]


def test_fin_without_final_ack_lingers_one_second_and_idle_close():
    a = _conversation()
    a.c(4, 9, "AF")
    a.s(9, 5, "AF")  # the last ACK was not captured
    b = _conversation(client=("10.0.0.3", 40001), t0_ns=a.t0_ns + 500_000_000)
    c = _conversation(client=("10.0.0.4", 40002), t0_ns=a.t0_ns + 3_000_000_000)
    an = TcpAnalyzer()
    an.feed(a.batch())
    assert an.take_closed() == []
    an.feed(b.batch())
    assert an.take_closed() == []  # 0.5 s later: still lingering
    an.feed(c.batch())
    closed = an.take_closed(idle_ns=2_000_000_000)
    assert sorted(s.client_port for s in closed) == [40000, 40001]
    assert [s.client_port for s in an.finish()] == [40002]


def test_history_repeats_at_powers_of_ten():
    f = Flow().handshake()
    for _ in range(12):
        f.c(1, 1, "A", 10, dt_us=300_000)  # 12 timeouts of the same segment
    f.s(1, 11, "A")
    s = analyze(f.batch()).summary()
    assert s.history == "ShADTTa" and s.retransmissions == (11, 0)


def test_mixed_batches_of_many_connections():
    flows = [
        _conversation(client=("10.0.0.1", 40000 + i), t0_ns=Flow.t0_ns + i * 50_000)
        for i in range(30)
    ]
    rows = concat_batches([f.batch() for f in flows])
    order = np.argsort(rows.ts_ns, kind="stable")
    from tcp_builders import _COLS, SegmentBatch

    b = SegmentBatch(**{k: getattr(rows, k)[order] for k in _COLS}, buf=rows.buf, sack={})
    r = analyze(b, batch_size=13)
    assert len(r.summaries) == 30
    assert {r.data(TO_CLIENT, s.conn_key) for s in r.summaries} == {b"response"}
    assert [s.client_port for s in sorted(r.summaries, key=lambda s: s.conn_key)] == list(
        range(40000, 40030)
    )


def test_flow_hash_collisions_fall_back_to_exact_grouping(monkeypatch):
    from parsers.tcp import _flows

    flows = [_conversation(client=("10.0.0.1", 40000 + i)) for i in range(5)]
    b = concat_batches([f.batch() for f in flows])
    expected = analyze(b)
    monkeypatch.setattr(_flows, "_mix", lambda x: x & np.uint64(0))  # every flow hashes to 0
    collided = analyze(b)
    assert len(collided.summaries) == 5
    assert [(c.conn_key, c.direction, c.data) for c in collided.chunks] == [
        (c.conn_key, c.direction, c.data) for c in expected.chunks
    ]


def test_ack_logs_of_many_connections_keep_every_ack_in_little_room():
    """A connection direction's ACK log (its ACK progress) keeps the ACKs not pruned, in
    order, through appends, batch extends, prunes and growth; and a log holding a few
    ACKs holds little room: with 10,000 open connections, room for 256 ACKs per log was
    80 MB of a 1M-packet capture's peak."""
    import tracemalloc

    from parsers.tcp._logs import AckLog

    rng = np.random.default_rng(11)
    log, ref = AckLog(), []
    t = off = 0
    for _ in range(3000):
        step = rng.integers(0, 4)
        if step == 0:
            t, off = t + int(rng.integers(1, 1000)), off + int(rng.integers(1, 1500))
            log.append(t, off)
            ref.append((t, off))
        elif step == 1:
            k = int(rng.integers(0, 40))
            ts = t + np.cumsum(rng.integers(1, 1000, k))
            offs = off + np.cumsum(rng.integers(1, 1500, k))
            log.extend(ts, offs)
            ref += list(zip(ts.tolist(), offs.tolist(), strict=True))
            if k:
                t, off = int(ts[-1]), int(offs[-1])
        elif step == 2 and ref:
            below = ref[int(rng.integers(0, len(ref)))][1]
            log.prune(below)
            ref = [(a, o) for a, o in ref if o >= below]
        ts, offs = log.arrays()
        assert list(zip(ts.tolist(), offs.tolist(), strict=True)) == ref

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    logs = []
    for i in range(1000):  # the ACK logs of 1,000 connection directions, 3 ACKs each
        a = AckLog()
        a.extend(np.array([i, i + 1, i + 2]), np.array([100, 200, 300]))
        logs.append(a)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert all(a.arrays()[1].tolist() == [100, 200, 300] for a in logs)
    assert held < 2_000_000, f"{held:,} bytes for 1,000 logs of 3 ACKs"  # 4.8 MB with room for 256
