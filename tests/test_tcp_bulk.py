"""The bulk (numpy) path must give exactly what the per-packet path gives."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from shared_paths import CAPTURES
from tcp_builders import analyze, batches_of, concat_batches, decode_file, slice_batch

from parsers.records import SegmentBatch
from parsers.tcp import _analyzer, _fast, _flows
from parsers.tcp._limits import (
    DSACK_GRACE_NS,
    DUP_WINDOW_IPID_NS,
    DUP_WINDOW_NOID_NS,
    PENDING_RETX_NS,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_tcp import synth  # noqa: E402

DUP_WINDOWS = (DUP_WINDOW_IPID_NS, DUP_WINDOW_NOID_NS)
NO_PENDING = ([], None, PENDING_RETX_NS, DSACK_GRACE_NS)  # no retransmission waits for a verdict


def _norm(r):
    chunks = {}
    for c in r.chunks:
        chunks.setdefault((c.conn_key, c.direction), []).append(
            (c.data, c.ts_ns, c.frame_no, c.stream_offset, c.gap_before)
        )
    events = sorted(dataclasses.astuple(e) for e in r.events)
    rtts = sorted(dataclasses.astuple(s) for s in r.rtts)
    sums = []
    for s in sorted(r.summaries, key=lambda s: s.conn_key):
        acks = [a.tolist() for p in s.ack_progress for a in p]
        sums.append((dataclasses.replace(s, ack_progress=None), acks))
    return chunks, events, rtts, sums


def _both_ways(monkeypatch, batches, batch_size=None):
    bulk = analyze(batches, batch_size=batch_size)
    with monkeypatch.context() as m:
        m.setattr(_analyzer, "FAST_MIN_ROWS", 10**9)
        per_packet = analyze(batches, batch_size=batch_size)
    assert per_packet.an.stats["fast_rows"] == 0
    return bulk, per_packet


CAPTURE_NAMES = sorted(p.name for p in CAPTURES.glob("*.pcap*")) if CAPTURES.is_dir() else []


@pytest.mark.skipif(not CAPTURE_NAMES, reason="captures not available")
def test_real_captures_same_result_both_paths(monkeypatch):
    fast_rows = 0
    for name in CAPTURE_NAMES:
        batches = decode_file(CAPTURES / name)
        bulk, per_packet = _both_ways(monkeypatch, batches)
        assert _norm(bulk) == _norm(per_packet), name
        fast_rows += bulk.an.stats["fast_rows"]
        small = analyze(concat_batches(batches), batch_size=29)
        assert _norm(small) == _norm(bulk), name
    assert fast_rows > 4000  # the bulk path did take part


@pytest.mark.parametrize("batch_size", [4096, 997])
def test_synthetic_traffic_same_result_both_paths(monkeypatch, batch_size):
    b = synth(30_000, 3)
    bulk, per_packet = _both_ways(monkeypatch, [b], batch_size=batch_size)
    assert _norm(bulk) == _norm(per_packet)
    st = bulk.an.stats
    assert st["fast_rows"] > 0.95 * st["segments"]
    # the synthetic losses: a hole upstream, SACKed dup ACKs, the retransmission
    k = bulk.kinds()
    assert k["lost_segment"] == k["fast_retransmission"] > 0 and set(k) == {
        "lost_segment",
        "fast_retransmission",
        "dup_ack",
    }
    assert {r.source for r in bulk.rtts} == {"handshake", "data_ack", "tsecr"}
    for s in bulk.summaries:
        assert s.retransmissions[0] == 0 and s.loss_bursts[1] == s.retransmissions[1] > 0
        assert len(bulk.data(1, s.conn_key)) == s.bytes[1]


def test_one_row_batches_through_the_bulk_path(monkeypatch):
    """Re-cut batches make the bulk path start and stop at every possible row."""
    b = synth(3_000, 2)
    whole = analyze(b)
    for size in (25, 48, 50, 64):
        assert _norm(analyze(batches_of(b, size))) == _norm(whole)


@pytest.mark.skipif(not CAPTURE_NAMES, reason="captures not available")
def test_bulk_run_right_after_the_handshake(monkeypatch):
    """A batch that ends with the handshake: the next one starts in bulk at the first
    data, before either side's IP id is known (the SYNs do not set it) and before any
    history letter of data or ACKs. Both count as the per-packet path counts them: the
    letters in the order of their first packets, the IP id steps from the second packet."""
    checked = 0
    for name in CAPTURE_NAMES:
        whole = concat_batches(decode_file(CAPTURES / name))
        if len(whole) < 4 * _analyzer.FAST_MIN_ROWS:
            continue
        bulk, per_packet = _both_ways(monkeypatch, [slice_batch(whole, 0, 3), slice_batch(whole, 3, len(whole))])
        assert _norm(bulk) == _norm(per_packet), name
        checked += bulk.an.stats["fast_rows"] > 0
    assert checked >= 8  # (9 of the shared captures)


def _perturbed(seed: int, damage: float = 1.0):
    """A clean bidirectional exchange, then random capture/network damage: drops,
    duplicates, reordering, snaplen cuts, bit-flipped sequence numbers (not in the
    handshake: a corrupt SYN/ACK sequence number is trusted)."""
    import random

    from tcp_builders import Flow, make_batch

    rnd = random.Random(seed)
    f = Flow(cisn=rnd.randrange(2**32), sisn=rnd.randrange(2**32)).handshake(
        ws=rnd.choice([-1, 3]), tsval=10
    )
    tv = 11
    cs = ss = 1
    for i in range(120):
        tv += rnd.choice([0, 1])
        if rnd.random() < 0.2:
            n = rnd.randrange(1, 300)
            f.c(cs, ss, "AP", n, tsval=tv, tsecr=tv + 5000)
            cs += n
        n = rnd.choice([1448, 1448, 500, 77])
        win = rnd.choice([0, 100]) if rnd.random() < 0.5 * damage else 65535
        f.s(ss, cs, "A", n, tsval=tv + 5000, tsecr=tv, win=win)
        ss += n
        if i % 2:
            sack = [(ss - 3000, ss)] if rnd.random() < 0.1 else None
            f.c(cs, ss - rnd.choice([0, 0, 0, 1448]), "A", tsval=tv, tsecr=tv + 5000, sack=sack)
    f.c(cs, ss, "AF", tsval=tv, tsecr=tv + 5000)
    f.s(ss, cs + 1, "AF", tsval=tv + 5000, tsecr=tv)
    rows = []
    for k, r in enumerate(f.rows):
        x = rnd.random() / damage
        if x < 0.05:
            continue  # dropped (before the capture point, or by the capture)
        rows.append(dict(r))
        if x < 0.10:
            rows.append(dict(r))  # duplicated
        elif x < 0.13 and r["payload"]:
            rows[-1]["payload_wire_len"] = len(r["payload"])
            rows[-1]["payload"] = r["payload"][: len(r["payload"]) // 2]  # snaplen cut
        elif x < 0.14 and k > 2:
            rows[-1]["seq"] ^= 1 << rnd.randrange(32)  # garbage
    for _ in range(int(10 * damage)):  # local reordering
        i = rnd.randrange(len(rows) - 1)
        rows[i], rows[i + 1] = rows[i + 1], rows[i]
    t = rows[0]["ts_ns"]
    for r in rows:  # capture order = time order
        t = max(t + 1000, r["ts_ns"])
        r["ts_ns"] = t
    return make_batch(rows)


@pytest.mark.parametrize("seed", range(16))
def test_damaged_captures_same_result_both_paths(monkeypatch, seed):
    b = _perturbed(seed, damage=1.0 if seed < 8 else 0.1)
    bulk, per_packet = _both_ways(monkeypatch, [b], batch_size=40 + seed)
    assert _norm(bulk) == _norm(per_packet)
    if seed >= 8:
        assert bulk.an.stats["fast_rows"] > 0
    pos = {}
    for c in bulk.chunks:
        k = (c.conn_key, c.direction)
        if k in pos:
            assert c.stream_offset == pos[k] + c.gap_before
        pos[k] = c.stream_offset + len(c.data)
    for s in bulk.summaries:
        for d in (0, 1):
            ts, off = s.ack_progress[d]
            assert (np.diff(ts) >= 0).all() and (np.diff(off) > 0).all()


def _exact(r):
    """Everything a run produced, in the order it was produced."""
    chunks = [dataclasses.astuple(c) for c in r.chunks]
    events = [dataclasses.astuple(e) for e in r.events]
    rtts = [dataclasses.astuple(s) for s in r.rtts]
    sums = [(dataclasses.replace(s, ack_progress=None), [a.tolist() for p in s.ack_progress for a in p])
            for s in r.summaries]  # fmt: skip
    return chunks, events, rtts, sums, r.an.stats


@pytest.mark.skipif(_fast._speedups is None, reason="C extension not built (pip install -e .)")
@pytest.mark.parametrize("case", ["synth", "real", *(f"damaged{i}" for i in range(16))])
def test_c_bulk_path_same_as_numpy(monkeypatch, case):
    """_speedups.fast_run gives the numpy bulk path's results. It also takes the ACKs with
    SACK blocks and the duplicate ACKs that the numpy path leaves to the per-packet path:
    only the order of the results and how many rows went in bulk may differ."""
    if case == "synth":
        cases = [([synth(20_000, 3)], 997), ([synth(3_000, 2)], 50)]
    elif case == "real":
        cases = [(decode_file(CAPTURES / name), None) for name in CAPTURE_NAMES]
    else:
        seed = int(case[7:])
        cases = [([_perturbed(seed, damage=1.0 if seed < 8 else 0.1)], 40 + seed)]
    for batches, size in cases:
        fast = analyze(batches, batch_size=size)
        with monkeypatch.context() as m:
            m.setattr(_fast, "_speedups", None)
            numpy = analyze(batches, batch_size=size)
        _assert_same_but_more_in_bulk(fast, numpy)


def _assert_same_but_more_in_bulk(fast, numpy) -> None:
    assert _norm(fast) == _norm(numpy)
    c_stats, np_stats = dict(fast.an.stats), dict(numpy.an.stats)
    assert c_stats.pop("fast_rows") >= np_stats.pop("fast_rows")
    assert c_stats.pop("slow_rows") <= np_stats.pop("slow_rows")
    assert c_stats == np_stats


@pytest.mark.skipif(_flows._speedups is None, reason="C extension not built (pip install -e .)")
@pytest.mark.parametrize("nflows", [1, 7, 3000])
def test_c_flow_grouping_same_as_numpy(monkeypatch, nflows):
    """The C hash-table grouping finds the numpy grouping's flows, orientation and keys
    (both directions of a flow together; near-identical tuples apart)."""
    import random

    rnd = random.Random(nflows)
    ends = [(rnd.choice([0, 0x20010DB8 << 32]), rnd.choice([1, 2, 0xFFFF0A000001]), rnd.choice([80, 443, 50051, 40000]))
            for _ in range(nflows * 2)]  # fmt: skip
    n = 5000
    cols = {k: [] for k in ("src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport")}
    for _ in range(n):
        f = rnd.randrange(nflows)
        a, z = ends[2 * f], ends[2 * f + 1]
        if rnd.random() < 0.5:
            a, z = z, a
        for k, v in zip(cols, (a[0], a[1], z[0], z[1], a[2], z[2]), strict=True):
            cols[k].append(v)
    b = _fast_batch(n, cols)
    got = _flows.group_flows(b)
    with monkeypatch.context() as m:
        m.setattr(_flows, "_speedups", None)
        want = _flows.group_flows(b)

    def flows(g):
        groups = [g.order[a:z].tolist() for a, z in zip(g.starts.tolist(), g.stops.tolist(), strict=True)]
        return sorted(groups), g.swap.tolist(), [g.key(r) for r in range(n)]

    assert flows(got) == flows(want)
    firsts = got.order[got.starts].tolist()
    assert firsts == sorted(firsts)  # C groups come in order of their first row


def _fast_batch(n: int, cols: dict) -> SegmentBatch:
    z = np.zeros(n, np.int64)
    return SegmentBatch(
        frame_no=z, ts_ns=z, ip_version=np.full(n, 4, np.uint8),
        src_hi=np.array(cols["src_hi"], np.uint64), src_lo=np.array(cols["src_lo"], np.uint64),
        dst_hi=np.array(cols["dst_hi"], np.uint64), dst_lo=np.array(cols["dst_lo"], np.uint64),
        sport=np.array(cols["sport"], np.uint16), dport=np.array(cols["dport"], np.uint16),
        seq=np.zeros(n, np.uint32), ack=np.zeros(n, np.uint32), flags=np.zeros(n, np.uint8),
        window=np.zeros(n, np.uint16), payload_off=z, payload_len=np.zeros(n, np.int32),
        payload_wire_len=np.zeros(n, np.int32), has_ts=np.zeros(n, bool),
        ts_val=np.zeros(n, np.uint32), ts_ecr=np.zeros(n, np.uint32), wscale=np.zeros(n, np.int8),
        mss=np.zeros(n, np.int32), ip_id=np.zeros(n, np.int32), buf=np.zeros(0, np.uint8),
    )  # fmt: skip


@pytest.mark.skipif(_fast._speedups is None, reason="C extension not built (pip install -e .)")
def test_c_records_refuse_bad_input():
    """pack_rows wants a permutation of the rows, room for them and MSS values of 16 bits
    (or -1); fast_run a record range inside them, and the logs as lists of ints."""
    sp = _fast._speedups
    n = 4
    b = _fast_batch(n, {k: [0] * n for k in ("src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport")})
    swap = np.zeros(n, bool)

    def cols(order, sack=None):
        arrays = (b.flags, b.payload_wire_len, b.payload_len, b.window, sack, swap, b.seq, b.ack,
                  b.ts_ns, b.frame_no, b.has_ts, b.ts_val, b.ts_ecr, b.ip_id, b.payload_off,
                  np.array(order, np.int64), b.wscale, b.mss, b.ip_version)  # fmt: skip
        return tuple(None if a is None else np.ascontiguousarray(a, t) for a, t in zip(arrays, _fast._C_TYPES, strict=True))

    packed = bytearray(64 * n)
    sp.pack_rows(cols([3, 1, 2, 0]), packed)
    for order in ([0, 1, 2, 2], [0, 1, 2, 4], [-1, 1, 2, 3], [0, 1, 2]):
        with pytest.raises(ValueError):
            sp.pack_rows(cols(order), packed)
    with pytest.raises(ValueError):
        sp.pack_rows(cols([0, 1, 2, 3]), bytearray(64 * n - 1))  # no room
    mss = b.mss
    b.mss = np.array([0, 65536, 0, 0], np.int32)  # more than the option's 16 bits hold
    with pytest.raises(ValueError):
        sp.pack_rows(cols([0, 1, 2, 3]), packed)
    b.mss = mss
    sp.pack_rows(cols([0, 1, 2, 3]), packed)
    state = _fast._c_state(_fast.Dir(0))
    for at, count in ((3, 2), (-1, 1), (0, 5)):
        with pytest.raises(ValueError):
            sp.fast_run(packed, at, count, True, state, state, 16, 0, None, DUP_WINDOWS, NO_PENDING)
    assert sp.fast_run(packed, 0, 4, True, state, state, 16, 0, None, DUP_WINDOWS, NO_PENDING)[0] == 0  # SYN-less, ACK-less rows
    d = _fast.Dir(0)
    d.segs.set_arrays(np.array([0, 10]), np.array([20, 15]), np.array([1, 2]))  # ends out of order
    assert sp.fast_run(packed, 0, 4, True, _fast._c_state(d), state, 16, 0, None, DUP_WINDOWS, NO_PENDING) is None
    # the logs go as lists of ints, with the index their outstanding part starts at
    st = list(_fast._c_state(d))
    for position, value, error in ((15, [0, "x"], TypeError), (29, 3, ValueError), (29, -1, ValueError)):
        bad = list(st)
        bad[position] = value
        with pytest.raises(error):
            sp.fast_run(packed, 0, 4, True, tuple(bad), state, 16, 0, None, DUP_WINDOWS, NO_PENDING)
    # SACK blocks: a dict of lists of (left, right) by row, read for the flagged rows
    b.flags[:] = 0x10  # pure ACKs at the next sequence number of sides whose base is known
    b.window[:] = 100
    packed_sack = bytearray(64 * n)
    sp.pack_rows(cols([0, 1, 2, 3], sack=np.ones(n, bool)), packed_sack)
    known = _fast.Dir(0)
    known.base = 0
    ks = _fast._c_state(known)
    assert sp.fast_run(packed_sack, 0, 4, True, ks, ks, 16, 0, {}, DUP_WINDOWS, NO_PENDING)[0] == 4
    for sacks in ([], {0: (1, 2)}, {0: [(1, "x")]}, {0: [(1,)]}):
        with pytest.raises(TypeError):
            sp.fast_run(packed_sack, 0, 4, True, ks, ks, 16, 0, sacks, DUP_WINDOWS, NO_PENDING)
    # retransmissions waiting for a verdict: (sent, covered or -1, start, TSval or None, direction)
    waiting = [(1, -1, 0, None, 0), (1, -1, 0, 5, 1)]
    assert sp.fast_run(packed_sack, 0, 4, True, ks, ks, 16, 0, {}, DUP_WINDOWS, (waiting, *NO_PENDING[1:]))[0] == 4
    for bad_one, error in (((1, -1, 0, None, 2), ValueError), ((1, -1, 0, "x", 0), TypeError), ((1, -1, 0), TypeError)):
        with pytest.raises(error):
            sp.fast_run(packed_sack, 0, 4, True, ks, ks, 16, 0, {}, DUP_WINDOWS, ([bad_one], *NO_PENDING[1:]))


@pytest.mark.parametrize("ws", [7, 40])
def test_bogus_window_scale_takes_the_numpy_bulk_path(monkeypatch, ws):
    """Window scales above RFC 7323's 14 leave the C run (it keeps values in int64) for
    the numpy one; either way the result is the per-packet path's."""
    from tcp_builders import Flow, make_batch

    f = Flow(cisn=5, sisn=9).handshake(ws=ws, tsval=10)
    cs = ss = 1
    for i in range(200):
        f.s(ss, cs, "A", 1000, tsval=11 + i, tsecr=10 + i, win=3)
        ss += 1000
        f.c(cs, ss, "A", tsval=10 + i, tsecr=11 + i, win=500)
    b = make_batch(f.rows)
    calls = []
    if _fast._speedups is not None:
        monkeypatch.setattr(_fast.BulkPath, "_fast_c", lambda self, *a: calls.append(1) or (0, 0, 0))
    bulk, per_packet = _both_ways(monkeypatch, [b])
    assert bool(calls) == (_fast._speedups is not None and ws <= 14)
    if ws > 14:
        assert _norm(bulk) == _norm(per_packet) and bulk.an.stats["fast_rows"] > 300


