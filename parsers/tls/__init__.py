"""TLS for passive captures: record framing, the clear handshake's facts (SNI, ALPN,
version, cipher suite, resumption), decryption with key logs (TLS 1.2 and 1.3, AES-GCM
and ChaCha20-Poly1305, through the ``cryptography`` library) into the same application
decoders as cleartext, and request estimates from the record layer when there are no keys.
Sans-I/O: key log text, bytes and timestamps in; plaintext, facts and estimates out."""

from ._conn import TlsConnection
from ._decrypt import DecryptError, RecordCipher
from ._handshake import Hello
from ._keylog import KeyLog
from ._keys import SUITES, hkdf_expand_label, prf, tls12_keys, tls13_keys, tls13_next_secret
from ._records import Record, RecordStream

__all__ = [
    "SUITES",
    "DecryptError",
    "Hello",
    "KeyLog",
    "Record",
    "RecordCipher",
    "RecordStream",
    "TlsConnection",
    "hkdf_expand_label",
    "prf",
    "tls12_keys",
    "tls13_keys",
    "tls13_next_secret",
]
