"""Content hash of a capture file (its idempotency key), with an optional head start.

Hashing a large file costs about as much as importing the pipeline's libraries, and
hashlib releases the GIL: the CLI starts the hash of the files it was given in a
background thread (:func:`prefetch`) before those imports, and :func:`capture_id_of`
then takes the result instead of reading the file again. Deliberately light: no numpy,
no pyarrow, no concurrent.futures (~10 ms more before the hash starts).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

CHUNK_BYTES = 4 << 20


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
_pending: dict[tuple[str, int, int], _Hashing] = {}


def _hash(path: Path) -> str:
    # SHA-256 (its first 128 bits): with the CPU's SHA instructions about twice as fast as
    # blake2b here (1.8 vs 0.9 GB/s), so a big file's hash is done while the pipeline
    # imports instead of holding up its start
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()[:32]


def _key(path: Path) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.realpath(path), st.st_size, st.st_mtime_ns)


def prefetch(paths: list[Path]) -> None:
    """Start hashing these files, one after another, in a daemon thread."""
    todo: list[tuple[Path, _Hashing]] = []
    with _lock:
        for p in paths:
            key = _key(p)
            if key is None or key in _pending or not os.path.isfile(p):
                continue
            _pending[key] = hashing = _Hashing()
            todo.append((p, hashing))
    if not todo:
        return

    def run() -> None:
        for p, hashing in todo:
            try:
                hashing.finish(_hash(p))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                hashing.finish(error=exc)

    threading.Thread(target=run, name="tailtap-hash", daemon=True).start()


def capture_id_of(path: Path) -> str:
    """Content hash of the file as stored on disk (the idempotency key); a prefetched
    hash is used when the file is unchanged since (same size and modification time)."""
    key = _key(path)
    with _lock:
        hashing = _pending.pop(key, None) if key is not None else None
    if hashing is not None:
        try:
            return hashing.result()
        except OSError:
            pass  # read it again below, raising where the caller expects it
    return _hash(path)
