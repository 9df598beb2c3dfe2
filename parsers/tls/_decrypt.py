"""One direction's record protection undone: AES-GCM or ChaCha20-Poly1305 (the
``cryptography`` library's AEADs), the TLS 1.2 nonce (explicit for GCM, RFC 5288; the
IV XOR the sequence number for ChaCha20, RFC 7905) and additional data, the TLS 1.3
nonce and inner content type (RFC 8446 section 5.2-5.3)."""

from __future__ import annotations

from ._keys import DirectionKeys, Suite
from ._records import RECORD_HEADER

TAG_LEN = 16
# the fewest bytes a protected record takes in the stream (its header and tag): lost bytes
# held at most this many fewer records
MIN_RECORD = 5 + TAG_LEN
# at most this many sequence numbers are tried for the record after lost bytes (each try
# is one AEAD open, a few microseconds): 86 kB of records of the least size
MAX_UNSURE = 4096


class DecryptError(Exception):
    """A record that does not decrypt with the keys in hand (wrong or missing keys)."""


class RecordCipher:
    """Decrypts one direction's records in order (the sequence number counts them). After
    bytes of the direction were lost (:meth:`lose`), the next record is tried at each
    sequence number the lost bytes leave possible: its tag verifies at one only."""

    def __init__(self, suite: Suite, keys: DirectionKeys, tls13: bool) -> None:
        self.suite = suite
        self.tls13 = tls13
        self.iv = keys.iv
        self._iv_number = int.from_bytes(keys.iv, "big")  # the per-record nonce in one XOR
        self.seq = 0
        self.unsure = 0  # records that may have been lost before the next one
        # cryptography at the first keyed direction, not at every start (~10 ms)
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

        self.invalid_tag = InvalidTag  # (what decrypt raises when the tag fails)
        self.aead = AESGCM(keys.key) if suite.cipher == "aes-gcm" else ChaCha20Poly1305(keys.key)

    def lose(self, nbytes: int) -> bool:
        """``nbytes`` of this direction's records were lost. False when they may have held
        more records than are tried (MAX_UNSURE): the sequence cannot be followed."""
        self.unsure += nbytes // MIN_RECORD + 1
        return self.unsure <= MAX_UNSURE

    def decrypt(self, content_type: int, version: int, payload: bytes) -> tuple[int, bytes]:
        """(content type, plaintext) of a protected record; DecryptError when the tag
        does not verify. TLS 1.3 returns the inner content type."""
        first = self.seq
        for seq in range(first, first + self.unsure + 1):
            try:
                out = self._open(seq, content_type, version, payload)
            except self.invalid_tag:
                continue
            self.seq, self.unsure = seq + 1, 0
            return out
        if self.unsure:
            raise DecryptError(f"no record sequence number from {first} to {first + self.unsure} decrypts the record "
                               "after lost bytes (a key update lost with them?)")
        raise DecryptError(f"record {first} does not decrypt (wrong key, or a record was lost)")

    def _xor_nonce(self, seq: int) -> bytes:
        return (self._iv_number ^ seq).to_bytes(12, "big")

    def _open(self, seq: int, content_type: int, version: int, payload: bytes) -> tuple[int, bytes]:
        if self.tls13:
            inner = self.aead.decrypt(self._xor_nonce(seq), payload, RECORD_HEADER.pack(content_type, version, len(payload)))
            end = len(inner)
            while end and inner[end - 1] == 0:  # zero padding after the inner type
                end -= 1
            if not end:
                raise DecryptError("TLS 1.3 record without an inner content type")
            return inner[end - 1], inner[: end - 1]
        if self.suite.cipher == "aes-gcm":
            if len(payload) < 8 + TAG_LEN:
                raise DecryptError(f"record of {len(payload)} bytes is too short for AES-GCM")
            nonce, body = self.iv + payload[:8], payload[8:]
        else:
            nonce, body = self._xor_nonce(seq), payload
        if len(body) < TAG_LEN:
            raise DecryptError(f"record of {len(payload)} bytes is too short for its tag")
        aad = (seq.to_bytes(8, "big") + bytes([content_type]) + version.to_bytes(2, "big")
               + (len(body) - TAG_LEN).to_bytes(2, "big"))  # fmt: skip
        return content_type, self.aead.decrypt(nonce, body, aad)
