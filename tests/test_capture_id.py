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


def test_a_failed_prefetch_is_read_again_where_the_caller_expects_it(tmp_path, monkeypatch):
    """An error of the background read (here: the file went before the thread read it) is
    not the caller's: capture_id_of reads the file itself and raises there."""
    a = tmp_path / "a.pcap"
    a.write_bytes(b"x" * 1000)
    real_hash = cid._hash
    monkeypatch.setattr(cid, "_hash", lambda path: (_ for _ in ()).throw(FileNotFoundError(path)))
    cid.prefetch([a])
    cid._pending[next(iter(cid._pending))]._done.wait()
    monkeypatch.setattr(cid, "_hash", real_hash)
    assert cid.capture_id_of(a) == _direct(a)
    assert not cid._pending


def test_the_hash_module_starts_light():
    """It is imported before the pipeline's libraries, to start hashing early: importing
    it loads neither numpy, pyarrow nor concurrent.futures and its logging."""
    import subprocess
    import sys

    code = ("import sys, telemetry.store.capture_id; "
            "print(sorted(m for m in ('numpy', 'pyarrow', 'concurrent.futures', 'logging') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
