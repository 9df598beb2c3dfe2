"""pcap / pcapng container decoding: every variant, any chunking, and broken files."""

from __future__ import annotations

import struct

import capture_builders as cb
import numpy as np
import pytest

from parsers.capture import CaptureDecoder, CaptureFormatError, _format, _gather, _pcap, _pcapng
from parsers.records import PacketBatch

T0 = 1_700_000_000_123_456_000  # a microsecond-aligned time in ns


@pytest.fixture(autouse=True, params=["c", "python"])
def record_walk(request, monkeypatch) -> str:
    """Every test runs with the C record walks and gather (when built) and with the
    Python ones."""
    if request.param == "c" and _format._speedups is None:
        pytest.skip("C extension not built (pip install -e .)")
    if request.param == "python":
        for reader in (_pcap, _pcapng, _gather):
            monkeypatch.setattr(reader, "_speedups", None)
    return request.param


def decode(
    data: bytes, chunk: int | None = None, batch_packets: int = 65536
) -> tuple[CaptureDecoder, list[PacketBatch]]:
    dec = CaptureDecoder(batch_packets=batch_packets)
    batches: list[PacketBatch] = []
    step = chunk or max(len(data), 1)
    for i in range(0, len(data), step):
        batches += dec.feed(data[i : i + step])
    batches += dec.close()
    return dec, batches


def rows(batches: list[PacketBatch]) -> list[tuple[int, int, int, int, int, bytes]]:
    """(frame_no, ts_ns, linktype, caplen, origlen, bytes) per packet."""
    out = []
    for b in batches:
        for i in range(len(b)):
            off, cap = int(b.offset[i]), int(b.caplen[i])
            out.append(
                (
                    int(b.frame_no[i]),
                    int(b.ts_ns[i]),
                    int(b.linktype[i]),
                    cap,
                    int(b.origlen[i]),
                    b.buf[off : off + cap].tobytes(),
                )
            )
    return out


def payloads(n: int) -> list[bytes]:
    return [bytes([i % 251]) * (40 + 13 * i % 97) for i in range(n)]


# -- classic pcap ------------------------------------------------------------------------


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("nano", [False, True])
def test_pcap_variants(big_endian: bool, nano: bool) -> None:
    step = 1_234_567 if nano else 1_234_000
    pkts = [(T0 + i * step, p) for i, p in enumerate(payloads(5))]
    dec, batches = decode(cb.pcap(pkts, linktype=1, nano=nano, big_endian=big_endian))
    assert dec.format == "pcap"
    assert dec.issues == []
    assert dec.packets_read == 5
    assert rows(batches) == [(i + 1, ts, 1, len(p), len(p), p) for i, (ts, p) in enumerate(pkts)]
    b = batches[0]
    assert b.frame_no.dtype == np.int64 and b.ts_ns.dtype == np.int64
    assert b.linktype.dtype == np.int32 and b.caplen.dtype == np.int32
    assert b.origlen.dtype == np.int32 and b.offset.dtype == np.int64
    assert b.buf.dtype == np.uint8


def test_pcap_snaplen_origlen_and_fcs_bits_in_linktype() -> None:
    data = cb.pcap([(T0, b"x" * 60, 1514)], linktype=0x10000000 | (2 << 29) | 1)
    _, batches = decode(data)
    assert rows(batches) == [(1, T0, 1, 60, 1514, b"x" * 60)]


def test_modified_pcap_24_byte_records() -> None:
    head = struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, 1)
    rec = struct.pack("<IIII", 100, 5, 3, 3) + b"\0" * 8 + b"abc"
    _, batches = decode(head + rec + rec)
    assert [r[1:] for r in rows(batches)] == [(100_000_005_000, 1, 3, 3, b"abc")] * 2


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1000])
def test_any_chunking_and_exact_batches(chunk: int) -> None:
    pkts = [(T0 + i * 1000, p) for i, p in enumerate(payloads(30))]
    data = cb.pcap(pkts)
    _, whole = decode(data)
    dec, batches = decode(data, chunk=chunk, batch_packets=8)
    assert [len(b) for b in batches] == [8, 8, 8, 6]
    assert rows(batches) == rows(whole)
    assert dec.bytes_read == len(data)
    assert dec.packets_read == 30


