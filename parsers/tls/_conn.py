"""One TLS connection: its records, its handshake's facts, and either its plaintext (with
keys: decrypted record by record and handed, timed by the packet that completed each
record, to the same application decoders as cleartext) or estimates from the record layer
alone (without keys, or when the keys do not fit).

Roles: 0 = the client (the ClientHello's sender), 1 = the server."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import numpy as np

from parsers.records import DecodeIssue, RunBuilder

from . import _onepass
from ._decrypt import DecryptError, RecordCipher
from ._handshake import (
    CLIENT_HELLO,
    FINISHED,
    KEY_UPDATE,
    SERVER_HELLO,
    HandshakeBuffer,
    Hello,
    read_client_hello,
    read_encrypted_extensions,
    read_server_hello,
)
from ._keyless import KeylessEstimator
from ._keylog import KeyLog
from ._keys import SUITES, Suite, tls12_keys, tls13_keys, tls13_next_secret
from ._records import (
    ALERT,
    APPLICATION_DATA,
    CHANGE_CIPHER_SPEC,
    HANDSHAKE,
    Record,
    RecordStream,
    _app_data_ends,
    _whole_records,
)

ENCRYPTED_EXTENSIONS = 8
_SECRETS = (("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0"),
            ("SERVER_HANDSHAKE_TRAFFIC_SECRET", "SERVER_TRAFFIC_SECRET_0"))  # fmt: skip


class TlsConnection:
    """Feed it each direction's in-order bytes (TCP direction, as the session sees them);
    ``plaintext`` receives (TCP direction, bytes, ts_ns, frame_no, plaintext offset, gap)."""

    def __init__(self, conn_key: int, client_dir: int, keylog: KeyLog | None,
                 plaintext: Callable[[int, bytes, int, int, int, int], Any]) -> None:
        self.conn_key = conn_key
        self.client_dir = client_dir  # TCP direction of the client
        self.keylog = keylog
        self.plaintext = plaintext
        self.hello = Hello()
        self.streams = (RecordStream(), RecordStream())
        self.clear_hs = (HandshakeBuffer(), HandshakeBuffer())
        self.secret_hs = (HandshakeBuffer(), HandshakeBuffer())
        self.ciphers: list[RecordCipher | None] = [None, None]
        self.tls13_secrets: list[bytes | None] = [None, None]
        self.suite: Suite | None = None
        self.status = "handshake"  # handshake | decrypting | keyless
        self.why_keyless: str | None = None  # why the plaintext is not read
        self.encrypted_seen = False
        self._seen_protected = [False, False]  # by role: protected records from here on
        self._tls12: Any = None  # (client, server) DirectionKeys of a TLS 1.2 session
        self.plain_offset = [0, 0]  # by role: plaintext bytes handed on
        # by role: plaintext end offset and direction (TCP) end offset of each app record
        self.plain_ends: tuple[list[int], list[int]] = ([], [])
        self.tcp_ends: tuple[list[int], list[int]] = ([], [])
        self.plain_gap = [0, 0]
        self.keyless = KeylessEstimator(conn_key, client_dir)
        self.issues: list[DecodeIssue] = []
        self.decrypted_records = 0

    # -- input ---------------------------------------------------------------------------
    def feed(self, d: int, data: bytes, ts_ns: int, frame_no: int, offset: int, gap: int) -> None:
        role = 0 if d == self.client_dir else 1
        stream = self.streams[role]
        skipped = stream.skipped
        records = stream.feed(data, ts_ns, frame_no, offset, gap)
        if stream.skipped != skipped:
            self.plain_gap[role] = 1
            self.keyless.lost(role)
            cipher = self.ciphers[role]
            if self.status == "decrypting" and (cipher is None or not cipher.lose(stream.skipped - skipped)):
                # (a cipher tries the sequence numbers the lost bytes leave possible)
                self._go_keyless(f"bytes of the {('client', 'server')[role]}'s records were lost "
                                 "(the record sequence cannot be followed)", frame_no)  # fmt: skip
        for rec in records:
            self._record(role, rec)

    def feed_rows(self, rows: np.ndarray, mv: memoryview, plain: RunBuilder) -> None:
        """:meth:`feed` for each row of a ChunkRun (``rows``: int64, RunColumn order; the
        bytes in ``mv``; runs have no gaps). The usual packets of a TLS 1.3 connection being
        decrypted, whole application data records, are cut and opened in one pass
        (parsers/tls/_onepass.py), their plaintext added to ``plain`` there; the rest goes
        to :attr:`plaintext`, which the caller gathers into the same run, in order (the same
        records, sequence numbers, plaintext and offsets as :meth:`feed` gives)."""
        listed: list | None = None  # the rows as tuples, made when Python first reads one
        i, n = 0, len(rows)
        while i < n:
            if listed is None:
                d, ts, fno, off, a, z = rows[i].tolist()
            else:
                d, ts, fno, off, a, z = listed[i]
            if self._one_pass_reads(d, off):
                read = self._one_pass(rows, i, mv, plain)
                if read > i:
                    i = read
                    continue
            if self.status != "keyless" or not self._keyless_app_data(d, mv[a:z], ts, off):
                self.feed(d, bytes(mv[a:z]), ts, fno, off, 0)
            i += 1
            if listed is None and i < n:
                listed = rows.tolist()

    def _one_pass_reads(self, d: int, offset: int) -> bool:
        """Whether the one pass may read a packet of TCP direction ``d`` at direction offset
        ``offset``: its role's (:meth:`_one_pass_role`), starting at its next record."""
        role = 0 if d == self.client_dir else 1
        return offset == self.streams[role].base and self._one_pass_role(role)

    def _one_pass_role(self, role: int) -> bool:
        """Whether the one pass may read ``role``'s packets: being decrypted, TLS 1.3, its
        record sequence and framing followed."""
        cipher = self.ciphers[role]
        return (self.status == "decrypting" and cipher is not None and cipher.tls13 and not cipher.unsure
                and not self.plain_gap[role] and self.streams[role].between_records())

    def _keyless_app_data(self, d: int, data: memoryview, ts: int, offset: int) -> bool:
        """A packet of a connection read without keys that is whole application data
        records from its direction's next record on (the usual one), to the estimator as
        :meth:`feed` hands its records on, without a Record or a copy of its bytes each;
        False, nothing done, for any other packet."""
        role = 0 if d == self.client_dir else 1
        stream = self.streams[role]
        if offset != stream.base or not stream.between_records():
            return False
        ends = _app_data_ends(data)
        if ends is None:
            return False
        stream.cut_outside(offset + len(data), len(ends))
        self.encrypted_seen = True
        self._seen_protected[role] = True
        estimator, hello, start = self.keyless, self.hello, 0
        for end in ends:
            estimator.app_data(role, end - start - 5, ts, offset + end, hello)
            start = end
        return True

    def _one_pass(self, rows: np.ndarray, first: int, mv: memoryview, plain: RunBuilder) -> int:
        """The rows from ``first`` on that the one pass reads; returns the first it left."""
        streams = self.streams
        ciphers = [c if self._one_pass_role(role) else None for role, c in enumerate(self.ciphers)]
        live = next(c for c in ciphers if c is not None)  # (the first row's, at least)
        stop, records, opened, seqs, bases, ats, cut, opened_by = _onepass.open_run(
            rows, first, mv, self.client_dir, tuple(c and c.aead.decrypt for c in ciphers),
            tuple(c and c.iv for c in ciphers), tuple(c.seq if c else 0 for c in ciphers),
            (streams[0].base, streams[1].base), tuple(self.plain_offset), live.invalid_tag, plain.rows, plain.buf,
            self.plain_ends, self.tcp_ends)  # fmt: skip
        for role, cipher in enumerate(ciphers):
            if cipher is not None and cut[role]:
                cipher.seq = seqs[role]
                streams[role].cut_outside(bases[role], cut[role])
                self.plain_offset[role] = ats[role]
                self.decrypted_records += opened_by[role]
                self.encrypted_seen = True
                self._seen_protected[role] = True
        if records < 0:
            return stop
        d, ts, fno, off, a, z = rows[stop].tolist()  # (cut, and its leading records opened)
        self._records_left(0 if d == self.client_dir else 1, bytes(mv[a:z]), opened, ts, fno, off)
        return stop + 1

    def _records_left(self, role: int, data: bytes, opened: int, ts: int, fno: int, off: int) -> None:
        """The records of a packet of whole application data records after the ``opened``
        leading ones the one pass opened (padding, handshake messages, alerts, a tag that
        fails, and those after), read as any record is."""
        cut = _whole_records(data)
        assert cut is not None  # (the one pass cut it)
        start = cut[opened - 1][2] if opened else 0
        for _ctype, version, end in cut[opened:]:
            self._record(role, Record(APPLICATION_DATA, version, data[start + 5 : end], ts, fno, off + end))
            start = end

    def _hand_on(self, role: int, d: int, plain: bytes, ts: int, fno: int, end_offset: int) -> None:
        """Decrypted application data of ``role`` (TCP direction ``d``), the record that
        carried it ending at direction offset ``end_offset``, to the plaintext's reader."""
        off = self.plain_offset[role]
        gap, self.plain_gap[role] = self.plain_gap[role], 0
        self.plain_offset[role] = off + len(plain)
        self.plain_ends[role].append(off + len(plain))
        self.tcp_ends[role].append(end_offset)
        self.plaintext(d, plain, ts, fno, off, gap)

    def _record(self, role: int, rec: Record) -> None:
        ctype = rec.content_type
        if ctype == HANDSHAKE and self.ciphers[role] is None and not self._seen_protected[role]:
            for mtype, body in self.clear_hs[role].feed(rec.payload):
                self._clear_handshake(role, mtype, body, rec)
            return
        if ctype == CHANGE_CIPHER_SPEC:
            if self.hello.version != 0x0304:
                self._tls12_ccs(role, rec)
            return
        if ctype == ALERT and self.ciphers[role] is None:
            return
        # protected
        self.encrypted_seen = True
        self._seen_protected[role] = True
        if self.status == "decrypting" and self.ciphers[role] is not None:
            self._decrypt(role, rec)
            return
        if self.status != "keyless":
            if not self.hello.client_random or not self.hello.server_random:
                why = "the handshake was not captured (the connection began before the capture)"
            else:
                why = self.why_keyless or "no keys for this session"
            self._go_keyless(why, rec.frame_no)
        self.keyless.record(role, rec, self.hello)

    # -- handshake -----------------------------------------------------------------------
    def _clear_handshake(self, role: int, mtype: int, body: bytes, rec: Record) -> None:
        try:
            if mtype == CLIENT_HELLO and role == 0:
                read_client_hello(body, self.hello)
            elif mtype == SERVER_HELLO and role == 1:
                read_server_hello(body, self.hello)
                if not self.hello.retry or self.hello.cipher_suite is not None:
                    self._server_hello_done(rec.frame_no)
        except ValueError as exc:
            self.issues.append(DecodeIssue("tls_bad_hello", rec.frame_no, f"TLS hello not read: {exc}"))

    def _server_hello_done(self, frame_no: int) -> None:
        h = self.hello
        self.keyless.hello = h
        suite = SUITES.get(h.cipher_suite or -1)
        if suite is None:
            self.why_keyless = f"cipher suite 0x{h.cipher_suite or 0:04x} is not decrypted (AEAD suites only)"
            return
        self.suite = suite
        if self.keylog is None or not self.keylog:
            self.why_keyless = "no key log given (and no Decryption Secrets Block in the capture)"
            return
        if h.version == 0x0304:
            secrets = [self.keylog.tls13_secret(_SECRETS[r][0], h.client_random) for r in (0, 1)]
            if None in secrets:
                self.why_keyless = "the key log has no TLS 1.3 secrets for this session's client random"
                return
            for r in (0, 1):
                self.tls13_secrets[r] = secrets[r]
                self.ciphers[r] = RecordCipher(suite, tls13_keys(suite, secrets[r]), tls13=True)  # type: ignore[arg-type]
            self.status = "decrypting"
            return
        master = self.keylog.master_secret(h.client_random, h.server_session_id or h.client_session_id)
        if master is None:
            self.why_keyless = "the key log has no master secret for this session (client random or session id)"
            return
        self._tls12 = tls12_keys(suite, master, h.client_random, h.server_random)
        self.status = "decrypting"

    def _tls12_ccs(self, role: int, rec: Record) -> None:
        if self.status == "decrypting" and self._tls12 is not None and self.suite is not None:
            self.ciphers[role] = RecordCipher(self.suite, self._tls12[role], tls13=False)
        else:
            self._seen_protected[role] = True  # what follows is protected

    def _decrypt(self, role: int, rec: Record) -> None:
        cipher = self.ciphers[role]
        assert cipher is not None
        try:
            ctype, plain = cipher.decrypt(rec.content_type, rec.version, rec.payload)
        except DecryptError as exc:
            self._go_keyless(f"{exc}", rec.frame_no)
            self.keyless.record(role, rec, self.hello)
            return
        self.decrypted_records += 1
        if ctype == HANDSHAKE:
            for mtype, body in self.secret_hs[role].feed(plain):
                self._secret_handshake(role, mtype, body)
        elif ctype == APPLICATION_DATA and plain:
            d = self.client_dir if role == 0 else 1 - self.client_dir
            self._hand_on(role, d, plain, rec.ts_ns, rec.frame_no, rec.end_offset)

    def _secret_handshake(self, role: int, mtype: int, body: bytes) -> None:
        suite = self.suite
        if suite is None or not suite.tls13:
            return
        if mtype == ENCRYPTED_EXTENSIONS and role == 1:
            try:
                read_encrypted_extensions(body, self.hello)
            except ValueError:
                pass
        elif mtype == FINISHED:
            secret = self.keylog.tls13_secret(_SECRETS[role][1], self.hello.client_random) if self.keylog else None
            if secret is None:
                self._go_keyless("the key log has no TLS 1.3 application traffic secret for this session", 0)
                return
            self.tls13_secrets[role] = secret
            self.ciphers[role] = RecordCipher(suite, tls13_keys(suite, secret), tls13=True)
        elif mtype == KEY_UPDATE:
            old = self.tls13_secrets[role]
            if old is not None:
                new = tls13_next_secret(suite, old)
                self.tls13_secrets[role] = new
                self.ciphers[role] = RecordCipher(suite, tls13_keys(suite, new), tls13=True)

    def _go_keyless(self, why: str, frame_no: int) -> None:
        if self.status == "keyless":
            return
        was = self.status
        self.status = "keyless"
        self.why_keyless = why
        self.ciphers = [None, None]
        if was == "decrypting" or self.keylog:
            self.issues.append(DecodeIssue("tls_not_decrypted", frame_no, f"TLS connection read without keys from here: {why}"))

    # -- output --------------------------------------------------------------------------
    def tcp_offset(self, d: int, plain_offset: int | None) -> int | None:
        """The direction offset just after the record that carried plaintext byte
        ``plain_offset - 1`` (message end offsets are joined with ACKs by it)."""
        if plain_offset is None:
            return None
        role = 0 if d == self.client_dir else 1
        ends = self.plain_ends[role]
        if not ends:
            return None
        i = bisect_left(ends, plain_offset)
        return self.tcp_ends[role][min(i, len(ends) - 1)]

    def facts(self) -> dict[str, Any]:
        h = self.hello
        return {
            "tls_version": h.version_name,
            "tls_sni": h.sni,
            "tls_alpn": h.alpn or (h.alpn_offered[0] if len(h.alpn_offered) == 1 else None),
            "tls_cipher": self.suite.name if self.suite else (None if h.cipher_suite is None else f"0x{h.cipher_suite:04x}"),
            "tls_resumed": h.resumed,
            "tls_decrypted": self.decrypted_records > 0 and self.status != "keyless",
            "tls_note": self.why_keyless,
        }
