"""The TLS layer's pieces: the TLS 1.3 key schedule's last steps against RFC 8448's
published values, key log lines (each format, and clear problems naming the line), record
framing over arbitrary chunks and after lost bytes, and the ClientHello/ServerHello facts
of real captures."""

from __future__ import annotations

import pytest
from shared_paths import CAPTURES

from parsers.tls import SUITES, KeyLog, RecordStream, tls13_keys
from parsers.tls._handshake import HandshakeBuffer, Hello, read_client_hello, read_server_hello

AES128 = SUITES[0x1301]


def test_tls13_traffic_keys_match_rfc8448():
    """RFC 8448 section 3 (a simple 1-RTT handshake, TLS_AES_128_GCM_SHA256)."""
    server = tls13_keys(AES128, bytes.fromhex("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38"))
    assert server.key.hex() == "3fce516009c21727d0f2e4e86ee403bc"
    assert server.iv.hex() == "5d313eb2671276ee13000b30"
    client = tls13_keys(AES128, bytes.fromhex("b3eddb126e067f35a780b3abf45e2d8f3b1a950738f52e9600746a0e27a55a21"))
    assert client.key.hex() == "dbfaa693d1762c5b666af5d950258d01"
    assert client.iv.hex() == "5bd3c71b836e0b76bb73265f"


def test_key_log_formats_and_problems():
    r = "11" * 32
    text = "\n".join([
        "# a comment",
        f"CLIENT_RANDOM {r} {'22' * 48}",
        f"RSA Session-ID:{'33' * 32} Master-Key:{'44' * 48}",
        f"CLIENT_TRAFFIC_SECRET_0 {r} {'55' * 32}",
        f"SERVER_HANDSHAKE_TRAFFIC_SECRET {r} {'66' * 48}",
        f"EXPORTER_SECRET {r} {'77' * 32}",
        "CLIENT_RANDOM abc",
        f"CLIENT_RANDOM {'zz' * 32} {'22' * 48}",
        f"CLIENT_RANDOM {r} {'22' * 10}",
        "SOMETHING_ELSE 1 2",
    ])  # fmt: skip
    log = KeyLog()
    log.add_text(text, "keys.txt")
    assert log.lines == 4
    assert log.master_secret(bytes.fromhex(r), b"") == bytes.fromhex("22" * 48)
    assert log.master_secret(b"\0" * 32, bytes.fromhex("33" * 32)) == bytes.fromhex("44" * 48)
    assert log.tls13_secret("CLIENT_TRAFFIC_SECRET_0", bytes.fromhex(r)) == bytes.fromhex("55" * 32)
    assert log.problems == [
        "keys.txt line 7: CLIENT_RANDOM needs a client random and a secret (1 fields)",
        "keys.txt line 8: not hexadecimal",
        "keys.txt line 9: a TLS 1.2 master secret has 48 bytes, not 10",
        "keys.txt line 10: unknown label 'SOMETHING_ELSE'",
    ]


def _records(data: bytes, pieces: list[int]) -> list[tuple[int, int, int]]:
    rs, out, off = RecordStream(), [], 0
    for i, n in enumerate(pieces):
        out += [(r.content_type, len(r.payload), r.end_offset) for r in rs.feed(data[off : off + n], i, i, off, 0)]
        off += n
    return out


def test_records_cut_from_any_chunking_and_refound_after_a_loss():
    recs = [bytes([23, 3, 3]) + len(p).to_bytes(2, "big") + p for p in (b"a" * 100, b"b" * 3000, b"c" * 7)]
    data = b"".join(recs)
    want = [(23, 100, 105), (23, 3000, 3110), (23, 7, 3122)]
    assert _records(data, [len(data)]) == want
    assert _records(data, [1] * len(data)) == want
    assert _records(data, [3, 200, 2, 1000, 5000]) == want
    # bytes lost inside the second record: the first is kept, the third refound
    rs = RecordStream()
    got = rs.feed(data[:150], 0, 1, 0, 0)
    got += rs.feed(data[3000:], 1, 2, 3000, 2850)
    assert [(r.content_type, len(r.payload), r.end_offset) for r in got] == [(23, 100, 105), (23, 7, 3122)]
    assert rs.skipped > 0


def _record_ends(stream: bytes) -> list[int]:
    """Where each record of a stream of whole records ends (as its headers say)."""
    ends, at = [], 0
    while at < len(stream):
        at += 5 + int.from_bytes(stream[at + 3 : at + 5], "big")
        ends.append(at)
    return ends


