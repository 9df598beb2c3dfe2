"""Bulk link/IP/TCP decoding: every link type, VLANs, IP options and extension headers,
fragments, truncation, TCP options; and the real captures against tshark."""

from __future__ import annotations

import shutil
import subprocess

import capture_builders as cb
import numpy as np
import pytest
from shared_paths import CAPTURES

from parsers.capture import CaptureDecoder, _gather, _packets, decode_segments, format_addr
from parsers.records import DecodeIssue, DecodeStats, PacketBatch, SegmentBatch


@pytest.fixture(autouse=True, params=["c", "gather", "python"])
def header_decode(request, monkeypatch) -> str:
    """Every test runs with the C header decode (when built), with numpy over the C
    header gather, and with numpy alone."""
    if request.param != "python" and _gather._speedups is None:
        pytest.skip("C extension not built (pip install -e .)")
    if request.param != "c":
        monkeypatch.setattr(_packets, "_speedups", None)
    if request.param == "python":
        monkeypatch.setattr(_gather, "_speedups", None)
    return request.param

T0 = 1_600_000_000_000_000_000
SRC4, DST4 = "10.1.2.3", "192.168.200.9"
SRC6, DST6 = "2001:db8::1", "fe80::abcd:1"


def decode_frames(
    frames: list[bytes], linktype: int = 1, snaplen: int | None = None
) -> tuple[SegmentBatch, DecodeStats, list[DecodeIssue]]:
    """Frames -> pcap -> CaptureDecoder -> decode_segments (one batch)."""
    pkts: list[cb.Packet] = []
    for i, f in enumerate(frames):
        cut = f[:snaplen] if snaplen is not None else f
        pkts.append((T0 + i * 1000, cut, len(f)))
    dec = CaptureDecoder()
    batches = dec.feed(cb.pcap(pkts, linktype=linktype)) + dec.close()
    assert len(batches) == 1
    stats, issues = DecodeStats(), []
    return decode_segments(batches[0], stats, issues), stats, issues


def seg_tuple(seg: SegmentBatch, i: int) -> tuple:
    return (
        int(seg.ip_version[i]),
        format_addr(seg.src_hi[i], seg.src_lo[i]),
        format_addr(seg.dst_hi[i], seg.dst_lo[i]),
        int(seg.sport[i]),
        int(seg.dport[i]),
        int(seg.seq[i]),
        int(seg.ack[i]),
        seg.payload(i),
    )


def tcp4(payload: bytes = b"hello", **kw) -> bytes:
    return cb.ipv4(SRC4, DST4, cb.tcp(1234, 80, 1000, 2000, payload=payload, **kw))


def tcp6(payload: bytes = b"hello", ext: list | None = None) -> bytes:
    return cb.ipv6(SRC6, DST6, cb.tcp(1234, 80, 1000, 2000, payload=payload), ext=ext)


V4 = (4, SRC4, DST4, 1234, 80, 1000, 2000, b"hello")
V6 = (6, SRC6, DST6, 1234, 80, 1000, 2000, b"hello")


# -- one packet, every field ---------------------------------------------------------


def test_ethernet_ipv4_tcp_all_fields() -> None:
    frame = cb.ether(
        cb.ipv4(
            SRC4,
            DST4,
            cb.tcp(443, 50000, 0xFFFFFFF0, 0x80000001, flags=0x19, window=1234, payload=b"x" * 100),
            ident=0xBEEF,
        )
    )
    seg, stats, issues = decode_frames([frame])
    assert len(seg) == 1 and issues == []
    assert seg_tuple(seg, 0) == (4, SRC4, DST4, 443, 50000, 0xFFFFFFF0, 0x80000001, b"x" * 100)
    assert int(seg.frame_no[0]) == 1 and int(seg.ts_ns[0]) == T0
    assert int(seg.flags[0]) == 0x19 and int(seg.window[0]) == 1234
    assert int(seg.ip_id[0]) == 0xBEEF
    assert int(seg.payload_len[0]) == int(seg.payload_wire_len[0]) == 100
    assert int(seg.payload_off[0]) + 100 <= seg.buf.shape[0]
    assert not seg.has_ts[0] and int(seg.wscale[0]) == -1 and int(seg.mss[0]) == -1
    assert seg.sack == {}
    assert int(seg.src_hi[0]) == 0 and int(seg.src_lo[0]) == 0xFFFF_0A010203
    dtypes = {
        "frame_no": np.int64, "ts_ns": np.int64, "ip_version": np.uint8, "src_hi": np.uint64,
        "src_lo": np.uint64, "dst_hi": np.uint64, "dst_lo": np.uint64, "sport": np.uint16,
        "dport": np.uint16, "seq": np.uint32, "ack": np.uint32, "flags": np.uint8,
        "window": np.uint16, "payload_off": np.int64, "payload_len": np.int32,
        "payload_wire_len": np.int32, "has_ts": np.bool_, "ts_val": np.uint32,
        "ts_ecr": np.uint32, "wscale": np.int8, "mss": np.int32, "ip_id": np.int32,
    }  # fmt: skip
    for name, dtype in dtypes.items():
        assert getattr(seg, name).dtype == dtype, name
    assert (stats.packets, stats.tcp, stats.linktypes) == (1, 1, {1: 1})
    assert stats.bytes == len(frame)


