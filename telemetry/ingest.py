"""Ingest: capture file -> parsers -> Arrow tables -> Parquet store.

This is the only module that opens capture files. It streams a file in chunks through
the sans-I/O parsers (capture container -> bulk TCP decode -> TCP reassembly/analysis
-> HTTP/2 / gRPC sessions), joins what they produce (ACK times of response messages,
client-side estimates, inter-message gaps) and hands Arrow tables to the store. Memory
stays bounded: rows are drained from the parsers after every batch and written in
row groups; per-connection state lives only while the connection is open.
"""

from __future__ import annotations

import gc
import gzip
import hashlib
import os
import signal
import time
import traceback
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain, groupby
from operator import attrgetter
from pathlib import Path
from typing import NoReturn

import numpy as np
import pyarrow as pa

from parsers.capture import CaptureDecoder, CaptureFormatError, decode_segments, format_addr
from parsers.h2 import sent_runs as _sent_runs
from parsers.llm.semantics import EVENT_NAMES, TOKEN_KINDS
from parsers.records import (
    DIRECTION_NAMES,
    MESSAGE_DIRECTION_NAMES,
    TO_CLIENT,
    TO_SERVER,
    ChunkRun,
    ConnectionSummary,
    DecodeIssue,
    DecodeStats,
    H2Event,
    PacketBatch,
    RequestRecord,
    RttRun,
    RttSample,
    TcpEvent,
)
from parsers.session import AppSession
from parsers.tcp import TcpAnalyzer
from telemetry import __version__
from telemetry.capture_id import capture_id_of
from telemetry.lockstep import Peer, PeerGone, fork_pair
from telemetry.sendlog import KIND_NAMES as _SEND_KINDS
from telemetry.sendlog import SendLog
from telemetry.store import CaptureWriter, Store, table_from_columns

CHUNK_BYTES = 4 << 20
SPLIT_MIN_BYTES = 16 << 20  # a smaller capture is read faster than a second process starts
GC_GEN0_THRESHOLD = 50_000
# Connections idle this long are closed and their rows written (bounded memory).
IDLE_CLOSE_NS = 120 * 1_000_000_000
RATE_BUCKET_NS = 100_000_000  # flow_rates bucket: fine enough to see a shaper's ceiling
GZIP_MAGIC = b"\x1f\x8b"
APP_THROTTLE_HTTP = (429, 503)
APP_THROTTLE_GRPC = (8, 14)  # RESOURCE_EXHAUSTED, UNAVAILABLE


@dataclass
class IngestOptions:
    h2_ports: frozenset[int] = frozenset()
    capture_side: str = "auto"  # auto | server | client
    force: bool = False  # re-ingest even when the capture is already in the store
    # processes a single capture of SPLIT_MIN_BYTES or more may use (1 or 2): split by
    # connection, same rows as one process
    processes: int = 1


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


class InputError(Exception):
    """The file cannot be read as a capture; the message names the file and the place."""


