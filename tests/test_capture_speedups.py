"""The optional C record walks (parsers/capture/_speedups.c) find exactly the records the
Python walks find, on real captures fed in awkward chunkings and on hand-built edge cases
(the container tests also run whole in both modes)."""

from __future__ import annotations

import dataclasses
import random
import struct
from pathlib import Path

import capture_builders as cb
import numpy as np
import pytest

from parsers.capture import CaptureDecoder, _format, _pcap, _pcapng, decode_segments
from parsers.records import DecodeStats, PacketBatch

pytestmark = pytest.mark.skipif(_format._speedups is None, reason="C extension not built (pip install -e .)")

ROOT = Path(__file__).resolve().parents[1]
REAL = sorted(ROOT.glob("samples/*/capture.pcap"))[:4] + sorted(Path("/work/shared/captures").glob("*.pcap*"))


def _decode(data: bytes, pure: bool, monkeypatch, seed: int) -> tuple:
    with monkeypatch.context() as m:
        if pure:
            m.setattr(_pcap, "_speedups", None)
            m.setattr(_pcapng, "_speedups", None)
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
            c = _pcap._walk_pcap(buf, 0, end, 16, rec)
            raw, stop = _format._speedups.walk_pcap(buf, 0, end, 16, order == ">")
            py, pstop = _pcap._walk_pcap_py(buf, 0, end, 16, rec)
            assert np.frombuffer(raw, np.int64).tolist() == py == c[0].tolist()
            assert stop == pstop == c[1]
        head = struct.Struct(order + "II")
        ng = bytearray()
        for i in range(100):
            body = struct.pack(order + "IIIII", 0, 0, i, 4, 4) + b"abcd"
            ng += struct.pack(order + "II", 6, 12 + len(body)) + body + struct.pack(order + "I", 12 + len(body))
        ng += struct.pack(order + "II", 5, 16) + b"\0" * 8  # an ISB stops the walk
        raw, stop = _format._speedups.walk_epb(ng, 0, len(ng), order == ">")
        py, pstop = _pcapng._walk_epb_py(ng, 0, len(ng), head)
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


def _fuzz_batch(rnd: random.Random, n: int) -> PacketBatch:
    """Valid frames of every link type (VLANs, IPv6 extension headers, TCP options),
    then bytes flipped, snaplen cuts and odd wire lengths: mostly garbage headers."""
    src6, dst6 = "2001:db8::1", "fe80::1"
    opts = [b"", cb.NOP * 2 + cb.opt_ts(5, 6), cb.opt_mss(1460) + cb.opt_sack_ok() + cb.opt_wscale(7),
            cb.NOP * 2 + cb.opt_sack([(1, 2), (5, 9)]), b"\x05\x01\x00\x00"]  # fmt: skip
    frames: list[tuple[int, bytes, int]] = []
    for _ in range(n):
        seg = cb.tcp(rnd.randrange(65536), 80, rnd.randrange(1 << 32), 7,
                     payload=b"p" * rnd.choice((0, 1, 30)), options=rnd.choice(opts))  # fmt: skip
        if rnd.random() < 0.5:
            ip = cb.ipv4("10.0.0.1", "10.0.0.2", seg, proto=rnd.choice((6, 6, 17, 1)))
        else:
            ext = rnd.choice(([], [cb.ext_header(0)], [cb.frag_header(8, True)], [cb.ah_header(), cb.ext_header(60, 1)]))
            ip = cb.ipv6(src6, dst6, seg, ext=ext)
        et = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
        lt = rnd.choice((0, 1, 1, 12, 101, 108, 113, 228, 229, 276, 147))
        frame = {0: cb.null(ip, 2 if et == 0x0800 else 24), 108: cb.null(ip, 2 if et == 0x0800 else 24, ">"),
                 1: cb.ether(ip, et, rnd.choice((None, [(0x8100, 5)], [(0x88A8, 1), (0x8100, 2)]))),
                 113: cb.sll(ip, et), 276: cb.sll2(ip, et)}.get(lt, ip)  # fmt: skip
        b = bytearray(frame)
        for _ in range(rnd.choice((0, 0, 1, 3))):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        cut = rnd.choice((len(b), len(b), rnd.randrange(len(b) + 1)))
        frames.append((lt, bytes(b[:cut]), rnd.choice((len(b), 0, cut))))
    buf = b"".join(f[1] for f in frames)
    offsets = np.cumsum([0] + [len(f[1]) for f in frames[:-1]])
    return PacketBatch(
        frame_no=np.arange(1, n + 1, dtype=np.int64),
        ts_ns=np.arange(n, dtype=np.int64) * 1000,
        linktype=np.array([f[0] for f in frames], np.int32),
        caplen=np.array([len(f[1]) for f in frames], np.int32),
        origlen=np.array([f[2] for f in frames], np.int32),
        offset=offsets.astype(np.int64),
        buf=np.frombuffer(buf + bytes(64), np.uint8),
    )


