"""What an ingest is asked to do (IngestOptions) and what it reports (IngestResult)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from parsers.records import DecodeIssue
from parsers.tls import KeyLog

ProgressFn = Callable[[int, int], None]  # (bytes read of the file on disk, packets)
# what the ingest does once a file is read (on a 10M-packet capture, seconds of each): one
# of the stages below, said as it begins
StageFn = Callable[[str], None]
FINISHING = "finishing"  # the connections still open closed, their last rows written
ANALYSING = "analysing"  # the models kept with the capture computed (telemetry.models.stored)


@dataclass
class IngestOptions:
    h2_ports: frozenset[int] = frozenset()
    capture_side: str = "auto"  # auto | server | client
    force: bool = False  # re-ingest even when the capture is already in the store
    # processes a single capture of SPLIT_MIN_BYTES or more may use (1 or 2): split by
    # connection, same rows as one process
    processes: int = 1
    # compute the models kept with each capture at its commit (telemetry.models.stored);
    # off, queries compute them when read (the same answers)
    store_models: bool = True
    # TLS secrets (key logs read by the caller); the capture's Decryption Secrets Blocks
    # are added to a copy as the file is read
    keylog: KeyLog | None = None


@dataclass
class IngestResult:
    path: str
    capture_id: str = ""
    skipped: bool = False  # already in the store
    error: str | None = None  # nothing could be read
    packets: int = 0
    bytes: int = 0
    connections: int = 0
    requests: int = 0
    issues: list[DecodeIssue] = field(default_factory=list)
    seconds: float = 0.0