def _open(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == GZIP_MAGIC:
        return gzip.open(path, "rb"), True
    return open(path, "rb"), False


ProgressFn = Callable[[int, int], None]  # (bytes read of the file on disk, packets)


def ingest_file(
    path: str | os.PathLike[str],
    store: Store,
    options: IngestOptions | None = None,
    progress: ProgressFn | None = None,
) -> IngestResult:
    """Ingest one capture file on its own: a chain of one file, finished inside its commit."""
    return IngestChain(store, options).ingest(path, progress, final=True)


def _unreadable(path: Path) -> str | None:
    if not path.exists():
        return f"{path}: no such file"
    if path.is_dir():
        return f"{path}: is a folder, not a capture file"
    if path.stat().st_size == 0:
        return f"{path}: empty file, not a capture"
    return None


class IngestChain:
    """Ingests consecutive files of one capture run (a rotated capture) with ONE parser
    state, so that a connection crossing a rotation keeps its HPACK table and open streams.

    Each file still has its own capture_id (content hash), ``captures`` row and atomic
    commit: rows resolved while reading a file go to that file's writer; connections and
    requests still open at its end continue in the next file (a request straddling a
    rotation is one row, written with the file in which it ends). :meth:`close` finishes
    what is left (open connections, unanswered requests) as a small commit of its own,
    capture_id ``closing_id(last file's id)``, with a ``captures`` row of no packets: the
    files' commits are never held back, so a file is in the store as soon as it was read
    (the daemon deletes it then).

    A file already in the store (without ``force``) breaks the chain: the state so far is
    closed, the file skipped, and the next file starts a fresh state (no row twice). A file
    that fails after some of its packets went through the parsers drops the state (its
    rows were thrown away with its writer); one that fails before keeps it.
    """

    def __init__(self, store: Store, options: IngestOptions | None = None) -> None:
        self.store = store
        self.options = options or IngestOptions()
        self._pipeline: CapturePipeline | None = None
        self._last: IngestResult | None = None  # the chain's last committed file

    @property
    def open(self) -> bool:
        """Whether parser state carries over to the next file."""
        return self._pipeline is not None

    def ingest(
        self, path: str | os.PathLike[str], progress: ProgressFn | None = None, final: bool = False
    ) -> IngestResult:
        """Ingest the next file of the run. ``final``: it is the last one, finish
        everything inside its own commit (what :func:`ingest_file` does)."""
        path = Path(path)
        result = IngestResult(path=str(path))
        started = time.perf_counter()
        result.error = _unreadable(path)
        if result.error:
            return result
        result.capture_id = capture_id_of(path)
        if self.store.has_capture(result.capture_id) and not self.options.force:
            self.close()
            result.skipped = True
            return result
        writer = self.store.writer(result.capture_id)
        if final and self._pipeline is None and _worth_splitting(path, self.options):
            with _fewer_collections():
                _ingest_split(path, writer, result, self.options, progress)
            self._last = None if result.error else result
            result.seconds = time.perf_counter() - started
            return result
        carried = self._pipeline
        pipeline = carried
        if pipeline is None:
            pipeline = CapturePipeline(result.capture_id, writer, self.options)
        else:
            pipeline.begin_file(result.capture_id, writer)
        self._pipeline = None  # only a file read to its end hands its state on
        with _fewer_collections():
            try:
                _stream(path, pipeline, result, progress)
                if result.error:
                    writer.abort()
                    if carried is not None and pipeline.decoder.packets_read == 0:
                        self._pipeline = carried  # not a packet of it was used: the state is intact
                    else:
                        self._last = None
                    return result
                writer.flush()  # the rows so far are written while the last ones are built
                if final:
                    pipeline.finish()
                else:
                    pipeline.end_file()
                pipeline.fill_result(result)
                writer.commit(pipeline.capture_row(path, result), derive=lambda w: _derive(w, result))
            except BaseException:
                writer.abort()
                self._last = None
                raise
        if not final:
            self._pipeline = pipeline
        self._last = result
        result.seconds = time.perf_counter() - started
        return result

    def close(self) -> IngestResult | None:
        """Finish the state carried over (TCP finish, sessions finish) and commit it;
        None when there was none."""
        pipeline, last = self._pipeline, self._last
        self._pipeline = self._last = None
        if pipeline is None or last is None:
            return None
        started = time.perf_counter()
        result = IngestResult(path=last.path, capture_id=closing_id(last.capture_id))
        writer = self.store.writer(result.capture_id)
        pipeline.begin_file(result.capture_id, writer)
        with _fewer_collections():
            try:
                pipeline.finish()
                pipeline.fill_result(result)
                writer.commit(pipeline.capture_row(Path(f"{last.path}{CLOSING_SUFFIX}"), result), derive=lambda w: _derive(w, result))
            except BaseException:
                writer.abort()
                raise
        result.seconds = time.perf_counter() - started
        return result


def _derive(writer: CaptureWriter, result: IngestResult) -> dict[Path, Path]:
    """The models kept with the capture, computed from its written files (imported here:
    DuckDB is not loaded until the capture's rows are written). If they cannot be computed
    the capture is stored without them, with a warning: queries then compute them when read."""
    from telemetry.stored_models import store_capture_models

    try:
        return store_capture_models(writer)
    except Exception as exc:  # noqa: BLE001 - the rows are good; only the stored analysis is missing
        result.issues.append(DecodeIssue("analysis_not_stored", 0, f"analysis not stored with the capture ({str(exc).splitlines()[0]}); queries compute it when read"))
        return {}


CLOSING_SUFFIX = "#close"  # path of the captures row of a chain's closing commit


def closing_id(capture_id: str) -> str:
    """capture_id of the closing commit after the file ``capture_id``: derived, so that
    closing the same chain again replaces it (idempotent) and never names a file."""
    return hashlib.blake2b(f"{capture_id}{CLOSING_SUFFIX}".encode(), digest_size=16).hexdigest()


@contextmanager
def _fewer_collections() -> Iterator[None]:
    # The pipeline allocates (and frees by reference counting) a few container objects
    # per packet; the default gen-0 threshold (700) runs the cycle collector every few
    # hundred packets for nothing. Collect less often while ingesting.
    gc_threshold = gc.get_threshold()
    gc.set_threshold(max(gc_threshold[0], GC_GEN0_THRESHOLD), *gc_threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*gc_threshold)


def _worth_splitting(path: Path, options: IngestOptions) -> bool:
    return options.processes > 1 and path.stat().st_size >= SPLIT_MIN_BYTES


def _ingest_split(
    path: Path, writer: CaptureWriter, result: IngestResult, options: IngestOptions, progress: ProgressFn | None
) -> None:
    """Ingest one capture file with two processes, each handling every other connection
    (TcpAnalyzer's ``share``) in lockstep (telemetry/lockstep.py). The child writes its rows
    into the capture's staging folder; the parent commits them with its own, so the store
    gets the rows one process would have written, in one atomic commit."""
    peer = fork_pair()
    if peer.index == 1:
        _split_child(path, writer.store, result.capture_id, options, peer)
    try:
        pipeline = CapturePipeline(result.capture_id, writer, options, peer)
        _stream(path, pipeline, result, progress)
        if result.error:  # the child stopped at the same place
            _wait_child(peer)
            writer.abort()
            return
        pipeline.finish()
        part, staged = peer.receive()
        pipeline.add_split_part(part)
        writer.adopt(staged)
        _wait_child(peer)
        pipeline.fill_result(result)
        writer.commit(pipeline.capture_row(path, result), derive=lambda w: _derive(w, result))
    except BaseException as exc:
        status = _wait_child(peer, kill=True)
        writer.abort()
        if isinstance(exc, PeerGone):
            raise RuntimeError(f"{path}: the second ingest process failed (exit status {status})") from None
        raise
    finally:
        peer.close()


def _split_child(path: Path, store: Store, capture_id: str, options: IngestOptions, peer: Peer) -> NoReturn:
    """The child of :func:`_ingest_split`: its half of the connections, then exit."""
    code = 0
    try:
        writer = store.writer(capture_id, part=1)
        pipeline = CapturePipeline(capture_id, writer, options, peer)
        result = IngestResult(path=str(path))
        _stream(path, pipeline, result, None)
        if result.error is None:
            pipeline.finish()
            peer.send((pipeline.split_part(), writer.close_part()))
    except PeerGone:  # the parent stopped: it throws the rows away
        code = 1
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - reported here, the parent sees the exit status
        traceback.print_exc()
        code = 70
    finally:
        os._exit(code)


def _wait_child(peer: Peer, kill: bool = False) -> int:
    """Reap the split's child (killed first when ``kill``); its exit status."""
    if peer.child_pid is None:
        return 0
    if kill:
        try:
            os.kill(peer.child_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(peer.child_pid, 0)
    peer.child_pid = None
    return os.waitstatus_to_exitcode(status)


def _stream(path: Path, pipeline: CapturePipeline, result: IngestResult, progress: ProgressFn | None) -> None:
    fh, compressed = _open(path)
    pipeline.compressed = compressed
    decoder = pipeline.decoder
    raw = fh.fileobj if compressed else fh  # on-disk position for progress
    try:
        while True:
            try:
                chunk = fh.read(CHUNK_BYTES)
            except (OSError, EOFError) as exc:  # corrupt or truncated gzip stream
                pipeline.issues.append(
                    DecodeIssue("bad_compression", decoder.packets_read, f"{path}: {exc}", fatal=True)
                )
                break
            if not chunk:
                break
            try:
                batches = decoder.feed(chunk)
            except CaptureFormatError as exc:
                result.error = f"{path}: {exc}"
                return
            for batch in batches:
                pipeline.process(batch)
            if progress is not None:
                progress(raw.tell(), decoder.packets_read)
        try:
            for batch in decoder.close():
                pipeline.process(batch)
        except CaptureFormatError as exc:
            result.error = f"{path}: {exc}"
            return
    finally:
        fh.close()
    if decoder.packets_read == 0 and not result.error:
        fatal = [i for i in decoder.issues if i.fatal]
        reason = fatal[0].message if fatal else "no packets"
        result.error = f"{path}: nothing could be read ({reason})"


_CONN_KEY = attrgetter("conn_key")
_NO_TS = np.iinfo(np.int64).min  # acked_ts not (yet) known: null in the table
_MSG_FIELDS = ("sid", "idx", "ts", "size", "comp", "end", "gap", "acked", "kind", "tokens")
# messages TTFT and token gaps are measured on (the others are LLM stream events that carry
# no generated content: role, usage, finish, ping...)
_GAP_KINDS = np.array(sorted(TOKEN_KINDS), dtype=np.int64)
_EVENT_NAMES = np.array(EVENT_NAMES, dtype=object)


@dataclass(slots=True)
class _Msgs:
    """Messages of one session direction as numpy columns, in completion order (so
    their end offsets ascend). One object per batch instead of one per message."""

    sid: np.ndarray  # int64 stream id
    idx: np.ndarray  # int64 index within the stream and direction
    ts: np.ndarray  # int64 ns
    size: np.ndarray  # int64
    comp: np.ndarray  # bool
    end: np.ndarray  # int64 direction offset after the last byte
    gap: np.ndarray  # float64 ms since the previous message of the stream; NaN: none
    acked: np.ndarray  # int64 ns of the covering ACK; _NO_TS: none (yet)
    kind: np.ndarray  # int64 LLM event kind (parsers.llm.semantics); 0: not an event
    tokens: np.ndarray  # int64 tokens the event carries; -1: not said

    def __len__(self) -> int:
        return len(self.sid)

    def part(self, a: int, b: int) -> _Msgs:
        return _Msgs(*(getattr(self, f)[a:b] for f in _MSG_FIELDS))

    @staticmethod
    def concat(parts: list[_Msgs]) -> _Msgs:
        if len(parts) == 1:
            return parts[0]
        return _Msgs(*(np.concatenate([getattr(p, f) for p in parts]) for f in _MSG_FIELDS))


_EMPTY_I64 = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class _Rates:
    """flow_rates buckets of one TCP direction not written yet, as sorted columns: bytes
    and segments sent (zero when none) and the highest acked offset (-1: no ACK progress
    in that bucket). A bucket is kept when it saw either."""

    bucket: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    sent_bytes: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    sent_pkts: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    acked: np.ndarray = field(default_factory=lambda: _EMPTY_I64)

    def __len__(self) -> int:
        return len(self.bucket)

    def counted(self) -> int:
        """Buckets with bytes sent plus buckets with ACK progress."""
        return int((self.sent_pkts > 0).sum()) + int((self.acked >= 0).sum())

    def add(self, bucket: np.ndarray, sent_bytes: np.ndarray, sent_pkts: np.ndarray, acked: np.ndarray) -> None:
        """Fold rows in (any order, repeated buckets allowed): sums sent, max acked."""
        n = len(bucket)
        if n > 1:
            step = bucket[1:] - bucket[:-1]
            if (step < 0).any():
                self._fold(bucket, sent_bytes, sent_pkts, acked)
                return
            if not step.all():  # repeats, next to each other: one row per bucket
                starts = np.flatnonzero(np.concatenate(([True], step != 0)))
                bucket = bucket[starts]
                sent_bytes = np.add.reduceat(sent_bytes, starts)
                sent_pkts = np.add.reduceat(sent_pkts, starts)
                acked = np.maximum.reduceat(acked, starts)
        elif not n:
            return
        k = len(self.bucket)
        if k and bucket[0] < self.bucket[-1]:
            self._fold(bucket, sent_bytes, sent_pkts, acked)
            return
        # the usual case, time going forward: append, the first bucket maybe onto the last
        same = int(k > 0 and bucket[0] == self.bucket[-1])
        self.bucket = np.concatenate((self.bucket, bucket[same:]))
        sb = np.concatenate((self.sent_bytes, sent_bytes[same:]))
        sp = np.concatenate((self.sent_pkts, sent_pkts[same:]))
        ac = np.concatenate((self.acked, acked[same:]))
        if same:  # (fresh arrays: the inputs may share memory)
            sb[k - 1] += sent_bytes[0]
            sp[k - 1] += sent_pkts[0]
            ac[k - 1] = max(ac[k - 1], acked[0])
        self.sent_bytes, self.sent_pkts, self.acked = sb, sp, ac

    def _fold(self, bucket: np.ndarray, sent_bytes: np.ndarray, sent_pkts: np.ndarray, acked: np.ndarray) -> None:
        """:meth:`add` for rows in any order: sort everything, reduce per bucket."""
        b = np.concatenate((self.bucket, bucket))
        order = np.argsort(b, kind="stable")
        b = b[order]
        starts = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
        self.bucket = b[starts]
        self.sent_bytes = np.add.reduceat(np.concatenate((self.sent_bytes, sent_bytes))[order], starts)
        self.sent_pkts = np.add.reduceat(np.concatenate((self.sent_pkts, sent_pkts))[order], starts)
        self.acked = np.maximum.reduceat(np.concatenate((self.acked, acked))[order], starts)

    def take(self, upto: int | None) -> _Rates:
        """Remove and return the buckets before ``upto`` (all of them: None)."""
        k = len(self.bucket) if upto is None else int(np.searchsorted(self.bucket, upto, side="left"))
        out = _Rates(self.bucket[:k], self.sent_bytes[:k], self.sent_pkts[:k], self.acked[:k])
        self.bucket, self.sent_bytes = self.bucket[k:], self.sent_bytes[k:]
        self.sent_pkts, self.acked = self.sent_pkts[k:], self.acked[k:]
        return out


@dataclass(slots=True)
class _LastTimes:
    """Time of the last message per stream * 2 + direction (the connection's open
    streams), as sorted columns: looked up and updated once per batch, not per stream."""

    keys: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    ts: np.ndarray = field(default_factory=lambda: _EMPTY_I64)

    def swap(self, keys: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For sorted unique ``keys``: whether a time was held for each and which (0:
        none); ``last`` becomes their time."""
        pos = np.searchsorted(self.keys, keys)
        known = pos < len(self.keys)
        known[known] = self.keys[pos[known]] == keys[known]
        held = np.zeros(len(keys), dtype=np.int64)
        held[known] = self.ts[pos[known]]
        self.ts[pos[known]] = last[known]  # (self.ts is always an array of its own)
        new = ~known
        if new.any():
            self.keys = np.insert(self.keys, pos[new], keys[new])
            self.ts = np.insert(self.ts, pos[new], last[new])
        return known, held

    def forget(self, streams: list[int]) -> None:
        """Drop both directions of these streams (they are over)."""
        if len(self.keys) and streams:
            key = np.array(streams, dtype=np.int64) * 2
            key = np.concatenate((key, key + 1))
            pos = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
            gone = pos[self.keys[pos] == key]
            if len(gone):
                self.keys, self.ts = np.delete(self.keys, gone), np.delete(self.ts, gone)


@dataclass
class _ConnRows:
    """Rows of one connection not yet handed to the writer."""

    tcp_events: list[TcpEvent] = field(default_factory=list)
    rtt: list[RttSample | RttRun] = field(default_factory=list)
    n_rtt: int = 0  # RTT samples in ``rtt`` (an RttRun holds many)
    h2: list[H2Event] = field(default_factory=list)
    messages: list[tuple[int, _Msgs]] = field(default_factory=list)  # (session direction, rows)
    requests: list[_Ready] = field(default_factory=list)
    n_requests: int = 0  # requests in ``requests`` (a _Ready holds many)

    def counts(self) -> tuple[int, ...]:
        """Rows waiting per table."""
        n_msgs = sum(len(m) for _d, m in self.messages)
        return len(self.tcp_events), self.n_rtt, len(self.h2), n_msgs, self.n_requests

    def __len__(self) -> int:
        return sum(self.counts())


@dataclass(slots=True)
class _Ready:
    """Requests resolved together, with their client-side times and the statistics of
    their response gaps as columns: one object per resolution, not one per request."""

    records: list[RequestRecord]
    first_acked: np.ndarray  # int64 ns of the ACK of the first response message; _NO_TS: none
    end_acked: np.ndarray  # int64 ns of the ACK of the response's last byte; _NO_TS: none
    floor_ms: float  # RTT floor toward the client when they were resolved (0.0: none yet)
    gaps: tuple[np.ndarray, np.ndarray, np.ndarray]  # p50, p99, max gap ms; NaN: < 2 messages


@dataclass
class _Conn:
    key: int
    session: AppSession | None = None
    rows: _ConnRows = field(default_factory=_ConnRows)
    # per session-oriented direction: messages waiting for the ACK that covers them
    pending: list[_Msgs | None] = field(default_factory=lambda: [None, None])
    pending_requests: list[RequestRecord] = field(default_factory=list)
    # stream -> ns between its consecutive response messages (one array per batch), kept
    # until its request is resolved: the request's gap statistics
    response_gaps: dict[int, list[np.ndarray]] = field(default_factory=dict)
    last_ts: _LastTimes = field(default_factory=lambda: _LastTimes())
    # RTT sample values per TCP direction (for the connection's min/p50/p99); compact
    # doubles, as every sample of a long connection is kept for its exact percentiles
    rtt_values: tuple[array, array] = field(default_factory=lambda: (array("d"), array("d")))
    rtt_floor: list[float | None] = field(default_factory=lambda: [None, None])  # running minimum
    requests: int = 0
    # flow_rates, per TCP direction: new bytes, segments and highest acked offset per bucket
    rates: tuple[_Rates, _Rates] = field(default_factory=lambda: (_Rates(), _Rates()))
    ack_seen_ns: list[int] = field(default_factory=lambda: [-1, -1])
    # highest acked offset of the last flow_rates bucket written (rows written while open)
    prev_acked: list[int | None] = field(default_factory=lambda: [None, None])
    # stream -> ACK time of its first response message (resolved before the request is;
    # _NO_TS: not acked)
    first_acked: dict[int, int] = field(default_factory=dict)

    def note_rates(
        self, tcp_direction: int, ts: np.ndarray, offsets: np.ndarray, sent: tuple[np.ndarray, ...] | None = None
    ) -> None:
        """Fold ACK progress not yet seen into the per-bucket highest acked offset, and
        ``sent`` (a batch's bucket, bytes, segments, -1 rows) with it: one fold a batch."""
        rows = [sent] if sent is not None else []
        start = int(np.searchsorted(ts, self.ack_seen_ns[tcp_direction], side="right"))
        if start < len(ts):
            new_ts, new_off = ts[start:], offsets[start:]
            buckets = new_ts // RATE_BUCKET_NS
            # last entry of each bucket holds its highest offset (progress is non-decreasing)
            last = np.flatnonzero(np.append(buckets[1:] != buckets[:-1], True))
            zeros = np.zeros(len(last), dtype=np.int64)
            rows.append((buckets[last], zeros, zeros, new_off[last].astype(np.int64)))
            self.ack_seen_ns[tcp_direction] = int(new_ts[-1])
        if len(rows) == 2:  # both in bucket order (what _Rates.add folds fastest)
            cols = [np.concatenate(c) for c in zip(*rows, strict=True)]
            order = np.argsort(cols[0], kind="stable")
            rows = [tuple(c[order] for c in cols)]
        if rows:
            self.rates[tcp_direction].add(*rows[0])

    @property
    def flip(self) -> int:
        return int(self.session.flipped) if self.session is not None else 0

    def rtt_floor_ms(self, tcp_direction: int) -> float | None:
        return self.rtt_floor[tcp_direction]

    def rate_buckets(self) -> int:
        return self.rates[0].counted() + self.rates[1].counted()


FLUSH_CONN_ROWS = 20_000  # write a long connection's rows out once this many are waiting
# requests of all connections are built into one table once this many wait (its ~35
# columns cost more per table than per row)
REQUEST_TABLE_ROWS = 4096
# flow_rates buckets of an open connection are written once capture time has moved this
# far past them (a bucket must not get more bytes after its row was written)
RATE_HOLD_NS = 60 * 1_000_000_000


class CapturePipeline:
    """Drives the parsers for one capture and hands rows to the writer."""

    def __init__(
        self, capture_id: str, writer: CaptureWriter, options: IngestOptions, peer: Peer | None = None
    ) -> None:
        """``peer``: this pipeline is one of two processes sharing the capture's
        connections (:func:`_ingest_split`): it keeps only its own connections' segments;
        the capture-wide counts and issues are the parent's (index 0) alone."""
        self.capture_id = capture_id
        self.writer = writer
        self.options = options
        self.decoder = CaptureDecoder()
        self.stats = DecodeStats()
        self.issues: list[DecodeIssue] = []
        self.tcp = TcpAnalyzer(share=(peer.index, 2) if peer is not None else None)
        self.conns: dict[int, _Conn] = {}
        self.sessions: dict[int, AppSession] = {}  # conn key -> session, for the chunk loop
        self.compressed = False
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.monotonic = True  # capture times never went back so far
        self.connections_written = 0
        self.requests_written = 0
        self.peer = peer
        # a split's child decodes the same packets as the parent: its counts go nowhere
        self.capture_wide = peer is None or peer.index == 0
        self._child_stats, self._child_issues = DecodeStats(), []
        # resolved requests not built into a table yet: (connection, blocks) in order
        self._requests_out: list[tuple[ConnectionSummary, list[_Ready]]] = []
        self._requests_out_n = 0
        self.sendlog = SendLog(self._path_of, peer)  # segment_sends (loss-gated)

    # -- files of a chain ----------------------------------------------------------------
    def begin_file(self, capture_id: str, writer: CaptureWriter) -> None:
        """Go on with the next file of the run: new container decoder and per-file counts;
        the TCP analyzer, sessions and connections carry over."""
        self.capture_id = capture_id
        self.writer = writer
        self.decoder = CaptureDecoder()
        self.stats = DecodeStats()
        self.issues = []
        self.compressed = False
        self.first_ts = None
        self.connections_written = 0
        self.requests_written = 0

    def end_file(self) -> None:
        """The file ends but the capture goes on: hand the writer every row resolved so
        far (rows of open connections too, once their orientation is final); what is still
        open carries over to the next file."""
        for conn in self.conns.values():
            self._flush_open(conn)
        self._write_requests()
        self._take_decoder_issues()

    def fill_result(self, result: IngestResult) -> None:
        result.packets = self.stats.packets
        result.bytes = self.stats.bytes
        result.connections = self.connections_written
        result.requests = self.requests_written
        result.issues = self.issues

    def _conn(self, key: int) -> _Conn:
        conn = self.conns.get(key)
        if conn is None:
            conn = self.conns[key] = _Conn(key)
        return conn

    def _open_session(self, key: int) -> AppSession:
        conn = self._conn(key)
        client_port, server_port = self.tcp.connection_info(key)
        force = bool(self.options.h2_ports & {client_port, server_port})
        conn.session = self.sessions[key] = AppSession(key, client_port, server_port, force_h2=force)
        return conn.session

    # -- per batch -------------------------------------------------------------------
    def process(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        ts_ns = batch.ts_ns
        if self.first_ts is None:
            self.first_ts = int(ts_ns[0])
        if self.monotonic and (
            (self.last_ts is not None and int(ts_ns[0]) < self.last_ts)
            or bool((ts_ns[1:] < ts_ns[:-1]).any())
        ):
            self.monotonic = False
        self.last_ts = int(ts_ns[-1])
        if self.capture_wide:
            segments = decode_segments(batch, self.stats, self.issues)
        else:
            segments = decode_segments(batch, self._child_stats, self._child_issues)
        if self.peer is not None and len(segments):
            # the clock of one process reading every connection (idle and FIN closes)
            self.tcp.advance_clock(int(segments.ts_ns.max()))
        chunks = self.tcp.feed_runs(segments)
        if chunks:
            # the TCP layer hands out each connection's chunks together: one lookup per
            # group; bulk-path chunks come as ChunkRun columns, fed in one call each
            sessions = self.sessions
            for key, group in groupby(chunks, _CONN_KEY):
                session = sessions.get(key)
                if session is None:
                    session = self._open_session(key)
                for item in group:
                    if type(item) is ChunkRun:
                        session.feed_run(item)
                    else:
                        session.feed(item)
            sent = self._count_sent(chunks)
            self.sendlog.note_chunks(chunks)
        else:
            sent = {}
        for key, conn in self.conns.items():
            for tcp_dir in (TO_SERVER, TO_CLIENT):
                ts, off = self.tcp.ack_progress(key, tcp_dir)
                conn.note_rates(tcp_dir, ts, off, sent.get(key * 2 + tcp_dir))
        self._take_tcp_events()
        for conn in self.conns.values():
            if conn.session is not None:
                requests, rows, h2_events = conn.session.take_columns()
                self._take(conn, requests, rows, h2_events)
                self._resolve_acks(conn, None)
            if len(conn.rows) + conn.rate_buckets() + self.sendlog.pending(conn.key) >= FLUSH_CONN_ROWS:
                self._flush_open(conn)
        self._close_all(self.tcp.take_closed(IDLE_CLOSE_NS))

    def _take_tcp_events(self) -> None:
        events, samples = self.tcp.take_events_runs()
        self.sendlog.note_events(events)
        for ev in events:
            self._conn(ev.conn_key).rows.tcp_events.append(ev)
        for key, run in groupby(samples, _CONN_KEY):
            group = list(run)
            conn = self._conn(key)
            conn.rows.rtt.extend(group)
            # bulk-path samples come as RttRun columns, the others one by one
            parts: tuple[list, list] = ([], [])
            singles: tuple[list[float], list[float]] = ([], [])
            for s in group:
                if type(s) is RttRun:
                    parts[s.direction].append(s.rtt_ms)
                    conn.rows.n_rtt += len(s)
                else:
                    singles[s.direction].append(s.rtt_ms)
                    conn.rows.n_rtt += 1
            for tcp_dir in (TO_SERVER, TO_CLIENT):
                arrays = parts[tcp_dir]
                if singles[tcp_dir]:
                    arrays.append(np.array(singles[tcp_dir], dtype=np.float64))
                if not arrays:
                    continue
                values = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
                if not len(values):
                    continue
                conn.rtt_values[tcp_dir].frombytes(values.astype(np.float64, copy=False).tobytes())
                low = float(values.min())  # the running minimum (RTTs are never NaN)
                floor = conn.rtt_floor[tcp_dir]
                if floor is None or low < floor:
                    conn.rtt_floor[tcp_dir] = low

    def _close_all(self, summaries: list[ConnectionSummary]) -> None:
        """Closing a connection settles what the TCP layer still held: verdicts on recent
        retransmissions, holes, bytes buffered behind a hole. Take those first.
        A split's processes always go through (the send log exchanges in lockstep)."""
        if not summaries and self.peer is None:
            return
        for chunk in self.tcp.take_chunks():
            session = self.sessions.get(chunk.conn_key)
            if session is None:
                session = self._open_session(chunk.conn_key)
            session.feed(chunk)
        self._take_tcp_events()
        for summary in summaries:
            self._close(summary)

    def _count_sent(self, chunks: list) -> dict[int, tuple[np.ndarray, ...]]:
        """flow_rates bytes/segments sent per connection direction and bucket, in bulk:
        conn key * 2 + TCP direction -> (bucket, bytes, segments, -1) rows, by bucket."""
        runs = [c for c in chunks if type(c) is ChunkRun]
        singles = [c for c in chunks if type(c) is not ChunkRun] if len(runs) < len(chunks) else []
        parts = [_run_sent(runs)] if runs else []
        if singles:
            parts.append(_chunk_sent(singles))
        cd, buckets, nbytes, npkts = (np.concatenate(c) for c in zip(*parts, strict=True))
        if not len(cd):
            return {}
        order = np.argsort(cd, kind="stable")
        cd, buckets = cd[order], buckets[order]
        # one row per stretch of equal (connection direction, bucket): summed here, for
        # every connection at once
        change = np.empty(len(cd), dtype=bool)
        change[:1] = True
        change[1:] = (cd[1:] != cd[:-1]) | (buckets[1:] != buckets[:-1])
        starts = np.flatnonzero(change)
        cd, buckets = cd[starts], buckets[starts]
        nbytes = np.add.reduceat(nbytes[order], starts)
        npkts = np.add.reduceat(npkts[order], starts)
        no_ack = np.full(len(cd), -1, dtype=np.int64)
        firsts = np.flatnonzero(np.concatenate(([True], cd[1:] != cd[:-1])))
        bounds = [*firsts.tolist(), len(cd)]
        return {
            k: (buckets[a:z], nbytes[a:z], npkts[a:z], no_ack[a:z])
            for k, a, z in zip(cd[firsts].tolist(), bounds[:-1], bounds[1:], strict=True)
        }

    def _take(self, conn: _Conn, requests, rows, h2_events) -> None:
        conn.rows.h2.extend(h2_events)
        if len(rows):
            self._take_messages(conn, rows)
        conn.pending_requests.extend(requests)

    def _take_messages(self, conn: _Conn, rows: list[tuple] | np.ndarray) -> None:
        """Session message rows (MessageRow tuples or their (n, 7) int64 columns) ->
        per-direction columns waiting for their ACK, with the gap since the previous
        message of the same stream and direction."""
        n = len(rows)
        if isinstance(rows, np.ndarray):
            a = rows
        else:
            a = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=7 * n).reshape(n, 7)
        dirs = a[:, 1]  # (columns: sid, dir, idx, ts, size, flags, end)
        flags = a[:, 5]
        kinds = (flags >> 8) & 0xF
        if kinds.any():  # LLM stream events: gaps only between those carrying content
            gap = np.full(n, np.nan)
            sel = np.flatnonzero(np.isin(kinds, _GAP_KINDS))
            if len(sel):
                gap[sel] = self._gaps(conn, a[sel, 0], dirs[sel], a[sel, 3])
        else:
            gap = self._gaps(conn, a[:, 0], dirs, a[:, 3])
        for d in (TO_SERVER, TO_CLIENT):
            sel = np.flatnonzero(dirs == d)
            m = len(sel)
            if not m:
                continue
            # whole rows gathered once; the fields stay (strided) views of them
            part, part_gap = (a, gap) if m == n else (a[sel], gap[sel])
            pf = part[:, 5]
            block = _Msgs(
                part[:, 0], part[:, 2], part[:, 3], part[:, 4], (pf & 1) != 0, part[:, 6], part_gap,
                np.full(m, _NO_TS, dtype=np.int64), (pf >> 8) & 0xF, (pf >> 12) - 1,
            )
            old = conn.pending[d]
            conn.pending[d] = block if old is None else _Msgs.concat([old, block])

    @staticmethod
    def _gaps(conn: _Conn, sid: np.ndarray, dirs: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """ms since the previous message of the same stream and direction (NaN: none
        known) of message rows in completion order; the response gaps are kept for the
        requests' gap statistics."""
        n = len(sid)
        key = sid * 2 + dirs
        order = np.argsort(key, kind="stable")
        ks, tso = key[order], ts[order]
        first = np.ones(n, dtype=bool)  # first row of its key in this batch
        first[1:] = ks[1:] != ks[:-1]
        firsts = np.flatnonzero(first)
        lasts = np.append(firsts[1:] - 1, n - 1)
        prev = np.empty(n, dtype=np.int64)
        prev[1:] = tso[:-1]
        known, held = conn.last_ts.swap(ks[firsts], tso[lasts])
        prev[firsts] = held
        has = ~first  # a previous message is known
        has[firsts] = known
        diff = tso - prev  # ns since the previous message of the stream and direction
        gap = np.empty(n, dtype=np.float64)
        gap[order] = np.where(has, diff / 1e6, np.nan)
        _note_response_gaps(conn.response_gaps, ks, diff, has)
        return gap

    # -- ACK times ---------------------------------------------------------------------
    def _ack_arrays(self, conn: _Conn, session_dir: int, summary: ConnectionSummary | None):
        """(ts, acked offset) of the far end's ACKs for one session-oriented direction."""
        tcp_dir = session_dir ^ conn.flip
        if summary is not None:
            return summary.ack_progress[tcp_dir] if summary.ack_progress is not None else None
        return self.tcp.ack_progress(conn.key, tcp_dir)

    def _resolve_acks(self, conn: _Conn, summary: ConnectionSummary | None) -> None:
        """Give messages their ACK time and requests their client-side times; hand over
        what is resolved (everything, at close); then forget ACK progress nothing needs."""
        final = summary is not None
        for session_dir in (TO_SERVER, TO_CLIENT):
            pending = conn.pending[session_dir]
            if pending is None:
                continue
            arrays = self._ack_arrays(conn, session_dir, summary)
            if arrays is not None and len(arrays[0]):
                ack_ts, ack_off = arrays
                idx = np.searchsorted(ack_off, pending.end, side="left")
                found = idx < len(ack_ts)
                if found.any():
                    got = np.asarray(ack_ts, dtype=np.int64)[np.minimum(idx, len(ack_ts) - 1)]
                    pending.acked = np.where(found, got, pending.acked)
            n = len(pending)
            if final:
                n_done = n
            else:
                # messages complete in offset order: the resolved ones form a prefix
                unresolved = np.flatnonzero(pending.acked == _NO_TS)
                n_done = int(unresolved[0]) if len(unresolved) else n
            if not n_done:
                continue
            done = pending if n_done == n else pending.part(0, n_done)
            conn.pending[session_dir] = None if n_done == n else pending.part(n_done, n)
            if session_dir == TO_CLIENT:
                # the first response message's ACK; of an LLM stream, its first event
                # carrying content (the TTFT point)
                firsts = np.flatnonzero((done.idx == 0) & (done.kind == 0))
                conn.first_acked.update(zip(done.sid[firsts].tolist(), done.acked[firsts].tolist(), strict=True))
                events = np.flatnonzero((done.kind != 0) & np.isin(done.kind, _GAP_KINDS))
                for sid, acked in zip(done.sid[events].tolist(), done.acked[events].tolist(), strict=True):
                    conn.first_acked.setdefault(sid, acked)
            conn.rows.messages.append((session_dir, done))
        if final:
            ready, waiting = conn.pending_requests, []
        else:
            arrays = self._ack_arrays(conn, TO_CLIENT, None)
            upto = int(arrays[1][-1]) if arrays is not None and len(arrays[1]) else -1  # acked so far
            ready, waiting = [], []
            for r in conn.pending_requests:
                (ready if r.end_offset is None or r.end_offset <= upto else waiting).append(r)
        conn.pending_requests = waiting
        if not ready:
            if not final:
                self._prune_acks(conn)
            return
        # ACK times of every ready request's end (and first response byte) in one lookup
        k = len(ready)
        sids = [r.stream_id for r in ready]
        firsts = [conn.first_acked.pop(s, _NO_TS) for s in sids]
        lookups = [r.end_offset for r in ready]
        lookups += [r.first_message_end_offset if f == _NO_TS else None for r, f in zip(ready, firsts, strict=True)]
        found = self._acked_many(conn, lookups, summary)
        first_acked = np.array(firsts, dtype=np.int64)
        # a non-gRPC response has no message rows: its first byte's ACK was looked up
        first_acked = np.where(first_acked == _NO_TS, found[k:], first_acked)
        # the streams are over: their last message times are not needed again (bounded
        # memory on long connections)
        conn.last_ts.forget(sids)
        gaps_of = conn.response_gaps
        gaps = [gaps_of.pop(s, None) for s in sids]
        floor = conn.rtt_floor_ms(TO_CLIENT ^ conn.flip) or 0.0
        conn.rows.requests.append(_Ready(ready, first_acked, found[:k], floor, _gap_stats(gaps)))
        conn.rows.n_requests += k
        conn.requests += k
        if not final:
            self._prune_acks(conn)

    def _prune_acks(self, conn: _Conn) -> None:
        """ACK progress below every offset still waiting for its ACK is not needed again."""
        for session_dir in (TO_SERVER, TO_CLIENT):
            pending = conn.pending[session_dir]
            needed = [int(pending.end[0])] if pending is not None else []
            if session_dir == TO_CLIENT:
                for r in conn.pending_requests:
                    needed += [o for o in (r.first_message_end_offset, r.end_offset) if o is not None]
            if needed:
                self.tcp.prune_acks(conn.key, session_dir ^ conn.flip, min(needed))

    def _acked_many(
        self, conn: _Conn, offsets: list[int | None], summary: ConnectionSummary | None
    ) -> np.ndarray:
        """When the client's ACK covering each offset was seen (_NO_TS: no offset, or not
        acked yet), with one search over the connection's ACK progress."""
        arrays = self._ack_arrays(conn, TO_CLIENT, summary)
        if arrays is None or not len(arrays[0]):
            return np.full(len(offsets), _NO_TS, dtype=np.int64)
        ack_ts, ack_off = arrays
        want = np.array([-1 if o is None else o for o in offsets], dtype=np.int64)
        idx = np.searchsorted(ack_off, want, side="left")
        ok = (want >= 0) & (idx < len(ack_ts))
        got = np.asarray(ack_ts, dtype=np.int64)[np.minimum(idx, len(ack_ts) - 1)]
        return np.where(ok, got, _NO_TS)

    # -- long connections --------------------------------------------------------------
    def _flush_open(self, conn: _Conn) -> None:
        """Write an open connection's rows so memory does not grow with its length.
        Only once its orientation is final (rows say to_server/to_client)."""
        if conn.session is None or not conn.session.orientation_final:
            return
        summary = self._open_summary(conn.key)
        if summary is None:
            return
        if conn.flip:
            summary = flip_summary(summary)
        rates_upto = None
        if self.monotonic and self.last_ts is not None:
            rates_upto = (self.last_ts - RATE_HOLD_NS) // RATE_BUCKET_NS
        self._write_rows(conn, summary, rates_upto=rates_upto, final=False)

    def _path_of(self, key: int) -> tuple[str, str] | None:
        """(client, server) address of an open connection as the TCP layer names it."""
        s = self.tcp.open_summary(key)
        return None if s is None else (s.client_addr, s.server_addr)

    def _open_summary(self, key: int) -> ConnectionSummary | None:
        """conn_id and addresses of a connection still open (as the TCP layer names it)."""
        return self.tcp.open_summary(key)

    # -- connection end ----------------------------------------------------------------
    def _close(self, summary: ConnectionSummary) -> None:
        conn = self.conns.pop(summary.conn_key, None) or _Conn(summary.conn_key)
        self.sessions.pop(summary.conn_key, None)
        protocol = "unknown"
        if conn.session is not None:
            result = conn.session.finish(summary.end_ns)
            protocol = result.protocol
            self.issues.extend(result.issues)
            self._take(conn, result.requests, result.message_rows, result.h2_events)
        if summary.ack_progress is not None:
            for tcp_dir in (TO_SERVER, TO_CLIENT):
                ts, off = summary.ack_progress[tcp_dir]
                conn.note_rates(tcp_dir, ts, off)
        self._resolve_acks(conn, summary)
        if conn.flip:
            summary = flip_summary(summary)
        self._write_rows(conn, summary)
        self.sendlog.forget(summary.conn_key)
        self._write_connection(conn, summary, protocol)

    def finish(self) -> None:
        self._close_all(self.tcp.finish())
        self._write_requests()
        if self.capture_wide:
            self._take_decoder_issues()

    def split_part(self) -> tuple[int, int, list[DecodeIssue]]:
        """What a split's child adds to the capture: connections and requests written,
        and its connections' issues."""
        return self.connections_written, self.requests_written, self.issues

    def add_split_part(self, part: tuple[int, int, list[DecodeIssue]]) -> None:
        connections, requests, issues = part
        self.connections_written += connections
        self.requests_written += requests
        self.issues.extend(issues)

    def _take_decoder_issues(self) -> None:
        # decode_segments already reports unknown link types per type; the container's
        # per-interface reports would say the same twice
        reported = {i.kind for i in self.issues}
        self.issues.extend(i for i in self.decoder.issues if not (i.kind == "unknown_linktype" and i.kind in reported))

    # -- rows ---------------------------------------------------------------------------
    def _write_rows(
        self, conn: _Conn, summary: ConnectionSummary, rates_upto: int | None = None, final: bool = True
    ) -> None:
        """Hand a connection's waiting rows to the writer. flow_rates: every bucket when
        ``final``, else those before bucket ``rates_upto`` (none when it is None)."""
        rows, flip = conn.rows, conn.flip
        base = _IdColumns(self.capture_id, summary.conn_id, max(rows.counts()))

        if rows.tcp_events:
            ev = rows.tcp_events
            self.writer.append("tcp_events", table_from_columns("tcp_events", {
                **base(len(ev)),
                "ts": [e.ts_ns for e in ev],
                "direction": [DIRECTION_NAMES[e.direction ^ flip] for e in ev],
                "kind": [e.kind for e in ev],
                "seq": [e.seq for e in ev],
                "bytes": [e.bytes for e in ev],
                "frame_no": [e.frame_no for e in ev],
                "recovery_ms": [e.recovery_ms for e in ev],
                "burst_id": [e.burst_id for e in ev],
            }))
        if rows.rtt:
            ts, rtt, runs = _rtt_columns(rows.rtt)
            counts = [k for _d, _s, k in runs]
            self.writer.append("rtt_samples", table_from_columns("rtt_samples", {
                **base(len(ts)),
                "ts": pa.array(ts, _TS),
                "direction": _run_strings([DIRECTION_NAMES[d ^ flip] for d, _s, _k in runs], counts),
                "rtt_ms": pa.array(rtt, pa.float64()),
                "source": _run_strings([src for _d, src, _k in runs], counts),
            }))
        if rows.h2:
            h2 = rows.h2
            self.writer.append("h2_events", table_from_columns("h2_events", {
                **base(len(h2)),
                "ts": [e.ts_ns for e in h2],
                "stream_id": [e.stream_id for e in h2],
                "direction": [DIRECTION_NAMES[e.direction] for e in h2],
                "kind": [e.kind for e in h2],
                "value": [e.value for e in h2],
                "detail": [e.detail for e in h2],
                "duration_ms": [e.duration_ms for e in h2],
            }))
        if rows.messages:
            self.writer.append("messages", self._messages_table(base, rows.messages))
        self._write_rates(conn, base, rates_upto, final)
        sends = self.sendlog.take(conn.key)
        if sends is not None:
            dirs, ts, seq, size, kind = sends
            self.writer.append("segment_sends", table_from_columns("segment_sends", {
                **base(len(ts)),
                "ts": pa.array(ts, _TS),
                "direction": pa.array(np.array(DIRECTION_NAMES, dtype=object)[dirs ^ flip], pa.string()),
                "seq": pa.array(seq, pa.int64()),
                "bytes": pa.array(size, pa.int64()),
                "kind": pa.array(np.array(_SEND_KINDS, dtype=object)[kind], pa.string()),
            }))
        if rows.requests:
            self._requests_out.append((summary, rows.requests))
            self._requests_out_n += rows.n_requests
            self.requests_written += rows.n_requests
            if self._requests_out_n >= REQUEST_TABLE_ROWS:
                self._write_requests()
        conn.rows = _ConnRows()

    def _write_requests(self) -> None:
        """Hand the writer the requests resolved so far (of every connection), in one
        table; before the file's commit (end_file, finish) all of them."""
        if self._requests_out:
            self.writer.append("requests", self._requests_table(self._requests_out))
            self._requests_out, self._requests_out_n = [], 0

    def _messages_table(self, base: _IdColumns, blocks: list[tuple[int, _Msgs]]) -> pa.Table:
        ms = _Msgs.concat([m for _d, m in blocks])
        return table_from_columns("messages", {
            **base(len(ms)),
            "stream_id": pa.array(ms.sid, pa.int64()),
            "direction": _run_strings([MESSAGE_DIRECTION_NAMES[d] for d, _m in blocks], [len(m) for _d, m in blocks]),
            "index": pa.array(ms.idx, pa.int64()),
            "ts": pa.array(ms.ts, _TS),
            "acked_ts": pa.array(ms.acked, _TS, mask=ms.acked == _NO_TS),
            "size": pa.array(ms.size, pa.int64()),
            "compressed": pa.array(ms.comp, pa.bool_()),
            "gap_ms": pa.array(ms.gap, pa.float64(), mask=np.isnan(ms.gap)),
            **_event_columns(ms),
        })

    def _write_rates(self, conn: _Conn, base: _IdColumns, upto: int | None = None, final: bool = True) -> None:
        if not final and upto is None:
            return
        parts: list[dict[str, object]] = []
        for tcp_dir in (TO_SERVER, TO_CLIENT):
            rates = conn.rates[tcp_dir]
            if not len(rates):
                continue
            done = rates.take(None if final else upto)
            n = len(done)
            if not n:
                continue
            # bytes_acked: a bucket's highest acked offset minus the previous bucket's that
            # had one (carried over from rows already written), never negative
            has = done.acked >= 0
            values = done.acked[has]
            delta = np.zeros(n, dtype=np.int64)
            if len(values):
                prev = np.empty(len(values), dtype=np.int64)
                prev[1:] = values[:-1]
                carried = conn.prev_acked[tcp_dir]
                prev[0] = carried if carried is not None else 0
                delta[has] = np.maximum(values - prev, 0)
                conn.prev_acked[tcp_dir] = int(values[-1])
            parts.append({
                "ts": done.bucket * RATE_BUCKET_NS,
                "direction": _repeat(DIRECTION_NAMES[tcp_dir ^ conn.flip], n),
                "bytes_sent": done.sent_bytes,
                "packets_sent": done.sent_pkts,
                "bytes_acked": delta,
            })
        if parts:
            cols: dict[str, object] = {
                "ts": pa.array(np.concatenate([p["ts"] for p in parts]), _TS),
                "direction": pa.concat_arrays([p["direction"] for p in parts]),
            }
            for name in ("bytes_sent", "packets_sent", "bytes_acked"):
                cols[name] = pa.array(np.concatenate([p[name] for p in parts]), pa.int64())
            n = len(cols["ts"])
            cols.update(base(n))
            cols["bucket_ms"] = pa.array(np.full(n, RATE_BUCKET_NS // 1_000_000, dtype=np.int32))
            self.writer.append("flow_rates", table_from_columns("flow_rates", cols))

    def _requests_table(self, resolved: list[tuple[ConnectionSummary, list[_Ready]]]) -> pa.Table:
        blocks = [b for _s, bs in resolved for b in bs]
        records = [r for b in blocks for r in b.records]
        n = len(records)
        conns = [s for s, _bs in resolved]
        per_conn = [sum(len(b.records) for b in bs) for _s, bs in resolved]
        # the columns copied from the records, in one C-level pass
        passthrough = zip(*map(_PASSTHROUGH_OF, records), strict=True)
        cols: dict[str, object] = dict(zip(_REQUEST_PASSTHROUGH, passthrough, strict=True))
        times = {}
        for name in ("request_start", "request_end", "first_message", "last_message", "end", "first_byte"):
            arr = pa.array(cols[name], _TS)
            cols[name] = arr
            times[name] = arr.to_numpy(zero_copy_only=False).view(np.int64)  # nulls: NaT = _NO_TS
        start = times["request_start"]
        ttft_from = _either(times["request_end"], start)
        last = _either(times["end"], times["last_message"])
        first_acked, end_acked = (np.concatenate([getattr(b, f) for b in blocks]) for f in ("first_acked", "end_acked"))
        floor = np.repeat([b.floor_ms for b in blocks], [len(b.records) for b in blocks])
        # Client-side estimates. The client sent the request half an RTT (capture point
        # <-> client, at its floor) before the capture saw it, and received each response
        # half an RTT before its ACK reached the capture point: the two shifts cancel in
        # (ACK time - request time). Without an ACK the response is assumed to reach the
        # client half an RTT after the capture point: + one RTT floor in all.
        ttft_est = _client_est(ttft_from, times["first_message"], first_acked, floor)
        latency_est = _client_est(start, last, end_acked, floor)
        p50, p99, max_gap = (np.concatenate([b.gaps[j] for b in blocks]) for j in range(3))
        throttled = [
            h in APP_THROTTLE_HTTP or g in APP_THROTTLE_GRPC
            for h, g in zip(cols["http_status"], cols["grpc_status"], strict=True)
        ]
        cols.update(
            app_throttled=throttled,
            ttft_ms=_float_col(_ms(ttft_from, times["first_message"])),
            ttfb_ms=_float_col(_ms(ttft_from, times["first_byte"])),
            tokens_per_s=_float_col(_tokens_per_s(cols["completion_tokens"], times["first_message"], times["last_message"])),
            latency_ms=_float_col(_ms(start, last)),
            gap_p50_ms=_float_col(p50),
            gap_p99_ms=_float_col(p99),
            max_gap_ms=_float_col(max_gap),
            first_message_acked=pa.array(first_acked, _TS, mask=first_acked == _NO_TS),
            end_acked=pa.array(end_acked, _TS, mask=end_acked == _NO_TS),
            ttft_client_est_ms=_float_col(ttft_est),
            latency_client_est_ms=_float_col(latency_est),
            capture_id=_repeat(self.capture_id, n),
            conn_id=_run_strings([s.conn_id for s in conns], per_conn),
            client_addr=_run_strings([s.client_addr for s in conns], per_conn),
            client_port=np.repeat(np.array([s.client_port for s in conns], dtype=np.int32), per_conn),
            server_addr=_run_strings([s.server_addr for s in conns], per_conn),
            server_port=np.repeat(np.array([s.server_port for s in conns], dtype=np.int32), per_conn),
        )
        return table_from_columns("requests", cols)

    def _write_connection(self, conn: _Conn, s: ConnectionSummary, protocol: str) -> None:
        cols: dict[str, list] = {
            "capture_id": [self.capture_id],
            "conn_id": [s.conn_id],
            "client_addr": [s.client_addr],
            "client_port": [s.client_port],
            "server_addr": [s.server_addr],
            "server_port": [s.server_port],
            "client_known": [s.client_known],
            "ip_version": [s.ip_version],
            "start": [s.start_ns],
            "end": [s.end_ns],
            "duration_ms": [(s.end_ns - s.start_ns) / 1e6],
            "packets_to_server": [s.packets[0]],
            "packets_to_client": [s.packets[1]],
            "bytes_to_server": [s.bytes[0]],
            "bytes_to_client": [s.bytes[1]],
            "syn_seen": [s.syn_seen],
            "handshake_rtt_ms": [s.handshake_rtt_ms],
            "retransmissions_to_server": [s.retransmissions[0]],
            "retransmissions_to_client": [s.retransmissions[1]],
            "loss_bursts_to_server": [s.loss_bursts[0]],
            "loss_bursts_to_client": [s.loss_bursts[1]],
            "longest_loss_burst": [s.longest_loss_burst],
            "out_of_order_to_server": [s.out_of_order[0]],
            "out_of_order_to_client": [s.out_of_order[1]],
            "zero_windows_to_server": [s.zero_windows[0]],
            "zero_windows_to_client": [s.zero_windows[1]],
            "capture_loss_bytes": [sum(s.capture_loss_bytes)],
            "protocol": [protocol],
            "requests": [conn.requests],
            "history": [s.history],
        }
        floors = {}
        for tcp_dir in (TO_SERVER, TO_CLIENT):
            name = DIRECTION_NAMES[tcp_dir ^ conn.flip]
            vals = np.asarray(conn.rtt_values[tcp_dir], dtype=float)
            # one partition for the three (the 0th percentile is the minimum itself)
            stats = np.percentile(vals, (0, 50, 99)).tolist() if len(vals) else [None] * 3
            for stat, value in zip(("min", "p50", "p99"), stats, strict=True):
                cols[f"rtt_{stat}_ms_{name}"] = [value]
            floors[name] = stats[0]
        cols["capture_side"] = [capture_side(floors["to_server"], floors["to_client"])]
        self.writer.append("connections", table_from_columns("connections", cols))
        self.connections_written += 1

    def capture_row(self, path: Path, result: IngestResult) -> pa.Table:
        st = self.stats
        return table_from_columns("captures", {
            "capture_id": [self.capture_id],
            "path": [str(path)],
            "format": [self.decoder.format],
            "compressed": [self.compressed],
            "link_types": [",".join(f"{k}:{v}" for k, v in sorted(st.linktypes.items()))],
            "packets": [st.packets],
            "bytes": [st.bytes],
            "tcp_packets": [st.tcp],
            "ip_fragments": [st.ip_fragments],
            "truncated_packets": [st.truncated],
            "undecodable_packets": [st.unknown_linktype + st.malformed],
            "first_ts": [self.first_ts],
            "last_ts": [self.last_ts],
            "kernel_drops": [getattr(self.decoder, "kernel_drops", None)],
            "issues": [len(self.issues)],
            "connections": [self.connections_written],
            "requests": [self.requests_written],
            "parser_version": [__version__],
            "ingest_time": [time.time_ns()],
        })


_REQUEST_PASSTHROUGH = (
    "stream_id", "protocol", "method", "path", "authority", "content_type", "user_agent", "kind",
    "request_start", "request_end", "response_headers", "first_message", "last_message", "end",
    "http_status", "grpc_status", "grpc_message", "grpc_encoding", "request_messages",
    "response_messages", "request_bytes", "response_bytes", "reset_code", "trailers_only",
    "headers_known", "first_byte", "model", "finish_reason", "prompt_tokens", "completion_tokens",
)
_PASSTHROUGH_OF = attrgetter(*_REQUEST_PASSTHROUGH)


_TS = pa.timestamp("ns", tz="UTC")


def _run_strings(values: list[str], counts: list[int]) -> pa.Array:
    """String column of runs, ``counts[i]`` times ``values[i]``, built from buffers: no
    Python str per row (a batch's messages, an RttRun's samples share theirs)."""
    raw = [v.encode() for v in values]
    lens = np.repeat(np.array([len(r) for r in raw], dtype=np.int64), counts)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] >= 2**31:  # beyond 32-bit offsets (never for one flush's rows)
        return pa.array([v for v, k in zip(values, counts, strict=True) for _ in range(k)], pa.string())
    data = b"".join([r * k for r, k in zip(raw, counts, strict=True)])
    return pa.StringArray.from_buffers(len(lens), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))


def _rtt_columns(items: list[RttSample | RttRun]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str, int]]]:
    """(ts, rtt_ms) columns of RttSamples and RttRuns, in order, and their runs of
    (TCP direction, source, count)."""
    ts, rtt, runs = [], [], []
    singles: list[RttSample] = []

    def flush_singles() -> None:
        if singles:
            ts.append(np.array([s.ts_ns for s in singles], dtype=np.int64))
            rtt.append(np.array([s.rtt_ms for s in singles], dtype=np.float64))
            for (d, src), group in groupby(singles, _DIR_SOURCE):
                runs.append((d, src, sum(1 for _ in group)))
            singles.clear()

    for it in items:
        if type(it) is RttRun:
            flush_singles()
            ts.append(it.ts_ns)
            rtt.append(it.rtt_ms)
            runs.append((it.direction, it.source, len(it)))
        else:
            singles.append(it)
    flush_singles()
    return np.concatenate(ts), np.concatenate(rtt), runs


_DIR_SOURCE = attrgetter("direction", "source")


class _IdColumns:
    """The capture_id and conn_id columns of one connection's tables: built once, for
    the longest table, and sliced for the others (no copy)."""

    def __init__(self, capture_id: str, conn_id: str, longest: int) -> None:
        self._values = {"capture_id": capture_id, "conn_id": conn_id}
        self._built: dict[str, pa.Array] = {}
        self._longest = longest

    def __call__(self, n: int) -> dict[str, pa.Array]:
        if n > self._longest or not self._built:
            self._longest = max(n, self._longest)
            self._built = {name: _repeat(v, self._longest) for name, v in self._values.items()}
        return {name: col if len(col) == n else col.slice(0, n) for name, col in self._built.items()}


def _repeat(value: str, n: int) -> pa.Array:
    """A string column of one value, built from buffers (no list of n references, and
    no pyarrow.compute import)."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def _run_sent(runs: list[ChunkRun]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(conn_key * 2 + direction, bucket, bytes, 1) per chunk of ChunkRuns, as columns."""
    rows = np.concatenate([r.rows for r in runs]) if len(runs) > 1 else runs[0].rows
    keys = np.concatenate([np.full(len(r), r.conn_key * 2, dtype=np.int64) for r in runs])
    return keys + rows[:, 0], rows[:, 1] // RATE_BUCKET_NS, rows[:, 5] - rows[:, 4], np.ones(len(rows), dtype=np.int64)


def _chunk_sent(chunks: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`_run_sent` gives, for PayloadChunks (summed per group where the C
    extension does it)."""
    totals = _sent_runs(chunks, RATE_BUCKET_NS) if _sent_runs is not None else None
    if totals is None:
        cd = np.array([c.conn_key * 2 + c.direction for c in chunks], dtype=np.int64)
        buckets = np.array([c.ts_ns for c in chunks], dtype=np.int64) // RATE_BUCKET_NS
        lens = np.array([len(c.data) for c in chunks], dtype=np.int64)
        return cd, buckets, lens, np.ones(len(chunks), dtype=np.int64)
    keys = np.array(list(totals.keys()), dtype=np.int64).reshape(-1, 2)
    vals = np.array(list(totals.values()), dtype=np.int64).reshape(-1, 2)
    return keys[:, 0], keys[:, 1], vals[:, 0], vals[:, 1]


def _note_response_gaps(held: dict[int, list[np.ndarray]], keys: np.ndarray, diff: np.ndarray, has: np.ndarray) -> None:
    """Keep the gaps (ns) between consecutive response messages of each stream, from a
    batch's message rows sorted by stream * 2 + direction (``has``: a previous message
    is known, ``diff``: ns since it)."""
    resp = np.flatnonzero(has & ((keys & 1) == TO_CLIENT))
    if not len(resp):
        return
    sids = keys[resp] >> 1
    gaps = diff[resp]  # grouped by stream, each in order
    cuts = (np.flatnonzero(sids[1:] != sids[:-1]) + 1).tolist()
    starts, stops = [0, *cuts], [*cuts, len(sids)]
    for sid, a, z in zip(sids[starts].tolist(), starts, stops, strict=True):
        # a copy unless whole: a long stream must not keep every batch's array alive
        part = gaps if len(starts) == 1 else gaps[a:z].copy()
        arrays = held.get(sid)
        if arrays is None:
            held[sid] = [part]
        else:
            arrays.append(part)


def _gap_stats(gaps: list[list[np.ndarray] | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """p50, p99 and max (ms) of each request's response gaps (ns, in arrays; None: no
    gaps), NaN for none, for all requests at once: the linear-interpolated quantiles
    (numpy's default method) of each sorted list of gaps in ms, with the same float
    operations as taking them one list at a time."""
    n = len(gaps)
    out = (np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan))
    owners = [i for i, g in enumerate(gaps) if g]
    if not owners:
        return out
    arrays = [a for i in owners for a in gaps[i]]  # type: ignore[union-attr]
    k = np.array([sum(map(len, gaps[i])) for i in owners], dtype=np.int64)  # type: ignore[arg-type]
    owner = np.repeat(np.arange(len(owners)), k)
    # x -> x / 1e6 keeps the order: sort the exact ns, divide after
    g = _sort_within(owner, arrays[0] if len(arrays) == 1 else np.concatenate(arrays)) / 1e6
    first = np.zeros(len(k), dtype=np.int64)  # each request's first gap in g
    np.cumsum(k[:-1], out=first[1:])
    for j, q in enumerate((0.50, 0.99)):
        pos = q * (k - 1)
        lo = pos.astype(np.int64)
        hi = np.minimum(lo + 1, k - 1)
        a, b = g[first + lo], g[first + hi]
        out[j][owners] = a + (b - a) * (pos - lo)
    out[2][owners] = g[first + k - 1]
    return out


def _sort_within(owner: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` sorted within each run of equal ``owner`` (non-decreasing): one sort of
    a combined int64 key where it fits, else a two-key sort."""
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    if span * (int(owner[-1]) + 1) < 2**63:
        key = owner * span + (values - lo)
        key.sort(kind="stable")  # timsort: fast on the runs the groups already are
        return key - owner * span + lo
    return values[np.lexsort((values, owner))]


def _event_columns(ms: _Msgs) -> dict[str, pa.Array]:
    """messages.event and messages.tokens (all null without LLM stream events)."""
    n = len(ms)
    if not ms.kind.any():
        return {"event": pa.nulls(n, pa.string()), "tokens": pa.nulls(n, pa.int64())}
    return {
        "event": pa.array(_EVENT_NAMES[ms.kind], pa.string()),
        "tokens": pa.array(ms.tokens, pa.int64(), mask=ms.tokens < 0),
    }


def _tokens_per_s(completion: list[int | None], first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Decode rate: tokens after the first over the time from the first to the last
    response message (vLLM's time per output token, inverted); NaN when not known."""
    tokens = np.array([-1 if c is None else c for c in completion], dtype=np.float64)
    span = _ms(first, last) / 1e3
    ok = (tokens >= 2) & (span > 0)  # (NaN spans compare false)
    out = np.full(len(tokens), np.nan)
    out[ok] = (tokens[ok] - 1) / span[ok]
    return out


def _either(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Times ``a``, ``b`` where ``a`` is none (_NO_TS)."""
    return np.where(a != _NO_TS, a, b)


def _ms(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(b - a) in ms; NaN where either time is none."""
    ok = (a != _NO_TS) & (b != _NO_TS)
    return np.where(ok, (np.where(ok, b, 0) - np.where(ok, a, 0)) / 1e6, np.nan)


def _client_est(start: np.ndarray, seen: np.ndarray, acked: np.ndarray, floor_ms: np.ndarray) -> np.ndarray:
    """(ACK time - start) where the ACK was seen, else (seen - start) + the RTT floor."""
    return np.where(acked != _NO_TS, _ms(start, acked), _ms(start, seen) + floor_ms)


def _float_col(values: np.ndarray) -> pa.Array:
    """float64 column, null where NaN (the computed times and gaps are never NaN)."""
    return pa.array(values, pa.float64(), mask=np.isnan(values))


def capture_side(floor_to_server_ms: float | None, floor_to_client_ms: float | None) -> str:
    """Which end the capture point sits near, from the two RTT floors."""
    if floor_to_server_ms is None or floor_to_client_ms is None:
        return "unknown"
    lo, hi = sorted((floor_to_server_ms, floor_to_client_ms))
    if hi <= 0 or lo > 0.25 * hi:
        return "middle"
    return "server" if floor_to_server_ms < floor_to_client_ms else "client"


def flip_summary(s: ConnectionSummary) -> ConnectionSummary:
    from parsers.tcp import flip_summary as _flip

    return _flip(s)


__all__ = ["IngestChain", "IngestOptions", "IngestResult", "InputError", "ingest_file", "closing_id", "capture_side", "format_addr"]
