"""Impairment models and per-direction schedules for the lab bridge.

Pure code (no sockets, no clock): the bridge feeds it one frame at a time with the frame's
arrival time and gets back when to release the frame, or that it is dropped. That makes
every model testable with synthetic times, and the bridge's decisions reproducible from
its seed and the sequence of frames.

A *window* is a named interval ``[start_ns, end_ns)`` on one direction (``to_server`` =
client -> server, ``to_client`` = server -> client) with an ordered list of models. A frame
arriving in a window passes through the window's models in order; each model may drop it,
delay it (move its planned release time later) or *hold* it (reordering: the frame is
released late and later frames may overtake it). Every other frame of a direction keeps
FIFO order: it is never released before a frame that arrived before it, unless that frame
was held. So the only overtaking the bridge causes is the reordering it was asked for, and
a queue that builds inside a window drains in order after the window ends (such frames are
logged as ``backlog`` against the window).

Model specs are plain dicts (``{"kind": "gilbert_elliott", ...}``), so schedules travel as
JSON into the bridge process and out into ``labels.json`` with every parameter filled in.

Rates are bits per second of whole Ethernet frames (header included), sizes are bytes of
Ethernet frames, times are nanoseconds (CLOCK_REALTIME, UTC since the epoch).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000

TO_SERVER = 0
TO_CLIENT = 1
DIRECTIONS = ("to_server", "to_client")

# What the bridge did with a frame (the `action` column of the bridge log).
PASS = "pass"  # outside every window, forwarded at once
FORWARD = "forward"  # inside a window, no model acted on it
DELAY = "delay"  # released later than it arrived (delay, jitter, queue, shaper)
HOLD = "hold"  # held back so later frames overtake it (reordering)
DROP = "drop"
BACKLOG = "backlog"  # outside any window but behind frames still delayed by one


@dataclass(slots=True)
class Pkt:
    """One frame on its way through a window's models (mutated by them)."""

    t_ns: int  # planned release time; starts as the arrival time
    size: int  # Ethernet frame bytes
    payload: int  # TCP payload bytes (0 for pure ACKs and non-TCP)
    is_ip: bool
    dropped: bool = False
    held: bool = False
    by: str = ""  # kind of the model that dropped / held / delayed it


class Model:
    """Base class: ``apply`` mutates the Pkt. ``match`` selects the frames a model acts on:
    ``all`` (every IPv4 frame), ``payload`` (TCP segments with payload)."""

    kind: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, **params: Any) -> None:
        unknown = set(params) - set(self.defaults) - {"kind"}
        if unknown:
            raise ValueError(f"{self.kind}: unknown parameters {sorted(unknown)}")
        self.params = {**self.defaults, **{k: v for k, v in params.items() if k != "kind"}}
        self.match = self.params.get("match", "all")
        if self.match not in ("all", "payload"):
            raise ValueError(f"{self.kind}: match must be 'all' or 'payload'")

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.params}

    def matches(self, p: Pkt) -> bool:
        return p.is_ip and (self.match == "all" or p.payload > 0)

    def _tail_drop(self, p: Pkt) -> bool:
        """A full waiting room (``self.backlog`` over ``limit_bytes``) drops the frame."""
        if self.backlog.at(p.t_ns) + p.size > self.params["limit_bytes"]:
            p.dropped, p.by = True, self.kind
            return True
        return False

    def start(self, t_ns: int, rng: random.Random) -> None:  # noqa: B027 - optional hook
        """Called when the window opens (resets per-window state)."""

    def apply(self, p: Pkt, rng: random.Random) -> None:
        raise NotImplementedError


class GilbertElliott(Model):
    """Bursty loss: a two-state Markov chain (good/bad) stepped once per matching frame.
    In a state the frame is lost with ``loss_good`` / ``loss_bad``; then the chain moves
    good->bad with ``p_gb`` and bad->good with ``p_bg`` (mean burst = 1/p_bg frames)."""

    kind = "gilbert_elliott"
    defaults = {"p_gb": 0.01, "p_bg": 0.3, "loss_good": 0.0, "loss_bad": 1.0, "match": "all"}

    def start(self, t_ns: int, rng: random.Random) -> None:
        self.bad = False

    def apply(self, p: Pkt, rng: random.Random) -> None:
        if not self.matches(p):
            return
        loss = self.params["loss_bad"] if self.bad else self.params["loss_good"]
        if loss > 0 and rng.random() < loss:
            p.dropped, p.by = True, self.kind
        if self.bad:
            self.bad = rng.random() >= self.params["p_bg"]
        else:
            self.bad = rng.random() < self.params["p_gb"]


