"""The pipeline's column builders over the TCP layer's column records (RttRun,
ChunkRun) give what the one-object-per-row records give."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from ingest_reference import quantile, sent_totals

from parsers.records import (
    DIRECTION_NAMES,
    ChunkRun,
    PayloadChunk,
    RttRun,
    RttSample,
    expand_rtts,
    expand_runs,
)
from telemetry.ingest.columns import coded_strings as _coded_strings
from telemetry.ingest.columns import run_strings as _run_strings
from telemetry.ingest.rates import run_sent as _run_sent
from telemetry.ingest.tables import RTT_SOURCES, rtt_stats
from telemetry.ingest.tables import rtt_columns as _rtt_columns
from telemetry.store.parquet import TEXT


def test_rtt_columns_mix_runs_and_samples_in_order():
    items = [
        RttSample(5, 1, 0, 0.5, "handshake"),
        RttRun(1, 1, np.array([7, 9], np.int64), np.array([1.25, 2.5]), "data_ack"),
        RttSample(10, 1, 1, 3.0, "tsecr"),
        RttSample(11, 1, 0, 4.0, "data_ack"),
        RttRun(1, 0, np.array([12], np.int64), np.array([0.125]), "tsecr"),
    ]
    flat = expand_rtts(items)
    ts, rtt, direction, source = _rtt_columns(items)
    assert ts.tolist() == [s.ts_ns for s in flat] == [5, 7, 9, 10, 11, 12]
    assert rtt.tolist() == [s.rtt_ms for s in flat]
    for flip in (0, 1):
        assert _coded_strings(direction ^ flip, DIRECTION_NAMES).to_pylist() == [
            DIRECTION_NAMES[s.direction ^ flip] for s in flat
        ]
    assert _coded_strings(source, RTT_SOURCES).to_pylist() == [s.source for s in flat]


def test_rtt_columns_random_mixes_match_the_samples():
    """Runs (empty ones too) and single samples in any order and mix: the columns are
    the expanded samples', row by row."""
    import random

    rnd = random.Random(7)
    for _ in range(200):
        items: list = []
        t = 0
        for _ in range(rnd.randrange(0, 8)):
            if rnd.random() < 0.5:
                n = rnd.randrange(0, 5)
                ts = np.arange(t, t + n, dtype=np.int64)
                items.append(RttRun(1, rnd.randrange(2), ts, ts / 7.0, rnd.choice(RTT_SOURCES)))
                t += n
            else:
                items.append(RttSample(t, 1, rnd.randrange(2), t / 3.0, rnd.choice(RTT_SOURCES)))
                t += 1
        flat = expand_rtts(items)
        ts, rtt, direction, source = _rtt_columns(items)
        assert ts.tolist() == [s.ts_ns for s in flat]
        assert rtt.tolist() == [s.rtt_ms for s in flat]
        assert direction.tolist() == [s.direction for s in flat]
        assert [RTT_SOURCES[c] for c in source.tolist()] == [s.source for s in flat]


def test_rtt_stats_are_numpys_percentiles_bit_for_bit():
    """The connections' RTT min/p50/p99 are np.percentile's (linear method), exactly:
    few and many samples, ties, tiny and wide values, one sample."""
    rng = np.random.default_rng(5)
    for trial in range(3000):
        n = int(rng.integers(1, 12)) if trial % 3 == 0 else int(rng.integers(1, 5000))
        values = (
            rng.exponential(5.0, n),
            np.round(rng.normal(20.0, 3.0, n), 3),
            rng.integers(0, 4, n).astype(np.float64),
            rng.random(n) * 1e-3 + 1e4 * (rng.random(n) < 0.01),
        )[trial % 4]
        want = np.percentile(values, (0, 50, 99)).tolist()
        assert rtt_stats(values.copy()) == want, (n, trial)


def _as_text(table: pa.Table) -> pa.Table:
    """The table's values, whatever codes its text columns use."""
    return pa.table([c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in table.columns],
                    names=table.column_names)


