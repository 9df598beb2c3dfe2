"""A capture's content hash is the same whether it was prefetched or not, and a file
changed after the prefetch is hashed again."""

from __future__ import annotations

import hashlib
import os

from telemetry.store import capture_id as cid


def _direct(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:32]


def test_prefetched_hash_is_the_content_hash(tmp_path):
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    a.write_bytes(os.urandom(9 << 20))
    b.write_bytes(b"small")
    cid.prefetch([a, b, tmp_path / "missing.pcap", tmp_path])
    assert cid.capture_id_of(a) == _direct(a)
    assert cid.capture_id_of(b) == _direct(b)
    assert not cid._pending  # taken once


def test_file_changed_after_prefetch_is_hashed_again(tmp_path):
    a = tmp_path / "a.pcap"
    a.write_bytes(b"x" * 1000)
    cid.prefetch([a])
    cid._pending[next(iter(cid._pending))].result()  # let the prefetch finish first
    a.write_bytes(b"y" * 2000)
    assert cid.capture_id_of(a) == _direct(a)
    cid._pending.clear()