@pytest.mark.parametrize("seed", range(6))
def test_header_decode_same_as_numpy(seed: int, monkeypatch) -> None:
    """The C header decode gives the numpy decode's segments, counts and issues, also on
    corrupt and cut headers of every link type."""
    from parsers.capture import _packets

    batch = _fuzz_batch(random.Random(seed), 3000)
    results = []
    for pure in (False, True):
        stats, issues = DecodeStats(), []
        with monkeypatch.context() as m:
            if pure:
                m.setattr(_packets, "_speedups", None)
            seg = decode_segments(batch, stats, issues)
        cols = {f.name: getattr(seg, f.name) for f in dataclasses.fields(seg) if f.name not in ("buf", "sack")}
        results.append(({k: (v.dtype, v.tolist()) for k, v in cols.items()}, seg.sack, stats,
                        [(i.kind, i.frame_no, i.message) for i in issues]))  # fmt: skip
    assert results[0][1:] == results[1][1:]
    for k, v in results[0][0].items():
        assert v == results[1][0][k], k
    assert len(results[0][0]["frame_no"][1]) > 100  # the fuzz leaves many segments whole


def test_header_decode_declines_bytes_outside_buf() -> None:
    from parsers.capture import _packets

    frame = cb.ether(cb.ipv4("10.0.0.1", "10.0.0.2", cb.tcp(1, 2, 3, 4)))
    cols = [np.empty(1, t) for t in _packets._C_COLUMNS]
    buf = np.frombuffer(frame, np.uint8)
    rest = (np.array([len(frame)], np.int32), np.array([1], np.int32), np.array([7], np.int64), np.array([0], np.int64))
    decode = _packets._speedups.decode_tcp
    assert decode(buf, np.array([0], np.int64), np.array([len(frame)], np.int32), *rest, *cols)[0] == 1
    assert decode(buf, np.array([1], np.int64), np.array([len(frame)], np.int32), *rest, *cols) == -1


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("damage", ["trailer", "caplen", "first", "iface", "none"])
def test_pcapng_epb_records_same_as_numpy(order: str, damage: str, monkeypatch) -> None:
    """The C EPB walk+decode gives the numpy path's rows and issues, also for a block whose
    trailing length or captured length is corrupt, or that names an unknown interface."""
    pkts = [cb.epb(0, 1000 + i, bytes([i]) * (i % 70), order=order) for i in range(60)]
    k = 0 if damage == "first" else 37
    blk = bytearray(pkts[k])
    if damage in ("trailer", "first"):
        blk[-4:] = struct.pack(order + "I", len(blk) + 4)
    elif damage == "caplen":
        blk[20:24] = struct.pack(order + "I", len(blk))
    elif damage == "iface":
        blk[8:12] = struct.pack(order + "I", 3)
    pkts[k] = bytes(blk)
    data = cb.shb(order) + cb.idb(1, order=order) + b"".join(pkts)
    for seed in range(3):
        assert _decode(data, False, monkeypatch, seed) == _decode(data, True, monkeypatch, seed)
    issues = _decode(data, False, monkeypatch, 0)[2]
    assert [i[0] for i in issues] == {"none": [], "iface": ["bad_interface"]}.get(damage, ["bad_block"])
