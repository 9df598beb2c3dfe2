"""Content hash of a capture file (its idempotency key), with an optional head start.

The hash is XXH3-128 (xxhash): reading the file costs more than hashing it (the
realistic 158 MB 1M-packet capture: 0.04 CPU s, SHA-256's 0.14). Stores written before
it keep the SHA-256 ids they hold (:data:`LEGACY`, the store's choice:
``StoreLayout.capture_id_scheme``), so that a capture ingested again is still found.

Hashing a large file takes a while, and both hashes release the GIL: the CLI starts the
hash of the files it was given in a background thread (:func:`prefetch`) before the
pipeline's imports, and :func:`capture_id_of` then takes the result instead of reading
the file again. Deliberately light: no numpy, no pyarrow, no concurrent.futures (~10 ms
more before the hash starts).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import xxhash

CHUNK_BYTES = 4 << 20
CURRENT = "xxh3-128"  # the scheme of a new store's capture ids
LEGACY = "sha256-128"  # SHA-256's first 128 bits: the ids of stores written before
SCHEMES = (CURRENT, LEGACY)


class _Hashing:
    """The hash of one file, being computed by the background thread."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._digest: str | None = None
        self._error: BaseException | None = None

    def finish(self, digest: str | None = None, error: BaseException | None = None) -> None:
        self._digest, self._error = digest, error
        self._done.set()

    def result(self) -> str:
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._digest is not None
        return self._digest


_lock = threading.Lock()
_pending: dict[tuple[str, str, int, int], _Hashing] = {}  # (scheme, path, size, mtime)


def _hash(path: Path, scheme: str) -> str:
    digest: xxhash.xxh3_128 | hashlib._Hash
    if scheme == CURRENT:
        digest = xxhash.xxh3_128()
    elif scheme == LEGACY:
        digest = hashlib.sha256()
    else:
        raise ValueError(f"unknown capture id scheme {scheme!r}")
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()[:32]


def _key(path: Path, scheme: str) -> tuple[str, str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (scheme, os.path.realpath(path), st.st_size, st.st_mtime_ns)


def prefetch(paths: list[Path], scheme: str = CURRENT) -> None:
    """Start hashing these files, one after another, in a daemon thread (ids of the
    ``scheme`` of the store they go to)."""
    todo: list[tuple[Path, _Hashing]] = []
    with _lock:
        for p in paths:
            key = _key(p, scheme)
            if key is None or key in _pending or not os.path.isfile(p):
                continue
            _pending[key] = hashing = _Hashing()
            todo.append((p, hashing))
    if not todo:
        return

    def run() -> None:
        for p, hashing in todo:
            try:
                hashing.finish(_hash(p, scheme))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                hashing.finish(error=exc)

    threading.Thread(target=run, name="tailtap-hash", daemon=True).start()


def capture_id_of(path: Path, scheme: str = CURRENT) -> str:
    """Content hash of the file as stored on disk (the idempotency key), in the id
    ``scheme`` of the store it goes to; a prefetched hash is used when the file is
    unchanged since (same size and modification time)."""
    key = _key(path, scheme)
    with _lock:
        hashing = _pending.pop(key, None) if key is not None else None
    if hashing is not None:
        try:
            return hashing.result()
        except OSError:
            pass  # read it again below, raising where the caller expects it
    return _hash(path, scheme)