def test_coded_strings():
    import random

    rnd = random.Random(2)
    for names in (("to_server", "to_client"), ("new", "retransmission", "", "spurious_retransmission"), ("é",)):
        codes = np.array([rnd.randrange(len(names)) for _ in range(rnd.randrange(0, 500))], np.int64)
        col = _coded_strings(codes, names)
        # codes into the vocabulary: the type the store's writer takes text in
        assert col.type == TEXT and col.to_pylist() == [names[c] for c in codes.tolist()]
    assert _coded_strings(np.zeros(3, np.int64), ("",)).to_pylist() == ["", "", ""]
    # None in the vocabulary (parsers.llm.semantics.EVENT_NAMES: not an event) is null
    col = _coded_strings(np.array([0, 2, 1, 0, 2]), (None, "content", "final"))
    assert col.to_pylist() == [None, "final", "content", None, "final"] and col.null_count == 2
    assert _coded_strings(np.zeros(2, np.int64), (None,)).to_pylist() == [None, None]


def test_run_strings():
    col = _run_strings(["to_server", "", "response"], [2, 1, 3])
    assert col.type == TEXT and col.to_pylist() == ["to_server"] * 2 + [""] + ["response"] * 3
    # a value met again later shares its code; None is null
    col = _run_strings(["a", None, "b", "a", None], [1, 2, 1, 2, 0])
    assert col.to_pylist() == ["a", None, None, "b", "a", "a"] and col.dictionary.to_pylist() == ["a", "b"]
    assert _run_strings([None], [2]).to_pylist() == [None, None]
    assert _run_strings(["x"], [0]).to_pylist() == []
    assert _run_strings([], []).to_pylist() == []


@pytest.mark.parametrize("path", ["c", "python"])
def test_run_sent_counts_like_chunks(monkeypatch, path):
    import random

    from telemetry.ingest import rates

    if path == "python":
        monkeypatch.setattr(rates, "_run_sent", None)
    elif rates._run_sent is None:
        pytest.fail("parsers.h2._speedups.run_sent is not built")
    buf = np.arange(256, dtype=np.uint8)
    rows = np.array(
        [[0, 1_000, 1, 0, 0, 10], [1, 50_000_000, 2, 0, 10, 30], [0, 150_000_000, 3, 10, 30, 31]],
        np.int64,
    )
    runs = [ChunkRun(3, rows, buf), ChunkRun(4, rows[:2].copy(), buf)]
    rnd = random.Random(11)
    for key in range(6):  # interleaved directions, time going back, buckets before 1970, empty runs
        n = rnd.choice((0, 1, 7, 300))
        ts = 1_700_000_000_000_000_000 * rnd.choice((1, -1)) + np.cumsum(
            [rnd.choice((0, 1_000, 40_000_000, -30_000_000)) for _ in range(n)], dtype=np.int64)
        starts = np.array([rnd.randrange(200) for _ in range(n)], np.int64)
        cols = [np.array([rnd.choice((0, 1)) for _ in range(n)], np.int64), ts, np.arange(n, dtype=np.int64),
                np.zeros(n, np.int64), starts, starts + np.array([rnd.randrange(50) for _ in range(n)], np.int64)]
        runs.append(ChunkRun(key * 1000 + 7, np.ascontiguousarray(np.stack(cols, axis=1).reshape(n, 6)), buf))
    chunks: list[PayloadChunk] = expand_runs(runs)  # type: ignore[arg-type]
    totals: dict = {}
    for k, b, nbytes, count in zip(*(c.tolist() for c in _run_sent(runs)), strict=True):
        got = totals.get((k, b), (0, 0))
        totals[(k, b)] = (got[0] + nbytes, got[1] + count)
    assert totals == sent_totals(chunks)
    assert len(totals) > 30
    # in C a direction's consecutive chunks of one bucket come summed: fewer rows
    rows_out = len(_run_sent(runs)[0])
    assert rows_out == len(chunks) if path == "python" else rows_out < len(chunks) / 2
    assert chunks[1].data == bytes(range(10, 30)) and chunks[2].stream_offset == 10
    # the pipeline's rows from them: one per direction and bucket, summed, either way
    cd, bucket, nbytes, count, acked = rates.sent_rows(runs)
    assert {(k, b): (x, c) for k, b, x, c in zip(cd.tolist(), bucket.tolist(), nbytes.tolist(), count.tolist(),
                                                  strict=True)} == totals
    assert len(cd) == len(totals) and (acked == -1).all()


