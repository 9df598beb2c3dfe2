"""The daemon's key logs (``--keylog``), read at start and again as they grow.

A client that writes SSLKEYLOGFILE appends a session's secrets when the session starts,
long after the daemon did: before each capture file is ingested, the lines added since the
last read go into the same KeyLog the parsers use. A file replaced or truncated (rotated) is
read again from its start; a line still being written waits for its newline.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from parsers.tls import KeyLog

log = logging.getLogger("tailtap.daemon")

HEAD_BYTES = 128  # a client random is in the first line
MAX_PROBLEMS_LOGGED = 20  # per read: a file of garbage must not flood the log


@dataclass
class _Position:
    inode: int = -1
    offset: int = 0  # bytes read (up to the last complete line)
    lines: int = 0  # lines read
    head: bytes = b""  # the file's first bytes, as read: a file replaced under the name differs


class KeyLogFollower:
    """Reads each key log's new complete lines into ``keylog``."""

    def __init__(self, paths: tuple[Path, ...], keylog: KeyLog | None = None) -> None:
        self.paths = tuple(Path(p) for p in paths)
        self.keylog = keylog if keylog is not None else KeyLog()
        self._positions = {p: _Position() for p in self.paths}
        self._missing: set[Path] = set()  # files said gone (once)

    def read_start(self) -> None:
        """The first read, at the daemon's start: every line, the last one too when it has
        no newline; a file that cannot be read raises OSError (a usage error)."""
        for path in self.paths:
            self._read(path, self._positions[path], whole=True)
        self._log_problems(0)

    def read_new(self) -> int:
        """Read what each file gained since the last call; returns the secrets added. A
        file that went away is said once in the log and read again when it is back."""
        before, problems = self.keylog.lines, len(self.keylog.problems)
        for path in self.paths:
            try:
                self._read(path, self._positions[path], whole=False)
            except OSError as exc:
                if path not in self._missing:
                    log.warning("--keylog %s: %s; read again when it is back", path, exc.strerror or exc)
                    self._missing.add(path)
                continue
            self._missing.discard(path)
        self._log_problems(problems)
        added = self.keylog.lines - before
        if added:
            log.info("key logs: %d new secret(s)", added)
        return added

    def _log_problems(self, start: int) -> None:
        for problem in self.keylog.problems[start : start + MAX_PROBLEMS_LOGGED]:
            log.warning("%s", problem)

    def _read(self, path: Path, position: _Position, whole: bool) -> None:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            # another file under the name (rotated, truncated, replaced; its inode may be
            # the old one's): its size or its first bytes tell
            if st.st_ino != position.inode or st.st_size < position.offset or f.read(len(position.head)) != position.head:
                position.inode, position.offset, position.lines, position.head = st.st_ino, 0, 0, b""
            if st.st_size == position.offset:
                return
            f.seek(position.offset)
            data = f.read(st.st_size - position.offset)
        # later, a line still being written (no newline yet) waits for the next read
        complete = len(data) if whole else data.rfind(b"\n") + 1
        if complete == 0:
            return
        text = data[:complete].decode("ascii", errors="replace")
        self.keylog.add_text(text, str(path), first_line=position.lines + 1)
        position.offset += complete
        if len(position.head) < HEAD_BYTES:
            position.head = (position.head + data[:complete])[:HEAD_BYTES]
        position.lines += text.count("\n")
