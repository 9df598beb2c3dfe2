"""A capture's content hash is the same whether it was prefetched or not, and a file
changed after the prefetch is hashed again. A new store's ids are XXH3-128, a store
written before keeps its SHA-256 ids: a capture ingested again is found either way."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import xxhash

from telemetry.ingest import IngestOptions, ingest_file
from telemetry.store import capture_id as cid
from telemetry.store.layout import ID_SCHEME_FILE, StoreError
from telemetry.store.parquet import Store

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "baseline" / "capture.pcap"


def _direct(path, scheme=cid.CURRENT) -> str:
    if scheme == cid.LEGACY:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:32]
    return xxhash.xxh3_128(path.read_bytes()).hexdigest()


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
    monkeypatch.setattr(cid, "_hash", lambda path, scheme: (_ for _ in ()).throw(FileNotFoundError(path)))
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


def test_the_prefetch_hashes_in_the_scheme_asked_for(tmp_path):
    a = tmp_path / "a.pcap"
    a.write_bytes(os.urandom(5 << 20))
    cid.prefetch([a], cid.LEGACY)
    assert cid.capture_id_of(a) == _direct(a)  # another scheme: not the prefetched hash
    assert cid.capture_id_of(a, cid.LEGACY) == _direct(a, cid.LEGACY)
    assert not cid._pending
    assert _direct(a) != _direct(a, cid.LEGACY)


def test_a_new_store_says_its_ids_are_xxh3_and_finds_a_capture_again(tmp_path):
    store = Store(tmp_path / "store")
    first = ingest_file(SAMPLE, store, IngestOptions(store_models=False))
    assert first.error is None and not first.skipped
    assert first.capture_id == _direct(SAMPLE)
    assert (store.root / ID_SCHEME_FILE).read_text().strip() == cid.CURRENT
    assert store.capture_ids() == [first.capture_id]
    again = ingest_file(SAMPLE, store, IngestOptions(store_models=False))
    assert again.skipped and again.capture_id == first.capture_id


def test_a_store_written_before_keeps_its_sha256_ids(tmp_path):
    """A store of an earlier version: its captures under SHA-256 ids, no scheme file. The
    same capture is found there again (not stored twice), and the store says so from then
    on, its other captures taking SHA-256 ids too."""
    store = Store(tmp_path / "store")
    (tmp_path / "store").mkdir()
    (store.root / ID_SCHEME_FILE).write_text(cid.LEGACY)  # what the earlier version wrote...
    old = ingest_file(SAMPLE, store, IngestOptions(store_models=False))
    (store.root / ID_SCHEME_FILE).unlink()  # ...without saying so
    assert old.capture_id == _direct(SAMPLE, cid.LEGACY)
    assert store.capture_id_scheme() == cid.LEGACY
    again = ingest_file(SAMPLE, store, IngestOptions(store_models=False))
    assert again.skipped and again.capture_id == old.capture_id
    other = tmp_path / "other.pcap"
    shutil.copy(SAMPLE.parent.parent / "reorder" / "capture.pcap", other)
    new = ingest_file(other, store, IngestOptions(store_models=False))
    assert new.capture_id == _direct(other, cid.LEGACY) and not new.skipped
    assert (store.root / ID_SCHEME_FILE).read_text().strip() == cid.LEGACY
    assert sorted(store.capture_ids()) == sorted([old.capture_id, new.capture_id])


def test_an_unknown_scheme_is_a_store_error_naming_the_file(tmp_path):
    store = Store(tmp_path)
    (tmp_path / ID_SCHEME_FILE).write_text("md5\n")
    with pytest.raises(StoreError, match=f"{ID_SCHEME_FILE}: unknown capture id scheme 'md5'"):
        store.capture_id_scheme()
