"""The rows the pipeline resolved, as Arrow tables of the store's schemas
(telemetry/store/schema.py): one function per table, each checked against its schema by
``table_from_columns`` (an unknown or missing column is an error)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import attrgetter

import numpy as np
import pyarrow as pa

from parsers.llm.semantics import EVENT_NAMES
from parsers.records import (
    DIRECTION_NAMES,
    MESSAGE_DIRECTION_NAMES,
    TO_CLIENT,
    TO_SERVER,
    ConnectionSummary,
    RttRun,
    RttSample,
    RttSource,
)
from telemetry.ingest.columns import (
    NO_TS,
    TS,
    Part,
    coded_strings,
    concat_columns,
    float_col,
    id_columns,
    repeat,
    run_strings,
)
from telemetry.ingest.joins import gap_stats
from telemetry.ingest.sendlog import KIND_NAMES as SEND_KINDS
from telemetry.ingest.state import Conn, Msgs, Ready
from telemetry.store.parquet import TEXT, table_from_columns

APP_THROTTLE_HTTP = (429, 503)
APP_THROTTLE_GRPC = (8, 14)  # RESOURCE_EXHAUSTED, UNAVAILABLE
RTT_SOURCES = tuple(RttSource)
_SOURCE_CODE = {name: i for i, name in enumerate(RTT_SOURCES)}

REQUEST_PASSTHROUGH = (
    "stream_id", "protocol", "method", "path", "authority", "content_type", "user_agent", "kind",
    "request_start", "request_end", "response_headers", "first_message", "last_message", "end",
    "http_status", "grpc_status", "grpc_message", "grpc_encoding", "request_messages",
    "response_messages", "request_bytes", "response_bytes", "reset_code", "trailers_only",
    "headers_known", "first_byte", "model", "finish_reason", "prompt_tokens", "completion_tokens",
)
_PASSTHROUGH_OF = attrgetter(*REQUEST_PASSTHROUGH)


def _flipped(codes: np.ndarray, parts: Sequence[Part]) -> np.ndarray:
    """Direction codes of the parts' rows (in order) with each part's flip applied."""
    flips = [p.flip for p in parts]
    if not any(flips):
        return codes
    return codes ^ np.repeat(np.array(flips, dtype=codes.dtype), [p.n for p in parts])


def tcp_events_table(capture_id: str, parts: Sequence[Part]) -> pa.Table:
    """Parts' rows: lists of TcpEvents."""
    events = [e for p in parts for e in p.rows]
    return table_from_columns("tcp_events", {
        **id_columns(capture_id, parts),
        "ts": [e.ts_ns for e in events],
        "direction": [DIRECTION_NAMES[e.direction ^ p.flip] for p in parts for e in p.rows],
        "kind": [e.kind for e in events],
        "seq": [e.seq for e in events],
        "bytes": [e.bytes for e in events],
        "frame_no": [e.frame_no for e in events],
        "recovery_ms": [e.recovery_ms for e in events],
        "burst_id": [e.burst_id for e in events],
        "prompt": [e.prompt for e in events],
    })


def rtt_samples_table(capture_id: str, parts: Sequence[Part]) -> pa.Table:
    """Parts' rows: lists of RttSamples and RttRuns (``n``: their samples)."""
    ts, rtt, direction, source = rtt_columns([it for p in parts for it in p.rows])
    return table_from_columns("rtt_samples", {
        **id_columns(capture_id, parts),
        "ts": pa.array(ts, TS),
        "direction": coded_strings(_flipped(direction, parts), DIRECTION_NAMES),
        "rtt_ms": pa.array(rtt, pa.float64()),
        "source": coded_strings(source, RTT_SOURCES),
    })


def h2_events_table(capture_id: str, parts: Sequence[Part]) -> pa.Table:
    """Parts' rows: lists of H2Events (in session directions: no flip)."""
    events = [e for p in parts for e in p.rows]
    return table_from_columns("h2_events", {
        **id_columns(capture_id, parts),
        "ts": [e.ts_ns for e in events],
        "stream_id": [e.stream_id for e in events],
        "direction": [DIRECTION_NAMES[e.direction] for e in events],
        "kind": [e.kind for e in events],
        "value": [e.value for e in events],
        "detail": [e.detail for e in events],
        "duration_ms": [e.duration_ms for e in events],
    })