def _fed(pieces: list[tuple[bytes, int, int]], as_bytes: bool) -> tuple:
    """Every record and the framing state after each piece (data, offset, gap): pieces
    as bytes take the shortcut for whole records, as bytearrays the general loop."""
    rs, seen = RecordStream(), []
    for i, (data, off, gap) in enumerate(pieces):
        got = rs.feed(data if as_bytes else bytearray(data), 1000 + i, i + 1, off, gap)
        seen.append(([(r.content_type, r.version, bytes(r.payload), r.ts_ns, r.frame_no, r.end_offset) for r in got],
                     bytes(rs.buf), rs.base, rs.searching, rs.skipped, rs.records))
    return tuple(seen)


@pytest.mark.parametrize("seed", range(12))
def test_whole_record_packets_cut_as_the_general_loop_cuts_them(seed, monkeypatch):
    """Packets of whole records (the usual ones, cut without the buffer) and every other
    kind (a record over packets, a header split, junk after a loss, a gap, an empty
    packet): the same records and the same state as the general loop gives."""
    import random

    rnd = random.Random(seed)
    stream = b"".join(bytes([rnd.choice([22, 23, 23, 23, 21]), 3, rnd.choice([1, 3])]) + n.to_bytes(2, "big")
                      + rnd.randbytes(n) for n in (rnd.choice([0, 1, 5, 60, 900, 17000]) for _ in range(40)))  # fmt: skip
    bounds = _record_ends(stream)
    pieces, pos, off = [], 0, 0
    while pos < len(stream):
        kind = rnd.random()
        later = [b for b in bounds if b > pos]
        if kind < 0.5:  # up to one of the next record ends: whole records, or the rest of one
            n = rnd.choice(later[:3]) - pos
        elif kind < 0.9:
            n = rnd.randrange(1, 400)
        else:
            n = 0
        gap = rnd.randrange(1, 50) if rnd.random() < 0.05 and pieces else 0
        pos += gap
        off += gap
        data = stream[pos : pos + n] if rnd.random() > 0.03 else b"\x99" * 7  # junk now and then
        pieces.append((data, off, gap))
        pos += n
        off += len(data)
    slow = _fed(pieces, False)
    whole, taken = RecordStream._whole, []

    def counted(self, *args):
        got = whole(self, *args)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(RecordStream, "_whole", counted)
    assert _fed(pieces, True) == slow
    assert any(taken)


@pytest.mark.skipif(not CAPTURES.is_dir(), reason=f"shared captures not found at {CAPTURES}")
def test_hello_facts_of_a_real_tls13_handshake():
    """Firefox 65 to facebook.com: the ClientHello and ServerHello read from the capture's
    first records (tshark shows the same SNI, suite and version)."""
    from parsers.capture import CaptureDecoder, decode_segments
    from parsers.records import DecodeStats
    from parsers.tcp import TcpAnalyzer

    dec, tcp = CaptureDecoder(), TcpAnalyzer()
    streams = {0: RecordStream(), 1: RecordStream()}
    bufs = {0: HandshakeBuffer(), 1: HandshakeBuffer()}
    hello = Hello()
    for batch in dec.feed((CAPTURES / "firefox-tls13-facebook-dsb.pcapng").read_bytes()) + dec.close():
        for item in tcp.feed_runs(decode_segments(batch, DecodeStats(), [])):
            for c in item.chunks() if hasattr(item, "chunks") else [item]:
                for rec in streams[c.direction].feed(c.data, c.ts_ns, c.frame_no, c.stream_offset, c.gap_before):
                    if rec.content_type != 22:
                        continue
                    for mtype, body in bufs[c.direction].feed(rec.payload):
                        if mtype == 1:
                            read_client_hello(body, hello)
                        elif mtype == 2:
                            read_server_hello(body, hello)
    assert hello.sni == "www.facebook.com"
    assert hello.alpn_offered[:2] == ["h2", "http/1.1"]
    assert hello.version_name == "TLS 1.3" and hello.cipher_suite == 0x1301 and hello.resumed is False
    assert len(hello.client_random) == 32 and len(hello.server_random) == 32