@pytest.mark.parametrize("size", [None, 100, 250])
def test_ip_id_gaps_cut_runs_alike_in_c_and_numpy(monkeypatch, size):
    """The bulk run stops before a packet whose IP id skips a few numbers while its side
    numbers packets one by one (that packet records the loss upstream of the capture
    point), and makes no run when such a packet comes within FAST_MIN_ROWS rows: the C
    run (which checks the IP ids itself) and the numpy one agree with each other and with
    the per-packet path, gaps near the start of a run, after a stop and far from both."""
    from tcp_builders import Flow, make_batch

    f = Flow(cisn=5, sisn=9).handshake(tsval=10)
    cs = ss = 1
    sid, cid = 5000, 100
    skips = {40, 41, 90, 97, 150, 230, 231, 232, 300}
    for i in range(400):
        sid = (sid + (3 if i in skips else 1)) & 0xFFFF
        f.s(ss, cs, "A", 1000, tsval=11 + i, tsecr=10 + i, ip_id=sid)
        ss += 1000
        if i % 2:
            cid = (cid + (2 if i % 50 == 7 else 1)) & 0xFFFF
            f.c(cs, ss, "A", tsval=10 + i, tsecr=11 + i, ip_id=cid)
        if i == 120:  # a request from the client
            f.c(cs, ss, "A", 50, tsval=10 + i, tsecr=11 + i, ip_id=(cid := cid + 1))
            cs += 50
    b = make_batch(f.rows)
    fast = analyze([b], batch_size=size)
    assert any(e.kind == "upstream_loss" for e in fast.events)
    if _fast._speedups is not None:
        with monkeypatch.context() as m:
            m.setattr(_fast, "_speedups", None)
            numpy = analyze([b], batch_size=size)
        assert _exact(fast) == _exact(numpy)
    bulk, per_packet = _both_ways(monkeypatch, [b], batch_size=size)
    assert _norm(bulk) == _norm(per_packet)
    assert bulk.an.stats["fast_rows"] > 300