def test_ethernet_padding_is_not_payload() -> None:
    frame = cb.ether(tcp4(b"")) + b"\0" * 6  # 60-byte minimum frame
    seg, _, _ = decode_frames([frame])
    assert int(seg.payload_len[0]) == 0 and int(seg.payload_wire_len[0]) == 0
    frame = cb.ether(tcp4(b"ab")) + b"\xff" * 4  # + FCS-like trailer
    seg, _, _ = decode_frames([frame])
    assert seg.payload(0) == b"ab"


# -- link types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vlans",
    [
        [(0x8100, 10)],
        [(0x88A8, 100), (0x8100, 10)],  # QinQ
        [(0x9100, 7), (0x88A8, 100), (0x8100, 10)],  # three tags
        [(0x8100, 1)] * 6,
    ],
)
def test_vlan_tags_any_depth(vlans: list[tuple[int, int]]) -> None:
    frames = [cb.ether(tcp4(), vlans=vlans), cb.ether(tcp6(), 0x86DD, vlans=vlans)]
    seg, stats, _ = decode_frames(frames + [cb.ether(tcp4())])
    assert [seg_tuple(seg, i) for i in range(3)] == [V4, V6, V4]


def test_vlan_tag_cut_by_snaplen_is_truncated() -> None:
    frame = cb.ether(tcp4(), vlans=[(0x8100, 1), (0x8100, 2)])
    seg, stats, issues = decode_frames([frame], snaplen=16)
    assert len(seg) == 0 and stats.truncated == 1
    assert [i.kind for i in issues] == ["truncated_packet"]


@pytest.mark.parametrize(
    ("linktype", "wrap"),
    [
        (113, lambda p, et: cb.sll(p, et)),
        (276, lambda p, et: cb.sll2(p, et)),
        (101, lambda p, et: p),
        (12, lambda p, et: p),
        (14, lambda p, et: p),
    ],
)
def test_cooked_and_raw_link_types(linktype: int, wrap) -> None:
    seg, stats, issues = decode_frames([wrap(tcp4(), 0x0800), wrap(tcp6(), 0x86DD)], linktype)
    assert [seg_tuple(seg, i) for i in range(len(seg))] == [V4, V6]
    assert issues == [] and stats.linktypes == {linktype: 2}


def test_raw_ipv4_and_ipv6_link_types() -> None:
    seg, _, _ = decode_frames([tcp4()], 228)
    assert seg_tuple(seg, 0) == V4
    seg, _, _ = decode_frames([tcp6()], 229)
    assert seg_tuple(seg, 0) == V6


@pytest.mark.parametrize("linktype", [0, 108])
@pytest.mark.parametrize("order", ["<", ">"])
def test_bsd_loopback_families_in_both_byte_orders(linktype: int, order: str) -> None:
    frames = [cb.null(tcp4(), 2, order)] + [cb.null(tcp6(), af, order) for af in (24, 28, 30)]
    frames.append(cb.null(b"\x00" * 40, 7, order))  # some other family
    seg, stats, _ = decode_frames(frames, linktype)
    assert [seg_tuple(seg, i) for i in range(len(seg))] == [V4, V6, V6, V6]
    assert stats.non_ip == 1