@pytest.mark.parametrize("seq", [0, 1, 255, 2**32 + 7, 2**64 - 1])
def test_tls13_record_nonce_is_the_iv_xor_the_padded_sequence_number(seq):
    """RFC 8446 section 5.3, written out byte by byte here: a record protected by
    cryptography's AES-GCM under that nonce is read back at that sequence number."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from parsers.tls._decrypt import RecordCipher

    keys = tls13_keys(AES128, bytes.fromhex("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38"))
    nonce = bytes(a ^ b for a, b in zip(keys.iv, seq.to_bytes(12, "big"), strict=True))
    inner = b"hello" + bytes([23]) + b"\0\0"  # content, inner type, padding
    header = bytes([23, 3, 3]) + (len(inner) + 16).to_bytes(2, "big")
    protected = AESGCM(keys.key).encrypt(nonce, inner, header)
    cipher = RecordCipher(AES128, keys, tls13=True)
    cipher.seq = seq
    assert cipher.decrypt(23, 0x0303, protected) == (23, b"hello")


def _tls13_record(keys, seq: int, content: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = bytes(a ^ b for a, b in zip(keys.iv, seq.to_bytes(12, "big"), strict=True))
    inner = content + bytes([23])
    return AESGCM(keys.key).encrypt(nonce, inner, bytes([23, 3, 3]) + (len(inner) + 16).to_bytes(2, "big"))


def test_records_after_lost_bytes_are_read_at_the_sequence_number_their_tag_verifies():
    """Lost bytes held an unknown number of records (at most their size over the least a
    record takes): the next record is tried at each number they leave possible."""
    from parsers.tls._decrypt import MAX_UNSURE, MIN_RECORD, DecryptError, RecordCipher

    keys = tls13_keys(AES128, bytes.fromhex("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38"))
    records = [_tls13_record(keys, seq, f"record {seq}".encode()) for seq in range(8)]
    cipher = RecordCipher(AES128, keys, tls13=True)
    assert cipher.decrypt(23, 0x0303, records[0]) == (23, b"record 0")
    lost = sum(5 + len(r) for r in records[1:4])  # records 1-3 and their headers lost
    assert cipher.lose(lost)
    assert cipher.decrypt(23, 0x0303, records[4]) == (23, b"record 4")
    assert (cipher.seq, cipher.unsure) == (5, 0)
    assert cipher.decrypt(23, 0x0303, records[5]) == (23, b"record 5")  # and on in order
    assert not cipher.lose(MIN_RECORD * (MAX_UNSURE + 1))  # too many to try: not followed
    cipher = RecordCipher(AES128, keys, tls13=True)
    cipher.lose(5 + len(records[0]))  # too few bytes for records 0-5: record 6 is not tried at 6
    with pytest.raises(DecryptError, match="no record sequence number from 0 to"):
        cipher.decrypt(23, 0x0303, records[6])


def _protect(keys, seq: int, inner: bytes, outer: int = 23) -> bytes:
    """A TLS 1.3 record (header and all) of ``inner`` (content, inner type, padding)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    header = bytes([outer, 3, 3]) + (len(inner) + 16).to_bytes(2, "big")
    nonce = bytes(a ^ b for a, b in zip(keys.iv, seq.to_bytes(12, "big"), strict=True))
    return header + AESGCM(keys.key).encrypt(nonce, inner, header)


def _direction_records(rnd, secret: bytes) -> bytes:
    """One direction's records after the handshake: mostly application data, and now and
    then what the one-pass reading leaves to the record-by-record one (padding, an empty
    record, a ticket, a KeyUpdate, an alert, a middlebox ChangeCipherSpec, a bad tag)."""
    from parsers.tls import tls13_next_secret

    keys, seq, out = tls13_keys(AES128, secret), 0, []
    for i in range(60):
        kind, body = rnd.random(), rnd.randbytes(rnd.choice([1, 30, 700, 3000]))
        if kind < 0.75:
            out.append(_protect(keys, seq, body + b"\x17"))
        elif kind < 0.8:
            out.append(_protect(keys, seq, body + b"\x17" + bytes(rnd.randrange(1, 40))))
        elif kind < 0.83:
            out.append(_protect(keys, seq, b"\x17"))
        elif kind < 0.88:  # a NewSessionTicket: a handshake message read and let go
            out.append(_protect(keys, seq, bytes([4]) + len(body).to_bytes(3, "big") + body + b"\x16"))
        elif kind < 0.92:  # KeyUpdate: the records after it under the next keys
            out.append(_protect(keys, seq, bytes([24, 0, 0, 1, 0, 0x16])))
            secret = tls13_next_secret(AES128, secret)
            keys, seq = tls13_keys(AES128, secret), -1
        elif kind < 0.94:
            out.append(_protect(keys, seq, bytes([1, 0]) + b"\x15"))
        elif kind < 0.96:
            out.append(bytes([20, 3, 3, 0, 1, 1]))
            seq -= 1
        elif kind < 0.97 and i >= 50:  # a tag that does not verify: no keys from there
            rec = bytearray(_protect(keys, seq, body + b"\x17"))
            rec[-1] ^= 1
            out.append(bytes(rec))
        else:
            out.append(_protect(keys, seq, body + b"\x17"))
        seq += 1
    return b"".join(out)