def _lossy_long_rtt_flow(eifel: int | None = None, dup_sacks: bool = False):
    """A server streams 1,000-byte segments every millisecond to a client 80 ms away (the
    capture sits by the server, 0.5 ms from it): the full RTT makes the D-SACK grace
    4 RTTs, 322 ms, not 200. Segment 150 is lost past the capture point: the client's
    duplicate ACKs carry SACK blocks, the server fast-retransmits it, and the ACK that
    covers it echoes the retransmission (a genuine loss: its verdict falls 322 ms later,
    mid-stream). Segment 600 is held up 100 ms past the capture point: it is
    retransmitted, covered, and then the late original brings a D-SACK (spurious).
    ``eifel``: that segment is held up 60 ms, long enough to be fast-retransmitted but
    not for its resend to arrive first: the ACK that covers it echoes the original's
    TSval (spurious by the Eifel check), the resend brings a D-SACK. ``dup_sacks``: each
    ACK with SACK blocks is captured twice, 2 us apart."""
    from tcp_builders import Flow

    f = Flow().handshake(ws=7, tsval=1)  # (a scaled window: 80 segments in flight fit)
    start_us = f._t_us + 1000
    rows: list[tuple[int, int, dict]] = []  # (capture time, order, packet)
    n, lost, late = 1000, 150, 600
    held = {late: 100_000, **({eifel: 60_000} if eifel is not None else {})}
    sent_us = {}
    for i in range(n):
        sent_us[i] = start_us + 1000 * i
        rows.append((sent_us[i], len(rows), dict(side=1, seq=1 + 1000 * i, ack=1, flags="A", data=1000, tsval=10 + i)))
    # the client: each segment arrives 40 ms after the capture saw it, its ACK is seen 40 ms later
    arrivals = {i: sent_us[i] + 40_000 + held.get(i, 0) for i in range(n) if i != lost}
    dups = dict.fromkeys((lost, *held), 0)
    got: set[int] = set()
    nxt = 0
    retx_at = {}
    events = sorted((t, i) for i, t in arrivals.items())
    k = 0
    while k < len(events):
        t, i = events[k]
        k += 1
        dsack = i in got
        tsval = 10 + i if i not in retx_at or (i == eifel and not dsack) else 5000 + i
        got.add(i)
        while nxt in got:
            nxt += 1
        blocks = []
        if dsack:
            blocks.append((1 + 1000 * i, 1 + 1000 * (i + 1)))
        above = sorted(j for j in got if j > nxt)
        if above:
            blocks.append((1 + 1000 * above[0], 1 + 1000 * (above[-1] + 1)))
        hole = nxt if nxt in dups else None
        rows.append((t + 40_000, len(rows), dict(side=0, seq=1, ack=1 + 1000 * nxt, flags="A", tsval=9 + i,
                                                  tsecr=tsval, sack=blocks or None)))  # fmt: skip
        if hole is not None and above and not dsack:
            dups[hole] += 1
            if dups[hole] == 3:  # the server's fast retransmission, seen 0.5 ms after the third dup ACK
                rt = t + 40_000 + 500
                retx_at[hole] = rt
                rows.append((rt, len(rows), dict(side=1, seq=1 + 1000 * hole, ack=1, flags="A", data=1000,
                                                  tsval=5000 + hole)))  # fmt: skip
                events.append((rt + 40_000, hole))
                events.sort()
    for t_us, _, p in sorted(rows):
        side, twice = p.pop("side"), dup_sacks and p.get("sack") is not None
        (f.c if side == 0 else f.s)(p.pop("seq"), p.pop("ack"), p.pop("flags"), p.pop("data", b""), t_us=t_us, **p)
        if twice:
            f.dup(dt_us=2)
    return f.batch()