def test_unknown_linktype_counted_with_one_issue_per_linktype() -> None:
    dec = CaptureDecoder(batch_packets=2)
    data = cb.pcap([(T0, b"abc")] * 5, linktype=147)
    batches = dec.feed(data) + dec.close()
    stats, issues = DecodeStats(), []
    segs = [decode_segments(b, stats, issues) for b in batches]
    assert sum(len(s) for s in segs) == 0
    assert stats.unknown_linktype == 5 and stats.packets == 5
    [issue] = issues
    assert issue.kind == "unknown_linktype" and "147" in issue.message
    assert "5 packet" in issue.message and issue.frame_no == 1


def test_mixed_link_types_in_one_batch() -> None:
    data = b"".join(
        [
            cb.shb(),
            cb.idb(1),
            cb.idb(0),
            cb.idb(147),
            cb.idb(276),
            cb.epb(0, 1, cb.ether(tcp4())),
            cb.epb(1, 2, cb.null(tcp6(), 30)),
            cb.epb(2, 3, b"?" * 30),
            cb.epb(3, 4, cb.sll2(tcp4())),
            cb.epb(0, 5, cb.ether(b"\0" * 28, 0x0806)),  # ARP
        ]
    )
    dec = CaptureDecoder()
    [batch] = dec.feed(data) + dec.close()
    stats, issues = DecodeStats(), []
    seg = decode_segments(batch, stats, issues)
    assert [seg_tuple(seg, i) for i in range(len(seg))] == [V4, V6, V4]
    assert seg.frame_no.tolist() == [1, 2, 4]
    assert stats.linktypes == {1: 2, 0: 1, 147: 1, 276: 1}
    assert (stats.tcp, stats.unknown_linktype, stats.non_ip) == (3, 1, 1)


# -- IP layer --------------------------------------------------------------------------


@pytest.mark.parametrize("option_bytes", [4, 8, 40])
def test_ipv4_options(option_bytes: int) -> None:
    opts = b"\x94\x04\x00\x00" + b"\x01" * (option_bytes - 4)  # router alert + NOPs
    frame = cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1234, 80, 1000, 2000, payload=b"hello"),
                             options=opts))  # fmt: skip
    seg, _, _ = decode_frames([frame])
    assert seg_tuple(seg, 0) == V4


def test_ipv6_extension_header_chain() -> None:
    chains = [
        [cb.ext_header(0)],
        [cb.ext_header(0, 1), cb.ext_header(43, 2), cb.ext_header(60)],
        [cb.ext_header(60), cb.frag_header(0, more=False)],  # atomic fragment: whole packet
        [cb.ah_header(4), cb.ext_header(60, 3)],
    ]
    frames = [cb.ether(tcp6(ext=chain), 0x86DD) for chain in chains]
    seg, stats, issues = decode_frames(frames)
    assert [seg_tuple(seg, i) for i in range(len(seg))] == [V6] * 4
    assert issues == [] and stats.ip_fragments == 0
    assert seg.ip_id.tolist() == [-1] * 4


def test_ip_fragments_counted_and_reported_once_with_count() -> None:
    frames = [
        cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2, payload=b"a" * 16), mf=True)),
        cb.ether(cb.ipv4(SRC4, DST4, b"b" * 16, frag_offset=16)),
        cb.ether(tcp4()),
        cb.ether(tcp6(ext=[cb.frag_header(0, more=True)]), 0x86DD),
        cb.ether(tcp6(ext=[cb.ext_header(0), cb.frag_header(64, more=False)]), 0x86DD),
    ]
    dec = CaptureDecoder(batch_packets=3)
    batches = dec.feed(cb.pcap([(T0, f) for f in frames])) + dec.close()
    stats, issues = DecodeStats(), []
    segs = [decode_segments(b, stats, issues) for b in batches]
    assert [seg_tuple(s, i) for s in segs for i in range(len(s))] == [V4]
    assert stats.ip_fragments == 4 and stats.tcp == 1
    [issue] = issues
    assert issue.kind == "ip_fragment" and issue.frame_no == 1
    assert "4 fragment" in issue.message


def test_non_tcp_counted() -> None:
    frames = [
        cb.ether(cb.ipv4(SRC4, DST4, cb.udp(53, 53, b"q"), proto=17)),
        cb.ether(cb.ipv6(SRC6, DST6, cb.udp(53, 53, b"q"), next_header=17), 0x86DD),
        cb.ether(cb.ipv4(SRC4, DST4, b"\x08\x00" + b"\0" * 6, proto=1)),  # ICMP
        cb.ether(cb.ipv6(SRC6, DST6, b"", next_header=59), 0x86DD),  # no next header
        cb.ether(b"\0" * 28, 0x0806),  # ARP
        cb.ether(b"\xaa\xaa\x03" + b"\0" * 40, 46),  # 802.3 length field + LLC
        cb.ether(tcp4()),
    ]
    seg, stats, issues = decode_frames(frames)
    assert len(seg) == 1 and issues == []
    assert (stats.udp, stats.other_ip, stats.non_ip, stats.tcp) == (2, 2, 2, 1)