def test_gap_stats_match_the_per_request_quantiles():
    import random

    from telemetry.ingest.joins import gap_stats as _gap_stats

    rnd = random.Random(5)
    lists: list[list[int]] = [[], [7], [1, 1], [5, 9], [3, 1, 4]]  # ties, order as seen
    for _ in range(300):
        t = 1_760_000_000_000_000_000 + rnd.randrange(10**9)
        times = [t]
        for _k in range(rnd.choice((0, 1, 2, 5, 60, 200))):
            t += rnd.choice((0, 1, 999, rnd.randrange(10**8)))
            times.append(t)
        lists.append(times)
    # each request's gaps as the batches handed them over: split anywhere
    gaps: list[list[np.ndarray] | None] = []
    for times in lists:
        diffs = np.diff(np.array(times, np.int64))
        cut = rnd.randrange(len(diffs) + 1)
        gaps.append([p for p in (diffs[:cut], diffs[cut:]) if len(p)] or None)
    p50, p99, mx = (a.tolist() for a in _gap_stats(gaps))
    for i, times in enumerate(lists):
        if len(times) < 2:
            assert np.isnan([p50[i], p99[i], mx[i]]).all()
            continue
        ordered = sorted((b - a) / 1e6 for a, b in zip(times[:-1], times[1:], strict=True))
        assert (p50[i], p99[i], mx[i]) == (quantile(ordered, 0.5), quantile(ordered, 0.99), ordered[-1])


def test_gap_stats_sort_huge_spans_too():
    from telemetry.ingest.joins import gap_stats as _gap_stats

    big = np.array([2**62, -(2**62), 5], np.int64)  # too wide for the combined sort key
    p50, p99, mx = _gap_stats([[big], None, [np.array([3, 4, 1], np.int64)]])
    assert p50.tolist()[::2] == [5 / 1e6, 3 / 1e6] and mx.tolist()[::2] == [2**62 / 1e6, 4 / 1e6]
    assert np.isnan(p99[1])


@pytest.mark.parametrize("forward", [False, True])
def test_rates_fold_like_the_bucket_dicts(forward):
    import random

    from telemetry.ingest.rates import Rates as _Rates

    rnd = random.Random(3)
    r = _Rates()
    sent: dict[int, tuple[int, int]] = {}
    acked: dict[int, int] = {}
    written = []
    for step in range(40):
        n = rnd.randrange(0, 30)
        if forward:  # time going forward: sorted, repeats, starting at or after the last bucket
            b = np.array(sorted(rnd.randrange(step * 3, step * 3 + 4) for _ in range(n)), np.int64)
        else:
            b = np.array([rnd.randrange(step, step + 20) for _ in range(n)], np.int64)
        if rnd.random() < 0.5:
            nb = np.array([rnd.randrange(1, 1500) for _ in range(n)], np.int64)
            r.add(b, nb, np.ones(n, np.int64), np.full(n, -1, np.int64))
            for x, y in zip(b.tolist(), nb.tolist(), strict=True):
                got = sent.get(x, (0, 0))
                sent[x] = (got[0] + y, got[1] + 1)
        else:
            off = np.array([rnd.randrange(0, 10**6) for _ in range(n)], np.int64)
            z = np.zeros(n, np.int64)
            r.add(b, z, z, off)
            for x, y in zip(b.tolist(), off.tolist(), strict=True):
                acked[x] = max(acked.get(x, y), y)
        assert r.counted() == len(sent) + len(acked)
        if step % 7 == 6:
            upto = step + 5
            done = r.take(upto)
            keys = sorted(k for k in sent.keys() | acked.keys() if k < upto)
            assert done.bucket.tolist() == keys
            assert done.sent_bytes.tolist() == [sent.get(k, (0, 0))[0] for k in keys]
            assert done.sent_pkts.tolist() == [sent.get(k, (0, 0))[1] for k in keys]
            assert done.acked.tolist() == [acked.get(k, -1) for k in keys]
            for k in keys:
                sent.pop(k, None)
                acked.pop(k, None)
            written += keys
    assert written