def _verdicts_by_batch(b, size, pure: bool, monkeypatch, per_packet: bool = False):
    """(batch, kind, offset) of every retransmission event, by the batch after which it was
    handed out: a verdict falls on the packet it falls on, in whichever batch that is."""
    from parsers.tcp import TcpAnalyzer

    with monkeypatch.context() as m:
        if pure:
            m.setattr(_fast, "_speedups", None)
        if per_packet:
            m.setattr(_analyzer, "FAST_MIN_ROWS", 10**9)
        an = TcpAnalyzer()
        out = []
        for i, part in enumerate(batches_of(b, size)):
            an.feed(part)
            ev, _ = an.take_events()
            out += [(i, e.kind, e.seq) for e in ev if "retransmission" in e.kind]
        an.finish()
        out += [("end", e.kind, e.seq) for e in an.take_events()[0] if "retransmission" in e.kind]
        return sorted(out, key=str), an.stats


@pytest.mark.skipif(_fast._speedups is None, reason="C extension not built (pip install -e .)")
def test_c_runs_take_sack_blocks_and_give_each_verdict_on_its_packet(monkeypatch):
    """The C run takes ACKs with SACK blocks and duplicate ACKs, ends at a D-SACK, and
    runs while an ACKed retransmission waits for its verdict, which it gives on the very
    packet the per-packet path gives it on (the grace depends on the smoothed RTTs the
    run's own samples move): the verdicts fall in the same batches as packet by packet."""
    b = _lossy_long_rtt_flow()
    bulk, per_packet = _both_ways(monkeypatch, [b])
    assert _norm(bulk) == _norm(per_packet)
    kinds = bulk.kinds()
    assert kinds["dup_ack"] >= 6 and kinds["fast_retransmission"] == 1 and kinds["spurious_retransmission"] == 1
    assert sum(len(s) for s in b.sack.values()) > 100  # SACK blocks on most of the ACKs after each hole
    c_rows = bulk.an.stats["fast_rows"]
    with monkeypatch.context() as m:
        m.setattr(_fast, "_speedups", None)
        numpy = analyze([b])
    assert _norm(numpy) == _norm(bulk)
    assert c_rows > numpy.an.stats["fast_rows"] + 200  # the numpy run waits from 200 ms to the verdict
    for size in (61, 64, 97, 250, 1000):
        expected, _ = _verdicts_by_batch(b, size, pure=False, monkeypatch=monkeypatch, per_packet=True)
        got, stats = _verdicts_by_batch(b, size, pure=False, monkeypatch=monkeypatch)
        assert got == expected, size
        assert stats["fast_rows"] > 0.75 * stats["segments"], size
        assert _verdicts_by_batch(b, size, pure=True, monkeypatch=monkeypatch)[0] == expected, size


