"""Lab scenarios: what each run injects, where and when.

Windows are placed as fractions of the run's duration (so ``--duration`` stretches them);
the runner turns them into absolute UTC times for ``labels.json``. Every window names the
attribution ``cause`` it should be scored as (the categories of DESIGN.md "Attribution")
and a ``kind``; ``also`` names further (cause, kind) pairs when one impairment injects
several at once (a frozen server both stops generating and stops reading). ``settle_s`` is how long its effects may outlast it (RTO backoff after a
loss burst, a queue draining): ``labels.json`` gives ``effect_end`` = end + settle, and a
request counts as *in* the window when it overlaps ``[start, effect_end)``.

Layers: ``bridge`` windows are impairments on one direction (``to_client`` = responses
from server to client, i.e. downstream of the server-side capture point); ``server``
windows are the server's own schedule; ``client`` windows the client's (slow reader).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WindowSpec:
    name: str
    layer: str  # bridge | server | client
    start: float  # fraction of the duration
    end: float
    cause: str  # loss_burst | reordering | queueing | throttling | server
    kind: str
    direction: str | None = None  # bridge windows: to_server | to_client
    models: tuple[dict[str, Any], ...] = ()  # bridge windows: impair.py model specs
    params: dict[str, Any] = field(default_factory=dict)  # server / client windows
    settle_s: float = 1.0
    also: tuple[tuple[str, str], ...] = ()  # further (cause, kind) the same impairment injects


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    windows: tuple[WindowSpec, ...] = ()
    duration_s: float = 20.0
    client: dict[str, Any] = field(default_factory=dict)  # overrides of the client config
    server: dict[str, Any] = field(default_factory=dict)
    bulk: bool = False  # competing bulk download during the queueing windows
    sysctls: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> sysctls
    # the path's own models for the whole run, per direction (impair.py specs): e.g. a
    # constant delay that sets the RTT floor, a link rate
    path: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # competing bulk download (server -> client) in these intervals (fractions of the run),
    # besides the queueing windows' own when ``bulk``: cross traffic
    bulk_windows: tuple[tuple[float, float], ...] = ()


# Load and server defaults (a 2-core machine copes with this alongside the bridge).
CLIENT_DEFAULTS: dict[str, Any] = {
    "rate": 12.0,  # requests per second, Poisson
    "connections": 3,
    "embed_share": 0.15,
    "embed_chars": [64, 4096],  # Embed input sizes
    "prompt_words": [16, 256],
    "max_tokens": [30, 80],
    "deadline_s": 20.0,
    "drain_s": 8.0,
    "retry": {"max_attempts": 3, "backoff_ms": 50.0},
    "channel_options": [],
}
SERVER_DEFAULTS: dict[str, Any] = {
    "port": 50051,
    "token_interval_ms": 15.0,
    "prefill_base_ms": 15.0,
    "prefill_per_token_ms": 0.3,
    "embed_base_ms": 5.0,
    "max_workers": 128,
    "grpc_options": [],
}
BULK_PORT = 5201

GE_BURSTY = {"kind": "gilbert_elliott", "p_gb": 0.01, "p_bg": 0.3, "loss_good": 0.0,
             "loss_bad": 0.9, "match": "all"}  # fmt: skip
DROP8 = {"kind": "drop_consecutive", "n": 8, "after_ms": 200.0, "every_ms": 1500.0,
         "match": "payload"}  # fmt: skip

_loss = WindowSpec(
    "loss_burst", "bridge", 0.4, 0.7, "loss_burst", "gilbert_elliott+drop_consecutive",
    direction="to_client", models=(DROP8, GE_BURSTY), settle_s=2.0,
)  # fmt: skip
_stall = WindowSpec(
    "server_stall", "server", 0.4, 0.7, "server", "prefill_stall",
    params={"kind": "stall", "extra_ms": 300.0, "decode_factor": 1.0}, settle_s=0.5,
)  # fmt: skip

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("baseline", "No impairment: the unimpaired bridge and server only."),
        Scenario(
            "loss_burst",
            "Bursty loss of server->client frames (Gilbert-Elliott, mean burst ~3) plus 8 "
            "consecutive data segments dropped every 1.5 s, downstream of the capture point.",
            (_loss,),
        ),
        Scenario(
            "reorder",
            "5% of server->client data segments held back 30 ms so later ones overtake them.",
            (
                WindowSpec(
                    "reorder",
                    "bridge",
                    0.4,
                    0.7,
                    "reordering",
                    "reorder",
                    direction="to_client",
                    settle_s=0.5,
                    models=(
                        {"kind": "reorder", "share": 0.05, "hold_ms": 30.0, "match": "payload"},
                    ),
                ),
            ),  # fmt: skip
        ),
        Scenario(
            "queueing",
            "3 Mbit/s bottleneck FIFO (40 KB, tail drop) on server->client, filled by a "
            "competing bulk download that runs only inside the window.",
            (
                WindowSpec(
                    "queueing",
                    "bridge",
                    0.4,
                    0.7,
                    "queueing",
                    "bottleneck",
                    direction="to_client",
                    settle_s=1.0,
                    models=(
                        {
                            "kind": "queue",
                            "rate_bps": 3_000_000,
                            "limit_bytes": 40_000,
                            "match": "all",
                        },
                    ),
                ),
            ),  # fmt: skip
            bulk=True,
        ),
        Scenario(
            "throttle_shaper",
            "Token-bucket shaper on server->client at 300 kbit/s (burst 3 KB, 60 KB "
            "waiting room): the excess is delayed, delivery rate capped.",
            (
                WindowSpec(
                    "throttle_shaper",
                    "bridge",
                    0.4,
                    0.7,
                    "throttling",
                    "shaper",
                    direction="to_client",
                    settle_s=3.0,
                    models=(
                        {
                            "kind": "shaper",
                            "rate_bps": 300_000,
                            "burst_bytes": 3_000,
                            "limit_bytes": 60_000,
                            "match": "all",
                        },
                    ),
                ),
            ),  # fmt: skip
        ),
        Scenario(
            "throttle_policer",
            "Token-bucket policer on server->client at 300 kbit/s (burst 6 KB): the excess "
            "is dropped.",
            (
                WindowSpec(
                    "throttle_policer",
                    "bridge",
                    0.4,
                    0.7,
                    "throttling",
                    "policer",
                    direction="to_client",
                    settle_s=2.0,
                    models=(
                        {
                            "kind": "policer",
                            "rate_bps": 300_000,
                            "burst_bytes": 6_000,
                            "match": "all",
                        },
                    ),
                ),
            ),  # fmt: skip
        ),
        Scenario(
            "flow_control",
            "Small HTTP/2 windows (client lookahead 256 B, no BDP probing); inside the window "
            "the client is a slow reader: its process is frozen 300 ms of every 400 ms "
            "(SIGSTOP/SIGCONT by the runner), so it neither reads its sockets nor grants "
            "HTTP/2 window, and the server's streams block on WINDOW_UPDATE.",
            (
                WindowSpec(
                    "flow_control",
                    "client",
                    0.4,
                    0.7,
                    "throttling",
                    "h2_flow_control",
                    params={
                        "kind": "slow_reader",
                        "freeze_ms": 300.0,
                        "run_ms": 100.0,
                        "read_delay_ms": 0.0,
                    },
                    settle_s=1.0,
                ),
            ),  # fmt: skip
            client={
                "channel_options": [
                    ["grpc.http2.lookahead_bytes", 256],
                    ["grpc.http2.bdp_probe", 0],
                ]
            },  # fmt: skip
        ),
        Scenario(
            "server_stall",
            "Clean network; the server prefills 300 ms longer for requests arriving in the window.",
            (_stall,),
        ),
        Scenario(
            "mixed",
            "Two causes in separate windows: bursty server->client loss, then a server "
            "prefill stall.",
            (
                WindowSpec(**{**_loss.__dict__, "start": 0.2, "end": 0.4}),
                WindowSpec(**{**_stall.__dict__, "start": 0.6, "end": 0.8}),
            ),
            duration_s=25.0,
        ),
        Scenario(
            "server_slow_read",
            "The server is slow to read: inside the window its process is frozen 250 ms of "
            "every 500 ms (SIGSTOP/SIGCONT by the runner) with 16 KB socket buffers and larger "
            "Embed inputs (8-32 KB), so the requests it does not read fill its receive buffer and it advertises a zero "
            "window; its token streams pause too (frozen process): two causes at once, "
            "receive_window for the uploads that met the zero window and server for the rest.",
            (
                WindowSpec(
                    "server_slow_read",
                    "server",
                    0.4,
                    0.7,
                    "throttling",
                    "zero_window",
                    params={"kind": "slow_read", "freeze_ms": 250.0, "run_ms": 250.0},
                    settle_s=1.0,
                    also=(("server", "paused"),),
                ),
            ),  # fmt: skip
            client={"embed_share": 0.4, "embed_chars": [8192, 32768]},
            sysctls={"server": {"net.ipv4.tcp_rmem": "4096 16384 16384"}},
        ),
        Scenario(
            "resource_exhausted",
            "The server answers 40% of requests RESOURCE_EXHAUSTED inside the window; the "
            "client retries with backoff (50 ms, x2).",
            (
                WindowSpec(
                    "resource_exhausted",
                    "server",
                    0.4,
                    0.7,
                    "throttling",
                    "resource_exhausted",
                    params={"kind": "resource_exhausted", "p": 0.4, "after_ms": 2.0},
                    settle_s=0.5,
                ),
            ),  # fmt: skip
        ),
    )
}


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
