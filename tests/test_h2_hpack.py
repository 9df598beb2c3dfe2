"""Tolerant HPACK: missing dynamic-table context, incremental indexing keeping indexes
aligned, table size updates, SETTINGS_HEADER_TABLE_SIZE, malformed blocks."""

from __future__ import annotations

import pytest
from h2_builders import (
    GRPC_RESPONSE,
    Conv,
    Hpack,
    data,
    grpc_msg,
    grpc_request_headers,
    headers,
    run_session,
    settings,
)
from hpack import Encoder
from hpack.hpack import encode_integer

from parsers.h2._hpack import TolerantDecoder


def _lit_incremental(name_index: int, value: bytes) -> bytes:
    """Literal with incremental indexing, indexed name, raw value."""
    head = encode_integer(name_index, 6)
    head[0] |= 0x40
    return bytes(head) + bytes(encode_integer(len(value), 7)) + value


def _indexed(index: int) -> bytes:
    b = encode_integer(index, 7)
    b[0] |= 0x80
    return bytes(b)


def test_full_context_matches_stock_decoder() -> None:
    enc = Encoder()
    dec = TolerantDecoder()
    for k in range(5):
        hdrs = grpc_request_headers(f"/svc/M{k % 2}") + [
            ("x-req", str(k)),
            ("cookie", "a=1"),
            ("cookie", "b=2"),
        ]
        blk = dec.decode(enc.encode(hdrs))
        assert blk.unknown == 0 and blk.error is None
        h = blk.as_dict()
        assert h[":path"] == f"/svc/M{k % 2}" and h["x-req"] == str(k) and h["cookie"] == "a=1; b=2"


def test_missing_context_keeps_static_and_literals() -> None:
    enc = Encoder()
    enc.encode(grpc_request_headers() + [("x-tenant", "acme")])  # block lost (before capture)
    second = enc.encode(grpc_request_headers("/pkg.Svc/Other") + [("x-tenant", "acme")])
    dec = TolerantDecoder(complete=False)
    blk = dec.decode(second)
    h = blk.as_dict()
    # :method POST and :scheme http are static; :path literal; the rest were dynamic
    assert h[":method"] == "POST" and h[":path"] == "/pkg.Svc/Other" and h[":scheme"] == "http"
    assert blk.unknown >= 3 and "content-type" not in h
    assert all(i > 61 for i in blk.unknown_indexes)


def test_incremental_literals_stay_aligned_after_unknowns() -> None:
    dec = TolerantDecoder(complete=False)
    # block 1: an unknown dynamic entry (index 62), then a new literal inserted at 62
    b1 = _indexed(70) + _lit_incremental(31, b"application/grpc")  # 31 = content-type
    blk1 = dec.decode(b1)
    assert blk1.unknown == 1 and blk1.as_dict() == {"content-type": "application/grpc"}
    # block 2: a literal with incremental indexing whose *name* is unknown (dynamic)
    b2 = _lit_incremental(63, b"tenant-7")
    blk2 = dec.decode(b2)
    assert blk2.unknown == 1 and blk2.fields == [(None, "tenant-7")]
    # block 3: 62 is now the unknown-named entry, 63 is content-type from block 1
    blk3 = dec.decode(_indexed(63) + _indexed(62) + _indexed(64))
    assert blk3.fields[0] == ("content-type", "application/grpc")
    assert blk3.fields[1] == (None, "tenant-7")
    assert blk3.fields[2] == (None, None) and blk3.unknown == 2


def test_size_update_evicts_and_zero_clears() -> None:
    dec = TolerantDecoder()
    dec.decode(_lit_incremental(1, b"a" * 10) + _lit_incremental(4, b"/b"))
    assert len(dec.entries) == 2
    # size update to exactly one entry: the oldest (":authority") goes
    keep = 32 + len(":path") + 2
    upd = encode_integer(keep, 5)
    upd[0] |= 0x20
    blk = dec.decode(bytes(upd) + _indexed(62))
    assert blk.fields == [(":path", "/b")] and dec.max_size == keep
    zero = encode_integer(0, 5)
    zero[0] |= 0x20
    blk = dec.decode(bytes(zero) + _indexed(62))
    assert blk.unknown == 1 and not dec.entries


def test_settings_header_table_size_shrinks_decoder() -> None:
    dec = TolerantDecoder()
    dec.decode(_lit_incremental(1, b"x" * 100))
    dec.set_max_allowed(64)
    assert dec.max_size == 64 and not dec.entries


def test_malformed_block_reports_and_drops_context() -> None:
    dec = TolerantDecoder()
    dec.decode(_lit_incremental(1, b"host-a"))
    blk = dec.decode(b"\x40\x85abc")  # literal name claims 5 bytes, 3 present
    assert blk.error and not dec.complete and not dec.entries
    assert dec.decode(b"\x82").as_dict() == {":method": "GET"}  # static still fine
    bad_huff = dec.decode(b"\x04\x82\xff\xff")  # :path with invalid Huffman (EOS)
    assert bad_huff.error