@pytest.mark.parametrize(
    ("snaplen", "truncated"),
    [
        (10, True),  # inside the Ethernet header
        (14 + 12, True),  # inside the IPv4 header
        (14 + 20 + 10, True),  # inside the TCP header
        (14 + 20 + 20 + 6, True),  # inside the TCP options
        (14 + 20 + 32 + 3, False),  # inside the payload: a segment with less payload
    ],
)
def test_snaplen_cuts(snaplen: int, truncated: bool) -> None:
    frame = cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2, options=cb.NOP * 2 + cb.opt_ts(5, 6),
                                                 payload=b"z" * 50)))  # fmt: skip
    seg, stats, issues = decode_frames([frame], snaplen=snaplen)
    assert stats.truncated == int(truncated)
    if truncated:
        assert len(seg) == 0 and issues[0].kind == "truncated_packet"
    else:
        assert int(seg.payload_len[0]) == 3 and int(seg.payload_wire_len[0]) == 50
        assert seg.payload(0) == b"zzz" and bool(seg.has_ts[0])


def test_ipv6_extension_header_cut_by_snaplen() -> None:
    frame = cb.ether(tcp6(ext=[cb.ext_header(0, 2)]), 0x86DD)
    seg, stats, _ = decode_frames([frame], snaplen=14 + 40 + 4)
    assert len(seg) == 0 and stats.truncated == 1


def test_tso_zero_length_ip_uses_frame_length() -> None:
    payload = b"p" * 3000
    f4 = cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2, payload=payload), total_length=0))
    f6 = cb.ether(cb.ipv6(SRC6, DST6, cb.tcp(1, 2, payload=payload), payload_length=0), 0x86DD)
    seg, _, _ = decode_frames([f4, f6])
    assert seg.payload_wire_len.tolist() == [3000, 3000]
    assert seg.payload(0) == payload and seg.payload(1) == payload


def test_malformed_headers_counted() -> None:
    frames = [
        cb.ether(b"\x55" + tcp4()[1:]),  # IP version 5 in an IPv4 ethertype
        cb.ether(b"\x44" + tcp4()[1:]),  # IHL 4 (< 20 bytes)
        cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2), total_length=10)),  # shorter than IHL
        cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2, data_offset=4))),  # TCP offset < 5
        cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2), total_length=30)),  # TCP past IP end
        cb.ether(tcp4()),
    ]
    seg, stats, issues = decode_frames(frames)
    assert len(seg) == 1 and int(seg.frame_no[0]) == 6
    assert stats.malformed == 5
    assert [(i.kind, i.frame_no) for i in issues] == [("malformed_ip", 1)]


# -- TCP options -------------------------------------------------------------------------


def opts_of(seg: SegmentBatch, i: int) -> tuple:
    return (
        bool(seg.has_ts[i]),
        int(seg.ts_val[i]),
        int(seg.ts_ecr[i]),
        int(seg.wscale[i]),
        int(seg.mss[i]),
        seg.sack.get(i, []),
    )