@pytest.mark.parametrize("one_pass", ["c", "python"])
@pytest.mark.parametrize("seed", range(40))
def test_packets_of_whole_records_opened_in_one_pass_as_record_by_record(seed, one_pass, monkeypatch):
    """TlsConnection.feed_rows (what the session hands a run of packets to) reads packets
    of whole application data records in one pass, their plaintext gathered into a run:
    the same plaintext, in the same order, offsets, sequence numbers and state as feeding
    each packet to TlsConnection.feed, whatever the records hold, however the packets cut
    them and whatever bytes were lost; with the C one pass (parsers/tls/_speedups.c) and
    the Python one alike."""
    import random

    from fuzz.targets import tls_fed_in_runs
    from parsers.tls import RecordCipher, TlsConnection, _onepass

    if one_pass == "c":  # (loaded whatever TAILTAP_PURE_PYTHON says: both are compared here)
        c_one_pass = pytest.importorskip("parsers.tls._speedups", reason="parsers/tls/_speedups.c not built")
        chosen = c_one_pass.open_run
    else:
        chosen = _onepass.open_run_rows

    rnd = random.Random(seed)
    secrets = (rnd.randbytes(32), rnd.randbytes(32))
    streams = [_direction_records(rnd, secret) for secret in secrets]
    pieces = []  # (TCP direction, data, offset, bytes lost before) of each packet, in order
    for d, stream in enumerate(streams):
        bounds = _record_ends(stream)
        pos, mine, lost = 0, [], 0
        while pos < len(stream):
            later = [b for b in bounds if b > pos]
            n = rnd.choice(later[:3]) - pos if rnd.random() < 0.8 else rnd.randrange(1, 600)
            if mine and rnd.random() < 0.02:  # a packet the capture missed
                lost += len(stream[pos : pos + n])
            else:
                mine.append((d, stream[pos : pos + n], pos, lost))
                lost = 0
            pos += n
        pieces.append(mine)
    order = [0] * len(pieces[0]) + [1] * len(pieces[1])
    rnd.shuffle(order)
    packets, taken = [], [0, 0]  # (direction, data, ts_ns, frame_no, offset, bytes lost before)
    for i, d in enumerate(order):
        _, data, off, gap = pieces[d][taken[d]]
        taken[d] += 1
        packets.append((d, data, 1000 + i, i + 1, off, gap))

    def connection(plaintext=None) -> tuple[TlsConnection, list]:
        got: list = []
        conn = TlsConnection(1, 0, None, plaintext or (lambda *plain: got.append(plain)))
        conn.hello.version, conn.suite, conn.status = 0x0304, AES128, "decrypting"
        conn.tls13_secrets = list(secrets)
        conn.ciphers = [RecordCipher(AES128, tls13_keys(AES128, s), tls13=True) for s in secrets]
        return conn, got

    def state(conn: TlsConnection, got: list) -> tuple:
        return (got, conn.status, conn.why_keyless, conn.decrypted_records, conn.plain_ends, conn.tcp_ends,
                conn.plain_offset, [c and c.seq for c in conn.ciphers], [(s.base, s.records, s.skipped) for s in conn.streams],
                list(conn.issues), conn.facts())  # fmt: skip

    slow, slow_got = connection()
    for packet in packets:
        slow.feed(*packet)
    counted: list[int] = []
    monkeypatch.setattr(_onepass, "open_run", lambda *a: counted.append(1) or chosen(*a))
    # as the session feeds it: the packets after lost bytes one by one, the others as runs
    fast, fast_got = tls_fed_in_runs(lambda handed: connection(handed)[0], packets)
    assert state(fast, fast_got) == state(slow, slow_got)
    assert counted and slow.decrypted_records >= 10