def test_note_rates_folds_every_connection_like_the_bucket_dicts():
    """One fold of many connections' ACK progress and bytes sent, batch after batch,
    gives each connection direction what bucket dicts of its own give: bytes and segments
    summed, the highest offset acked in a bucket, ACKs already folded not counted twice."""
    import random

    from telemetry.ingest.rates import RATE_BUCKET_NS, note_rates
    from telemetry.ingest.state import Conn

    rnd = random.Random(5)
    keys = [0, 3, 7, 40]
    conns = {k: Conn(k) for k in keys}
    progress = {(k, d): ([], []) for k in keys for d in (0, 1)}  # each direction's whole ACK log
    sent: dict[tuple[int, int], dict[int, list[int]]] = {(k, d): {} for k in keys for d in (0, 1)}
    acked: dict[tuple[int, int], dict[int, int]] = {(k, d): {} for k in keys for d in (0, 1)}
    clock = {kd: 0 for kd in progress}
    for step in range(12):
        rows = []
        for kd in progress:
            if rnd.random() < 0.3:
                continue  # nothing from this direction in the batch
            ts_log, off_log = progress[kd]
            for _ in range(rnd.randrange(1, 40)):
                clock[kd] += rnd.randrange(0, RATE_BUCKET_NS // 3)
                offset = (off_log[-1] if off_log else 0) + rnd.randrange(0, 3000)
                ts_log.append(clock[kd])
                off_log.append(offset)
                bucket = clock[kd] // RATE_BUCKET_NS
                acked[kd][bucket] = max(acked[kd].get(bucket, -1), offset)
            for _ in range(rnd.randrange(0, 30)):  # sent rows: any order, repeated buckets
                bucket = (step * RATE_BUCKET_NS * 2 + rnd.randrange(0, 3 * RATE_BUCKET_NS)) // RATE_BUCKET_NS
                nbytes = rnd.randrange(1, 1500)
                rows.append((kd[0] * 2 + kd[1], bucket, nbytes, 1, -1))
                got = sent[kd].setdefault(bucket, [0, 0])
                got[0] += nbytes
                got[1] += 1
        rnd.shuffle(rows)
        half = len(rows) // 2

        def acks(k: int, d: int) -> tuple[np.ndarray, ...]:
            return tuple(np.array(x, np.int64) for x in progress[(k, d)])

        def columns(part: list) -> tuple[np.ndarray, ...] | None:
            return tuple(np.array(c, np.int64) for c in zip(*part, strict=True)) if part else None

        note_rates(conns, acks, columns(rows[:half]))
        # bytes sent and no ACK progress not folded yet; then nothing new: nothing folded again
        note_rates(conns, acks, columns(rows[half:]))
        note_rates(conns, acks, None)
    for (k, d), by_bucket in acked.items():
        assert conns[k].rates[d].counted() == len(by_bucket) + len(sent[(k, d)])
        done = conns[k].rates[d].take(None)
        buckets = sorted(by_bucket.keys() | sent[(k, d)].keys())
        assert done.bucket.tolist() == buckets
        assert done.acked.tolist() == [by_bucket.get(b, -1) for b in buckets]
        assert done.sent_bytes.tolist() == [sent[(k, d)].get(b, [0, 0])[0] for b in buckets]
        assert done.sent_pkts.tolist() == [sent[(k, d)].get(b, [0, 0])[1] for b in buckets]
    assert sum(len(v) for v in acked.values()) > 100


def test_c_smoothed_rtt_rounds_like_python():
    import random

    from parsers.tcp import _fast

    if _fast._speedups is None:
        pytest.skip("C extension not built (pip install -e .)")
    rnd = random.Random(11)
    for start in (None, 123456.789, 1e9 / 3):
        vals = np.array([rnd.choice((1, 999, rnd.randrange(10**9), rnd.randrange(10**13))) for _ in range(500)], np.int64)
        srtt = start
        for r in vals.tolist():
            srtt = float(r) if srtt is None else srtt * 0.875 + r * 0.125
        assert _fast._speedups.ewma(start, vals) == srtt
    assert _fast._speedups.ewma(None, np.zeros(0, np.int64)) is None


def test_stream_times_like_a_dict():
    """StreamTimes holds every connection's streams in one sorted array; it must behave as
    a dict of (connection, stream, direction) -> last time, streams and connections
    that are over dropped (lazily, before the next lookup), a closed connection's slot
    reused by a new one. Conn keys count every connection of a daemon's capture run:
    past 2**40 they must still be told apart."""
    import random

    from telemetry.ingest.state import StreamTimes, stream_keys

    rnd = random.Random(7)
    held, model = StreamTimes(), {}
    live = [1, 2, 7]
    fresh = iter(range(2**40, 2**41))
    for _ in range(400):
        triples = sorted({(rnd.choice(live), rnd.randrange(20), rnd.randrange(2)) for _ in range(rnd.randrange(0, 12))},
                         key=lambda t: (held.slot(t[0]), t[1], t[2]))
        keys = stream_keys(*(np.array(col, np.int64) for col in
                             ([held.slot(t[0]) for t in triples], [t[1] for t in triples], [t[2] for t in triples])))
        assert keys.tolist() == sorted(set(keys.tolist()))
        last = np.array([rnd.randrange(10**12) for _ in triples], np.int64)
        known, prev = held.swap(keys, last)
        for t, kn, p, ts in zip(triples, known.tolist(), prev.tolist(), last.tolist(), strict=True):
            assert kn == (t in model) and (not kn or p == model[t])
            model[t] = ts
        if rnd.random() < 0.3:
            conn, streams = rnd.choice(live), rnd.sample(range(2**31 - 3, 2**31) if rnd.random() < 0.1 else range(20), 3)
            held.forget(conn, streams)
            for s in streams:
                model.pop((conn, s, 0), None)
                model.pop((conn, s, 1), None)
        if rnd.random() < 0.15:  # a connection closes, a new one opens
            conn = rnd.choice(live)
            held.forget_connection(conn)
            model = {t: v for t, v in model.items() if t[0] != conn}
            live[live.index(conn)] = next(fresh)
        held.swap(np.zeros(0, np.int64), np.zeros(0, np.int64))  # what is over is dropped before a lookup
        want = sorted(model, key=lambda t: (held.slot(t[0]), t[1], t[2]))
        cols = ([held.slot(t[0]) for t in want], [t[1] for t in want], [t[2] for t in want])
        assert held.keys.tolist() == stream_keys(*(np.array(c, np.int64) for c in cols)).tolist()
        assert held.ts.tolist() == [model[t] for t in want]
    assert held._next_slot <= len(live) + 1  # slots are reused, not counted up


def test_tables_of_many_connections_are_each_connections_tables_in_order():
    """A table built of several connections' parts (each with its own direction flip) is
    the tables of each part alone, one after the other: ids, flips and rows stay with
    their part."""
    import random

    from parsers.records import TcpEvent
    from telemetry.ingest.columns import Part
    from telemetry.ingest.rates import flow_rates_table
    from telemetry.ingest.tables import rtt_samples_table, segment_sends_table, tcp_events_table

    rnd = random.Random(11)

    def rtt_rows():
        items, t = [], 0
        for _ in range(rnd.randrange(1, 6)):
            if rnd.random() < 0.5:
                ts = np.arange(t, t + rnd.randrange(1, 5), dtype=np.int64)
                items.append(RttRun(1, rnd.randrange(2), ts, ts / 7.0, rnd.choice(RTT_SOURCES)))
                t += len(ts)
            else:
                items.append(RttSample(t, 1, rnd.randrange(2), t / 3.0, rnd.choice(RTT_SOURCES)))
                t += 1
        return items, len(expand_rtts(items))

    def columns(k, n_cols, codes_at=(0,), hi=2):
        return tuple(np.array([rnd.randrange(hi) for _ in range(k)], np.int64) if j in codes_at
                     else np.arange(k, dtype=np.int64) * (j + 1) for j in range(n_cols))

    for _ in range(30):
        conns = [(f"C{i:03d}", rnd.randrange(2)) for i in range(rnd.randrange(1, 6))]
        cases = []
        for cid, flip in conns:
            items, n = rtt_rows()
            events = [TcpEvent(rnd.randrange(10**9), 1, rnd.randrange(2), "dup_ack", rnd.randrange(1000), 0, 1, None, None)
                      for _ in range(rnd.randrange(1, 4))]
            k = rnd.randrange(1, 6)
            sends = columns(k, 5, codes_at=(0, 4))
            rates = columns(k, 5, codes_at=(1,))
            cut = rnd.randrange(1, k + 1)  # a connection's rates come as one or two directions' sets
            rate_sets = [tuple(c[:cut] for c in rates)] + ([tuple(c[cut:] for c in rates)] if cut < k else [])
            cases.append({"rtt_samples": (rtt_samples_table, Part(cid, flip, items, n)),
                          "tcp_events": (tcp_events_table, Part(cid, flip, events, len(events))),
                          "segment_sends": (segment_sends_table, Part(cid, flip, sends, k)),
                          "flow_rates": (flow_rates_table, Part(cid, 0, rate_sets, k))})
        for table in cases[0]:
            build = cases[0][table][0]
            parts = [c[table][1] for c in cases]
            together = build("K", parts)
            alone = pa.concat_tables([build("K", [p]) for p in parts])
            assert _as_text(together).equals(_as_text(alone)), table
            assert together["conn_id"].to_pylist() == [p.conn_id for p in parts for _ in range(p.n)]
        # a part's flip turns its TCP directions into the session's
        got = rtt_samples_table("K", [c["rtt_samples"][1] for c in cases])["direction"].to_pylist()
        flat = [(s, p.flip) for c in cases for p in [c["rtt_samples"][1]] for s in expand_rtts(p.rows)]
        assert got == [DIRECTION_NAMES[s.direction ^ f] for s, f in flat]
        sends = [c["segment_sends"][1] for c in cases]
        got = segment_sends_table("K", sends)["direction"].to_pylist()
        assert got == [DIRECTION_NAMES[d ^ p.flip] for p in sends for d in p.rows[0].tolist()]


def test_messages_of_many_connections_taken_at_once_as_one_by_one():
    """The pipeline takes every connection's message rows of a batch in one pass: the
    waiting messages (with their gaps) and the response gaps must be what taking each
    connection's rows alone gives, whatever mix of gRPC messages and LLM events,
    tuples and columns, streams ending and connections closing."""
    import random

    from telemetry.ingest.joins import take_messages
    from telemetry.ingest.state import Conn, StreamTimes

    rnd = random.Random(5)
    fields = ("sid", "idx", "ts", "size", "comp", "end", "gap", "acked", "kind", "tokens")
    for _ in range(25):
        keys = rnd.sample(range(1, 40), rnd.randrange(1, 6))
        together, alone = {k: Conn(k) for k in keys}, {k: Conn(k) for k in keys}
        times_together, times_alone = StreamTimes(), StreamTimes()
        clock = dict.fromkeys(keys, 0)
        offsets = {k: [0, 0] for k in keys}
        for _batch in range(4):
            taken = []
            for k in keys:
                if rnd.random() < 0.2:
                    continue
                events = rnd.random() < 0.4
                rows = []
                for _m in range(rnd.randrange(1, 30)):
                    d = rnd.randrange(2)
                    clock[k] += rnd.randrange(1, 10**6)
                    offsets[k][d] += rnd.randrange(5, 500)
                    kind = rnd.choice((0, 1, 2, 3, 5)) if events else 0
                    flags = rnd.randrange(2) | (kind << 8) | (rnd.randrange(0, 4) << 12)
                    rows.append((rnd.randrange(1, 12) * 2 - 1, d, rnd.randrange(5), clock[k], rnd.randrange(900), flags, offsets[k][d]))
                taken.append((k, rows if rnd.random() < 0.5 else np.array(rows, np.int64).reshape(len(rows), 7)))
            if taken:
                take_messages([(together[k], rows) for k, rows in taken], times_together)
            for k, rows in taken:
                take_messages([(alone[k], rows)], times_alone)
            for k in rnd.sample(keys, min(2, len(keys))):  # some streams end
                streams = rnd.sample(range(1, 24, 2), 3)
                times_together.forget(k, streams)
                times_alone.forget(k, streams)
            if rnd.random() < 0.2:  # a connection closes; its key is not used again
                k = keys.pop()
                times_together.forget_connection(k)
                times_alone.forget_connection(k)
                if not keys:
                    break
        for k in keys:
            for d in (0, 1):
                a, b = together[k].pending[d], alone[k].pending[d]
                assert (a is None) == (b is None)
                if a is not None:
                    for f in fields:
                        assert np.array_equal(getattr(a, f), getattr(b, f), equal_nan=f == "gap"), (k, d, f)
            ga, gb = together[k].response_gaps, alone[k].response_gaps
            assert sorted(ga) == sorted(gb)
            for sid in ga:
                assert np.array_equal(np.concatenate(ga[sid]), np.concatenate(gb[sid]))


def test_rtt_values_keep_every_sample_up_to_the_bound():
    """A connection direction keeps every RTT sample while there are at most RTT_KEEP of
    them, in order: its percentiles are those of all of them, as before the bound."""
    from telemetry.ingest.state import RTT_KEEP, RttValues

    rng = np.random.default_rng(1)
    held, added = RttValues(seed=7), []
    while sum(map(len, added)) < RTT_KEEP - 1000:
        part = rng.lognormal(1.0, 0.5, int(rng.integers(1, 5000)))
        held.add(part)
        added.append(part)
    part = rng.lognormal(1.0, 0.5, RTT_KEEP - sum(map(len, added)))  # exactly up to the bound
    held.add(part)
    added.append(part)
    every = np.concatenate(added)
    assert len(held) == RTT_KEEP and np.array_equal(held.values(), every)
    assert rtt_stats(held.values()) == np.percentile(every, (0, 50, 99)).tolist()


def test_rtt_values_past_the_bound_are_a_uniform_sample_of_bounded_size():
    """Past RTT_KEEP samples a direction holds a uniform sample of RTT_KEEP of them
    (Algorithm R), whatever the count: memory does not grow with a long connection, and its
    median and 99th percentile stay close to those of every sample; the same samples give
    the same sample."""
    from telemetry.ingest.state import RTT_KEEP, RttValues

    rng = np.random.default_rng(2)
    n = 12 * RTT_KEEP
    every = rng.lognormal(1.0, 0.6, n)
    cuts = np.sort(rng.integers(0, n, 40))
    held, again = RttValues(seed=11), RttValues(seed=11)
    for part in np.split(every, cuts):
        held.add(part)
        again.add(part)
    sample = held.values()
    assert len(held) == n and len(sample) == RTT_KEEP and sample.nbytes == 8 * RTT_KEEP
    assert np.array_equal(sample, again.values())
    _lo, p50, p99 = rtt_stats(sample)
    true50, true99 = np.percentile(every, (50, 99))
    assert abs(p50 - true50) < 0.02 * true50 and abs(p99 - true99) < 0.05 * true99
    # uniform over the stream: each twelfth of it holds about a twelfth of the sample
    position = {v: i for i, v in enumerate(every.tolist())}
    share = np.bincount(np.array([position[v] for v in sample.tolist()]) * 12 // n, minlength=12) / RTT_KEEP
    assert np.all(np.abs(share - 1 / 12) < 0.01), share


def test_rtt_values_sample_as_algorithm_r_one_sample_at_a_time():
    """The reservoir taken a batch at a time is Algorithm R run one sample at a time on the
    same draws: a slot drawn by several samples of a batch keeps the last of them."""
    from telemetry.ingest.state import RTT_KEEP, RttValues

    rng = np.random.default_rng(3)
    first, rest = rng.random(RTT_KEEP), rng.random(5 * RTT_KEEP)
    held = RttValues(seed=5)
    held.add(first)
    held.add(rest)
    slots = np.random.default_rng(5).integers(0, RTT_KEEP + np.arange(len(rest)) + 1)
    expected = first.copy()
    for value, slot in zip(rest.tolist(), slots.tolist(), strict=True):
        if slot < RTT_KEEP:
            expected[slot] = value
    assert np.array_equal(held.values(), expected)


def test_connection_row_past_the_rtt_bound_reads_the_sample_and_the_running_minimum():
    """A connection with more RTT samples than RTT_KEEP in a direction: its row's median
    and 99th percentile are those of the uniform sample, close to those of every sample,
    and its minimum is the minimum of all of them (the running one), as with fewer."""
    from parsers.records import TO_CLIENT, TO_SERVER, ConnectionSummary
    from telemetry.ingest.state import RTT_KEEP, Conn
    from telemetry.ingest.tables import connection_row

    rng = np.random.default_rng(4)
    conn = Conn(3)
    every = {TO_SERVER: rng.lognormal(0.5, 0.3, 1000), TO_CLIENT: rng.lognormal(2.0, 0.7, 4 * RTT_KEEP)}
    every[TO_CLIENT][int(rng.integers(0, 4 * RTT_KEEP))] = 0.123  # the minimum, wherever it comes
    for d, values in every.items():
        for part in np.array_split(values, 9):
            conn.rtt_values[d].add(part)
    summary = ConnectionSummary(3, "c3", "10.0.0.1", 40000, "10.0.0.2", 50051, True, 0, 10**9, (1, 1), (0, 0),
                                True, 0.5, "Sh")  # fmt: skip
    row = connection_row("cap", conn, summary, "h2", side="server")
    assert [row[f"rtt_{s}_ms_to_server"] for s in ("min", "p50", "p99")] == rtt_stats(every[TO_SERVER])
    assert row["rtt_min_ms_to_client"] == 0.123
    true50, true99 = np.percentile(every[TO_CLIENT], (50, 99))
    assert abs(row["rtt_p50_ms_to_client"] - true50) < 0.02 * true50
    assert abs(row["rtt_p99_ms_to_client"] - true99) < 0.05 * true99
