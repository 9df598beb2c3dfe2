"""What the pipeline holds for each open connection: messages waiting for the ACK that
covers them, requests waiting to be resolved, RTT samples, flow_rates buckets, and the
rows not yet handed to the writer; and for all of them at once, the last message time
of each open stream."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from parsers.records import H2Event, RequestRecord, RttRun, RttSample, TcpEvent
from parsers.session import AppSession
from telemetry.ingest.rates import Rates

_MSG_FIELDS = ("sid", "idx", "ts", "size", "comp", "end", "gap", "acked", "kind", "tokens")
_EMPTY_I64 = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class Msgs:
    """Messages of one session direction as numpy columns, in completion order (so
    their end offsets ascend). One object per batch instead of one per message."""

    sid: np.ndarray  # int64 stream id
    idx: np.ndarray  # int64 index within the stream and direction
    ts: np.ndarray  # int64 ns
    size: np.ndarray  # int64
    comp: np.ndarray  # bool
    end: np.ndarray  # int64 direction offset after the last byte
    gap: np.ndarray  # float64 ms since the previous message of the stream; NaN: none
    acked: np.ndarray  # int64 ns of the covering ACK; NO_TS: none (yet)
    kind: np.ndarray  # int64 LLM event kind (parsers.llm.semantics); 0: not an event
    tokens: np.ndarray  # int64 tokens the event carries; -1: not said

    def __len__(self) -> int:
        return len(self.sid)

    def part(self, a: int, b: int) -> Msgs:
        return Msgs(*(getattr(self, f)[a:b] for f in _MSG_FIELDS))

    @staticmethod
    def concat(parts: list[Msgs]) -> Msgs:
        if len(parts) == 1:
            return parts[0]
        return Msgs(*(np.concatenate([getattr(p, f) for p in parts]) for f in _MSG_FIELDS))


# a stream's key in StreamTimes: connection slot << STREAM_KEY_SHIFT | stream id << 1 |
# direction. Stream ids are HTTP/2's 31 bits or an HTTP/1.1 exchange's index. A slot
# numbers the connections with open streams, reused once one closes: conn keys count
# every connection of a capture run, without bound in a daemon's.
STREAM_KEY_SHIFT = 34


def stream_keys(slots: np.ndarray, streams: np.ndarray, directions: np.ndarray) -> np.ndarray:
    return (slots << STREAM_KEY_SHIFT) | (streams << 1) | directions


@dataclass(slots=True)
class StreamTimes:
    """Time of the last message per open connection, stream and direction (keys from
    :func:`stream_keys`), as sorted columns: looked up and updated once per batch for
    every connection at once, not per connection or per stream. Streams and connections
    that are over are dropped before the next lookup, all in one pass."""

    keys: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    ts: np.ndarray = field(default_factory=lambda: _EMPTY_I64)
    _slots: dict[int, int] = field(default_factory=dict)  # conn key -> slot
    _free: list[int] = field(default_factory=list)  # slots of closed connections
    _next_slot: int = 0
    _gone: list[np.ndarray] = field(default_factory=list)  # keys of streams that are over
    _gone_slots: list[int] = field(default_factory=list)  # connections that are over

    def slot(self, conn_key: int) -> int:
        """The connection's slot (a new one on its first message)."""
        slot = self._slots.get(conn_key)
        if slot is None:
            if self._free:
                slot = self._free.pop()
            else:
                slot, self._next_slot = self._next_slot, self._next_slot + 1
            self._slots[conn_key] = slot
        return slot

    def swap(self, keys: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For sorted unique ``keys``: whether a time was held for each and which (0:
        none); ``last`` becomes their time."""
        self._drop()  # first: a reused slot's keys are the old connection's until now
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

    def forget(self, conn_key: int, streams: list[int]) -> None:
        """Drop both directions of these streams of a connection (they are over)."""
        slot = self._slots.get(conn_key)
        if slot is not None and len(self.keys) and streams:
            key = stream_keys(np.int64(slot), np.array(streams, dtype=np.int64), np.int64(0))
            self._gone += (key, key + 1)
            self._drop_if_many()

    def forget_connection(self, conn_key: int) -> None:
        """Drop every stream of a connection (it is closed); its slot is free again."""
        slot = self._slots.pop(conn_key, None)
        if slot is not None:
            self._gone_slots.append(slot)
            self._free.append(slot)
            self._drop_if_many()

    def _drop_if_many(self) -> None:
        if len(self._gone) + len(self._gone_slots) > 4096:  # bounded between lookups
            self._drop()

    def _drop(self) -> None:
        if not (self._gone or self._gone_slots):
            return
        keep = np.ones(len(self.keys), dtype=bool)
        if self._gone:
            keep &= ~np.isin(self.keys, np.concatenate(self._gone))
        if self._gone_slots:
            keep &= ~np.isin(self.keys >> STREAM_KEY_SHIFT, np.array(self._gone_slots, dtype=np.int64))
        if not keep.all():
            self.keys, self.ts = self.keys[keep], self.ts[keep]
        self._gone, self._gone_slots = [], []


@dataclass
class ConnRows:
    """Rows of one connection not yet handed to the writer."""

    tcp_events: list[TcpEvent] = field(default_factory=list)
    rtt: list[RttSample | RttRun] = field(default_factory=list)
    n_rtt: int = 0  # RTT samples in ``rtt`` (an RttRun holds many)
    h2: list[H2Event] = field(default_factory=list)
    messages: list[tuple[int, Msgs]] = field(default_factory=list)  # (session direction, rows)
    requests: list[Ready] = field(default_factory=list)
    n_requests: int = 0  # requests in ``requests`` (a Ready holds many)

    def counts(self) -> tuple[int, ...]:
        """Rows waiting per table."""
        n_msgs = sum(len(m) for _d, m in self.messages)
        return len(self.tcp_events), self.n_rtt, len(self.h2), n_msgs, self.n_requests

    def __len__(self) -> int:
        return sum(self.counts())


@dataclass(slots=True)
class Ready:
    """Requests resolved together, with their client-side times as columns and their
    response gaps (their statistics are taken when the requests table is built, for many
    resolutions at once): one object per resolution, not one per request."""

    records: list[RequestRecord]
    first_acked: np.ndarray  # int64 ns of the ACK of the first response message; NO_TS: none
    end_acked: np.ndarray  # int64 ns of the ACK of the response's last byte; NO_TS: none
    floor_ms: float  # RTT floor toward the client when they were resolved (0.0: none yet)
    gaps: list[list[np.ndarray] | None]  # each request's response gaps (ns, by batch); None: none


# RTT samples a connection keeps per direction for its percentiles (128 KiB of doubles):
# all of them up to this many, which covers every capture of samples/ and of the shared
# public ones (at most 10,395 in a connection direction) and the realistic 1M one (6,463);
# past it, a uniform sample. A bigger bound keeps memory growing with the capture for
# longer: with 65,536 the samples of the realistic 10M capture (200 connections) held
# 48 MiB at its end against 25 MiB
RTT_KEEP = 16_384


class RttValues:
    """One connection direction's RTT samples (ms), for its median and 99th percentile at
    close: every sample while there are at most RTT_KEEP, then a uniform sample of
    RTT_KEEP of them (reservoir sampling: each sample seen so far stays with the same
    chance), so that a connection open for days holds 128 KiB a direction, not every
    sample it had; and the minimum of all of them (the direction's RTT floor so far),
    exact whatever the count."""

    __slots__ = ("_all", "_sample", "_seen", "_rng", "_seed", "low")

    def __init__(self, seed: int) -> None:
        self._all: array | None = array("d")  # every sample, until RTT_KEEP
        self._sample: np.ndarray | None = None  # the uniform sample, past RTT_KEEP
        self._seen = 0
        self._rng: np.random.Generator | None = None
        self._seed = seed  # (one sample of a connection's samples, the same in every run)
        self.low: float | None = None  # the running minimum (RTTs are never NaN)

    def __len__(self) -> int:
        """Samples seen."""
        return self._seen

    def add(self, values: np.ndarray) -> None:
        if not len(values):
            return
        values = values.astype(np.float64, copy=False)
        low = float(values.min())
        if self.low is None or low < self.low:
            self.low = low
        if self._all is not None:
            room = RTT_KEEP - len(self._all)
            self._all.frombytes(values[:room].tobytes())
            self._seen += min(len(values), room)
            if len(values) <= room:
                return
            self._sample = np.frombuffer(self._all, dtype=np.float64).copy()
            self._all, values = None, values[room:]
        # Algorithm R: the sample numbered t (from 0) takes slot j, drawn uniformly from
        # [0, t], when j < RTT_KEEP; of the samples drawing the same slot the last one stays
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        slot = self._rng.integers(0, self._seen + np.arange(len(values)) + 1)
        self._seen += len(values)
        taken = np.flatnonzero(slot < RTT_KEEP)
        last = len(taken) - 1 - np.unique(slot[taken][::-1], return_index=True)[1]
        assert self._sample is not None
        self._sample[slot[taken[last]]] = values[taken[last]]

    def values(self) -> np.ndarray:
        """The samples held: every one, or the uniform sample of them."""
        if self._all is not None:
            return np.frombuffer(self._all, dtype=np.float64)
        assert self._sample is not None
        return self._sample


@dataclass
class Conn:
    key: int
    session: AppSession | None = None
    rows: ConnRows = field(default_factory=ConnRows)
    # per session-oriented direction: messages waiting for the ACK that covers them
    pending: list[Msgs | None] = field(default_factory=lambda: [None, None])
    pending_requests: list[RequestRecord] = field(default_factory=list)
    # response offset -> ns of the ACK covering it, for offsets that requests still open
    # may name when they end, below the ACK progress kept (joins.prune_acks)
    open_acks: dict[int, int] = field(default_factory=dict)
    # stream -> ns between its consecutive response messages (one array per batch), kept
    # until its request is resolved: the request's gap statistics
    response_gaps: dict[int, list[np.ndarray]] = field(default_factory=dict)
    # RTT samples per TCP direction, for the connection's min, p50 and p99 (bounded: RttValues)
    rtt_values: tuple[RttValues, RttValues] = field(init=False)
    requests: int = 0
    # flow_rates, per TCP direction: new bytes, segments and highest acked offset per bucket
    rates: tuple[Rates, Rates] = field(default_factory=lambda: (Rates(), Rates()))
    ack_seen_ns: list[int] = field(default_factory=lambda: [-1, -1])
    # highest acked offset of the last flow_rates bucket written (rows written while open)
    prev_acked: list[int | None] = field(default_factory=lambda: [None, None])
    # stream -> ACK time of its first response message (resolved before the request is;
    # NO_TS: not acked)
    first_acked: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rtt_values = (RttValues(2 * self.key), RttValues(2 * self.key + 1))

    @property
    def flip(self) -> int:
        return int(self.session.flipped) if self.session is not None else 0

    def rtt_floor_ms(self, tcp_direction: int) -> float | None:
        return self.rtt_values[tcp_direction].low

    def rate_buckets(self) -> int:
        return self.rates[0].counted() + self.rates[1].counted()