def test_one_pass_in_c_opens_and_refuses_what_the_python_one_does():
    """parsers/tls/_speedups.c's open_run against open_run_rows, called directly on
    packets at the edges of the cut (a header cut short, a record longer than the packet,
    another content type, an implausible version or length, nothing at all) and of the
    opening (a tag that fails, padding, an empty record, the records after those), alone
    and in runs with the other role's packets, a role not being read, a packet at another
    offset: the same results, the same rows, bytes and end offsets appended, nothing of a
    refused packet taken; and an error the AEAD raises (other than its tag failing) is
    raised with nothing of that packet appended."""
    import random

    import numpy as np
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from parsers.tls import _onepass

    c_one_pass = pytest.importorskip("parsers.tls._speedups", reason="parsers/tls/_speedups.c not built")
    keys = [tls13_keys(AES128, bytes([role]) * 32) for role in (0, 1)]
    decrypts = tuple(AESGCM(k.key).decrypt for k in keys)
    rnd = random.Random(7)

    def app(seq: int, body: bytes, role: int = 0) -> bytes:
        return _protect(keys[role], seq, body + b"\x17")

    def bad_tag(seq: int) -> bytes:
        rec = bytearray(app(seq, b"x" * 40))
        rec[-1] ^= 1
        return bytes(rec)

    packets = [
        app(5, b"one") + app(6, b"two" * 300) + app(7, b"three"),
        app(5, b"a") + _protect(keys[0], 6, b"padded\x17" + bytes(9)) + app(7, b"after padding"),
        app(5, b"a") + _protect(keys[0], 6, b"\x17") + app(7, b"after an empty record"),
        app(5, b"a") + bad_tag(6) + app(7, b"after a bad tag"),
        app(5, b"a") + _protect(keys[0], 6, bytes([1, 0]) + b"\x15"),  # an alert
        app(4, b"at the wrong sequence number"),
        app(5, b"whole") + app(6, b"cut short")[:-3],
        app(5, b"whole") + b"\x17\x03",  # a header cut short
        app(5, b"a") + bytes([22, 3, 3, 0, 4, 1, 2, 3, 4]),  # another content type
        bytes([23, 2, 3, 0, 1, 0]),  # SSL 2 version byte
        bytes([23, 3, 5, 0, 1, 0]),  # version 3.5
        bytes([23, 3, 3, 0x48, 1]) + bytes(0x4801),  # longer than a record may be
        b"",
    ] + [app(5, rnd.randbytes(rnd.randrange(0, 2000))) + app(6, rnd.randbytes(3)) for _ in range(20)]
    runs = [[(0, p, 500)] for p in packets] + [
        # (role, bytes, direction offset): the server's packets between, in order, then
        # a refused one; a packet at another offset; a role not read
        [(0, app(5, b"c1"), 500), (1, app(0, b"s1", 1) + app(1, b"s2", 1), 900), (0, app(6, b"c2"), 500 + len(app(5, b"c1"))),
         (1, app(2, b"s3", 1), 900 + len(app(0, b"s1", 1) + app(1, b"s2", 1))),
         (0, b"\x16\x03\x03\x00\x01\x00", 500 + len(app(5, b"c1") + app(6, b"c2")))],
        [(0, app(5, b"c1"), 500), (0, app(6, b"c2"), 12345)],
        [(1, app(0, b"s1", 1), 900), (0, app(5, b"c1"), 500)],
    ]  # fmt: skip
    outcomes = []
    for k, run in enumerate(runs):
        buf = b"pre" + b"".join(p for _role, p, _off in run) + b"post"
        rows, at = [], 3
        for role, p, off in run:
            rows.append((role, 1000 + at, 7 + at, off, at, at + len(p)))  # (client_dir 0: direction = role)
            at += len(p)
        rows = np.array(rows, dtype=np.int64).reshape(-1, 6)
        read = (decrypts[0], None) if k == len(runs) - 1 else decrypts
        results = []
        for one_pass in (c_one_pass.open_run, _onepass.open_run_rows):
            out_rows, out, ends = bytearray(b"r" * 48), bytearray(b"held"), ([4], [9], [100], [200])
            got = one_pass(rows, 0, memoryview(buf), 0, read, (keys[0].iv, keys[1].iv), (5, 0), (500, 900), (40, 70),
                           InvalidTag, out_rows, out, ends[:2], ends[2:])  # fmt: skip
            results.append((got, bytes(out_rows), bytes(out), ends))
        assert results[0] == results[1], run[0][1][:40]
        outcomes.append(results[0][0])
    # refused at once; every record opened; some, then one that does not; none; runs read on
    assert any(o[0] == 0 and o[1] == -1 for o in outcomes) and any(o[0] == 1 and o[1] == -1 for o in outcomes)
    assert {(o[1] == o[2], 0 < o[2] < o[1], o[2] == 0) for o in outcomes if o[1] >= 0} == {
        (False, True, False), (False, False, True)}
    assert [o[0] for o in outcomes[-3:]] == [4, 1, 0] and outcomes[-3][7] == (2, 3)

    def refusing(nonce: bytes, data: bytes, aad: bytes) -> bytes:
        raise ValueError("not a tag failure")

    for one_pass in (c_one_pass.open_run, _onepass.open_run_rows):
        record = app(0, b"x")
        out_rows, out, plain_ends = bytearray(), bytearray(), []
        with pytest.raises(ValueError, match="not a tag failure"):
            one_pass(np.array([[0, 0, 0, 0, 0, len(record)]], dtype=np.int64), 0, memoryview(record), 0,
                     (refusing, None), (keys[0].iv, keys[1].iv), (0, 0), (0, 0), (0, 0), InvalidTag, out_rows, out,
                     (plain_ends, []), ([], []))  # fmt: skip
        assert (out_rows, out, plain_ends) == (bytearray(), bytearray(), [])