@pytest.mark.parametrize(("block", "said"), [
    # an index whose integer does not end within hpack's limit
    (b"\xff" * 9, "Variable integer representation is too long: " + repr(b"\xff" * 6)),
    # a table size update cut inside its integer
    (b"\x3f\xff", "Unable to decode HPACK integer representation from " + repr(b"\x3f\xff")),
    # a literal's name length cut inside its integer
    (b"\x00\x7f\xff", "Unable to decode HPACK integer representation from " + repr(b"\x7f\xff")),
])  # fmt: skip
def test_bad_integers_reported_with_their_bytes_the_same_every_time(block: bytes, said: str) -> None:
    """hpack's message shows the bytes it was given: given a memoryview it showed an
    address, so the same block gave another issue message on every run."""
    for _ in range(3):
        assert TolerantDecoder().decode(memoryview(block)).error == f"HPACKDecodingError: {said}"


def test_mid_connection_session_headers_unknown() -> None:
    """Capture starts mid-connection: the dynamic table is missing on both sides."""
    ch, sh = Hpack(), Hpack()
    lost = Conv()
    lost.send(0, headers(1, ch.block(grpc_request_headers())), 0)
    lost.send(1, headers(1, sh.block(GRPC_RESPONSE)), 0)
    conv = Conv()
    conv.send(
        0, headers(3, ch.block(grpc_request_headers())) + data(3, grpc_msg(b"q"), end=True), 1
    )
    conv.send(1, headers(3, sh.block(GRPC_RESPONSE)) + data(3, grpc_msg(b"a")), 2)
    conv.send(1, headers(3, sh.block([("grpc-status", "0")]), end_stream=True), 3)
    conv.send(
        0, headers(5, ch.block(grpc_request_headers())) + data(5, grpc_msg(b"q2"), end=True), 4
    )
    conv.send(1, headers(5, sh.block(GRPC_RESPONSE)) + data(5, grpc_msg(b"a2")), 5)
    conv.send(1, headers(5, sh.block([("grpc-status", "0")]), end_stream=True), 6)
    _s, r = run_session(conv.chunks)
    assert r.protocol == "h2c" and not r.flipped
    reqs = {q.stream_id: q for q in r.requests}
    q = reqs[3]
    assert not q.headers_known and q.method == "POST" and q.http_status == 200
    assert q.path is None  # :path was indexed in the lost table
    # bodies still decoded as gRPC by their framing; timings intact
    assert (q.request_messages, q.response_messages) == (1, 1)
    assert q.first_message == conv.ts(2) and q.end == conv.ts(3) and q.grpc_status == 0
    assert reqs[5].response_messages == 1 and reqs[5].end == conv.ts(6)
    unk = [e for e in r.h2_events if e.kind == "headers_unknown"]
    assert unk and all(e.value > 0 for e in unk)


def test_header_table_size_setting_via_session() -> None:
    ch, sh = Hpack(), Hpack()
    conv = Conv()
    conv.send(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings({1: 0}), 0)
    sh.enc.header_table_size = 0
    conv.send(1, settings(), 0)
    conv.send(
        0, headers(1, ch.block(grpc_request_headers())) + data(1, grpc_msg(b"q"), end=True), 1
    )
    conv.send(1, headers(1, sh.block(GRPC_RESPONSE + [("x-a", "b")])), 2)
    conv.send(1, headers(1, sh.block([("grpc-status", "0"), ("x-a", "b")]), end_stream=True), 3)
    _s, r = run_session(conv.chunks)
    (q,) = r.requests
    assert q.headers_known and q.grpc_status == 0
    assert not r.issues


def test_repeated_blocks_decode_from_cache_only_while_the_table_is_unchanged():
    enc = Encoder()
    dec = TolerantDecoder()
    first = enc.encode([(":status", "200"), ("x-model", "a")])
    again = enc.encode([(":status", "200"), ("x-model", "a")])  # indexed: no table change
    assert dec.decode(first).as_dict() == {":status": "200", "x-model": "a"}
    b1, b2 = dec.decode(again), dec.decode(again)
    assert b1 is b2 and b1.as_dict() == {":status": "200", "x-model": "a"}  # decoded once
    # a new entry shifts the dynamic indexes: the same bytes now name another field
    dec.decode(_lit_incremental(58, b"zzz"))  # user-agent: zzz, inserted at 62
    assert dec.decode(again).as_dict() == {":status": "200", "user-agent": "zzz"}
    dec.lose_context()
    assert dec.decode(again).unknown == 1