def segment_sends_table(capture_id: str, parts: Sequence[Part]) -> pa.Table:
    """Parts' rows: the send log's (direction, ts, seq, bytes, kind) columns."""
    dirs, ts, seq, size, kind = concat_columns([p.rows for p in parts])
    return table_from_columns("segment_sends", {
        **id_columns(capture_id, parts),
        "ts": pa.array(ts, TS),
        "direction": coded_strings(_flipped(dirs, parts), DIRECTION_NAMES),
        "seq": pa.array(seq, pa.int64()),
        "bytes": pa.array(size, pa.int64()),
        "kind": coded_strings(kind, SEND_KINDS),
    })


def messages_table(capture_id: str, parts: Sequence[Part]) -> pa.Table:
    """Parts' rows: lists of (session direction, Msgs) blocks."""
    blocks = [b for p in parts for b in p.rows]
    ms = Msgs.concat([m for _d, m in blocks])
    return table_from_columns("messages", {
        **id_columns(capture_id, parts),
        "stream_id": pa.array(ms.sid, pa.int64()),
        "direction": run_strings([MESSAGE_DIRECTION_NAMES[d] for d, _m in blocks], [len(m) for _d, m in blocks]),
        "index": pa.array(ms.idx, pa.int64()),
        "ts": pa.array(ms.ts, TS),
        "acked_ts": pa.array(ms.acked, TS, mask=ms.acked == NO_TS),
        "size": pa.array(ms.size, pa.int64()),
        "compressed": pa.array(ms.comp, pa.bool_()),
        "gap_ms": pa.array(ms.gap, pa.float64(), mask=np.isnan(ms.gap)),
        **event_columns(ms),
    })


def requests_table(capture_id: str, resolved: list[tuple[ConnectionSummary, list[Ready]]]) -> pa.Table:
    blocks = [b for _s, bs in resolved for b in bs]
    records = [r for b in blocks for r in b.records]
    n = len(records)
    conns = [s for s, _bs in resolved]
    per_conn = [sum(len(b.records) for b in bs) for _s, bs in resolved]
    # the columns copied from the records, in one C-level pass
    passthrough = zip(*map(_PASSTHROUGH_OF, records), strict=True)
    cols: dict[str, object] = dict(zip(REQUEST_PASSTHROUGH, passthrough, strict=True))
    times = {}
    for name in ("request_start", "request_end", "first_message", "last_message", "end", "first_byte"):
        arr = pa.array(cols[name], TS)
        cols[name] = arr
        times[name] = arr.to_numpy(zero_copy_only=False).view(np.int64)  # nulls: NaT = NO_TS
    start = times["request_start"]
    ttft_from = either(times["request_end"], start)
    last = either(times["end"], times["last_message"])
    first_acked, end_acked = (np.concatenate([getattr(b, f) for b in blocks]) for f in ("first_acked", "end_acked"))
    floor = np.repeat([b.floor_ms for b in blocks], [len(b.records) for b in blocks])
    # Client-side estimates. The client sent the request half an RTT (capture point
    # <-> client, at its floor) before the capture saw it, and received each response
    # half an RTT before its ACK reached the capture point: the two shifts cancel in
    # (ACK time - request time). Without an ACK the response is assumed to reach the
    # client half an RTT after the capture point: + one RTT floor in all.
    ttft_est = client_est(ttft_from, times["first_message"], first_acked, floor)
    latency_est = client_est(start, last, end_acked, floor)
    # the gaps' statistics of every request at once (per resolution, their fixed cost was most of it)
    p50, p99, max_gap = gap_stats([g for b in blocks for g in b.gaps])
    protocols = cols["protocol"]
    cols["encrypted"] = [p is not None and p.endswith("tls") for p in protocols]
    cols["estimated"] = [p == "tls" for p in protocols]
    throttled = [
        h in APP_THROTTLE_HTTP or g in APP_THROTTLE_GRPC
        for h, g in zip(cols["http_status"], cols["grpc_status"], strict=True)
    ]
    cols.update(
        app_throttled=throttled,
        ttft_ms=float_col(ms_between(ttft_from, times["first_message"])),
        ttfb_ms=float_col(ms_between(ttft_from, times["first_byte"])),
        tokens_per_s=float_col(tokens_per_s(cols["completion_tokens"], times["first_message"], times["last_message"])),
        latency_ms=float_col(ms_between(start, last)),
        gap_p50_ms=float_col(p50),
        gap_p99_ms=float_col(p99),
        max_gap_ms=float_col(max_gap),
        first_message_acked=pa.array(first_acked, TS, mask=first_acked == NO_TS),
        end_acked=pa.array(end_acked, TS, mask=end_acked == NO_TS),
        ttft_client_est_ms=float_col(ttft_est),
        latency_client_est_ms=float_col(latency_est),
        capture_id=repeat(capture_id, n),
        conn_id=run_strings([s.conn_id for s in conns], per_conn),
        client_addr=run_strings([s.client_addr for s in conns], per_conn),
        client_port=np.repeat(np.array([s.client_port for s in conns], dtype=np.int32), per_conn),
        server_addr=run_strings([s.server_addr for s in conns], per_conn),
        server_port=np.repeat(np.array([s.server_port for s in conns], dtype=np.int32), per_conn),
    )
    return table_from_columns("requests", cols)


