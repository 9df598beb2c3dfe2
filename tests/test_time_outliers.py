"""Packets stamped far off the times of the packets around them (1970 among packets of
today) are read at the time of the packet before, counted and said; a clock that steps
and stays, and a capture's own gaps, are read as stamped. Packets recorded out of time
order (a capture over several queues) are read in time order. Whatever the times, the analysis looks at
no span's seconds or buckets beyond an hour: a capture stamped 1970 for a while made
`tailtap analyze` grow to 18 GB before it was stopped."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import capture_builders as cb
import numpy as np
import pytest

from parsers.capture import OutlierTimes, in_time_order
from parsers.records import DecodeStats, PacketBatch

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "baseline" / "capture.pcap"
S = 10**9
T0 = 1_700_000_000 * S


def _repair(batches: list[list[int]]) -> tuple[list[list[int]], DecodeStats, list]:
    clock, stats, issues = OutlierTimes(), DecodeStats(), []
    out, frame = [], 1
    for batch in batches:
        ts = np.array(batch, np.int64)
        frames = np.arange(frame, frame + len(ts), dtype=np.int64)
        frame += len(ts)
        out.append(clock.repair(ts, frames, stats, issues).tolist())
    return out, stats, issues


def test_a_packet_stamped_1970_is_read_at_its_neighbours_time():
    times = [T0 + i * S // 100 for i in range(40)]
    times[10] = 0
    times[20:23] = [0, 0, 5 * S]  # three in a row
    times[30] = T0 + 80 * 365 * 86400 * S  # one in 2103
    (fixed,), stats, issues = _repair([times])
    assert stats.time_outliers == 5
    assert [i for i, (a, b) in enumerate(zip(times, fixed, strict=True)) if a != b] == [10, 20, 21, 22, 30]
    assert all(abs(f - (T0 + i * S // 100)) <= 4 * S // 100 for i, f in enumerate(fixed))
    (issue,) = issues
    assert issue.kind == "time_outlier" and issue.frame_no == 11
    assert issue.message.startswith("5 packet(s) stamped more than 60 s off")
    assert "1970-01-01 00:00:00 UTC" in issue.message


def test_a_batch_s_last_packets_are_judged_by_the_packets_before_them():
    times = [T0 + i * S for i in range(12)]
    times[-1] = 0  # behind the one before: read at its time
    (fixed,), stats, _ = _repair([times])
    assert stats.time_outliers == 1 and fixed[-1] == times[-2]
    times[-1] = T0 + 365 * 86400 * S  # ahead: maybe a gap, read as stamped (the next batch outvotes it)
    (fixed,), stats, _ = _repair([times])
    assert stats.time_outliers == 0 and fixed == times
    (first, second), stats, _ = _repair([times, [T0 + 12 * S + i * S for i in range(8)]])
    assert first == times and stats.time_outliers == 0  # (already handed out: the cap in the SQL bounds it)
    for n in range(1, 12):  # batches too short for a whole window: never a time from nowhere
        out, _, _ = _repair([[T0 + i for i in range(n)], [T0 + 99 + i for i in range(n)]])
        assert out == [[T0 + i for i in range(n)], [T0 + 99 + i for i in range(n)]]


def test_gaps_and_clock_steps_are_read_as_stamped():
    gaps = [T0 + i * 3600 * S for i in range(30)]  # a packet an hour
    back = [T0 + i * S for i in range(20)] + [T0 - 86400 * S + i * S for i in range(20)]  # stepped back a day
    forward = [T0 + i * S for i in range(20)] + [T0 + 30 * 86400 * S + i * S for i in range(20)]
    stepped_twice = [T0] * 5 + [0] * 5 + [T0] * 5  # five in a row: more than the 4 a window outvotes
    for times in (gaps, back, forward, stepped_twice):
        (fixed,), stats, issues = _repair([times])
        assert fixed == times and stats.time_outliers == 0 and not issues


def test_batches_see_the_times_before_them_and_the_same_array_comes_back_untouched():
    times = [T0 + i * S // 10 for i in range(64)]
    times[33] = 0  # second packet of the second batch: its earlier neighbours are the first batch's
    clock, stats, issues = OutlierTimes(), DecodeStats(), []
    first = np.array(times[:32], np.int64)
    assert clock.repair(first, np.arange(1, 33), stats, issues) is first  # nothing to do: no copy
    second = clock.repair(np.array(times[32:], np.int64), np.arange(33, 65), stats, issues)
    assert int(second[1]) == times[32]  # the median of packets 30-38: the one before it
    assert stats.time_outliers == 1 and issues[0].frame_no == 34
    # one more file of a run: the same count goes on in its own issue
    clock.start_file()
    stats2, issues2 = DecodeStats(), []
    clock.repair(np.array([T0 + 7 * S, 0, T0 + 7 * S + 1, T0 + 7 * S + 2, T0 + 7 * S + 3], np.int64),
                 np.arange(1, 6), stats2, issues2)
    assert stats2.time_outliers == 1 and len(issues2) == 1 and len(issues) == 1


def test_random_captures_times():
    """2,000 random captures cut into random batches: ordered times with random gaps (up to
    days) come back as they were; stamped 0 or 2100 in runs of up to 4 among packets at most
    a second apart, every one is found, and nothing else moves."""
    rng = random.Random(55)
    for _ in range(2000):
        n = rng.randrange(1, 300)
        ordered = [T0]
        for _ in range(n - 1):
            ordered.append(ordered[-1] + rng.choice((0, 1, S // 1000, S, 3600 * S, 86400 * 3 * S)))
        cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randrange(0, 5)))) if n > 1 else []
        batches = [ordered[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
        out, stats, _ = _repair(batches)
        assert sum(out, []) == ordered and stats.time_outliers == 0
        dense = [T0 + i * rng.randrange(0, S) // 10 for i in range(n)]
        dense.sort()
        stamped, bad, i = list(dense), set(), rng.randrange(1, 9)
        while i < n - 5:  # not the first packet, nor the last packets of the capture
            run = rng.randrange(1, 5)
            for j in range(i, min(i + run, n - 5)):
                stamped[j] = rng.choice((0, T0 + 76 * 365 * 86400 * S))
                bad.add(j)
            i += run + rng.randrange(5, 40)
        out, stats, _ = _repair([stamped])
        fixed = out[0]
        assert {j for j in range(n) if fixed[j] != stamped[j]} == bad
        assert all(dense[max(0, j - 4)] <= fixed[j] <= dense[min(n - 1, j + 4)] for j in bad)


def _stamped_zero(src: Path, dst: Path, share: float, seed: int) -> int:
    """``src`` with a random ``share`` of its packets stamped 0."""
    rng, hit = random.Random(seed), []
    dst.write_bytes(cb.restamp(src.read_bytes(), lambda i, sec, usec: (0, 0) if rng.random() < share and not hit.append(i)
                            else (sec, usec)))
    return len(hit)


def _analyze(capture: Path, store: Path, *, repair: bool = True) -> subprocess.CompletedProcess:
    """`tailtap analyze` in a process whose address space is bounded at 4 GiB (a list of a
    span's 100 ms buckets over 56 years alone wants 16 GB)."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        + ("" if repair else "import parsers.capture._clock as c; c.OutlierTimes.repair = lambda self, ts, *a: ts\n")
        + "from telemetry.cli.main import main\n"
        f"sys.argv = ['tailtap', 'analyze', {str(capture)!r}, '--out', {str(store)!r}, '--format', 'json']\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def stamped(tmp_path_factory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("clock") / "stamped_zero.pcap"
    return path, _stamped_zero(SAMPLE, path, 0.03, seed=8)


def _methods(out: str) -> dict[str, tuple[int, float]]:
    import json

    doc = json.loads(out)
    return {m["method"]: (m["requests"], m["latency_p50_ms"]) for m in doc["methods"]}


def test_a_capture_with_packets_stamped_1970_reads_as_the_capture_it_was(tmp_path, stamped):
    path, hit = stamped
    assert hit > 300
    clean = _analyze(SAMPLE, tmp_path / "clean")
    damaged = _analyze(path, tmp_path / "damaged")
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert damaged.returncode == 0, damaged.stderr[-2000:]
    assert f"{hit} packet(s) stamped more than 60 s off" in damaged.stderr
    before, after = _methods(clean.stdout), _methods(damaged.stdout)
    assert before.keys() == after.keys()
    for method, (requests, p50) in before.items():
        assert after[method][0] == requests
        assert after[method][1] == pytest.approx(p50, rel=0.05)
    from telemetry.models.db import connect
    from telemetry.store.parquet import Store

    con = connect(Store(tmp_path / "damaged"))
    assert con.execute("SELECT time_outliers, year(first_ts) FROM captures").fetchall() == [(hit, 2026)]


def test_without_the_repair_the_analysis_stays_bounded(tmp_path, stamped):
    """The SQL's own bound (queries/_macros.sql span_range): the same capture read with its
    times as stamped (spans from 1970 to today) is analysed within the 4 GiB."""
    path, _ = stamped
    run = _analyze(path, tmp_path / "raw", repair=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "stamped more than 60 s off" not in run.stderr
    assert sum(r for r, _ in _methods(run.stdout).values()) == sum(r for r, _ in _methods(
        _analyze(SAMPLE, tmp_path / "clean").stdout).values())


def _batch(times: list[int]) -> PacketBatch:
    n = len(times)
    return PacketBatch(np.arange(1, n + 1, dtype=np.int64), np.array(times, np.int64), np.ones(n, np.int32),
                       np.full(n, 60, np.int32), np.full(n, 60, np.int32), np.arange(n, dtype=np.int64) * 60,
                       np.zeros(60 * n, np.uint8))


def test_packets_recorded_out_of_time_order_are_read_in_time_order():
    ms = 10**6
    times = [T0 + i * ms for i in range(10)]
    times[3], times[7] = times[7], times[3]  # recorded 4 places apart
    stats = DecodeStats()
    out = in_time_order(_batch(times), stats)
    assert out.ts_ns.tolist() == sorted(times)
    assert out.frame_no.tolist() == [1, 2, 3, 8, 5, 6, 7, 4, 9, 10]  # each keeps its packet number
    assert out.offset.tolist() == [(f - 1) * 60 for f in out.frame_no.tolist()]
    assert stats.out_of_time_order == 1  # packet 8, read before the packets 4-7 recorded before it
    ordered = _batch(sorted(times))
    assert in_time_order(ordered, stats) is ordered


def test_a_clock_that_steps_back_keeps_the_order_it_was_recorded_in():
    ms = 10**6
    stepped = [T0 + i * ms for i in range(5)] + [T0 - 10 * S + i * ms for i in range(5)]  # 10 s back
    stats = DecodeStats()
    batch = _batch(stepped)
    assert in_time_order(batch, stats) is batch and stats.out_of_time_order == 0
    stepped[6], stepped[8] = stepped[8], stepped[6]  # and out of order after the step
    out = in_time_order(_batch(stepped), stats)
    assert out.ts_ns.tolist() == stepped[:5] + sorted(stepped[5:]) and stats.out_of_time_order == 1


def test_a_capture_recorded_out_of_order_reads_as_the_capture_it_was(tmp_path):
    """samples/baseline (no cause injected: no p99 spike) with one packet in 50 recorded up to
    20 places (and 20 ms) late. Read in file order, windows had spikes blamed on loss bursts."""
    rng = random.Random(9)
    header, packets = cb.records(SAMPLE.read_bytes())
    stamp = [int.from_bytes(p[:4], "little") * S + int.from_bytes(p[4:8], "little") for p in packets]  # (ns pcap)
    for _ in range(len(packets) // 50):
        a = rng.randrange(len(packets))
        b = min(len(packets) - 1, a + rng.randrange(1, 20))
        if abs(stamp[b] - stamp[a]) < 20 * 10**6:  # a queue's lag: milliseconds
            packets[a], packets[b], stamp[a], stamp[b] = packets[b], packets[a], stamp[b], stamp[a]
    damaged = tmp_path / "recorded_out_of_order.pcap"
    damaged.write_bytes(header + b"".join(packets))
    clean, shuffled = _analyze(SAMPLE, tmp_path / "clean"), _analyze(damaged, tmp_path / "shuffled")
    assert clean.returncode == 0 and shuffled.returncode == 0, shuffled.stderr[-2000:]
    import json

    before, after = json.loads(clean.stdout), json.loads(shuffled.stdout)
    assert after["methods"] == before["methods"]
    assert after["report_verdict"] == before["report_verdict"] == "no p99 spike: every window stayed near its baseline"
    from telemetry.models.db import connect
    from telemetry.store.parquet import Store

    (late,) = connect(Store(tmp_path / "shuffled")).execute("SELECT out_of_time_order FROM captures").fetchone()
    assert late > len(packets) // 100

