"""Ingest: capture file -> parsers -> Arrow tables -> Parquet store.

The stages, one module each:

- ``source``: opens a capture file (gzip or not), reads it in chunks into a pipeline; the
  only place that opens capture files.
- ``chain``: files of one capture run with one parser state (``IngestChain``), or one
  file on its own (``ingest_file``); each file its own atomic commit.
- ``split``: one large file read by two processes, by connection.
- ``lockstep``: the two processes of a split exchanging what spans connections.
- ``pipeline``: each batch of packets through the sans-I/O parsers; rows drained after
  every batch (bounded memory).
- ``state``: what is held per open connection.
- ``joins``: messages and requests joined with the ACKs that acknowledged them; gaps.
- ``rates``: flow_rates buckets.
- ``sendlog``: the loss-gated send log behind the ``segment_sends`` table.
- ``tables`` and ``columns``: the resolved rows as Arrow tables of the store's schemas.
- ``commit``: what a commit adds (the models kept with the capture; closing ids).
"""

from telemetry.ingest.chain import IngestChain, ingest_file
from telemetry.ingest.commit import CLOSING_SUFFIX, closing_id
from telemetry.ingest.options import (
    ANALYSING,
    FINISHING,
    IngestOptions,
    IngestResult,
    ProgressFn,
    StageFn,
)
from telemetry.ingest.rates import RATE_BUCKET_NS

__all__ = [
    "ANALYSING",
    "CLOSING_SUFFIX",
    "FINISHING",
    "RATE_BUCKET_NS",
    "IngestChain",
    "IngestOptions",
    "IngestResult",
    "ProgressFn",
    "StageFn",
    "closing_id",
    "ingest_file",
]