@pytest.mark.skipif(_fast._speedups is None, reason="C extension not built (pip install -e .)")
@pytest.mark.parametrize("size", [None, 61, 97, 250])
def test_capture_duplicates_of_sack_acks_alike_in_c_and_per_packet(monkeypatch, size):
    """A capture duplicate is known by its signature (IP ID, numbers, TSval, SACK blocks):
    the C run remembers the signatures of the last packets it takes and looks up those
    the per-packet path remembered, and the other way round, so the two must write them
    alike. Every ACK with SACK blocks captured twice: each second copy is one duplicate,
    whichever path took either copy (batch cuts put them on either side)."""
    b = _lossy_long_rtt_flow(dup_sacks=True)
    twice = sum(1 for i in range(1, len(b)) if b.ts_ns[i] - b.ts_ns[i - 1] == 2000 and i in b.sack)
    assert twice > 100
    bulk, per_packet = _both_ways(monkeypatch, [b], batch_size=size)
    assert _norm(bulk) == _norm(per_packet)
    assert bulk.an.stats["duplicates"] == per_packet.an.stats["duplicates"] == twice
    assert bulk.an.stats["fast_rows"] > 0


@pytest.mark.skipif(_fast._speedups is None, reason="C extension not built (pip install -e .)")
def test_c_runs_take_retransmissions_and_go_on_while_they_wait(monkeypatch):
    """A C run takes a retransmission of bytes the capture saw (its kind, loss burst,
    Karn's mark on the resent segments, its TSval) and the rows up to the ACK that covers
    it (which gives no data->ACK sample) and on. It ends only before the rows the
    per-packet path must decide: the two D-SACKs and the ACK that echoes a TSval older
    than the resend's (Eifel: spurious). Same results as packet by packet and as the numpy
    run (which waits per packet from each resend to its covering ACK)."""
    b = _lossy_long_rtt_flow(eifel=800)
    bulk, per_packet = _both_ways(monkeypatch, [b])
    assert _norm(bulk) == _norm(per_packet)
    retx = sorted((e.kind, e.seq) for e in bulk.events if "retransmission" in e.kind)
    assert retx == [("fast_retransmission", 150_000), ("spurious_retransmission", 600_000),
                    ("spurious_retransmission", 800_000)]  # fmt: skip
    with monkeypatch.context() as m:
        m.setattr(_fast, "_speedups", None)
        numpy = analyze([b])
    _assert_same_but_more_in_bulk(bulk, numpy)
    assert numpy.an.stats["slow_rows"] > 3 * 150
    # every stop of the C runs, by the row it stopped at
    real, stops = _fast._speedups.fast_run, []

    def fast_run(records, at, count, *args):
        ran = real(records, at, count, *args)
        if ran is not None and ran[0] < count:
            stops.append(at + ran[0])
        return ran

    with monkeypatch.context() as m:
        m.setattr(_fast._speedups, "fast_run", fast_run)
        again = analyze([b])
    assert _norm(again) == _norm(bulk)
    dsacks = sorted(r for r, blocks in b.sack.items() if blocks[0][1] <= int(b.ack[r]) - 1)  # (first block below the ACK)
    eifel = [r for r in range(len(b)) if int(b.ts_ecr[r]) == 810]
    assert len(dsacks) == 2 and len(eifel) == 1
    assert sorted(set(stops)) == sorted(dsacks + eifel[:1]), stops
    assert again.an.stats["slow_rows"] <= 8
    for size in (61, 97, 250):
        expected, _ = _verdicts_by_batch(b, size, pure=False, monkeypatch=monkeypatch, per_packet=True)
        assert _verdicts_by_batch(b, size, pure=False, monkeypatch=monkeypatch)[0] == expected, size


