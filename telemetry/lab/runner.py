"""Runs one lab scenario end to end and writes its labelled capture.

Steps: namespaces + veths (offloads off) -> bridge (``chrt -r 10``) -> UDP probe of the
idle path -> tcpdump on the server's veth ``s0`` (the inference boundary) -> server ->
T0 fixed and sent to bridge and server -> client (connects, then Poisson load from T0 for
``duration`` s, drains) -> stop everything -> ``labels.json``, ``client.parquet`` (with
``in_window``), ``bridge_events.parquet`` -> cleanup.

Output directory:

- ``capture.pcap``: tcpdump at ``s0`` in the server namespace, nanosecond timestamps,
  full snaplen, no filter.
- ``client.parquet``: the client's truth per gRPC call (columns in ``client.py``).
- ``labels.json``: scenario, endpoints, every window in absolute UTC (ns and ISO) with
  its parameters and what the bridge/server/client observed doing in it, the bridge's
  measured idle delay, and the periods in which a lab process was disturbed.
- ``bridge_events.parquet``: one row per frame that met a window (``bridge.EVENT_COLUMNS``).
- ``work/`` (only with ``keep_work``): configs, logs, the raw reports.

Everything started is bounded in time (own deadlines, plus ``timeout`` around tcpdump)
and is stopped by process group and pid, and the namespaces are deleted, in ``finally``,
on SIGTERM/SIGINT and at exit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from telemetry.lab import scenarios as sc
from telemetry.lab.netns import (
    CLIENT_IF,
    CLIENT_IP,
    MTU,
    SERVER_IF,
    SERVER_IP,
    LabNet,
    cleanup_stale,
)
from telemetry.lab.openai_server import PROTOCOLS
from telemetry.lab.procs import REPO_ROOT, Freezer, Proc, _live_nets, _raise_terminated
from telemetry.lab.tls import HOSTNAME, self_signed
from telemetry.lab.truth import _window_rows, assign_windows, compare, iso, p99, read_pcap_summary

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
PROBE_PORT = 7007
LABELS_SCHEMA = "tailtap.lab.labels/1"



# the Python stacks a protocol's server and client run on (the `test` extra installs them)
_STACKS = {"openai-http1": ("uvicorn", "httpx"), "openai-h2c": ("hypercorn", "httpx", "h2")}
_TLS_STACKS = ("httpx", "h2")  # gRPC over TLS is called by httpx's HTTP/2


def missing_requirements(protocol: str = "grpc", tls: bool = False) -> list[str]:
    """What this machine lacks to run the lab (empty when it can)."""
    missing = []
    modules = set(_STACKS.get(protocol, ())) | (set(_TLS_STACKS) if tls and protocol == "grpc" else set())
    for module in sorted(modules):
        if importlib.util.find_spec(module) is None:
            missing.append(f"the Python package {module} (pip install -e '.[test]')")
    if os.geteuid() != 0:
        missing.append("root (euid 0)")
    for tool in ("ip", "tcpdump"):
        if shutil.which(tool) is None:
            missing.append(f"the {tool} binary")
    if shutil.which("ip"):
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        if r.returncode != 0:
            missing.append(f"ip netns ({r.stderr.strip()})")
    return missing


def run_scenario(
    name: str,
    out_dir: Path | str,
    duration: float | None = None,
    seed: int = 1,
    rate: float | None = None,
    keep_work: bool = False,
    client_capture: bool = False,
    log: Any = print,
    scenario: sc.Scenario | None = None,
    protocol: str = "grpc",
    realtime: bool = False,
    tls: bool = False,
) -> dict[str, Any]:
    """Run one scenario and return its labels (also written to out_dir/labels.json).
    ``protocol``: the LLM service's wire protocol, ``grpc`` (server.py) or the
    OpenAI-compatible streaming server over ``openai-http1`` / ``openai-h2c``
    (openai_server.py); the scenario is the same. ``realtime``: server, client and
    tcpdump under ``chrt -r 10`` too (the bridge always). ``tls``: the server over TLS
    (self-signed; ALPN h2 for gRPC and openai-h2c), the client writing the key log to
    out_dir/keys.txt (for gRPC that client is httpx: grpc_tls_client.py)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    missing = missing_requirements(protocol, tls)
    if missing:
        raise RuntimeError("the lab needs " + ", ".join(missing))
    scn = scenario or sc.get(name)
    duration = float(duration or scn.duration_s)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    for stale in ("capture.pcap", "capture_client.pcap", "labels.json", "client.parquet", "bridge_events.parquet", "keys.txt"):
        (out / stale).unlink(missing_ok=True)
    removed = cleanup_stale()
    if removed:
        log(f"removed stale lab namespaces: {', '.join(removed)}")

    old_handlers = {}
    if _in_main_thread():
        for s in (signal.SIGTERM, signal.SIGHUP):
            old_handlers[s] = signal.signal(s, _raise_terminated)
    net = LabNet(sysctls=scn.sysctls)
    procs: dict[str, Proc] = {}
    try:
        net.create()
        _live_nets.append(net)
        return _run(scn, name, duration, seed, rate, out, work, net, procs, client_capture, log, protocol, realtime, tls)
    finally:
        for key in ("client", "server", "tcpdump", "tcpdump_client", "bridge", "probe"):
            if key in procs:
                procs[key].stop(timeout=3.0)
        errors = net.destroy()
        if net in _live_nets:
            _live_nets.remove(net)
        for s, h in old_handlers.items():
            signal.signal(s, h)
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
        if errors:
            log(f"cleanup problems: {errors}")


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _py(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


def _run(
    scn: sc.Scenario,
    name: str,
    duration: float,
    seed: int,
    rate: float | None,
    out: Path,
    work: Path,
    net: LabNet,
    procs: dict[str, Proc],
    client_capture: bool,
    log: Any,
    protocol: str = "grpc",
    realtime: bool = False,
    tls: bool = False,
) -> dict[str, Any]:
    t_setup = time.time_ns()
    server_cfg = {**sc.SERVER_DEFAULTS, **scn.server}
    client_cfg = {**sc.CLIENT_DEFAULTS, **scn.client}
    if protocol != "grpc":
        server_cfg["protocol"] = client_cfg["protocol"] = protocol
    if rate:
        client_cfg["rate"] = rate
    if tls:
        cert, key = self_signed(work / "tls")
        server_cfg["tls"] = {"cert": str(cert), "key": str(key)}
        client_cfg["tls_keylog"] = str(out / "keys.txt")
    port = int(server_cfg["port"])
    lead_s = 3.0
    max_runtime = lead_s + duration + float(client_cfg["drain_s"]) + 30
    bridge_windows = [
        {
            "name": w.name,
            "direction": w.direction,
            "models": list(w.models),
            "start_s": round(w.start * duration, 3),
            "end_s": round(w.end * duration, 3),
        }  # fmt: skip
        for w in scn.windows
        if w.layer == "bridge"
    ]

    def layer_windows(layer: str) -> list[dict[str, Any]]:
        return [
            {
                "name": w.name,
                **w.params,
                "start_s": round(w.start * duration, 3),
                "end_s": round(w.end * duration, 3),
            }  # fmt: skip
            for w in scn.windows
            if w.layer == layer
        ]

    # 1. bridge, under real-time priority when chrt is there
    bcfg = {"if_client": "bc", "if_server": "bs", "windows": bridge_windows, "seed": seed,
            "max_runtime_s": max_runtime, "out": str(work / "bridge.json"),
            "late_threshold_ms": 2.0, "base": scn.path}  # fmt: skip
    (work / "bridge_cfg.json").write_text(json.dumps(bcfg))
    chrt = ["chrt", "-r", "10"] if shutil.which("chrt") else []
    procs["bridge"] = Proc("bridge", net.exec_argv("bridge", [*chrt, *_py("telemetry.lab.bridge", str(work / "bridge_cfg.json"))]), work / "bridge.log")  # fmt: skip
    procs["bridge"].wait_line("READY", 15)

    # 2. idle path check: UDP echo through the unimpaired bridge
    procs["probe"] = Proc("probe", net.exec_argv("server", _py("telemetry.lab.probe", "echo", str(PROBE_PORT), "20")), work / "probe.log", stdin=False)  # fmt: skip
    procs["probe"].wait_line("READY", 15)
    r = subprocess.run(
        net.exec_argv("client", _py("telemetry.lab.probe", "send", SERVER_IP, str(PROBE_PORT), "200", "5", str(work / "probe.json"))),
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"probe failed: {r.stderr[-800:]}")
    procs.pop("probe").stop(timeout=2)
    probe = json.loads((work / "probe.json").read_text())
    sent = dict(probe["sent"])
    rtts = sorted((t - sent[s]) / NS_PER_MS for s, t in probe["recv"])
    if len(rtts) < 0.9 * len(sent):
        raise RuntimeError(f"idle path loses probes: {len(rtts)}/{len(sent)} answered")
    idle_rtt = {"n": len(rtts), "min": rtts[0], "p50": rtts[len(rtts) // 2], "p99": p99(rtts)}

    # 3. capture at the server's veth (the inference boundary)
    tcpdump = ["timeout", "-k", "3", str(int(max_runtime)), "tcpdump", "-i", SERVER_IF, "-w",
               str(out / "capture.pcap"), "--time-stamp-precision=nano", "-s", "0", "-B", "8192",
               "-n", "-Z", "root"]  # fmt: skip
    rt = chrt if realtime else []  # the timing-sensitive processes under real-time priority too
    procs["tcpdump"] = Proc("tcpdump", net.exec_argv("server", [*rt, *tcpdump]), work / "tcpdump.log", stdin=False)  # fmt: skip
    if client_capture:
        tc = [*tcpdump[:6], CLIENT_IF, "-w", str(out / "capture_client.pcap"), *tcpdump[9:]]
        procs["tcpdump_client"] = Proc("tcpdump_client", net.exec_argv("client", [*rt, *tc]), work / "tcpdump_client.log", stdin=False)  # fmt: skip
        procs["tcpdump_client"].wait_log("listening on", 15)
    procs["tcpdump"].wait_log("listening on", 15)

    # 4. server
    scfg = {**server_cfg, "seed": seed, "windows": layer_windows("server"), "log": str(work / "server.json"),
            "max_runtime_s": max_runtime, "bulk_port": sc.BULK_PORT if scn.bulk or scn.bulk_windows else 0}  # fmt: skip
    (work / "server_cfg.json").write_text(json.dumps(scfg))
    procs["server"] = Proc("server", net.exec_argv("server", [*rt, *_py("telemetry.lab.serve", str(work / "server_cfg.json"))]), work / "server.log")  # fmt: skip
    procs["server"].wait_line("READY", 20)

    # 5. T0: windows become absolute; the client connects during the lead time
    t0 = time.time_ns() + int(lead_s * NS_PER_S)
    for key in ("bridge", "server"):
        procs[key].send(f"T0 {t0}")
    windows = _window_rows(scn, duration, t0)
    bulk = None
    if scn.bulk:
        bulk = {"port": sc.BULK_PORT, "windows": [w for w in bridge_windows if any(
            m["kind"] == "queue" for m in w["models"])]}  # fmt: skip
    if scn.bulk_windows:  # cross traffic on its own schedule (fractions of the run)
        extra = [{"start_s": round(a * duration, 3), "end_s": round(b * duration, 3)} for a, b in scn.bulk_windows]
        bulk = {"port": sc.BULK_PORT, "windows": sorted((bulk or {"windows": []})["windows"] + extra,
                                                        key=lambda w: w["start_s"])}  # fmt: skip
    ccfg = {**client_cfg, "seed": seed, "server_ip": SERVER_IP, "server_port": port,
            "start_ns": t0, "end_ns": t0 + int(duration * NS_PER_S), "max_runtime_s": max_runtime, "windows": layer_windows("client"),
            "bulk": bulk, "out": str(work / "client.parquet"), "meta_out": str(work / "client_meta.json")}  # fmt: skip
    (work / "client_cfg.json").write_text(json.dumps(ccfg))
    log(f"[{name}] T0 {iso(t0)}; load {duration:.0f} s at {client_cfg['rate']}/s; windows: "
        + (", ".join(f"{w['name']} {w['start_offset_s']:.1f}-{w['end_offset_s']:.1f}s" for w in windows) or "none"))  # fmt: skip
    procs["client"] = Proc("client", net.exec_argv("client", [*rt, *_py("telemetry.lab.load", str(work / "client_cfg.json"))]), work / "client.log", stdin=False)  # fmt: skip
    procs["client"].wait_line("READY", lead_s + 10)
    # slow-reader windows: the client or the server frozen in slices (by pid)
    freezers = {
        role: Freezer(
            procs[role].pid,
            [w for w in windows if w["layer"] == role and w["params"].get("freeze_ms")],
        )  # fmt: skip
        for role in ("client", "server")
    }
    for f in freezers.values():
        f.start()
    client_timeout = lead_s + duration + float(client_cfg["drain_s"]) + 20
    try:
        procs["client"].p.wait(client_timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"client did not finish in {client_timeout:.0f} s") from None
    finally:
        for f in freezers.values():
            f.stop()
    if procs["client"].p.returncode != 0:
        raise RuntimeError(f"client failed: {procs['client'].tail()}")
    procs.pop("client").stop()

    # 6. stop: server writes its log, tcpdump flushes, bridge writes its report
    procs["server"].send("STOP")
    procs.pop("server").stop(timeout=8)
    # libpcap hands packets to tcpdump in blocks retired after its 1 s timeout: stopped
    # sooner, tcpdump loses the last block (the end of the last requests)
    time.sleep(1.2)
    for key in ("tcpdump", "tcpdump_client"):
        if key in procs:
            procs.pop(key).stop(timeout=5, sig=signal.SIGINT)
    procs.pop("bridge").stop(timeout=8)
    t_end = time.time_ns()

    return _finish(scn, name, duration, seed, out, work, net, t_setup, t0, t_end, windows,
                   idle_rtt, server_cfg, client_cfg, ccfg,
                   {r: f.frozen for r, f in freezers.items()}, log)  # fmt: skip


def _tcpdump_stats(text: str) -> dict[str, int]:
    import re

    out = {}
    for key, pat in (("captured", r"(\d+) packets? captured"),
                     ("received_by_filter", r"(\d+) packets? received by filter"),
                     ("kernel_drops", r"(\d+) packets? dropped by kernel")):  # fmt: skip
        m = re.search(pat, text)
        if m:
            out[key] = int(m.group(1))
    return out


def _finish(
    scn: sc.Scenario,
    name: str,
    duration: float,
    seed: int,
    out: Path,
    work: Path,
    net: LabNet,
    t_setup: int,
    t0: int,
    t_end: int,
    windows: list[dict[str, Any]],
    idle_rtt: dict[str, Any],
    server_cfg: dict[str, Any],
    client_cfg: dict[str, Any],
    ccfg: dict[str, Any],
    frozen_by_role: dict[str, list[tuple[int, int]]],
    log: Any,
) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from telemetry.lab.bridge import EVENT_COLUMNS

    def report(name: str, logname: str) -> dict[str, Any]:
        try:
            return json.loads((work / name).read_text())
        except (OSError, ValueError) as e:
            tail = (work / logname).read_text(errors="replace")[-1500:]
            raise RuntimeError(f"no usable {name} ({e}); {logname}: {tail}") from None

    frozen = frozen_by_role["client"]
    bridge = report("bridge.json", "bridge.log")
    server = report("server.json", "server.log")
    meta = report("client_meta.json", "client.log")

    # client truth + in_window
    table = pq.read_table(work / "client.parquet")
    table = assign_windows(table, windows)
    pq.write_table(table, out / "client.parquet", compression="zstd")

    # bridge events
    ev = bridge["events"]
    cols = {c: [r[i] for r in ev] for i, c in enumerate(EVENT_COLUMNS)}
    types = {
        "direction": pa.string(),
        "window": pa.string(),
        "action": pa.string(),
        "by": pa.string(),
    }
    arrays = {c: pa.array(v, types.get(c, pa.int64())) for c, v in cols.items()}
    pq.write_table(pa.table(arrays), out / "bridge_events.parquet", compression="zstd")

    # what each window did, as observed
    rpcs = server["rpcs"]
    rows = table.to_pylist()
    for w in windows:
        obs: dict[str, Any] = {}
        params = w.get("params", {})
        if w["layer"] == "bridge":
            for key, n in bridge["counts"].items():
                wname, direction, action = key.split(":")
                if wname == w["name"]:
                    obs.setdefault(direction, {})[action] = n
        elif params.get("kind") == "stall":
            obs["rpcs_stalled"] = sum(1 for r in rpcs if r.get("stall") == w["name"])
        elif params.get("kind") == "resource_exhausted":
            obs["rpcs_rejected"] = sum(1 for r in rpcs if r.get("window") == w["name"])
        if params.get("kind") == "slow_reader":
            obs["calls_read_slowly"] = sum(1 for r in rows if r["slow_reader"])
        if params.get("freeze_ms"):
            mine = [
                (a, b) for a, b in frozen_by_role[w["layer"]] if w["start_ns"] <= a < w["end_ns"]
            ]
            obs["freezes"] = len(mine)
            obs["frozen_ms"] = sum(b - a for a, b in mine) / NS_PER_MS
        obs["calls_in_window"] = sum(1 for r in rows if r["in_window"] == w["name"])
        w["observed"] = obs

    tcpdump_stats = _tcpdump_stats((work / "tcpdump.log").read_text(errors="replace"))
    pcap = read_pcap_summary(out / "capture.pcap")
    disturbed = (
        [{"source": "bridge", **d} for d in bridge["disturbed"]]
        + [
            {"source": "server", **d}
            for d in server["disturbed"]
            # timers that fired late because the server was frozen on purpose
            if not any(
                a - 50 * NS_PER_MS <= d["start_ns"] <= b + 50 * NS_PER_MS
                for a, b in frozen_by_role["server"]
            )
        ]
        + [
            {
                "source": "client_dispatch",
                "start_ns": t,
                "end_ns": t + late,
                "events": 1,
                "max_late_ms": late / NS_PER_MS,
            }
            for t, late in meta["dispatch_late"]
            # a dispatch held up by an intended freeze is not a disturbance
            if not any(a - NS_PER_S <= t <= b for a, b in frozen)
        ]
    )
    for d in disturbed:
        d["start_iso"], d["end_iso"] = iso(d["start_ns"]), iso(d["end_ns"])
    problems = []
    if tcpdump_stats.get("kernel_drops"):
        problems.append(f"tcpdump kernel drops: {tcpdump_stats['kernel_drops']}")
    if any(bridge["stats"]["socket_drops"]):
        problems.append(f"bridge socket drops: {bridge['stats']['socket_drops']}")
    if pcap["frames_over_mtu"]:
        problems.append(f"{pcap['frames_over_mtu']} captured frames larger than the MTU")
    if tcpdump_stats.get("received_by_filter", 0) > tcpdump_stats.get("captured", 0):
        problems.append(f"tcpdump wrote {tcpdump_stats['captured']} of the {tcpdump_stats['received_by_filter']} packets its filter took")
    if any(c["reconnected"] for c in meta["connections"]):
        problems.append("a client channel reconnected")

    # the client's derived stream ids and ports against the capture (tshark)
    from telemetry.lab.verify import check_client_against_capture

    protocol = server_cfg.get("protocol", "grpc")
    keylog = ccfg.get("tls_keylog")
    client_check = check_client_against_capture(rows, out / "capture.pcap", int(server_cfg["port"]), protocol, keylog)
    if client_check.get("checked") and not client_check["ok"]:
        problems.append(f"client calls do not match the capture's streams: {client_check}")
    cmp_rows = compare(table, windows)
    idle = bridge["idle_delay_ms"]
    labels = {
        "schema": LABELS_SCHEMA,
        "scenario": name,
        "description": scn.description,
        "seed": seed,
        "duration_s": duration,
        "command": f"tailtap lab run {name} --out DIR --duration {duration:g} --seed {seed}"
        + (f" --protocol {protocol}" if protocol != "grpc" else "") + (" --tls" if keylog else ""),
        "protocol": protocol,
        # HTTPS: the key log the client wrote (in the run's folder), for --keylog
        "tls": {"keylog": Path(keylog).name, "sni": HOSTNAME} if keylog else None,
        "t0_ns": t0,
        "t0_iso": iso(t0),
        "load_end_ns": ccfg["end_ns"],
        "load_end_iso": iso(ccfg["end_ns"]),
        "setup_ns": t_setup,
        "run_end_ns": t_end,
        "endpoints": {
            "client": {
                "addr": CLIENT_IP,
                "ports": [c["local_port"] for c in meta["connections"]],
                "namespace": net.client,
                "interface": CLIENT_IF,
            },  # fmt: skip
            "server": {
                "addr": SERVER_IP,
                "port": int(server_cfg["port"]),
                "namespace": net.server,
                "interface": SERVER_IF,
                **({"service": "tailtap.lab.LLM", "methods": ["/tailtap.lab.LLM/Generate", "/tailtap.lab.LLM/Embed"]}
                   if protocol == "grpc" else
                   {"service": f"OpenAI-compatible ({protocol})", "methods": ["/v1/chat/completions", "/v1/embeddings"]}),
            },  # fmt: skip
            "bulk": {"port": sc.BULK_PORT, "direction": "to_client",
                     "windows": (ccfg["bulk"] or {}).get("windows")} if scn.bulk or scn.bulk_windows else None,
            "connections": meta["connections"],
        },
        "capture": {
            "file": "capture.pcap",
            "point": "server",  # capture side: the server's veth, the inference boundary
            "namespace": net.server,
            "interface": SERVER_IF,
            "snaplen": 262144,
            "filter": "",
            "timestamp_precision": "ns",
            **pcap,
            **{f"tcpdump_{k}": v for k, v in tcpdump_stats.items()},
        },
        "client_capture": {"file": "capture_client.pcap", "point": "client", "interface": CLIENT_IF,
                           **read_pcap_summary(out / "capture_client.pcap")}
        if (out / "capture_client.pcap").exists() else None,
        "path": {
            "models": scn.path,
            "mtu": MTU,
            "offloads": net.offloads,
            "congestion_control": net.congestion_control,
            "sysctls": scn.sysctls,
            "idle_udp_rtt_ms": idle_rtt,
            "link_stats": net.link_stats(),
        },
        "bridge": {
            "idle_delay_ms": idle,  # added by the bridge to unimpaired frames (rx -> tx)
            "late_threshold_ms": bridge["late_threshold_ms"],
            "stats": bridge["stats"],
            "priority": "SCHED_RR 10" if shutil.which("chrt") else "normal",
        },
        "load": {k: v for k, v in client_cfg.items()},
        "server": {k: v for k, v in server_cfg.items()},
        "windows": windows,
        "disturbed": disturbed,
        "problems": problems,
        "client_summary": cmp_rows,
        "client_check": client_check,
        "host": {
            "kernel": os.uname().release,
            "cpus": os.cpu_count(),
            "loadavg": os.getloadavg(),
        },  # fmt: skip
    }
    (out / "labels.json").write_text(json.dumps(labels, indent=1, default=str) + "\n")
    _print_summary(name, labels, log)
    return labels


def _print_summary(name: str, labels: dict[str, Any], log: Any) -> None:
    idle = labels["bridge"]["idle_delay_ms"]
    log(f"[{name}] bridge idle delay p50 {idle.get('p50', float('nan')):.3f} ms, "
        f"p99 {idle.get('p99', float('nan')):.3f} ms (n={idle.get('n')}); "
        f"capture {labels['capture']['packets']} packets, max frame {labels['capture']['max_frame_len']} B")  # fmt: skip

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:8.1f}"

    log(f"{'':24} {'reqs':>5} {'errs':>5} {'lat p99':>8} {'ttft p99':>8} {'gap p99':>8}  (ms)")
    for r in labels["client_summary"]:
        label = "outside windows" if r["window"] is None else f"in {r['window']}"
        log(f"{label:24} {r['requests']:5d} {r['errors']:5d} {f(r['latency_p99_ms'])} "
            f"{f(r['ttft_p99_ms'])} {f(r['max_gap_p99_ms'])}")  # fmt: skip
    for p in labels["problems"]:
        log(f"[{name}] warning: {p}")
    if labels["disturbed"]:
        worst = max(d["max_late_ms"] for d in labels["disturbed"])
        log(f"[{name}] note: {len(labels['disturbed'])} disturbed period(s) recorded "
            f"(worst lateness {worst:.1f} ms), see labels.json 'disturbed'")  # fmt: skip
