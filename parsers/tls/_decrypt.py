"""One direction's record protection undone: AES-GCM or ChaCha20-Poly1305 (the
``cryptography`` library's AEADs), the TLS 1.2 nonce (explicit for GCM, RFC 5288; the
IV XOR the sequence number for ChaCha20, RFC 7905) and additional data, the TLS 1.3
nonce and inner content type (RFC 8446 section 5.2-5.3)."""

from __future__ import annotations

import struct

from ._keys import DirectionKeys, Suite

TAG_LEN = 16
_HEADER = struct.Struct(">BHH")  # a record header: content type, version, length


class DecryptError(Exception):
    """A record that does not decrypt with the keys in hand (wrong or missing keys)."""


class RecordCipher:
    """Decrypts one direction's records in order (the sequence number counts them)."""

    def __init__(self, suite: Suite, keys: DirectionKeys, tls13: bool) -> None:
        self.suite = suite
        self.tls13 = tls13
        self.iv = keys.iv
        self._iv_number = int.from_bytes(keys.iv, "big")  # the per-record nonce in one XOR
        self.seq = 0
        # cryptography at the first keyed direction, not at every start (~10 ms)
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

        self._invalid_tag = InvalidTag
        self.aead = AESGCM(keys.key) if suite.cipher == "aes-gcm" else ChaCha20Poly1305(keys.key)

    def _xor_nonce(self) -> bytes:
        return (self._iv_number ^ self.seq).to_bytes(12, "big")

    def decrypt(self, content_type: int, version: int, payload: bytes) -> tuple[int, bytes]:
        """(content type, plaintext) of a protected record; DecryptError when the tag
        does not verify. TLS 1.3 returns the inner content type."""
        try:
            if self.tls13:
                inner = self.aead.decrypt(self._xor_nonce(), payload, _HEADER.pack(content_type, version, len(payload)))
                end = len(inner)
                while end and inner[end - 1] == 0:  # zero padding after the inner type
                    end -= 1
                if not end:
                    raise DecryptError("TLS 1.3 record without an inner content type")
                self.seq += 1
                return inner[end - 1], inner[: end - 1]
            if self.suite.cipher == "aes-gcm":
                if len(payload) < 8 + TAG_LEN:
                    raise DecryptError(f"record of {len(payload)} bytes is too short for AES-GCM")
                nonce, body = self.iv + payload[:8], payload[8:]
            else:
                nonce, body = self._xor_nonce(), payload
            if len(body) < TAG_LEN:
                raise DecryptError(f"record of {len(payload)} bytes is too short for its tag")
            aad = (self.seq.to_bytes(8, "big") + bytes([content_type]) + version.to_bytes(2, "big")
                   + (len(body) - TAG_LEN).to_bytes(2, "big"))  # fmt: skip
            plain = self.aead.decrypt(nonce, body, aad)
        except self._invalid_tag:
            raise DecryptError(f"record {self.seq} does not decrypt (wrong key, or a record was lost)") from None
        self.seq += 1
        return content_type, plain
