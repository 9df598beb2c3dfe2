"""NSS key log files (SSLKEYLOGFILE, and the key log a pcapng Decryption Secrets Block
carries): the secrets of TLS sessions, by client random (or session id), from text.

Sans-I/O: text in, secrets and line problems out. Labels read:

* ``CLIENT_RANDOM <client random> <master secret>`` (TLS 1.2 and earlier);
* ``RSA Session-ID:<session id> Master-Key:<master secret>`` (TLS 1.2, by session id);
* ``CLIENT_HANDSHAKE_TRAFFIC_SECRET``, ``SERVER_HANDSHAKE_TRAFFIC_SECRET``,
  ``CLIENT_TRAFFIC_SECRET_0``, ``SERVER_TRAFFIC_SECRET_0`` (TLS 1.3, by client random).

Other labels (``EXPORTER_SECRET``, ``EARLY_EXPORTER_SECRET``, ``CLIENT_EARLY_TRAFFIC_SECRET``,
``RSA <encrypted pre-master> <pre-master>``) are recognised and not used; so are the secrets
after a KeyUpdate that OpenSSL 3 logs as ``CLIENT_TRAFFIC_SECRET_N`` / ``SERVER_TRAFFIC_SECRET_N``
(the decryption derives them from ``_0``, RFC 8446 section 7.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TLS13_LABELS = (
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    "CLIENT_TRAFFIC_SECRET_0",
    "SERVER_TRAFFIC_SECRET_0",
)
_UPDATED_SECRET = re.compile(r"(CLIENT|SERVER)_TRAFFIC_SECRET_(N|[1-9][0-9]*)")
_IGNORED = ("EXPORTER_SECRET", "EARLY_EXPORTER_SECRET", "CLIENT_EARLY_TRAFFIC_SECRET", "RSA")


@dataclass
class KeyLog:
    """Secrets read from one or more key logs."""

    # label -> client random -> secret
    by_random: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    by_session_id: dict[bytes, bytes] = field(default_factory=dict)  # RSA Session-ID -> master
    problems: list[str] = field(default_factory=list)  # "SOURCE line N: what is wrong"
    lines: int = 0  # secrets read

    def __bool__(self) -> bool:
        return bool(self.lines)

    def add_text(self, text: str, source: str = "key log", first_line: int = 1) -> None:
        """Read every line of ``text``; a line that cannot be read is a problem, named by
        ``source`` and its line number (``text`` starts at ``first_line`` of the source:
        a key log read as it grows), and the others still count."""
        for no, raw in enumerate(text.splitlines(), first_line):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            problem = self._add_line(line)
            if problem:
                self.problems.append(f"{source} line {no}: {problem}")

    def _add_line(self, line: str) -> str | None:
        parts = line.split()
        label = parts[0]
        if label == "RSA" and len(parts) == 3 and parts[1].startswith("Session-ID:"):
            sid, master = parts[1][len("Session-ID:"):], parts[2]
            if not parts[2].startswith("Master-Key:"):
                return "an 'RSA Session-ID:' line needs 'Master-Key:<hex>'"
            master = master[len("Master-Key:"):]
            try:
                sid_b, master_b = bytes.fromhex(sid), bytes.fromhex(master)
            except ValueError:
                return "not hexadecimal"
            if len(master_b) != 48:
                return f"a TLS 1.2 master secret has 48 bytes, not {len(master_b)}"
            self.by_session_id[sid_b] = master_b
            self.lines += 1
            return None
        if label in _IGNORED or _UPDATED_SECRET.fullmatch(label):
            return None
        if label != "CLIENT_RANDOM" and label not in TLS13_LABELS:
            return f"unknown label {label[:40]!r}"
        if len(parts) != 3:
            return f"{label} needs a client random and a secret ({len(parts) - 1} fields)"
        try:
            random, secret = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
        except ValueError:
            return "not hexadecimal"
        if len(random) != 32:
            return f"a client random has 32 bytes, not {len(random)}"
        if label == "CLIENT_RANDOM" and len(secret) != 48:
            return f"a TLS 1.2 master secret has 48 bytes, not {len(secret)}"
        if label != "CLIENT_RANDOM" and len(secret) not in (32, 48):
            return f"a TLS 1.3 secret has 32 or 48 bytes, not {len(secret)}"
        self.by_random.setdefault(label, {})[random] = secret
        self.lines += 1
        return None

    def master_secret(self, client_random: bytes, session_id: bytes) -> bytes | None:
        """A TLS 1.2 session's master secret, by client random or else by session id."""
        secret = self.by_random.get("CLIENT_RANDOM", {}).get(client_random)
        if secret is None and session_id:
            secret = self.by_session_id.get(session_id)
        return secret

    def tls13_secret(self, label: str, client_random: bytes) -> bytes | None:
        return self.by_random.get(label, {}).get(client_random)