@pytest.mark.skipif(_fast._speedups is None, reason="C extension not built (pip install -e .)")
def test_realistic_connection_resends_same_in_c_and_per_packet(monkeypatch):
    """One connection of the realistic generator's capture (tests/data/tcp/README.md): its
    four fast retransmissions go through the C run, their kinds from the smoothed RTTs
    folded row by row as packet by packet (a run that folded its data->ACK samples before
    its TSecr ones made the second resend of the same bytes an RTO retransmission)."""
    batches = decode_file(ROOT / "tests" / "data" / "tcp" / "realistic_resends.pcap")
    bulk, per_packet = _both_ways(monkeypatch, batches)
    assert _norm(bulk) == _norm(per_packet)
    kinds = [e.kind for e in bulk.events if "retransmission" in e.kind]
    assert kinds.count("fast_retransmission") == 4 and len(kinds) == 4
    assert bulk.an.stats["slow_rows"] <= 3  # (the four resends are the C run's)


def _resend_with_the_newest_tsval():
    """A server streams 1,000-byte segments, each ACKed 0.5 ms later. Segment 100 is lost
    past the capture point; segments 101 (same TSval) and 102 (the next) reach the client,
    whose duplicate ACKs SACK them; the server resends 100 with 102's TSval (the same
    clock tick), so the TSval log's newest entry now starts at 100's offset (TsLog.add).
    The client's ACK of 100 and 101 echoes their TSval: Eifel makes the resend spurious,
    and, the resend's offset being below that ACK, the echo gives no TSecr sample."""
    from tcp_builders import Flow

    f = Flow().handshake(ws=7, tsval=1)
    t = f._t_us + 1000
    for i in range(100):
        f.s(1 + 1000 * i, 1, "A", 1000, t_us=t + 1000 * i, tsval=2000 + i)
        f.c(1, 1 + 1000 * (i + 1), "A", t_us=t + 1000 * i + 500, tsval=5 + i, tsecr=2000 + i)
    t += 100_000
    f.s(100_001, 1, "A", 1000, t_us=t, tsval=2200)  # lost past the capture point
    f.s(101_001, 1, "A", 1000, t_us=t + 100, tsval=2200)
    f.s(102_001, 1, "A", 1000, t_us=t + 900, tsval=2201)
    for k in range(3):
        f.c(1, 100_001, "A", t_us=t + 1000 + 10 * k, tsval=300, tsecr=2200, sack=[(101_001, 102_001 + 1000 * (k > 0))])
    f.s(100_001, 1, "A", 1000, t_us=t + 1200, tsval=2201)  # the resend, in 102's clock tick
    f.c(1, 102_001, "A", t_us=t + 1700, tsval=301, tsecr=2200)
    for i in range(103, 200):
        f.s(1 + 1000 * i, 1, "A", 1000, t_us=t + 1000 * (i - 100), tsval=2100 + i)
        f.c(1, 1 + 1000 * (i + 1), "A", t_us=t + 1000 * (i - 100) + 500, tsval=400 + i, tsecr=2100 + i)
    return f.batch()