@pytest.mark.parametrize("chunk", [1, 50, 100_000])
def test_batches_bounded_by_bytes(chunk: int) -> None:
    """Full-size packets fill a batch by bytes before by count: each batch's records stay
    within batch_bytes (a packet at least), whatever the feeding, and nothing is lost."""
    sizes = [1500, 60, 1500, 1500, 60, 60, 3000, 1500, 40, 1500]
    data = cb.pcap([(T0 + i, bytes([i]) * n) for i, n in enumerate(sizes)])
    _, whole = decode(data)
    dec = CaptureDecoder(batch_packets=4, batch_bytes=3200)
    batches: list[PacketBatch] = []
    for i in range(0, len(data), chunk):
        batches += dec.feed(data[i : i + chunk])
    batches += dec.close()
    assert rows(batches) == rows(whole)
    # records are 16 header bytes + data: [1500 60 1500] [1500 60 60] [3000] [1500 40 1500]
    assert [len(b) for b in batches] == [3, 3, 1, 3]
    for b in batches[:-1]:
        span = int(b.offset[-1] + b.caplen[-1] - b.offset[0])
        assert span <= 3200 or len(b) == 1


def test_feed_returns_full_batches_as_soon_as_ready() -> None:
    data = cb.pcap([(T0, b"a" * 10)] * 5)
    dec = CaptureDecoder(batch_packets=2)
    first = dec.feed(data[: 24 + 3 * 26])  # header + 3 records
    assert [len(b) for b in first] == [2]
    rest = dec.feed(data[24 + 3 * 26 :])
    assert [len(b) for b in rest] == [2]
    last = dec.close()
    assert [len(b) for b in last] == [1]
    assert int(last[0].frame_no[0]) == 5
    with pytest.raises(ValueError):
        dec.feed(b"more")


def test_batch_buffer_is_padded_and_independent_of_input() -> None:
    data = bytearray(cb.pcap([(T0, b"hello"), (T0, b"world")]))
    dec = CaptureDecoder()
    batches = dec.feed(bytes(data)) + dec.close()
    data[:] = b"\0" * len(data)
    b = batches[0]
    assert b.buf[b.offset[1] : b.offset[1] + 5].tobytes() == b"world"
    assert b.buf.shape[0] >= int(b.offset[1]) + 5 + 16  # zero padding after the data


@pytest.mark.parametrize("ng", [False, True])
@pytest.mark.parametrize(("chunk", "batch"), [(1, 3), (100, 5), (333, 1), (5000, 7), (1 << 20, 64)])
def test_batch_buffers_are_exact_spans_that_later_input_never_changes(ng: bool, chunk: int, batch: int) -> None:
    """Every batch buffer is the input from its first packet to the end of its last,
    then BUF_PAD zeros, and stays so while later input is fed (a batch may keep the
    decoder's input buffer instead of a copy)."""
    pkts = [(T0 + i, bytes([i % 251]) * (1 + (i * 37) % 300)) for i in range(400)]
    data = cb.shb() + cb.idb(1) if ng else cb.pcap([])
    at = []  # file offset of every packet's data
    for ts, p in pkts:
        at.append(len(data) + (28 if ng else 16))
        data += cb.epb(0, ts, p) if ng else cb.pcap([(ts, p)])[24:]
    dec = CaptureDecoder(batch_packets=batch)
    batches: list[PacketBatch] = []
    for i in range(0, len(data), chunk):
        batches += dec.feed(data[i : i + chunk])
    batches += dec.close()
    assert sum(len(b) for b in batches) == len(pkts)
    got = [b.buf[int(o) : int(o) + int(c)].tobytes() for b in batches for o, c in zip(b.offset, b.caplen, strict=True)]
    assert got == [p for _, p in pkts]
    # the span is the file's bytes (headers in between included), then zeros
    k = 0
    for b in batches:
        first, end = at[k], int(b.offset[-1]) + int(b.caplen[-1])
        assert b.buf[:end].tobytes() == data[first : first + end]
        assert b.buf.shape[0] == end + _format.BUF_PAD and not b.buf[end:].any()
        k += len(b)