class DropConsecutive(Model):
    """Deterministic loss: drop ``n`` consecutive matching frames, first ``after_ms`` after
    the window opens, then again every ``every_ms`` (0 = once)."""

    kind = "drop_consecutive"
    defaults = {"n": 5, "after_ms": 0.0, "every_ms": 0.0, "match": "payload"}

    def start(self, t_ns: int, rng: random.Random) -> None:
        self.next_ns = t_ns + int(self.params["after_ms"] * NS_PER_MS)
        self.left = 0

    def apply(self, p: Pkt, rng: random.Random) -> None:
        if not self.matches(p):
            return
        if self.left == 0 and self.next_ns is not None and p.t_ns >= self.next_ns:
            self.left = int(self.params["n"])
            every = self.params["every_ms"]
            self.next_ns = self.next_ns + int(every * NS_PER_MS) if every > 0 else None
        if self.left > 0:
            self.left -= 1
            p.dropped, p.by = True, self.kind


class Reorder(Model):
    """Hold back a share of matching frames by ``hold_ms`` so later frames overtake them."""

    kind = "reorder"
    defaults = {"share": 0.05, "hold_ms": 20.0, "match": "payload"}

    def apply(self, p: Pkt, rng: random.Random) -> None:
        if self.matches(p) and rng.random() < self.params["share"]:
            p.t_ns += int(self.params["hold_ms"] * NS_PER_MS)
            p.held, p.by = True, self.kind


class Delay(Model):
    """Constant delay plus uniform jitter in [-jitter_ms, +jitter_ms]. Order is kept (the
    direction's FIFO rule), like netem with a rate: jitter spreads gaps, it never reorders."""

    kind = "delay"
    defaults = {"delay_ms": 20.0, "jitter_ms": 0.0, "match": "all"}

    def apply(self, p: Pkt, rng: random.Random) -> None:
        if not self.matches(p):
            return
        d = self.params["delay_ms"]
        j = self.params["jitter_ms"]
        if j > 0:
            d += rng.uniform(-j, j)
        if d > 0:
            p.t_ns += int(d * NS_PER_MS)
            p.by = p.by or self.kind


class _Backlog:
    """Bytes still waiting in a FIFO, given each frame's departure time."""

    def __init__(self) -> None:
        self.q: deque[tuple[int, int]] = deque()
        self.bytes = 0

    def at(self, t_ns: int) -> int:
        q = self.q
        while q and q[0][0] <= t_ns:
            self.bytes -= q.popleft()[1]
        return self.bytes

    def add(self, depart_ns: int, size: int) -> None:
        self.q.append((depart_ns, size))
        self.bytes += size


class Queue(Model):
    """Bottleneck: FIFO served at ``rate_bps`` with a ``limit_bytes`` buffer; a frame that
    does not fit is tail-dropped. A frame departs when the link has serialized it."""

    kind = "queue"
    defaults = {"rate_bps": 4_000_000, "limit_bytes": 50_000, "match": "all"}

    def start(self, t_ns: int, rng: random.Random) -> None:
        self.busy_until = 0
        self.backlog = _Backlog()

    def apply(self, p: Pkt, rng: random.Random) -> None:
        if not self.matches(p) or p.dropped:
            return
        if self._tail_drop(p):
            return
        depart = max(p.t_ns, self.busy_until) + p.size * 8 * NS_PER_S // int(
            self.params["rate_bps"]
        )
        self.busy_until = depart
        self.backlog.add(depart, p.size)
        p.t_ns, p.by = depart, p.by or self.kind


class Shaper(Model):
    """Token-bucket shaper (like tbf): tokens at ``rate_bps`` up to ``burst_bytes``; a frame
    leaves when enough tokens have accumulated, in FIFO order (the excess is delayed). The
    waiting room holds ``limit_bytes``; beyond it frames are tail-dropped."""

    kind = "shaper"
    defaults = {"rate_bps": 500_000, "burst_bytes": 4_000, "limit_bytes": 200_000, "match": "all"}

    def start(self, t_ns: int, rng: random.Random) -> None:
        self.tokens = float(self.params["burst_bytes"])
        self.t_tok = t_ns
        self.last = 0
        self.backlog = _Backlog()

    def apply(self, p: Pkt, rng: random.Random) -> None:
        if not self.matches(p) or p.dropped:
            return
        if self._tail_drop(p):
            return
        rate = float(self.params["rate_bps"]) / 8 / NS_PER_S  # bytes per ns
        t = max(p.t_ns, self.last)
        tokens = min(float(self.params["burst_bytes"]), self.tokens + (t - self.t_tok) * rate)
        if tokens >= p.size:
            depart, tokens = t, tokens - p.size
        else:
            depart, tokens = t + int((p.size - tokens) / rate) + 1, 0.0
        self.tokens, self.t_tok, self.last = tokens, depart, depart
        if depart > p.t_ns:
            self.backlog.add(depart, p.size)
            p.t_ns, p.by = depart, p.by or self.kind


