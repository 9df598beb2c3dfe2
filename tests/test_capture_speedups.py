"""The optional C record walks (parsers/capture/_speedups.c) find exactly the records the
Python walks find, on real captures fed in awkward chunkings and on hand-built edge cases
(the container tests also run whole in both modes)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import capture_builders as cb
import numpy as np
import pytest

from parsers.capture import CaptureDecoder, _container

pytestmark = pytest.mark.skipif(_container._speedups is None, reason="C extension not built (pip install -e .)")

ROOT = Path(__file__).resolve().parents[1]
REAL = sorted(ROOT.glob("samples/*/capture.pcap"))[:4] + sorted(Path("/work/shared/captures").glob("*.pcap*"))


def _decode(data: bytes, pure: bool, monkeypatch, seed: int) -> tuple:
    with monkeypatch.context() as m:
        if pure:
            m.setattr(_container, "_speedups", None)
        rnd = random.Random(seed)
        dec = CaptureDecoder(batch_packets=1000)
        batches = []
        i = 0
        while i < len(data):
            step = rnd.choice((1, 7, 100, 4096, 1 << 20))
            batches += dec.feed(data[i : i + step])
            i += step
        batches += dec.close()
    cols = [
        np.concatenate([getattr(b, f) for b in batches]).tolist() if batches else []
        for f in ("frame_no", "ts_ns", "linktype", "caplen", "origlen")
    ]
    payload = b"".join(
        b.buf[int(o) : int(o) + int(c)].tobytes()
        for b in batches
        for o, c in zip(b.offset, b.caplen, strict=True)
    )
    return cols, payload, [(i.kind, i.frame_no, i.message, i.byte_offset) for i in dec.issues]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_captures_same_records(path: Path, monkeypatch) -> None:
    data = path.read_bytes()
    assert _decode(data, False, monkeypatch, 3) == _decode(data, True, monkeypatch, 3)


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("cut", [0, 5, 16, 17, 30])
def test_truncated_and_corrupt_tails(cut: int, big_endian: bool, monkeypatch) -> None:
    pkts = [(1_700_000_000_000_000_000 + i * 1000, bytes([i]) * (60 + i)) for i in range(50)]
    data = cb.pcap(pkts, big_endian=big_endian)
    # a cut tail, then a record claiming an absurd length
    for blob in (data[: len(data) - cut], data + struct.pack(">IIII" if big_endian else "<IIII", 1, 2, 1 << 30, 60) + b"x" * 40):
        assert _decode(blob, False, monkeypatch, cut) == _decode(blob, True, monkeypatch, cut)


def test_walks_directly_agree_on_both_byte_orders() -> None:
    for order in ("<", ">"):
        rec = struct.Struct(order + "I")
        buf = bytearray()
        for i in range(200):
            body = bytes(i % 60)
            buf += struct.pack(order + "IIII", i, 0, len(body), len(body)) + body
        for end in (len(buf), len(buf) - 3, 10):
            c = _container._walk_pcap(buf, 0, end, 16, rec)
            raw, stop = _container._speedups.walk_pcap(buf, 0, end, 16, order == ">")
            py, pstop = _container._walk_pcap_py(buf, 0, end, 16, rec)
            assert np.frombuffer(raw, np.int64).tolist() == py == c[0].tolist()
            assert stop == pstop == c[1]
        head = struct.Struct(order + "II")
        ng = bytearray()
        for i in range(100):
            body = struct.pack(order + "IIIII", 0, 0, i, 4, 4) + b"abcd"
            ng += struct.pack(order + "II", 6, 12 + len(body)) + body + struct.pack(order + "I", 12 + len(body))
        ng += struct.pack(order + "II", 5, 16) + b"\0" * 8  # an ISB stops the walk
        raw, stop = _container._speedups.walk_epb(ng, 0, len(ng), order == ">")
        py, pstop = _container._walk_epb_py(ng, 0, len(ng), head)
        assert np.frombuffer(raw, np.int64).tolist() == py and stop == pstop
        assert len(py) == 100


def test_gather_same_rows_as_numpy(monkeypatch) -> None:
    from parsers.capture import _gather

    rnd = random.Random(9)
    buf = np.frombuffer(bytes(rnd.randrange(256) for _ in range(3000)), np.uint8)
    pos = np.array([rnd.randrange(-50, 3100) for _ in range(500)] + [0, 2999, -1], np.int64)
    for width in (1, 2, 4, 20, 40, 3000):
        fast = _gather.take_rows(buf, pos, width)
        with monkeypatch.context() as m:
            m.setattr(_gather, "_speedups", None)
            slow = _gather.take_rows(buf, pos, width)
        assert fast.shape == slow.shape and fast.dtype == slow.dtype and (fast == slow).all()
        fast[:1] = 0  # a copy the caller may write to
    tiny = np.zeros(3, np.uint8)  # shorter than the window: the numpy path pads
    assert _gather.take_rows(tiny, np.array([0], np.int64), 8).shape == (1, 8)