def test_tcp_options_layouts() -> None:
    ts = cb.opt_ts(0xDEADBEEF, 0x01020304)
    layouts = [
        (cb.NOP * 2 + ts, (True, 0xDEADBEEF, 0x01020304, -1, -1, [])),
        # Linux SYN
        (cb.opt_mss(1460) + cb.opt_sack_ok() + ts + cb.NOP + cb.opt_wscale(7),
         (True, 0xDEADBEEF, 0x01020304, 7, 1460, [])),
        # macOS SYN
        (cb.opt_mss(16344) + cb.NOP + cb.opt_wscale(6) + cb.NOP * 2 + ts + cb.opt_sack_ok()
         + cb.EOL, (True, 0xDEADBEEF, 0x01020304, 6, 16344, [])),
        # Windows SYN: no timestamps
        (cb.opt_mss(1460) + cb.NOP + cb.opt_wscale(8) + cb.NOP * 2 + cb.opt_sack_ok(),
         (False, 0, 0, 8, 1460, [])),
        # dup ACK with SACK blocks after the timestamps
        (cb.NOP * 2 + ts + cb.NOP * 2 + cb.opt_sack([(100, 200), (0xFFFFFF00, 5)]),
         (True, 0xDEADBEEF, 0x01020304, -1, -1, [(100, 200), (0xFFFFFF00, 5)])),
        (cb.NOP * 2 + cb.opt_sack([(1, 2), (3, 4), (5, 6), (7, 8)]),
         (False, 0, 0, -1, -1, [(1, 2), (3, 4), (5, 6), (7, 8)])),
        # timestamps not behind the two NOPs, then padding
        (ts + cb.NOP * 2, (True, 0xDEADBEEF, 0x01020304, -1, -1, [])),
        # EOL ends the list: the timestamps after it are not options
        (cb.EOL + cb.NOP + ts + cb.NOP, (False, 0, 0, -1, -1, [])),
        # unknown option kinds are skipped by their length
        (b"\x1e\x06abcd" + cb.NOP * 2 + ts, (True, 0xDEADBEEF, 0x01020304, -1, -1, [])),
    ]  # fmt: skip
    frames = [
        cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2, options=o, payload=b"d"))) for o, _ in layouts
    ]
    seg, stats, issues = decode_frames(frames)
    assert issues == []
    assert [opts_of(seg, i) for i in range(len(seg))] == [want for _, want in layouts]
    assert all(seg.payload(i) == b"d" for i in range(len(seg)))
    assert all(isinstance(v, int) for blocks in seg.sack.values() for b in blocks for v in b)


def test_bad_tcp_option_length_keeps_earlier_options_and_reports() -> None:
    bad = cb.opt_mss(1400) + b"\x08\x01" + cb.NOP * 2  # timestamps with length 1
    past_end = cb.opt_wscale(3) + b"\x08\x0a\x00"  # option running past the header
    frames = [
        cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2, options=cb.NOP * 2 + cb.opt_ts(1, 2)))),
        cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2, options=bad))),
        cb.ether(cb.ipv4(SRC4, DST4, cb.tcp(1, 2, options=past_end))),
    ]
    seg, stats, issues = decode_frames(frames)
    assert len(seg) == 3 and stats.malformed == 0
    assert opts_of(seg, 1) == (False, 0, 0, -1, 1400, [])
    assert opts_of(seg, 2) == (False, 0, 0, 3, -1, [])
    assert [(i.kind, i.frame_no) for i in issues] == [("malformed_tcp_options", 2)]


# -- odd batches -----------------------------------------------------------------------


def test_empty_batch_and_unpadded_buffer() -> None:
    empty = PacketBatch(*(np.zeros(0, t) for t in (np.int64, np.int64, np.int32, np.int32,
                                                      np.int32, np.int64, np.uint8)))  # fmt: skip
    seg = decode_segments(empty, DecodeStats(), [])
    assert len(seg) == 0
    frame = cb.null(tcp4(b""), 2)  # the packet ends exactly at the end of buf
    batch = PacketBatch(
        frame_no=np.array([7], np.int64),
        ts_ns=np.array([T0], np.int64),
        linktype=np.array([0], np.int32),
        caplen=np.array([len(frame)], np.int32),
        origlen=np.array([len(frame)], np.int32),
        offset=np.array([0], np.int64),
        buf=np.frombuffer(frame, np.uint8),
    )
    seg = decode_segments(batch, DecodeStats(), [])
    assert seg_tuple(seg, 0) == V4[:-1] + (b"",)


def test_format_addr() -> None:
    assert format_addr(0, 0xFFFF_0A000001) == "10.0.0.1"
    assert format_addr(0, 1) == "::1"
    assert format_addr(0x20010DB8 << 32, 0x1) == "2001:db8::1"
    assert format_addr(np.uint64(0), np.uint64(0xFFFF_7F000001)) == "127.0.0.1"


# -- real captures against tshark ----------------------------------------------------------

FILES = sorted(p.name for p in CAPTURES.glob("*.pcap*")) if CAPTURES.is_dir() else []
FIELDS = [
    "frame.number", "frame.time_epoch", "tcp.srcport", "tcp.dstport", "tcp.seq_raw",
    "tcp.ack_raw", "tcp.len", "ip.src", "ipv6.src", "ip.dst", "ipv6.dst", "ip.id", "tcp.flags",
    "tcp.window_size_value", "tcp.options.timestamp.tsval", "tcp.options.timestamp.tsecr",
    "tcp.options.wscale.shift", "tcp.options.mss_val", "tcp.options.sack_le",
    "tcp.options.sack_re", "tcp.payload",
]  # fmt: skip


