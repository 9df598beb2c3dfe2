"""The pipeline of one capture: each batch of packets through the sans-I/O parsers
(container -> bulk TCP decode -> TCP reassembly and analysis -> HTTP/2, gRPC, HTTP/1.1,
SSE sessions), what they produce joined (telemetry.ingest.joins) and handed to the
writer as tables (telemetry.ingest.tables). Memory stays bounded: rows are drained from
the parsers after every batch and written in row groups; per-connection state lives only
while the connection is open."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Iterator
from itertools import groupby
from operator import attrgetter, itemgetter
from pathlib import Path

import numpy as np
import pyarrow as pa

from parsers.capture import CaptureDecoder, OutlierTimes, decode_segments, in_time_order
from parsers.records import (
    TO_CLIENT,
    TO_SERVER,
    ChunkRun,
    ConnectionSummary,
    DecodeIssue,
    DecodeStats,
    PacketBatch,
    PayloadChunk,
    RttRun,
    RunColumn,
)
from parsers.session import AppSession, SessionResult
from parsers.tcp import TcpAnalyzer, flip_summary
from parsers.tls import KeyLog
from telemetry import __version__
from telemetry.ingest.columns import Part
from telemetry.ingest.joins import resolve_acks, take_messages
from telemetry.ingest.lockstep import Peer
from telemetry.ingest.options import IngestOptions, IngestResult
from telemetry.ingest.rates import (
    RATE_BUCKET_NS,
    RATE_HOLD_NS,
    flow_rates_rows,
    flow_rates_table,
    note_rates,
    sent_rows,
)
from telemetry.ingest.sendlog import SendLog
from telemetry.ingest.state import Conn, ConnRows, Ready, StreamTimes
from telemetry.ingest.tables import (
    connection_row,
    connections_table,
    h2_events_table,
    messages_table,
    requests_table,
    rtt_samples_table,
    segment_sends_table,
    tcp_events_table,
)
from telemetry.store.parquet import CaptureWriter, table_from_columns

# Connections idle this long are closed and their rows written (bounded memory).
IDLE_CLOSE_NS = 120 * 1_000_000_000
FLUSH_CONN_ROWS = 20_000  # write a long connection's rows out once this many are waiting
PENDING_ROWS = 2_000_000  # ... and the largest connections' rows once all hold this many
# message rows of several connections taken in one pass (see _take_messages)
TAKE_ROWS = 65_536
# requests of all connections, and closed connections, are built into one table each once
# this many wait (their ~35-50 columns cost more per table than per row)
BATCH_TABLE_ROWS = 4096
# the other tables' rows of many connections are built into one table once this many wait
PART_TABLE_ROWS = 65_536
_PART_TABLES = {
    "tcp_events": tcp_events_table,
    "rtt_samples": rtt_samples_table,
    "h2_events": h2_events_table,
    "messages": messages_table,
    "flow_rates": flow_rates_table,
    "segment_sends": segment_sends_table,
}
_CONN_KEY = attrgetter("conn_key")


def _broke(session: AppSession, exc: Exception, item: PayloadChunk | ChunkRun | None) -> None:
    """A connection's decoders raised (a bug of ours): that connection stops being decoded
    and says so, the capture goes on (AppSession.broke); at the packet being read, or the
    packets of the run being read."""
    if type(item) is ChunkRun and len(item):
        first, last = (int(f) for f in item.rows[[0, -1], RunColumn.FRAME_NO])
        session.broke(exc, first, f" in packets {first}-{last}" if last != first else "")
    elif type(item) is PayloadChunk:
        session.broke(exc, item.frame_no)
    else:
        session.broke(exc)


class CapturePipeline:
    """Drives the parsers for one capture and hands rows to the writer."""

    def __init__(
        self, capture_id: str, writer: CaptureWriter, options: IngestOptions, peer: Peer | None = None
    ) -> None:
        """``peer``: this pipeline is one of two processes sharing the capture's
        connections (:func:`telemetry.ingest.split.ingest_split`): it keeps only its own connections' segments;
        the capture-wide counts and issues are the parent's (index 0) alone."""
        self.capture_id = capture_id
        self.writer = writer
        self.options = options
        self.decoder = CaptureDecoder()
        self.stats = DecodeStats()
        self.issues: list[DecodeIssue] = []
        # conn ids name the run (its first file): the same traffic captured twice is two
        # captures' connections in the store, never one connection's rows twice
        self.tcp = TcpAnalyzer(share=(peer.index, 2) if peer is not None else None, run=capture_id.encode())
        self.conns: dict[int, Conn] = {}
        self.stream_times = StreamTimes()  # last message time of every open stream
        self.sessions: dict[int, AppSession] = {}  # conn key -> session, for the chunk loop
        self.compressed = False
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.monotonic = True  # capture times never went back so far
        self.clock = OutlierTimes()  # packets stamped far off the packets around them
        self.connections_written = 0
        self.requests_written = 0
        self.peer = peer
        # a split's child decodes the same packets as the parent: its counts go nowhere
        self.capture_wide = peer is None or peer.index == 0
        self._child_stats, self._child_issues = DecodeStats(), []
        # resolved requests not built into a table yet: (connection, blocks) in order
        self._requests_out: list[tuple[ConnectionSummary, list[Ready]]] = []
        self._requests_out_n = 0
        # closed connections' rows not built into a table yet
        self._connections_out: list[dict[str, object]] = []
        # the other tables' rows handed over by connections, not built into tables yet
        self._parts: dict[str, list[Part]] = {t: [] for t in _PART_TABLES}
        self._parts_rows: dict[str, int] = dict.fromkeys(_PART_TABLES, 0)
        # segment_sends (loss-gated); the addresses from the TCP layer itself (a method of
        # this pipeline held by its own send log would be a reference cycle)
        self.sendlog = SendLog(self.tcp.open_addresses, peer)
        # TLS secrets: the given key logs, then the capture's Decryption Secrets Blocks
        self.keylog = copy.deepcopy(options.keylog) if options.keylog is not None else KeyLog()

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
        self.clock.start_file()
        self.connections_written = 0
        self.requests_written = 0

    def end_file(self) -> None:
        """The file ends but the capture goes on: hand the writer every row resolved so
        far (rows of open connections too, once their orientation is final); what is still
        open carries over to the next file."""
        for conn in self.conns.values():
            self._flush_open(conn)
        self._write_batched()
        self._take_decoder_issues()

    def fill_result(self, result: IngestResult) -> None:
        result.packets = self.stats.packets
        result.bytes = self.stats.bytes
        result.connections = self.connections_written
        result.requests = self.requests_written
        result.issues = self.issues

    def _conn(self, key: int) -> Conn:
        conn = self.conns.get(key)
        if conn is None:
            conn = self.conns[key] = Conn(key)
        return conn

    def _open_session(self, key: int) -> AppSession:
        conn = self._conn(key)
        client_port, server_port = self.tcp.connection_info(key)
        force = bool(self.options.h2_ports & {client_port, server_port})
        conn.session = self.sessions[key] = AppSession(key, client_port, server_port, force_h2=force, keylog=self.keylog)
        return conn.session

    # -- per batch -------------------------------------------------------------------
    def process(self, batch: PacketBatch) -> None:
        if self.decoder.tls_secrets:
            for secrets in self.decoder.tls_secrets:
                self.keylog.add_text(secrets.decode("ascii", "replace"), "the capture's Decryption Secrets Block")
            self.decoder.tls_secrets.clear()
        if len(batch) == 0:
            return
        stats, issues = (self.stats, self.issues) if self.capture_wide else (self._child_stats, self._child_issues)
        batch.ts_ns = self.clock.repair(batch.ts_ns, batch.frame_no, stats, issues)
        batch = in_time_order(batch, stats)
        ts_ns = batch.ts_ns
        if self.first_ts is None:
            self.first_ts = int(ts_ns[0])
        if self.monotonic and self.last_ts is not None and int(ts_ns[0]) < self.last_ts:
            self.monotonic = False  # (within a batch, the times are in order now)
        self.last_ts = int(ts_ns[-1])
        segments = decode_segments(batch, stats, issues)
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
                try:
                    for item in group:
                        if type(item) is ChunkRun:
                            session.feed_run(item)
                        else:
                            session.feed(item)
                except Exception as exc:  # noqa: BLE001 - see _broke
                    _broke(session, exc, item)
            sent = sent_rows(chunks)
            self.sendlog.note_chunks(chunks)
        else:
            sent = None
        note_rates(self.conns, self.tcp.ack_progress, sent)
        self._take_tcp_events()
        self._take_messages(self._session_rows())
        waiting: list[tuple[int, Conn]] = []
        for conn in self.conns.values():
            if conn.session is not None:
                resolve_acks(self.tcp, conn, None, self.stream_times)
            n = len(conn.rows) + conn.rate_buckets() + self.sendlog.pending(conn.key)
            if n >= FLUSH_CONN_ROWS:
                self._flush_open(conn)
            elif n:
                waiting.append((n, conn))
        self._flush_largest(waiting)
        self._close_all(self.tcp.take_closed(IDLE_CLOSE_NS))

    def _flush_largest(self, waiting: list[tuple[int, Conn]]) -> None:
        """Past PENDING_ROWS rows waiting in all open connections, write the connections
        holding most until half that is left: memory bounded whatever the number of
        connections (each alone stays under FLUSH_CONN_ROWS)."""
        total = sum(n for n, _conn in waiting)
        if total <= PENDING_ROWS:
            return
        for n, conn in sorted(waiting, key=itemgetter(0), reverse=True):
            if self._flush_open(conn):
                total -= n
                if total <= PENDING_ROWS // 2:
                    return

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
                conn.rtt_values[tcp_dir].add(np.concatenate(arrays) if len(arrays) > 1 else arrays[0])

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
            try:
                session.feed(chunk)
            except Exception as exc:  # noqa: BLE001 - see _broke
                _broke(session, exc, chunk)
        self._take_tcp_events()
        ended = [(summary, *self._end_session(summary)) for summary in summaries]
        # their last ACK progress into their flow_rates buckets, all together
        final_acks = {s.conn_key: s.ack_progress for s, _conn, _result in ended if s.ack_progress is not None}
        note_rates({s.conn_key: conn for s, conn, _result in ended if s.conn_key in final_acks},
                   lambda key, tcp_dir: final_acks[key][tcp_dir])
        # the closing connections' last message rows together (at the end of a capture,
        # every connection closes at once)
        self._take_messages((conn, result.message_rows) for _s, conn, result in ended
                            if result is not None and len(result.message_rows))
        for summary, conn, result in ended:
            self._close(summary, conn, result)

    def _session_rows(self) -> Iterator[tuple[Conn, object]]:
        """Each open connection's message rows of the batch (its requests and HTTP/2
        events go to the connection as they are taken)."""
        for conn in self.conns.values():
            if conn.session is not None:
                try:
                    requests, rows, h2_events = conn.session.take_columns()
                except Exception as exc:  # noqa: BLE001 - see _broke
                    _broke(conn.session, exc, None)
                    requests, rows, h2_events = conn.session.take_columns()
                conn.rows.h2.extend(h2_events)
                conn.pending_requests.extend(requests)
                if len(rows):
                    yield conn, rows

    def _take_messages(self, items: Iterable[tuple[Conn, object]]) -> None:
        """Message rows of many connections, taken TAKE_ROWS rows or so a pass: a pass
        per connection costs ~100 us of numpy calls each, one pass for all holds every
        connection's rows and their temporaries at once."""
        taken: list[tuple[Conn, object]] = []
        rows_taken = 0
        for conn, rows in items:
            taken.append((conn, rows))
            rows_taken += len(rows)
            if rows_taken >= TAKE_ROWS:
                take_messages(taken, self.stream_times)
                taken, rows_taken = [], 0
        if taken:
            take_messages(taken, self.stream_times)

    def _flush_open(self, conn: Conn) -> bool:
        """Write an open connection's rows so memory does not grow with its length.
        Only once its orientation is final (rows say to_server/to_client). Returns
        whether it wrote them."""
        if conn.session is None or not conn.session.orientation_final:
            return False
        summary = self._open_summary(conn.key)
        if summary is None:
            return False
        if conn.flip:
            summary = flip_summary(summary)
        rates_upto = None
        if self.monotonic and self.last_ts is not None:
            rates_upto = (self.last_ts - RATE_HOLD_NS) // RATE_BUCKET_NS
        self._write_rows(conn, summary, rates_upto=rates_upto, final=False)
        return True

    def _open_summary(self, key: int) -> ConnectionSummary | None:
        """conn_id and addresses of a connection still open (as the TCP layer names it)."""
        return self.tcp.open_summary(key)

    # -- connection end ----------------------------------------------------------------
    def _end_session(self, summary: ConnectionSummary) -> tuple[Conn, SessionResult | None]:
        """A closed connection's state, out of the open ones, and its session's last rows."""
        conn = self.conns.pop(summary.conn_key, None) or Conn(summary.conn_key)
        self.sessions.pop(summary.conn_key, None)
        if conn.session is None:
            return conn, None
        try:
            return conn, conn.session.finish(summary.end_ns)
        except Exception as exc:  # noqa: BLE001 - see _broke
            _broke(conn.session, exc, None)
            return conn, conn.session.finish(summary.end_ns)

    def _close(self, summary: ConnectionSummary, conn: Conn, result: SessionResult | None) -> None:
        """Resolve and write what a closed connection holds (its last message rows are
        taken already)."""
        protocol, tls = "unknown", None
        if result is not None:
            protocol, tls = result.protocol, result.tls
            self.issues.extend(result.issues)
            conn.rows.h2.extend(result.h2_events)
            conn.pending_requests.extend(result.requests)
        resolve_acks(self.tcp, conn, summary, self.stream_times)
        self.stream_times.forget_connection(conn.key)
        if conn.flip:
            summary = flip_summary(summary)
        self._write_rows(conn, summary)
        self.sendlog.forget(summary.conn_key)
        self._connections_out.append(connection_row(self.capture_id, conn, summary, protocol, tls,
                                                    self.options.capture_side))
        self.connections_written += 1
        if len(self._connections_out) >= BATCH_TABLE_ROWS:
            self._write_batched()

    def finish(self) -> None:
        self._close_all(self.tcp.finish())
        self._write_batched()
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

    def _write_rows(
        self, conn: Conn, summary: ConnectionSummary, rates_upto: int | None = None, final: bool = True
    ) -> None:
        """Hand a connection's waiting rows to the writer. flow_rates: every bucket when
        ``final``, else those before bucket ``rates_upto`` (none when it is None)."""
        rows, flip, conn_id = conn.rows, conn.flip, summary.conn_id
        if rows.tcp_events:
            self._add_part("tcp_events", Part(conn_id, flip, rows.tcp_events, len(rows.tcp_events)))
        if rows.rtt:
            self._add_part("rtt_samples", Part(conn_id, flip, rows.rtt, rows.n_rtt))
        if rows.h2:
            self._add_part("h2_events", Part(conn_id, 0, rows.h2, len(rows.h2)))
        if rows.messages:
            self._add_part("messages", Part(conn_id, 0, rows.messages, sum(len(m) for _d, m in rows.messages)))
        rates = flow_rates_rows(conn, rates_upto, final)
        if rates:
            self._add_part("flow_rates", Part(conn_id, 0, rates, sum(len(cols[0]) for cols in rates)))
        sends = self.sendlog.take(conn.key)
        if sends is not None:
            self._add_part("segment_sends", Part(conn_id, flip, sends, len(sends[1])))
        if rows.requests:
            self._requests_out.append((summary, rows.requests))
            self._requests_out_n += rows.n_requests
            self.requests_written += rows.n_requests
            if self._requests_out_n >= BATCH_TABLE_ROWS:
                self._write_batched()
        conn.rows = ConnRows()

    def _add_part(self, table: str, part: Part) -> None:
        parts = self._parts[table]
        parts.append(part)
        self._parts_rows[table] += part.n
        if self._parts_rows[table] >= PART_TABLE_ROWS:
            self._write_parts(table)

    def _write_parts(self, table: str) -> None:
        """Hand the writer one table of the connections' rows waiting for ``table``."""
        parts = self._parts[table]
        if parts:
            self.writer.append(table, _PART_TABLES[table](self.capture_id, parts))
            self._parts[table], self._parts_rows[table] = [], 0

    def _write_batched(self) -> None:
        """Hand the writer the rows built a table for many connections at a time: the
        requests resolved so far (of every connection), the connections closed so far,
        and the other tables' waiting parts; before the file's commit (end_file, finish)
        all of them."""
        for table in _PART_TABLES:
            self._write_parts(table)
        if self._requests_out:
            self.writer.append("requests", requests_table(self.capture_id, self._requests_out))
            self._requests_out, self._requests_out_n = [], 0
        if self._connections_out:
            self.writer.append("connections", connections_table(self._connections_out))
            self._connections_out = []

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
            "time_outliers": [st.time_outliers],
            "out_of_time_order": [st.out_of_time_order],
            "first_ts": [self.first_ts],
            "last_ts": [self.last_ts],
            "kernel_drops": [getattr(self.decoder, "kernel_drops", None)],
            "issues": [len(self.issues)],
            "connections": [self.connections_written],
            "requests": [self.requests_written],
            "parser_version": [__version__],
            "ingest_time": [time.time_ns()],
        })