TLS_FACTS = ("tls_version", "tls_sni", "tls_alpn", "tls_cipher", "tls_resumed", "tls_decrypted", "tls_note")


def connection_row(capture_id: str, conn: Conn, s: ConnectionSummary, protocol: str,
                   tls: dict | None = None, side: str = "auto") -> dict[str, object]:
    """The connection's one row, column by column (``tls``: a TLS connection's facts,
    parsers.tls; ``side``: where the user says the capture point sits, auto: told from
    the two RTT floors). :func:`connections_table` makes a table of many."""
    row: dict[str, object] = {
        "capture_id": capture_id,
        "conn_id": s.conn_id,
        "client_addr": s.client_addr,
        "client_port": s.client_port,
        "server_addr": s.server_addr,
        "server_port": s.server_port,
        "client_known": s.client_known,
        "ip_version": s.ip_version,
        "start": s.start_ns,
        "end": s.end_ns,
        "duration_ms": (s.end_ns - s.start_ns) / 1e6,
        "packets_to_server": s.packets[0],
        "packets_to_client": s.packets[1],
        "bytes_to_server": s.bytes[0],
        "bytes_to_client": s.bytes[1],
        "syn_seen": s.syn_seen,
        "handshake_rtt_ms": s.handshake_rtt_ms,
        "retransmissions_to_server": s.retransmissions[0],
        "retransmissions_to_client": s.retransmissions[1],
        "loss_bursts_to_server": s.loss_bursts[0],
        "loss_bursts_to_client": s.loss_bursts[1],
        "longest_loss_burst": s.longest_loss_burst,
        "out_of_order_to_server": s.out_of_order[0],
        "out_of_order_to_client": s.out_of_order[1],
        "zero_windows_to_server": s.zero_windows[0],
        "zero_windows_to_client": s.zero_windows[1],
        "capture_loss_bytes": sum(s.capture_loss_bytes),
        "protocol": protocol,
        "requests": conn.requests,
        "history": s.history,
        **{k: (tls or {}).get(k) for k in TLS_FACTS},
    }
    floors = {}
    for tcp_dir in (TO_SERVER, TO_CLIENT):
        name = DIRECTION_NAMES[tcp_dir ^ conn.flip]
        held = conn.rtt_values[tcp_dir]
        stats = rtt_stats(held.values()) if len(held) else [None] * 3
        # the minimum of every sample seen (past the bound the uniform sample may not hold it)
        stats[0] = held.low
        for stat, value in zip(("min", "p50", "p99"), stats, strict=True):
            row[f"rtt_{stat}_ms_{name}"] = value
        floors[name] = stats[0]
    row["capture_side"] = side if side in ("server", "client") else capture_side(floors["to_server"], floors["to_client"])
    return row


_RTT_QUANTILES = (0.0, 0.5, 0.99)  # min, p50, p99 (numpy's percentile divides by 100 first)


def rtt_stats(values: np.ndarray) -> list[float]:
    """min, p50 and p99 of ``values`` (not empty, no NaN) bit for bit as
    ``np.percentile(values, (0, 50, 99))`` gives them (its linear method: the same float
    operations in the same order), from one partition. Not np.percentile itself: its
    np.unique imports numpy.ma, which costs a tenth of a small capture's ingest."""
    n = len(values)
    spots = []
    for q in _RTT_QUANTILES:
        virtual = (n - 1) * q
        lo = math.floor(virtual)
        if virtual >= n - 1:  # the top: the largest value itself
            spots.append((n - 1, n - 1, virtual - (-1)))
        else:
            spots.append((lo, lo + 1, virtual - lo))
    kth = sorted({i for lo, hi, _t in spots for i in (lo, hi)})
    ordered = dict(zip(kth, np.partition(values, kth)[kth].tolist(), strict=True))
    out = []
    for lo, hi, t in spots:
        a, b = ordered[lo], ordered[hi]
        diff = b - a  # numpy's _lerp: from the nearer end
        out.append(b - diff * (1 - t) if t >= 0.5 else a + diff * t)
    return out


def connections_table(rows: list[dict[str, object]]) -> pa.Table:
    """The connections table of rows made by :func:`connection_row`: one table for many
    connections (a table per connection costs more than its row)."""
    return table_from_columns("connections", {name: [r[name] for r in rows] for name in rows[0]})