def _sessions(capture, keylog, as_runs: bool) -> list:
    """Every connection's SessionResult, the TCP layer's runs handed to the sessions as
    runs (what the pipeline does) or chunk by chunk."""
    from parsers.capture import CaptureDecoder, decode_segments
    from parsers.records import ChunkRun, DecodeStats
    from parsers.session import AppSession
    from parsers.tcp import TcpAnalyzer

    keys = None
    if keylog is not None:
        keys = KeyLog()
        keys.add_text(keylog.read_text())
    dec, tcp, sessions = CaptureDecoder(), TcpAnalyzer(), {}
    for batch in dec.feed(capture.read_bytes()) + dec.close():
        for item in tcp.feed_runs(decode_segments(batch, DecodeStats(), [])):
            s = sessions.get(item.conn_key)
            if s is None:
                s = sessions[item.conn_key] = AppSession(item.conn_key, *tcp.connection_info(item.conn_key), keylog=keys)
            if type(item) is ChunkRun and as_runs:
                s.feed_run(item)
            else:
                for c in item.chunks() if type(item) is ChunkRun else [item]:
                    s.feed(c)
    return [s.finish(0) for _, s in sorted(sessions.items())]


@pytest.mark.skipif(not CAPTURES.is_dir(), reason=f"shared captures not found at {CAPTURES}")
@pytest.mark.parametrize("capture, keylog", [
    ("http2-google-tls13-dsb.pcapng", "http2-google-tls13-dsb.keylog"),
    ("firefox-tls13-facebook-dsb.pcapng", "firefox-tls13-facebook-dsb.keylog"),
    ("grpc_person_search_protobuf_and_json_tls.pcapng", "grpc_person_search_protobuf_and_json_tls.keylog.txt"),
    ("http2-16-ssl.pcapng", "http2-16-ssl.keylog"),
])  # fmt: skip
def test_decrypted_connections_read_from_runs_as_chunk_by_chunk(capture, keylog):
    """Real HTTP/2 and gRPC over TLS 1.3 and 1.2 with their key logs: a session handed
    the TCP layer's runs (its TLS records opened in one pass, the plaintext handed on as
    a run) gives the requests, messages, events, issues and TLS facts it gives when each
    chunk is fed on its own."""
    runs = _sessions(CAPTURES / capture, CAPTURES / keylog, as_runs=True)
    chunks = _sessions(CAPTURES / capture, CAPTURES / keylog, as_runs=False)
    assert runs == chunks
    assert any(r.tls and r.tls["tls_decrypted"] and r.requests for r in runs)


@pytest.mark.skipif(not CAPTURES.is_dir(), reason=f"shared captures not found at {CAPTURES}")
@pytest.mark.parametrize("capture", [
    "http2-google-tls13-dsb.pcapng", "firefox-tls13-facebook-dsb.pcapng",
    "grpc_person_search_protobuf_and_json_tls.pcapng", "http2-16-ssl.pcapng",
])  # fmt: skip
def test_connections_without_keys_read_from_runs_as_chunk_by_chunk(capture):
    """The same captures without their key logs: a session handed runs (a packet of whole
    application data records to the estimates without a record made each) gives the
    estimated requests, response chunks, issues and facts it gives chunk by chunk."""
    runs = _sessions(CAPTURES / capture, None, as_runs=True)
    chunks = _sessions(CAPTURES / capture, None, as_runs=False)
    assert runs == chunks
    assert any(r.tls and not r.tls["tls_decrypted"] and r.requests for r in runs)
