"""The C reader of whole events in whole HTTP/1.1 chunks (parsers/llm/_speedups.c) reads
exactly what the Python readers read: on the fuzz target's seeds, on random event streams
cut into rows at random, on hand-made edge cases of the function itself, and (from
tests/test_real_stacks.py) on real servers' captures, table by table."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from fuzz.seeds import sse_seeds
from fuzz.targets import chunk_run, encode_chunks, read_sse_run, sse_run, target_sse_rows
from parsers import http1

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(http1._speedups is None, reason="C extension not built (pip install -e .)")


class _Counting:
    """parsers.llm._speedups, counting the rows (or feeds) its readers took."""

    def __init__(self, real) -> None:
        self.real, self.taken, self.feeds = real, 0, 0

    def __getattr__(self, name: str):  # (its other functions, as they are)
        return getattr(self.real, name)

    def sse_chunk_run(self, rows, buf, first, direction):
        stop, events = self.real.sse_chunk_run(rows, buf, first, direction)
        self.taken += stop - first
        return stop, events

    def sse_chunks(self, data, ts, off):
        events = self.real.sse_chunks(data, ts, off)
        self.taken += events is not None
        self.feeds += events is not None
        return events


@pytest.fixture
def counting(monkeypatch) -> _Counting:
    c = _Counting(http1._speedups)
    monkeypatch.setattr(http1, "_speedups", c)
    return c


def test_seeds_read_the_same_and_the_usual_ones_in_c(counting):
    taken = []
    for seed in sse_seeds():
        counting.taken = 0
        target_sse_rows(seed)  # raises when the two readings differ
        taken.append(counting.taken)
    # usual, packed, split, odd (comments, event lines, CRLF: all Python), a second exchange
    assert taken[0] > 0 and taken[1] > 0 and taken[2] > 0 and taken[4] > taken[0]
    assert taken[3] == 0


def test_chunks_fed_one_by_one_are_read_in_c_too(counting):
    """A packet's payload, or a TLS record's plaintext, fed alone (no run): the same."""
    run = sse_run(sse_seeds()[0])
    without = read_sse_run(run, False, as_chunks=True)
    assert read_sse_run(run, True, as_chunks=True) == without
    assert counting.feeds == 7  # the six tokens and [DONE]; the last chunk in Python
    assert without[3] or any(without[1])


def _chunk(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(body), body)


def _random_stream(rnd: random.Random) -> bytes:
    """An event-stream body of usual and unusual chunks, in rows of whole chunks (as
    servers write them) and now and then cut anywhere."""
    chunks = []
    for i in range(rnd.randint(1, 40)):
        kind = rnd.random()
        if kind < 0.7:
            text = bytes(rnd.choices(b"ab \xc3\xa9\\", k=rnd.randint(0, 9)))
            if rnd.random() < 0.05:
                text += b"\rc"  # a CR ends a line too
            event = b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % text
        elif kind < 0.75:
            event = b"data:[DONE]\n\n"
        elif kind < 0.8:
            event = b": keep-alive\n\n"
        elif kind < 0.85:
            event = b"event: x\ndata: %d\n\n" % i
        elif kind < 0.9:
            event = b"data: %d\r\n\r\n" % i
        else:
            event = b"data: %d\n" % i  # half an event: the next chunk ends it
        size = b"%x" % len(event)
        if rnd.random() < 0.05:
            size = size.upper().rjust(4, b"0")
        chunks.append(size + (b";ext=1" if rnd.random() < 0.03 else b"") + b"\r\n" + event + b"\r\n")
    if rnd.random() < 0.7:
        chunks.append(b"0\r\n\r\n")
    rows, body = [], b""
    while chunks:
        body += b"".join(chunks[: (k := rnd.choice((1, 1, 1, 2, 3)))])
        del chunks[:k]
        if rnd.random() < 0.8 or not chunks:
            rows.append((1, body))
            body = b""
        elif len(body) > 1:
            cut = rnd.randint(1, len(body) - 1)
            rows.append((1, body[:cut]))
            body = body[cut:]
    return encode_chunks(rows)


def test_random_streams_read_the_same(counting):
    rnd = random.Random(7)
    for _ in range(400):
        target_sse_rows(_random_stream(rnd))
    assert counting.taken > 1000  # ~1,900 of the rows went through C


def test_the_session_fed_row_by_row_reads_the_same(monkeypatch):
    """PayloadChunks one by one through AppSession.feed, the C reader off (the Python
    path alone), against the run read with C."""
    from parsers.session import AppSession

    rnd = random.Random(11)
    for _ in range(50):
        run = sse_run(_random_stream(rnd))
        with monkeypatch.context() as m:
            m.setattr(http1, "_speedups", None)
            s = AppSession(1, 40000, 8080)
            for c in run.chunks():
                s.feed(c)
            result = s.finish(1_700_000_000_000_000_000 + 10**9)
        taken, rows, requests, message_rows, issues = read_sse_run(run, True)
        assert taken[0] + taken[1] + requests == result.requests
        assert rows[0] + rows[1] + message_rows == [tuple(r) for r in result.message_rows]
        assert issues == result.issues


def _rows(parts: list[tuple[int, bytes]]) -> tuple[np.ndarray, np.ndarray]:
    run = chunk_run(parts, ts0=1000, step=1)
    return run.rows, run.buf


@pytest.mark.parametrize(("row", "taken"), [
    (_chunk(b"data: x\n\n"), 1),
    (_chunk(b"data:x\n\n"), 1),
    (_chunk(b"data:\n\n"), 1),
    (b"00000000000000" + _chunk(b"data: x\n\n"), 1),  # 15 hex digits
    (b"000000000000000" + _chunk(b"data: x\n\n"), 0),  # 16: left to Python
    (_chunk(b"data: x\n\n") + _chunk(b"data: y\n\n"), 1),
    (_chunk(b"data: x\n\n") + b"0\r\n\r\n", 0),  # the last chunk: the whole row to Python
    (_chunk(b"data: x\r\n\r\n"), 0),
    (_chunk(b"data: a\rb\n\n"), 0),  # a CR ends a line too
    (_chunk(b"data: a\nb\n\n"), 0),
    (_chunk(b": c\n\n"), 0),
    (_chunk(b"event: e\n\n"), 0),
    (_chunk(b"data: x\n\n")[:-1], 0),  # no CRLF after the data
    (_chunk(b"data: x\n\n")[:-2] + b"\n\n", 0),
    (b"9;e\r\ndata: x\n\n\r\n", 0),  # a chunk extension
    (b"0x9\r\ndata: x\n\n\r\n", 0),
    (b"", 0),
])  # fmt: skip
def test_what_the_c_reader_takes(row: bytes, taken: int):
    rows, buf = _rows([(1, row), (1, _chunk(b"data: next\n\n"))])
    stop, events = http1._speedups.sse_chunk_run(rows, buf, 0, 1)
    assert stop == (2 if taken else 0)
    if taken:
        assert [e[0] for e in events][-1] == 1001 and events[-1][1] == "next"


def test_the_c_reader_events():
    rows, buf = _rows([(0, b"x"), (1, _chunk(b"data: \xff{}\n\n") + _chunk(b"data:b\n\n")), (0, b"y")])
    assert http1._speedups.sse_chunk_run(rows, buf, 0, 1) == (0, [])  # a client row first
    stop, events = http1._speedups.sse_chunk_run(rows, buf, 1, 1)
    assert stop == 2
    # (ts, data, chunk data bytes, direction offset after the chunk data)
    assert events == [(1001, "\ufffd{}", 11, 14), (1001, "b", 8, 14 + 2 + 3 + 8)]
    with pytest.raises(ValueError):
        http1._speedups.sse_chunk_run(rows, buf, 4, 1)
    with pytest.raises(ValueError):
        http1._speedups.sse_chunk_run(rows[:, :5].copy(), buf, 0, 1)


def tables_with_and_without_c_reader(capture: Path, keylog=None) -> tuple[dict, dict, int]:
    """Every table tailtap writes for ``capture`` (bench/golden_outputs.py's canonical
    dump; decrypted with ``keylog``, a KeyLog), with the C reader and without it, and how
    many rows (or TLS records) the C reader took."""
    sys.path.insert(0, str(ROOT / "bench"))
    from golden_outputs import dump

    real = http1._speedups
    counting = _Counting(real)
    try:
        http1._speedups = counting
        with_c = dump([str(capture)], keylog=keylog)
        http1._speedups = None
        without = dump([str(capture)], keylog=keylog)
    finally:
        http1._speedups = real
    return with_c, without, counting.taken


def tables_with_and_without_h2_c(capture: Path, keylog=None) -> tuple[dict, dict, int]:
    """Every table tailtap writes for ``capture`` (decrypted with ``keylog``, a KeyLog)
    with the HTTP/2 C path (parsers/h2/_speedups.c) and without it, and how many events
    C read out of DATA frames of one event each (try_sse_frame: they reach
    EventSplitter.feed_whole_events)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from golden_outputs import dump

    from parsers.h2 import _conn
    from parsers.llm.taps import EventSplitter

    real, whole = _conn._speedups, EventSplitter.feed_whole_events
    taken = [0]

    def counted(self, events, out):
        taken[0] += len(events)
        return whole(self, events, out)

    try:
        EventSplitter.feed_whole_events = counted  # type: ignore[method-assign]
        with_c = dump([str(capture)], keylog=keylog)
        _conn._speedups = None
        without = dump([str(capture)], keylog=keylog)
    finally:
        _conn._speedups = real
        EventSplitter.feed_whole_events = whole  # type: ignore[method-assign]
    return with_c, without, taken[0]