def rtt_columns(items: list[RttSample | RttRun]) -> tuple[np.ndarray, ...]:
    """(ts, rtt_ms, TCP direction, index of the source in RTT_SOURCES) columns of
    RttSamples and RttRuns, in order. Per code, not per run of one value: the per-packet
    path's samples alternate between sources (an ACK gives a data_ack and a tsecr one).
    A run's codes are one value repeated: every run's are made in one np.repeat (a run
    holds a few dozen samples, and an array per run cost more than its samples)."""
    ts, rtt = [], []
    # per part, in order: its length and its codes (a run's one value, or -1 for a part of
    # single samples, whose codes per sample are in ``mixed``)
    lens, dir_code, src_code = [], [], []
    mixed: list[tuple[int, np.ndarray, np.ndarray]] = []  # (part, directions, sources)
    singles: list[RttSample] = []

    def flush_singles() -> None:
        n = len(singles)
        ts.append(np.fromiter([s.ts_ns for s in singles], np.int64, n))
        rtt.append(np.fromiter([s.rtt_ms for s in singles], np.float64, n))
        mixed.append((len(lens), np.fromiter([s.direction for s in singles], np.int64, n),
                      np.fromiter([_SOURCE_CODE[s.source] for s in singles], np.int64, n)))  # fmt: skip
        lens.append(n)
        dir_code.append(-1)
        src_code.append(-1)
        singles.clear()

    for it in items:
        if type(it) is RttRun:
            if singles:
                flush_singles()
            ts.append(it.ts_ns)
            rtt.append(it.rtt_ms)
            lens.append(len(it.ts_ns))
            dir_code.append(it.direction)
            src_code.append(_SOURCE_CODE[it.source])
        else:
            singles.append(it)
    if singles:
        flush_singles()
    if not lens:
        empty = np.empty(0, np.int64)
        return empty, np.empty(0, np.float64), empty, empty
    counts = np.array(lens, np.int64)
    direction = np.repeat(np.array(dir_code, np.int64), counts)
    source = np.repeat(np.array(src_code, np.int64), counts)
    if mixed:
        starts = np.zeros(len(lens), np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        for part, dirs, srcs in mixed:
            a = int(starts[part])
            direction[a : a + len(dirs)] = dirs
            source[a : a + len(srcs)] = srcs
    return np.concatenate(ts), np.concatenate(rtt), direction, source


def event_columns(ms: Msgs) -> dict[str, pa.Array]:
    """messages.event and messages.tokens (all null without LLM stream events)."""
    n = len(ms)
    if not ms.kind.any():
        return {"event": pa.nulls(n, TEXT), "tokens": pa.nulls(n, pa.int64())}
    return {
        "event": coded_strings(ms.kind, EVENT_NAMES),
        "tokens": pa.array(ms.tokens, pa.int64(), mask=ms.tokens < 0),
    }


def tokens_per_s(completion: list[int | None], first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Decode rate: tokens after the first over the time from the first to the last
    response message (vLLM's time per output token, inverted); NaN when not known."""
    tokens = np.array([-1 if c is None else c for c in completion], dtype=np.float64)
    span = ms_between(first, last) / 1e3
    ok = (tokens >= 2) & (span > 0)  # (NaN spans compare false)
    out = np.full(len(tokens), np.nan)
    out[ok] = (tokens[ok] - 1) / span[ok]
    return out


def either(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Times ``a``, ``b`` where ``a`` is none (NO_TS)."""
    return np.where(a != NO_TS, a, b)


def ms_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(b - a) in ms; NaN where either time is none."""
    ok = (a != NO_TS) & (b != NO_TS)
    return np.where(ok, (np.where(ok, b, 0) - np.where(ok, a, 0)) / 1e6, np.nan)


def client_est(start: np.ndarray, seen: np.ndarray, acked: np.ndarray, floor_ms: np.ndarray) -> np.ndarray:
    """(ACK time - start) where the ACK was seen, else (seen - start) + the RTT floor."""
    return np.where(acked != NO_TS, ms_between(start, acked), ms_between(start, seen) + floor_ms)


def capture_side(floor_to_server_ms: float | None, floor_to_client_ms: float | None) -> str:
    """Which end the capture point sits near, from the two RTT floors."""
    if floor_to_server_ms is None or floor_to_client_ms is None:
        return "unknown"
    lo, hi = sorted((floor_to_server_ms, floor_to_client_ms))
    if hi <= 0 or lo > 0.25 * hi:
        return "middle"
    return "server" if floor_to_server_ms < floor_to_client_ms else "client"