def test_input_buffers_are_reused_only_once_their_batches_are_gone(monkeypatch) -> None:
    """Dropped batches give their input buffer back for reuse; kept ones (and views of
    them) keep theirs unchanged."""
    pkts = [(T0 + i, bytes([i % 251]) * (1 + (i * 37) % 300)) for i in range(600)]
    data = cb.pcap([])
    at = []
    for ts, p in pkts:
        at.append(len(data) + 16)
        data += cb.pcap([(ts, p)])[24:]
    reused = []
    spare = CaptureDecoder._spare

    def counting(self: CaptureDecoder, size: int) -> np.ndarray:
        pool = [s for s, _ in self._retired]
        out = spare(self, size)
        reused.append(any(out is s for s in pool))
        return out

    monkeypatch.setattr(CaptureDecoder, "_spare", counting)
    dec = CaptureDecoder(batch_packets=20)
    kept: list[tuple[int, np.ndarray]] = []  # (first packet, a view of the buffer)
    n = 0
    for i in range(0, len(data), 500):
        for b in dec.feed(data[i : i + 500]):
            if (n // 20) % 3 == 0:
                kept.append((n, b.buf[: int(b.offset[-1]) + int(b.caplen[-1])]))
            n += len(b)
    assert any(reused) and not all(reused)
    for first, view in kept:
        assert view.tobytes() == data[at[first] : at[first] + len(view)]


# -- pcapng ------------------------------------------------------------------------------


def test_pcapng_sections_interfaces_resolutions_and_offsets() -> None:
    sec = T0 // 1_000_000_000
    frac_ns = T0 % 1_000_000_000
    le, be = "<", ">"
    data = b"".join(
        [
            cb.shb(le),
            cb.idb(1, order=le),  # default resolution: microseconds
            cb.idb(113, tsresol=9, order=le),  # nanoseconds
            cb.idb(101, tsresol=3, tsoffset=1000, order=le),  # milliseconds, +1000 s
            cb.epb(0, T0 // 1000, b"A" * 20, order=le),
            cb.epb(1, T0 + 7, b"B" * 21, origlen=100, order=le),
            cb.epb(2, T0 // 1_000_000, b"C" * 22, order=le),
            cb.epb(0, T0 // 1000 + 1, b"D" * 23, order=le),
            # second section, big-endian, power-of-two resolution
            cb.shb(be),
            cb.idb(276, tsresol=0x80 | 20, order=be),
            cb.idb(0, tsresol=0x80 | 0, tsoffset=-5, order=be),
            cb.epb(0, (sec << 20) | (1 << 19), b"E" * 24, order=be),  # sec + 0.5 s
            cb.epb(1, sec, b"F" * 25, order=be),
        ]
    )
    dec, batches = decode(data)
    assert dec.format == "pcapng"
    assert dec.issues == []
    got = rows(batches)
    assert [r[0] for r in got] == [1, 2, 3, 4, 5, 6]
    assert [r[2] for r in got] == [1, 113, 101, 1, 276, 0]
    assert [r[5] for r in got] == [b"A" * 20, b"B" * 21, b"C" * 22, b"D" * 23, b"E" * 24, b"F" * 25]
    assert got[1][3:5] == (21, 100)
    assert got[0][1] == T0
    assert got[1][1] == T0 + 7
    assert got[2][1] == (T0 // 1_000_000) * 1_000_000 + 1000 * 1_000_000_000
    assert got[3][1] == T0 + 1000
    assert got[4][1] == sec * 1_000_000_000 + 500_000_000
    assert got[5][1] == (sec - 5) * 1_000_000_000
    assert frac_ns  # T0 has a sub-second part, so the conversions above are not trivial


def test_pcapng_power_of_two_resolution_floors_to_ns() -> None:
    # 2^-30 s units: 1 unit = 0.931... ns
    data = cb.shb() + cb.idb(1, tsresol=0x80 | 30) + cb.epb(0, (3 << 30) | 3, b"x")
    _, batches = decode(data)
    assert int(batches[0].ts_ns[0]) == 3 * 1_000_000_000 + (3 * 1_000_000_000 >> 30)


def test_pcapng_spb_pb_and_skipped_blocks() -> None:
    data = b"".join(
        [
            cb.shb(),
            cb.nrb(),
            cb.idb(1, snaplen=16),
            cb.dsb(),
            cb.epb(0, 5_000_000, b"e" * 10),
            cb.spb(b"s" * 20, origlen=1500),  # snaplen 16 cuts it; no timestamp
            cb.custom_block(),
            cb.pb(0, 6_000_000, b"p" * 12),
            cb.isb(0, ifdrop=42),
            cb.epb(0, 7_000_000, b"f" * 11),
        ]
    )
    dec, batches = decode(data, chunk=5)
    assert dec.issues == []
    assert rows(batches) == [
        (1, 5_000_000_000, 1, 10, 10, b"e" * 10),
        (2, 5_000_000_000, 1, 16, 1500, b"s" * 16),  # previous packet's time
        (3, 6_000_000_000, 1, 12, 12, b"p" * 12),
        (4, 7_000_000_000, 1, 11, 11, b"f" * 11),
    ]
    assert dec.kernel_drops == 42


def test_pcapng_unknown_block_and_unknown_linktype_reported_once() -> None:
    data = b"".join(
        [
            cb.shb(),
            cb.idb(147),
            cb.block(0x77, b"????"),
            cb.epb(0, 1, b"a"),
            cb.block(0x77, b"!!!!"),
            cb.epb(0, 2, b"b"),
        ]
    )
    dec, batches = decode(data)
    assert len(rows(batches)) == 2
    kinds = [i.kind for i in dec.issues]
    assert kinds == ["unknown_linktype", "unknown_block"]
    assert "147" in dec.issues[0].message and "interface 0" in dec.issues[0].message
    assert not any(i.fatal for i in dec.issues)


def test_pcapng_bad_interface_id_skips_packet_keeps_numbering() -> None:
    data = cb.shb() + cb.idb(1) + cb.epb(0, 1, b"a") + cb.epb(3, 2, b"b") + cb.epb(0, 3, b"c")
    dec, batches = decode(data)
    assert [(r[0], r[5]) for r in rows(batches)] == [(1, b"a"), (3, b"c")]
    assert [(i.kind, i.frame_no, i.fatal) for i in dec.issues] == [("bad_interface", 2, False)]


# -- broken input ------------------------------------------------------------------------


def test_truncated_last_pcap_record() -> None:
    data = cb.pcap([(T0, b"a" * 50), (T0, b"b" * 50), (T0, b"c" * 50)])
    cut = data[:-20]
    dec, batches = decode(cut, chunk=17)
    assert [r[5] for r in rows(batches)] == [b"a" * 50, b"b" * 50]
    [issue] = dec.issues
    assert issue.kind == "truncated_record"
    assert issue.frame_no == 3
    assert issue.byte_offset == 24 + 2 * 66
    assert not issue.fatal


def test_truncated_last_pcapng_block() -> None:
    data = cb.shb() + cb.idb(1) + cb.epb(0, 1, b"a" * 40) + cb.epb(0, 2, b"b" * 40)
    dec, batches = decode(data[:-9])
    assert [r[5] for r in rows(batches)] == [b"a" * 40]
    [issue] = dec.issues
    assert (issue.kind, issue.frame_no, issue.fatal) == ("truncated_record", 2, False)
    assert issue.byte_offset == len(cb.shb() + cb.idb(1) + cb.epb(0, 1, b"a" * 40))
    assert "enhanced packet block" in issue.message


def test_corrupt_pcapng_block_length_mid_file_is_fatal_and_keeps_earlier_packets() -> None:
    good = cb.shb() + cb.idb(1) + cb.epb(0, 1, b"a" * 8) + cb.epb(0, 2, b"b" * 8)
    bad = bytearray(cb.epb(0, 3, b"c" * 8))
    bad[4:8] = struct.pack("<I", len(bad) + 8)  # start length disagrees with the end one
    tail = cb.epb(0, 4, b"d" * 8) * 3
    dec, batches = decode(good + bytes(bad) + tail, chunk=11)
    assert [r[5] for r in rows(batches)] == [b"a" * 8, b"b" * 8]
    [issue] = dec.issues
    assert (issue.kind, issue.frame_no, issue.fatal) == ("bad_block", 3, True)
    assert issue.byte_offset == len(good)


@pytest.mark.parametrize("length", [13, 4, 0x7FFFFFF0])
def test_invalid_pcapng_block_lengths_are_fatal(length: int) -> None:
    good = cb.shb() + cb.idb(1) + cb.epb(0, 1, b"a" * 8)
    bad = bytearray(cb.isb(0, 1))
    bad[4:8] = struct.pack("<I", length)
    dec, batches = decode(good + bytes(bad) + cb.epb(0, 2, b"b"))
    assert [r[5] for r in rows(batches)] == [b"a" * 8]
    [issue] = dec.issues
    assert (issue.kind, issue.frame_no, issue.byte_offset, issue.fatal) == (
        "bad_block",
        2,
        len(good),
        True,
    )


def test_corrupt_pcap_caplen_mid_file_is_fatal() -> None:
    pkts = [(T0, b"a" * 30)] * 3
    data = bytearray(cb.pcap(pkts))
    at = 24 + 46  # second record
    data[at + 8 : at + 12] = struct.pack("<I", 0xFFFF0000)
    data += cb.pcap(pkts)[24:]
    for chunk in (None, 5):
        dec, batches = decode(bytes(data), chunk=chunk)
        assert len(rows(batches)) == 1
        [issue] = dec.issues
        assert (issue.kind, issue.frame_no, issue.byte_offset, issue.fatal) == (
            "bad_record",
            2,
            at,
            True,
        )


def test_mid_file_bad_section_header_is_fatal() -> None:
    shb2 = bytearray(cb.shb())
    shb2[8:12] = b"\0\0\0\0"
    dec, batches = decode(cb.shb() + cb.idb(1) + cb.epb(0, 1, b"a") + bytes(shb2))
    assert len(rows(batches)) == 1
    assert [(i.kind, i.fatal) for i in dec.issues] == [("bad_block", True)]


@pytest.mark.parametrize(
    ("data", "found"),
    [
        (b"\x1f\x8b\x08\x00" + b"\0" * 40, "gzip"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "text 'GET / HTTP/1.1"),
        (b"\x7fELF\x02\x01\x01" + b"\0" * 30, "ELF"),
        (bytes(range(200, 240)), "bytes c8 c9 ca cb"),
    ],
)
def test_garbage_input_raises_naming_what_was_found(data: bytes, found: str) -> None:
    dec = CaptureDecoder()
    with pytest.raises(CaptureFormatError) as err:
        dec.feed(data)
    assert found in str(err.value)
    assert err.value.byte_offset == 0


def test_empty_and_too_short_inputs_raise_at_close() -> None:
    for data, words in [
        (b"", "empty"),
        (b"\xd4\xc3", "too short"),
        (cb.pcap([])[:20], "pcap file header cut short"),
        (cb.shb()[:10], "pcapng section header cut short"),
        (cb.shb()[:20], "pcapng section header cut short"),
    ]:
        dec = CaptureDecoder()
        assert dec.feed(data) == []
        with pytest.raises(CaptureFormatError, match=words):
            dec.close()


def test_header_only_files_are_valid_and_empty() -> None:
    for data in (cb.pcap([]), cb.shb() + cb.idb(1)):
        dec, batches = decode(data)
        assert batches == [] and dec.issues == [] and dec.packets_read == 0


def test_bad_byte_order_magic_in_first_section_header() -> None:
    data = bytearray(cb.shb())
    data[8:12] = b"abcd"
    with pytest.raises(CaptureFormatError, match="byte-order magic"):
        CaptureDecoder().feed(bytes(data))


@pytest.mark.parametrize("where", ["length", "trailer", "version"])
def test_corrupt_first_section_header_is_not_a_capture(where: str) -> None:
    data = bytearray(cb.shb() + cb.idb(1) + cb.epb(0, 1, b"a"))
    if where == "length":
        data[4:8] = struct.pack("<I", 10)
    elif where == "trailer":
        data[24:28] = struct.pack("<I", 99)
    else:
        data[12:14] = struct.pack("<H", 2)
    with pytest.raises(CaptureFormatError, match="unreadable pcapng file header") as err:
        decode(bytes(data))
    assert err.value.byte_offset == 0


def test_pcap_caplen_limit_follows_libpcap_and_snaplen() -> None:
    big = b"x" * 300_000
    dec, batches = decode(cb.pcap([(T0, b"a"), (T0, big)], snaplen=65535))
    assert len(rows(batches)) == 1
    assert [(i.kind, i.frame_no, i.fatal) for i in dec.issues] == [("bad_record", 2, True)]
    dec, batches = decode(cb.pcap([(T0, b"a"), (T0, big)], snaplen=1 << 20))
    assert len(rows(batches)) == 2 and dec.issues == []


def _fed_shared(data: bytes, window: int, batch: int) -> tuple[list[PacketBatch], np.ndarray]:
    """Batches of ``data`` fed as the mapped-file reader feeds it: windows of ``window``
    bytes, each from the first byte the decoder still needs."""
    held = np.frombuffer(data, np.uint8)
    dec = CaptureDecoder(batch_packets=batch)
    batches: list[PacketBatch] = []
    while dec.bytes_read < len(data):
        at = dec.resume_at
        end = min(len(data), max(at + window, dec.bytes_read + 1))
        batches += dec.feed_shared(memoryview(held[at:end]), at)
    return batches + dec.close(), held


@pytest.mark.parametrize("ng", [False, True])
@pytest.mark.parametrize(("window", "batch"), [(97, 3), (1000, 5), (4096, 64), (1 << 20, 7), (1 << 20, 1 << 20)])
def test_shared_input_is_read_in_place_into_the_same_batches(ng: bool, window: int, batch: int) -> None:
    """Input fed with feed_shared gives the packets feed() gives, in buffers that are views
    of it (no copy) with at least BUF_PAD of its bytes after their last packet; only the
    packets that end within BUF_PAD of the input's end are copied (zero padded)."""
    pkts = [(T0 + i, bytes([i % 251]) * (1 + (i * 37) % 300)) for i in range(400)]
    data = cb.shb() + cb.idb(1) if ng else cb.pcap([])
    for ts, p in pkts:
        data += cb.epb(0, ts, p) if ng else cb.pcap([(ts, p)])[24:]
    batches, held = _fed_shared(data, window, batch)
    copied = CaptureDecoder(batch_packets=batch)
    expected = copied.feed(data) + copied.close()

    def packets(bs: list[PacketBatch]) -> list[tuple[int, int, bytes]]:
        return [(int(f), int(t), b.buf[int(o) : int(o) + int(c)].tobytes())
                for b in bs for f, t, o, c in zip(b.frame_no, b.ts_ns, b.offset, b.caplen, strict=True)]  # fmt: skip

    assert packets(batches) == packets(expected)
    assert [(f, p) for f, _t, p in packets(batches)] == [(i + 1, p) for i, (_ts, p) in enumerate(pkts)]
    views = [np.shares_memory(b.buf, held) for b in batches]
    assert sum(views) >= len(batches) - 1 and sum(len(b) for b, v in zip(batches, views, strict=True) if v) > 200
    for b, view in zip(batches, views, strict=True):
        end = int(b.offset[-1]) + int(b.caplen[-1])
        assert b.buf.shape[0] >= end + _format.BUF_PAD
        if not view:
            assert not b.buf[end:].any()


def test_shared_input_must_start_where_the_decoder_resumes() -> None:
    """The decoder still needs the bytes of the packets it has not handed out (the first
    one's data on), and each feed must bring new input."""
    data = cb.pcap([(T0 + i, b"x" * 100) for i in range(10)])
    dec = CaptureDecoder()
    assert not dec.feed_shared(memoryview(data)[:150], 0)  # a record and a half
    assert dec.resume_at == 24 + 16  # the first packet's data: not handed out yet
    with pytest.raises(ValueError, match="start at or before 40"):
        dec.feed_shared(memoryview(data)[140:], 140)
    with pytest.raises(ValueError, match="end after 150"):
        dec.feed_shared(memoryview(data)[:150], 0)
    rest = dec.feed_shared(memoryview(data)[40:], 40) + dec.close()
    assert [int(c) for b in rest for c in b.caplen] == [100] * 10


def test_copied_input_may_follow_shared_input() -> None:
    """feed() after feed_shared(): the decoder copies what it still needs out of the
    caller's input (it never writes into it) and goes on with the same packets."""
    pkts = [(T0 + i, bytes([i % 251]) * (1 + (i * 37) % 300)) for i in range(50)]
    data = cb.pcap(pkts)
    held = np.frombuffer(data, np.uint8).copy()
    held.flags.writeable = False  # as a mapped file is
    dec = CaptureDecoder(batch_packets=7)
    cut = len(data) - 200  # a little copied input after much shared: no room is made in it
    batches = dec.feed_shared(memoryview(held[:cut]), 0)
    batches += dec.feed(data[cut:]) + dec.close()
    copied = CaptureDecoder(batch_packets=7)
    expected = copied.feed(data) + copied.close()

    def payloads(bs: list[PacketBatch]) -> list[bytes]:
        return [b.buf[int(o) : int(o) + int(c)].tobytes() for b in bs for o, c in zip(b.offset, b.caplen, strict=True)]

    assert payloads(batches) == payloads(expected) == [p for _, p in pkts]