class Policer(Model):
    """Token-bucket policer: tokens at ``rate_bps`` up to ``burst_bytes``; a frame that finds
    too few tokens is dropped (the excess is dropped, nothing is delayed)."""

    kind = "policer"
    defaults = {"rate_bps": 500_000, "burst_bytes": 6_000, "match": "all"}

    def start(self, t_ns: int, rng: random.Random) -> None:
        self.tokens = float(self.params["burst_bytes"])
        self.t_tok = t_ns

    def apply(self, p: Pkt, rng: random.Random) -> None:
        if not self.matches(p) or p.dropped:
            return
        rate = float(self.params["rate_bps"]) / 8 / NS_PER_S
        t = max(p.t_ns, self.t_tok)
        self.tokens = min(float(self.params["burst_bytes"]), self.tokens + (t - self.t_tok) * rate)
        self.t_tok = t
        if self.tokens >= p.size:
            self.tokens -= p.size
        else:
            p.dropped, p.by = True, self.kind


MODELS: dict[str, type[Model]] = {
    m.kind: m for m in (GilbertElliott, DropConsecutive, Reorder, Delay, Queue, Shaper, Policer)
}


def model_from_spec(spec: dict[str, Any]) -> Model:
    try:
        cls = MODELS[spec["kind"]]
    except KeyError:
        raise ValueError(f"unknown impairment kind {spec.get('kind')!r}") from None
    return cls(**spec)


@dataclass
class Window:
    """One impairment window on one direction (absolute times)."""

    name: str
    direction: str  # "to_server" | "to_client"
    start_ns: int
    end_ns: int
    models: list[dict[str, Any]]
    seed: int = 0

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}")
        if self.end_ns <= self.start_ns:
            raise ValueError(f"window {self.name}: end before start")


@dataclass
class _Active:
    w: Window
    dir: int
    models: list[Model]
    rng: random.Random
    started: bool = False


@dataclass(slots=True)
class Decision:
    release_ns: int | None  # None = dropped
    action: str
    window: str | None
    by: str


@dataclass
class Impairer:
    """Decides per frame, for both directions, from a list of windows, after the path's
    own models (``base``: per direction, applied to every IP frame for the whole run, e.g.
    the propagation delay that gives the path its RTT floor; a frame they delay still
    counts as passed, not impaired)."""

    windows: list[Window] = field(default_factory=list)
    base: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        self._base: list[list[Model]] = [[model_from_spec(m) for m in self.base.get(d, [])] for d in DIRECTIONS]
        self._base_rng = [random.Random(f"{self.seed}:base:{d}") for d in DIRECTIONS]
        self._base_started = [False, False]
        self._by_dir: list[list[_Active]] = [[], []]
        for i, w in enumerate(self.windows):
            d = DIRECTIONS.index(w.direction)
            # Each window gets its own RNG so adding a window never changes another's draws.
            rng = random.Random(f"{w.seed}:{i}:{w.name}:{w.direction}")
            self._by_dir[d].append(_Active(w, d, [model_from_spec(m) for m in w.models], rng))
        for lst in self._by_dir:
            lst.sort(key=lambda a: a.w.start_ns)
        # FIFO tail per direction: release time of the last non-held frame and the window
        # that delayed it.
        self.fifo_tail = [0, 0]
        self.fifo_window: list[str | None] = [None, None]

    def active(self, direction: int, t_ns: int) -> _Active | None:
        for a in self._by_dir[direction]:
            if a.w.start_ns <= t_ns < a.w.end_ns:
                return a
        return None

    def _path(self, direction: int, p: Pkt) -> None:
        """The path's own models (``base``) on a frame."""
        models = self._base[direction]
        if not self._base_started[direction]:
            for m in models:
                m.start(p.t_ns, self._base_rng[direction])
            self._base_started[direction] = True
        for m in models:
            m.apply(p, self._base_rng[direction])
            if p.dropped:
                return

    def decide(self, direction: int, t_ns: int, size: int, payload: int, is_ip: bool) -> Decision:
        a = self.active(direction, t_ns) if is_ip else None
        p = Pkt(t_ns, size, payload, is_ip)
        if is_ip and self._base[direction]:
            self._path(direction, p)
            if p.dropped:
                return Decision(None, DROP, "base", p.by)
            p.by = ""  # the path's delay is not an impairment
        if a is None:
            tail = self.fifo_tail[direction]
            if tail > p.t_ns and self.fifo_window[direction] is not None:
                return Decision(tail, BACKLOG, self.fifo_window[direction], "fifo")
            release = max(p.t_ns, tail)
            if self._base[direction]:
                self.fifo_tail[direction] = release
                self.fifo_window[direction] = None
            return Decision(release, PASS, None, "")
        if not a.started:
            for m in a.models:
                m.start(a.w.start_ns, a.rng)
            a.started = True
        passed = p.t_ns  # when it would have left without the window
        for m in a.models:
            m.apply(p, a.rng)
            if p.dropped:
                return Decision(None, DROP, a.w.name, p.by)
        if p.held:
            return Decision(p.t_ns, HOLD, a.w.name, p.by)
        release = max(p.t_ns, self.fifo_tail[direction])
        self.fifo_tail[direction] = release
        self.fifo_window[direction] = a.w.name
        if release > passed:
            return Decision(release, DELAY, a.w.name, p.by or "fifo")
        return Decision(release, FORWARD, a.w.name, "")