@pytest.mark.skipif(_fast._speedups is None, reason="C extension not built (pip install -e .)")
def test_c_run_resend_in_the_newest_tsval_tick(monkeypatch):
    """A resend whose TSval equals the newest one lowers that TSval's first offset in the C
    run as TsLog.add does: the ACK that echoes the older TSval (Eifel: spurious, per
    packet) then gives no TSecr sample on either path."""
    b = _resend_with_the_newest_tsval()
    bulk, per_packet = _both_ways(monkeypatch, [b])
    assert _norm(bulk) == _norm(per_packet)
    retx = [(e.kind, e.seq) for e in bulk.events if "retransmission" in e.kind]
    assert retx == [("spurious_retransmission", 100_000)]
    echo_200 = [int(b.ts_ns[r]) for r in range(len(b)) if int(b.ts_ecr[r]) == 2200]
    assert len(echo_200) == 4  # three duplicate ACKs, then the ACK of 100 and 101
    tsecr_at = {s.ts_ns for s in bulk.rtts if s.source == "tsecr"}
    assert echo_200[-1] not in tsecr_at and int(b.ts_ns[-1]) in tsecr_at
    assert bulk.an.stats["slow_rows"] < 20  # (the resend is the C run's)


def test_a_resend_at_a_batch_start_keeps_its_ack_from_sampling(monkeypatch):
    """Karn across a batch cut (samples/flow_control): the server's segment at frame
    10238 is resent at 10243, and the client's ACK at 10244 covers it (with a D-SACK).
    Cut before the resend, the next batch's C run takes the resend alone (no new data,
    no ACK of that side) and the ACK goes packet by packet: the run's mark on the
    logged segment must reach the log, or that ACK gives a 9.8 ms RTT sample from the
    original's send time. Both paths give the samples of the uncut capture."""
    whole = concat_batches(decode_file(ROOT / "samples" / "flow_control" / "capture.pcap"))
    cut = int(np.flatnonzero(whole.frame_no == 10243)[0])
    bulk, per_packet = _both_ways(monkeypatch, [slice_batch(whole, 0, cut), slice_batch(whole, cut, len(whole))])
    assert bulk.an.stats["fast_rows"] > 0
    assert _norm(bulk) == _norm(per_packet) == _norm(analyze([whole]))
    ack_ts = int(whole.ts_ns[np.flatnonzero(whole.frame_no == 10244)[0]])
    assert not [s for s in bulk.rtts if getattr(s, "ts_ns", None) == ack_ts]
