"""The clear part of a TLS handshake: ClientHello and ServerHello (RFC 8446 section 4.1,
RFC 5246 section 7.4.1) for the connection's facts (SNI, ALPN, version, cipher suite,
resumption) and the randoms and session id the key log is looked up by; and the
handshake message framing, clear or decrypted."""

from __future__ import annotations

from dataclasses import dataclass, field

CLIENT_HELLO, SERVER_HELLO, NEW_SESSION_TICKET, FINISHED, KEY_UPDATE = 1, 2, 4, 20, 24
# ServerHello.random of a HelloRetryRequest (RFC 8446 section 4.1.3)
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
VERSION_NAMES = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}


@dataclass
class Hello:
    """What the two hellos said."""

    client_random: bytes = b""
    client_session_id: bytes = b""
    sni: str | None = None
    alpn_offered: list[str] = field(default_factory=list)
    psk_offered: bool = False
    ticket_offered: bool = False
    server_random: bytes = b""
    server_session_id: bytes = b""
    cipher_suite: int | None = None
    version: int | None = None  # negotiated
    alpn: str | None = None  # chosen (TLS 1.2 ServerHello; TLS 1.3: EncryptedExtensions)
    resumed: bool | None = None
    retry: bool = False  # a HelloRetryRequest was seen

    @property
    def version_name(self) -> str | None:
        return None if self.version is None else VERSION_NAMES.get(self.version, f"0x{self.version:04x}")


class HandshakeBuffer:
    """Handshake messages of one direction from record payloads (a message may span
    records, and a record hold several)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, payload: bytes) -> list[tuple[int, bytes]]:
        self.buf += payload
        out, pos, buf = [], 0, self.buf
        while len(buf) - pos >= 4:
            length = int.from_bytes(buf[pos + 1 : pos + 4], "big")
            if len(buf) - pos < 4 + length:
                break
            out.append((buf[pos], bytes(buf[pos + 4 : pos + 4 + length])))
            pos += 4 + length
        del buf[:pos]
        return out


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("hello cut short")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vec(self, len_bytes: int) -> bytes:
        return self.take(self.int(len_bytes))

    def extensions(self) -> list[tuple[int, bytes]]:
        if self.pos >= len(self.data):
            return []
        r = _Reader(self.vec(2))
        out = []
        while r.pos < len(r.data):
            out.append((r.int(2), r.vec(2)))
        return out


def _alpn_list(body: bytes) -> list[str]:
    r = _Reader(_Reader(body).vec(2))
    out = []
    while r.pos < len(r.data):
        out.append(r.vec(1).decode("ascii", "replace"))
    return out


def read_client_hello(body: bytes, hello: Hello) -> None:
    """Fill ``hello`` from a ClientHello body; ValueError when it is malformed."""
    r = _Reader(body)
    r.take(2)
    hello.client_random = r.take(32)
    hello.client_session_id = r.vec(1)
    r.vec(2)  # cipher suites
    r.vec(1)  # compression methods
    for ext, data in r.extensions():
        if ext == 0 and data:  # server_name
            names = _Reader(_Reader(data).vec(2))
            while names.pos < len(names.data):
                kind, name = names.int(1), names.vec(2)
                if kind == 0:
                    hello.sni = name.decode("ascii", "replace")
        elif ext == 16:
            hello.alpn_offered = _alpn_list(data)
        elif ext == 41:
            hello.psk_offered = True
        elif ext == 35 and data:
            hello.ticket_offered = True


def read_server_hello(body: bytes, hello: Hello) -> None:
    """Fill ``hello`` from a ServerHello body; ValueError when it is malformed."""
    r = _Reader(body)
    legacy = r.int(2)
    random = r.take(32)
    if random == HRR_RANDOM:
        hello.retry = True  # the real ServerHello follows a second ClientHello
        return
    hello.server_random = random
    hello.server_session_id = r.vec(1)
    hello.cipher_suite = r.int(2)
    r.take(1)
    version, psk = legacy, False
    for ext, data in r.extensions():
        if ext == 43 and len(data) == 2:
            version = int.from_bytes(data, "big")
        elif ext == 16:
            alpn = _alpn_list(data)
            hello.alpn = alpn[0] if alpn else None
        elif ext == 41:
            psk = True
    hello.version = version
    if version == 0x0304:
        hello.resumed = psk
    else:  # TLS 1.2: the server echoes the session id it resumes
        hello.resumed = bool(hello.client_session_id) and hello.server_session_id == hello.client_session_id


def read_encrypted_extensions(body: bytes, hello: Hello) -> None:
    """TLS 1.3: the chosen ALPN, from the (decrypted) EncryptedExtensions."""
    for ext, data in _Reader(body).extensions():
        if ext == 16:
            alpn = _alpn_list(data)
            hello.alpn = alpn[0] if alpn else None