def _epoch_ns(text: str) -> int:
    sec, _, frac = text.partition(".")
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])


def _ref_row(f: list[str]) -> tuple:
    def num(s: str, base: int = 10) -> int:
        return int(s, base) if s else -1

    sack = list(zip(map(int, filter(None, f[18].split(","))),
                    map(int, filter(None, f[19].split(","))), strict=True))  # fmt: skip
    return (
        int(f[0]), _epoch_ns(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5]), int(f[6]),
        f[7] or f[8], f[9] or f[10], num(f[11], 16), int(f[12], 16) & 0xFF, int(f[13]),
        num(f[14]), num(f[15]), num(f[16]), num(f[17]), sack, bytes.fromhex(f[20]),
    )  # fmt: skip


def _our_row(seg: SegmentBatch, i: int) -> tuple:
    has_ts = bool(seg.has_ts[i])
    return (
        int(seg.frame_no[i]), int(seg.ts_ns[i]), int(seg.sport[i]), int(seg.dport[i]),
        int(seg.seq[i]), int(seg.ack[i]), int(seg.payload_wire_len[i]),
        format_addr(seg.src_hi[i], seg.src_lo[i]), format_addr(seg.dst_hi[i], seg.dst_lo[i]),
        int(seg.ip_id[i]), int(seg.flags[i]), int(seg.window[i]),
        int(seg.ts_val[i]) if has_ts else -1, int(seg.ts_ecr[i]) if has_ts else -1,
        int(seg.wscale[i]), int(seg.mss[i]), seg.sack.get(i, []), seg.payload(i),
    )  # fmt: skip


@pytest.fixture(scope="module")
def tshark_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple]]:
    """Every capture's TCP segments as tshark decodes them, from a single tshark run
    over all captures concatenated with mergecap (tshark starts slowly)."""
    tools = {t: shutil.which(t) for t in ("tshark", "mergecap", "capinfos")}
    missing = [t for t, path in tools.items() if path is None]
    if missing:
        pytest.skip(f"reference decoder not installed: {', '.join(missing)}")
    paths = [str(CAPTURES / name) for name in FILES]
    merged = tmp_path_factory.mktemp("tshark") / "all.pcapng"
    subprocess.run([tools["mergecap"], "-a", "-I", "none", "-w", str(merged), *paths],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    counts = subprocess.run([tools["capinfos"], "-T", "-r", "-c", *paths], check=True,
                            capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    first_frame: list[tuple[int, str]] = []
    total = 0
    for line, name in zip(counts.splitlines(), FILES, strict=True):
        first_frame.append((total, name))
        total += int(line.split("\t")[-1])
    cmd = [tools["tshark"], "-r", str(merged), "-n", "-o", "tcp.relative_sequence_numbers:FALSE",
           "-Y", "tcp && !icmp && !icmpv6", "-T", "fields", "-E", "occurrence=a"]  # fmt: skip
    for name in FIELDS:
        cmd += ["-e", name]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout
    ref: dict[str, list[tuple]] = {name: [] for name in FILES}
    k = 0
    for line in out.splitlines():
        row = _ref_row(line.split("\t"))
        while k + 1 < len(first_frame) and row[0] > first_frame[k + 1][0]:
            k += 1
        base, name = first_frame[k]
        ref[name].append((row[0] - base, *row[1:]))
    return ref


@pytest.mark.tshark
@pytest.mark.parametrize("name", FILES)
def test_real_capture_matches_tshark(name: str, tshark_reference: dict[str, list[tuple]]) -> None:
    data = (CAPTURES / name).read_bytes()
    dec = CaptureDecoder(batch_packets=64)  # several batches even for small files
    batches = []
    for i in range(0, len(data), 4096):
        batches += dec.feed(data[i : i + 4096])
    batches += dec.close()
    stats, issues = DecodeStats(), []
    segs = [decode_segments(b, stats, issues) for b in batches]
    ours = [_our_row(s, i) for s in segs for i in range(len(s))]
    ref = tshark_reference[name]
    assert dec.issues == [] and issues == []
    assert stats.tcp == len(ref) == len(ours)
    for got, want in zip(ours, ref, strict=True):
        assert got == want, f"frame {want[0]}"
