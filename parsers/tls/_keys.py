"""Traffic keys from a session's secrets: the TLS 1.2 PRF key block (RFC 5246 section 6.3,
AEAD suites: RFC 5288, RFC 7905) and the TLS 1.3 key schedule's last steps (RFC 8446
section 7: HKDF-Expand-Label for key, iv and the key update's next secret).

The hashes and HKDF are the ``cryptography`` library's; nothing here is a cipher."""

from __future__ import annotations

import hmac
from dataclasses import dataclass


@dataclass(frozen=True)
class Suite:
    """What decryption needs of a cipher suite."""

    code: int
    name: str
    cipher: str  # aes-gcm | chacha20-poly1305
    key_len: int
    hash_name: str  # sha256 | sha384
    tls13: bool

    @property
    def hash_len(self) -> int:
        return 48 if self.hash_name == "sha384" else 32


def _s(code: int, name: str, cipher: str, key_len: int, hash_name: str, tls13: bool = False) -> Suite:
    return Suite(code, name, cipher, key_len, hash_name, tls13)


# The AEAD suites real services use; others (CBC, RC4, CCM) are named but not decrypted.
SUITES = {s.code: s for s in (
    _s(0x1301, "TLS_AES_128_GCM_SHA256", "aes-gcm", 16, "sha256", True),
    _s(0x1302, "TLS_AES_256_GCM_SHA384", "aes-gcm", 32, "sha384", True),
    _s(0x1303, "TLS_CHACHA20_POLY1305_SHA256", "chacha20-poly1305", 32, "sha256", True),
    _s(0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "aes-gcm", 16, "sha256"),
    _s(0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "aes-gcm", 32, "sha384"),
    _s(0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "aes-gcm", 16, "sha256"),
    _s(0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "aes-gcm", 32, "sha384"),
    _s(0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256", "aes-gcm", 16, "sha256"),
    _s(0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384", "aes-gcm", 32, "sha384"),
    _s(0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "aes-gcm", 16, "sha256"),
    _s(0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "aes-gcm", 32, "sha384"),
    _s(0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "chacha20-poly1305", 32, "sha256"),
    _s(0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "chacha20-poly1305", 32, "sha256"),
    _s(0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "chacha20-poly1305", 32, "sha256"),
)}  # fmt: skip

def prf(secret: bytes, label: bytes, seed: bytes, length: int, hash_name: str) -> bytes:
    """The TLS 1.2 PRF, P_hash(secret, label + seed) (RFC 5246 section 5)."""
    seed = label + seed
    out, a = b"", seed
    while len(out) < length:
        a = hmac.new(secret, a, hash_name).digest()
        out += hmac.new(secret, a + seed, hash_name).digest()
    return out[:length]


@dataclass(frozen=True)
class DirectionKeys:
    key: bytes
    iv: bytes  # TLS 1.2 GCM: the 4-byte salt; otherwise the 12-byte IV


def tls12_keys(suite: Suite, master: bytes, client_random: bytes, server_random: bytes) -> tuple[DirectionKeys, DirectionKeys]:
    """(client write, server write) keys of a TLS 1.2 AEAD suite."""
    iv_len = 4 if suite.cipher == "aes-gcm" else 12
    block = prf(master, b"key expansion", server_random + client_random, 2 * (suite.key_len + iv_len), suite.hash_name)
    k = suite.key_len
    ck, sk = block[:k], block[k : 2 * k]
    civ, siv = block[2 * k : 2 * k + iv_len], block[2 * k + iv_len :]
    return DirectionKeys(ck, civ), DirectionKeys(sk, siv)


def hkdf_expand_label(secret: bytes, label: str, context: bytes, length: int, hash_name: str) -> bytes:
    """HKDF-Expand-Label (RFC 8446 section 7.1)."""
    full = b"tls13 " + label.encode()
    info = length.to_bytes(2, "big") + bytes([len(full)]) + full + bytes([len(context)]) + context
    # cryptography at the first TLS 1.3 key, not at every start (~10 ms with the AEADs)
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    algorithm = {"sha256": hashes.SHA256, "sha384": hashes.SHA384}[hash_name]()
    return HKDFExpand(algorithm, length, info).derive(secret)


def tls13_keys(suite: Suite, secret: bytes) -> DirectionKeys:
    """A TLS 1.3 traffic secret's write key and IV."""
    return DirectionKeys(
        hkdf_expand_label(secret, "key", b"", suite.key_len, suite.hash_name),
        hkdf_expand_label(secret, "iv", b"", 12, suite.hash_name),
    )


def tls13_next_secret(suite: Suite, secret: bytes) -> bytes:
    """The traffic secret after a KeyUpdate (RFC 8446 section 7.2)."""
    return hkdf_expand_label(secret, "traffic upd", b"", suite.hash_len, suite.hash_name)
