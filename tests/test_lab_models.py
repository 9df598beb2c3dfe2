"""Unit tests of the lab's pure parts: impairment models, schedules, window assignment and
the p99 comparison. No root needed."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from telemetry.lab import scenarios as sc
from telemetry.lab.bridge import merge_periods, parse_frame
from telemetry.lab.impair import (
    BACKLOG,
    DELAY,
    DROP,
    FORWARD,
    HOLD,
    NS_PER_MS,
    PASS,
    TO_CLIENT,
    TO_SERVER,
    Impairer,
    Window,
    model_from_spec,
)

MS = NS_PER_MS
T0 = 1_700_000_000 * 1_000_000_000


def window(
    models: list[dict], start_ms: float = 100, end_ms: float = 200, d: str = "to_client"
) -> Window:
    return Window("w", d, T0 + int(start_ms * MS), T0 + int(end_ms * MS), models, seed=7)


def feed(
    imp: Impairer, times_ms: list[float], size: int = 100, payload: int = 50, d: int = TO_CLIENT
):
    return [imp.decide(d, T0 + int(t * MS), size, payload, True) for t in times_ms]


def test_outside_windows_everything_passes_at_once() -> None:
    imp = Impairer([window([{"kind": "gilbert_elliott", "p_gb": 1.0, "loss_bad": 1.0}])])
    ds = feed(imp, [0, 50, 99.9, 200, 300])
    assert [d.action for d in ds] == [PASS] * 5
    assert all(
        d.release_ns == T0 + int(t * MS) for d, t in zip(ds, [0, 50, 99.9, 200, 300], strict=True)
    )


def test_gilbert_elliott_is_bursty_and_seeded() -> None:
    spec = {"kind": "gilbert_elliott", "p_gb": 0.05, "p_bg": 0.25, "loss_bad": 1.0}
    times = [100 + i * 0.01 for i in range(9000)]
    a = [d.action for d in feed(Impairer([window([spec])]), times)]
    b = [d.action for d in feed(Impairer([window([spec])]), times)]
    assert a == b  # same seed, same frames -> same drops
    drops = a.count(DROP)
    # stationary loss = p_gb / (p_gb + p_bg) = 1/6
    assert 0.10 < drops / len(a) < 0.23
    runs, cur = [], 0
    for x in a:
        if x == DROP:
            cur += 1
        elif cur:
            runs.append(cur)
            cur = 0
    assert 3.0 < sum(runs) / len(runs) < 5.5  # mean burst = 1 / p_bg = 4


def test_drop_consecutive_drops_exactly_n_payload_frames_then_repeats() -> None:
    imp = Impairer(
        [window([{"kind": "drop_consecutive", "n": 3, "after_ms": 10, "every_ms": 50}], 100, 200)]
    )
    times = [100 + i for i in range(100)]
    ds = [
        imp.decide(TO_CLIENT, T0 + int(t * MS), 100, 0 if i % 2 else 50, True)
        for i, t in enumerate(times)
    ]
    dropped = [t for d, t in zip(ds, times, strict=True) if d.action == DROP]
    assert dropped == [110, 112, 114, 160, 162, 164]  # only payload frames (even i)


def test_reorder_holds_share_and_lets_later_frames_overtake() -> None:
    imp = Impairer([window([{"kind": "reorder", "share": 0.2, "hold_ms": 30}])])
    times = [100 + i * 0.1 for i in range(1000)]
    ds = feed(imp, times)
    held = [(d, t) for d, t in zip(ds, times, strict=True) if d.action == HOLD]
    assert 120 < len(held) < 280
    for d, t in held:
        assert d.release_ns == T0 + int(t * MS) + 30 * MS
    others = [d for d in ds if d.action != HOLD]
    assert all(d.action == FORWARD and d.release_ns is not None for d in others)
    # a frame forwarded after a held one is released before it
    first_held = held[0]
    later = [d for d, t in zip(ds, times, strict=True) if t > first_held[1] and d.action == FORWARD]
    assert later[0].release_ns < first_held[0].release_ns


def test_delay_with_jitter_keeps_fifo_order() -> None:
    imp = Impairer([window([{"kind": "delay", "delay_ms": 20, "jitter_ms": 10}])])
    times = [100 + i * 0.5 for i in range(150)]
    ds = feed(imp, times)
    rel = [d.release_ns for d in ds]
    assert rel == sorted(rel)
    extra = [(d.release_ns - T0 - int(t * MS)) / MS for d, t in zip(ds, times, strict=True)]
    assert min(extra) >= 10 - 1e-6 and max(extra) <= 31
    assert all(d.action == DELAY for d in ds)


def test_queue_serializes_at_rate_and_tail_drops() -> None:
    # 8 Mbit/s: a 1000-byte frame takes 1 ms; limit 5000 B -> at most 5 queued.
    imp = Impairer([window([{"kind": "queue", "rate_bps": 8_000_000, "limit_bytes": 5000}])])
    ds = feed(imp, [100 + i * 0.01 for i in range(20)], size=1000)
    kept = [d for d in ds if d.action != DROP]
    assert len(kept) == 5 and sum(d.action == DROP for d in ds) == 15
    gaps = [(b.release_ns - a.release_ns) / MS for a, b in zip(kept, kept[1:], strict=False)]
    assert all(abs(g - 1.0) < 1e-3 for g in gaps)


def test_shaper_passes_burst_then_delays_excess() -> None:
    # 800 kbit/s = 100 bytes/ms; burst 1000 B: ten 100-byte frames pass, then 1 per ms.
    spec = {"kind": "shaper", "rate_bps": 800_000, "burst_bytes": 1000, "limit_bytes": 100_000}
    imp = Impairer([window([spec])])
    ds = feed(imp, [100 + i * 0.001 for i in range(30)], size=100)
    assert [d.action for d in ds[:10]] == [FORWARD] * 10
    assert all(d.action == DELAY for d in ds[10:])
    rel = [d.release_ns for d in ds[10:]]
    assert all(abs((b - a) / MS - 1.0) < 0.01 for a, b in zip(rel, rel[1:], strict=False))


def test_policer_drops_excess_and_delays_nothing() -> None:
    spec = {"kind": "policer", "rate_bps": 800_000, "burst_bytes": 1000}
    imp = Impairer([window([spec])])
    ds = feed(imp, [100 + i * 0.1 for i in range(100)], size=100)  # 1000 B/ms offered, 100 allowed
    assert all(d.action in (FORWARD, DROP) for d in ds)
    passed = sum(d.action == FORWARD for d in ds)
    assert 10 + 9 - 1 <= passed <= 10 + 10 + 1  # burst + 10 ms * 100 B/ms


def test_backlog_after_window_keeps_order() -> None:
    imp = Impairer([window([{"kind": "delay", "delay_ms": 50}], 100, 110)])
    ds = feed(imp, [105, 111, 112, 200])
    assert ds[0].action == DELAY and ds[0].release_ns == T0 + 155 * MS
    assert ds[1].action == BACKLOG and ds[1].release_ns == ds[0].release_ns and ds[1].window == "w"
    assert ds[3].action == PASS


def test_windows_are_per_direction_and_non_ip_frames_pass() -> None:
    imp = Impairer([window([{"kind": "policer", "rate_bps": 8, "burst_bytes": 0}], d="to_server")])
    assert imp.decide(TO_CLIENT, T0 + 150 * MS, 100, 10, True).action == PASS
    assert imp.decide(TO_SERVER, T0 + 150 * MS, 100, 10, True).action == DROP
    assert imp.decide(TO_SERVER, T0 + 150 * MS, 60, 0, False).action == PASS  # ARP


def test_model_specs_fill_defaults_and_reject_unknown() -> None:
    m = model_from_spec({"kind": "queue", "rate_bps": 1000})
    assert m.spec() == {"kind": "queue", "rate_bps": 1000, "limit_bytes": 50_000, "match": "all"}
    with pytest.raises(ValueError):
        model_from_spec({"kind": "queue", "rate": 1})
    with pytest.raises(ValueError):
        model_from_spec({"kind": "netem"})


def test_every_scenario_is_well_formed() -> None:
    expected = {"baseline", "loss_burst", "reorder", "queueing", "throttle_shaper",
                "throttle_policer", "flow_control", "server_stall", "mixed"}  # fmt: skip
    assert expected <= set(sc.SCENARIOS)
    causes = {"loss_burst", "reordering", "queueing", "throttling", "server"}
    for s in sc.SCENARIOS.values():
        assert (s.name == "baseline") == (not s.windows)
        for w in s.windows:
            assert 0 < w.start < w.end < 1 and w.cause in causes
            if w.layer == "bridge":
                assert w.direction in ("to_server", "to_client") and w.models
                Impairer([Window(w.name, w.direction, T0, T0 + 1, list(w.models))])
            else:
                assert w.layer in ("server", "client") and w.params.get("kind")
    mixed = sc.get("mixed")
    (a, b) = mixed.windows
    assert a.end < b.start and a.cause != b.cause


def test_parse_frame_reads_tcp_payload_length() -> None:
    eth = b"\x00" * 12 + b"\x08\x00"
    ip = bytes([0x45, 0, 0, 40 + 7, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0]) + bytes(8)
    tcp = (
        (1234).to_bytes(2, "big")
        + (50051).to_bytes(2, "big")
        + (99).to_bytes(4, "big")
        + bytes([0] * 4)
        + bytes([0x50, 0x18])
        + bytes(6)
    )
    f = eth + ip + tcp + b"payload"
    assert parse_frame(f) == (True, 1234, 50051, 99, 7, 0x1234)
    assert parse_frame(b"\x00" * 12 + b"\x08\x06" + bytes(28))[0] is False


def test_merge_periods() -> None:
    ev = [(0, 3 * MS), (100 * MS, 5 * MS), (1000 * MS, 2 * MS)]
    out = merge_periods(ev, 250 * MS)
    assert [(o["start_ns"], o["events"]) for o in out] == [(0, 2), (1000 * MS, 1)]
    assert out[0]["max_late_ms"] == 5.0


def test_assign_windows_and_compare() -> None:
    from telemetry.lab.client import SCHEMA
    from telemetry.lab.truth import assign_windows, compare

    rng = random.Random(1)
    rows = []
    for i in range(200):
        start = T0 + i * 50 * MS
        slow = 4000 <= i * 50 < 6000
        ttft = (300 if slow else 50) + rng.random()
        first = start + int(ttft * MS)
        end = first + 500 * MS
        rows.append({
            "request_id": i, "logical_id": i, "attempt": 0, "method": "Generate", "conn_index": 0,
            "conn_local_port": 1, "server_port": 2, "stream_id": 2 * i + 1, "conn_reconnected": False,
            "prompt_words": 1, "max_tokens": 2, "start_ns": start, "first_message_ns": first,
            "last_message_ns": end, "end_ns": end, "message_ns": [first, end], "messages": 2,
            "grpc_status": 0, "grpc_status_name": "OK", "ttft_ms": ttft, "latency_ms": (end - start) / MS,
            "max_gap_ms": 500.0, "slow_reader": False, "in_window": None,
        })  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    w = {"name": "stall", "start_ns": T0 + 4000 * MS, "end_ns": T0 + 6000 * MS,
         "effect_end_ns": T0 + 6500 * MS}  # fmt: skip
    table = assign_windows(table, [w])
    inw = table.column("in_window").to_pylist()
    # in = [start, end] overlaps [window start, effect_end)
    assert inw[60] is None and inw[70] == "stall" and inw[129] == "stall" and inw[130] is None
    out, stall = compare(table, [w])
    assert out["window"] is None and stall["window"] == "stall"
    assert stall["ttft_p99_ms"] > 250 and out["ttft_p99_ms"] < 60


def test_lab_names_the_python_stack_a_protocol_lacks(monkeypatch):
    from telemetry.lab import runner

    # this machine has the test extra: nothing lacking for any protocol, over TLS or not
    for protocol in ("grpc", "openai-http1", "openai-h2c"):
        for tls in (False, True):
            assert not [m for m in runner.missing_requirements(protocol, tls) if "Python package" in m]
    monkeypatch.setitem(runner._STACKS, "openai-http1", ("uvicorn", "tailtap_no_such_stack"))
    lacking = [m for m in runner.missing_requirements("openai-http1") if "Python package" in m]
    assert lacking == ["the Python package tailtap_no_such_stack (pip install -e '.[test]')"]
