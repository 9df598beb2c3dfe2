"""`tailtap daemon`: the exposition format, retention, the spool worker, CLI errors, and the
real thing: the daemon capturing gRPC traffic on loopback with tcpdump, rotating files,
ingesting them, surviving a killed capture, being scraped by a real Prometheus, and
stopping cleanly on SIGTERM.

Every process a test starts is killed by pid in a finally block.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from concurrent import futures
from pathlib import Path

import pytest
from capture_builders import ether, ipv4, pcap, tcp
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from typer.testing import CliRunner

from telemetry.daemon import retention
from telemetry.daemon.cli import daemon_app
from telemetry.daemon.metrics import DaemonMetrics
from telemetry.daemon.worker import Spool, Worker, WorkerSettings, has_packets, run_of
from telemetry.dashboards.grafana import LIVE, render_promql
from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

REPO = Path(__file__).resolve().parent.parent
TCPDUMP = shutil.which("tcpdump")
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
CAN_CAPTURE = TCPDUMP is not None and os.geteuid() == 0
needs_capture = pytest.mark.skipif(not CAN_CAPTURE, reason="needs root and tcpdump to capture on lo")
METHOD = "/tailtap.test.LLM/Generate"
TOKENS = 6


# -- helpers -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def _samples(text: str, name: str) -> list[tuple[str, float]]:
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            out.append((m.group(2) or "", float(m.group(3))))
    return out


def _total(text: str, name: str) -> float:
    return sum(v for _, v in _samples(text, name))


def _wait_for(what: str, timeout: float, probe):
    """Poll probe() until it returns something truthy; fail with what was last seen."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except OSError as exc:  # endpoint not up yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; last: {str(last)[:500]}")


def _children(pid: int) -> dict[int, str]:
    """pid -> command name of the processes whose parent is pid."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        if ppid == pid:
            out[int(stat.parent.name)] = comm
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


needs_prometheus = pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None,
                                      reason="prometheus and promtool (Debian's prometheus package) are needed: make test installs it")


def _promtool_check(text: str) -> None:
    assert PROMTOOL is not None, "promtool missing (the test is marked needs_prometheus)"
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, f"promtool check metrics:\n{proc.stdout}{proc.stderr}"


# -- exposition format ---------------------------------------------------------------------


def _openmetrics(metrics: DaemonMetrics) -> str:
    encoder, content_type = choose_encoder("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    return encoder(metrics.registry).decode()


def _observed(capture: Path, tmp_path: Path):
    """``capture`` ingested into a fresh store and folded into fresh daemon metrics: the
    metrics, and a connection to the store to check them against."""
    store = Store(tmp_path / "store")
    result = ingest_file(capture, store)
    metrics = DaemonMetrics()
    metrics.observe_capture(store, result.capture_id)
    return metrics, connect(store)


def test_capture_drops_are_no_lost_segments_in_the_counters(tmp_path):
    """samples/baseline (no impairment) with 1 packet in 200 taken out of the file, as a
    mirror port drops them: tailtap_tcp_events counts the capture's drops as capture_loss
    and no lost segment, as the dashboards' conn_timeline does (queries/network_events);
    tcp_events itself holds the holes the capture showed."""
    import random

    from fuzz import damaged

    order, header, packets = damaged.read_pcap((REPO / "samples" / "baseline" / "capture.pcap").read_bytes())
    capture = tmp_path / "dropped.pcap"
    capture.write_bytes(damaged.write_pcap(order, header, damaged.drop_one_in(200)(packets, random.Random(3))))
    metrics, con = _observed(capture, tmp_path)
    holes, acked_unseen = con.execute(
        "SELECT count(*) FILTER (WHERE kind = 'lost_segment'), count(*) FILTER (WHERE kind = 'capture_loss') FROM tcp_events"
    ).fetchone()
    assert holes > 0 and acked_unseen > 0

    def counted(kind: str) -> float:
        return sum(metrics.value("tailtap_tcp_events_total", kind=kind, direction=d) for d in ("to_client", "to_server"))

    assert counted("lost_segment") == 0
    assert counted("capture_loss") == acked_unseen


@needs_prometheus
def test_capture_metrics_carry_exemplars_of_stored_requests(tmp_path):
    """A stored lab capture folded into the histograms: every request observed once, each
    histogram bucket's exemplar a request the store holds; both expositions lint."""
    metrics, con = _observed(REPO / "samples" / "loss_burst" / "capture.pcap", tmp_path)
    n, keys = con.execute(
        "SELECT count(*) FILTER (WHERE latency_eff_ms IS NOT NULL), list(conn_id || ':' || stream_id) FROM request_metrics"
    ).fetchone()
    assert n > 100
    observed = sum(
        metrics.value("tailtap_request_latency_seconds_count", method=m, model=model)
        for (m, model) in {(s.labels["method"], s.labels["model"]) for f in metrics.registry.collect() for s in f.samples
                           if s.name == "tailtap_request_latency_seconds_count"}
    )
    assert observed == n
    assert metrics.value("tailtap_tcp_events_total", kind="fast_retransmission", direction="to_client") == 39

    text = _openmetrics(metrics)
    exemplars = re.findall(r'^tailtap_request_(?:latency|ttft|max_gap)_seconds_bucket\{[^}]*\} [0-9.]+ # \{request="([^"]+)"\} ([0-9.e+-]+)', text, re.M)
    assert len(exemplars) >= 10, text[:2000]
    assert {key for key, _ in exemplars} <= set(keys)
    # an exemplar's value lies in its bucket (the line: series, count, # {labels} value time)
    for line in text.splitlines():
        if " # {request=" in line:
            le = float(re.search(r'le="([^"]+)"', line).group(1))
            assert float(line.split("} ")[-1].split()[0]) <= le, line
    # the OpenMetrics text parses (the client library's own parser) and ends with # EOF
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "tailtap_request_ttft_seconds" in families and text.endswith("# EOF\n")
    classic = generate_latest(metrics.registry).decode()
    assert " # {" not in classic  # exemplars are OpenMetrics only
    _promtool_check(classic)


@needs_prometheus
def test_daemon_metrics_on_an_empty_store_render_and_lint(tmp_path):
    m = DaemonMetrics(max_methods=2)
    m.refresh_recent(Store(tmp_path / "store"), window_s=300, bucket_s=10)  # nothing stored yet
    assert m.value("tailtap_metrics_refresh_errors_total") == 0
    assert [m.method_label(x) for x in ("/a", "/b", "/c", "/a")] == ["/a", "/b", "(other)", "/a"]
    text = generate_latest(m.registry).decode()
    assert "tailtap_recent_slow_requests 0" in text
    _promtool_check(text)


# -- retention -----------------------------------------------------------------------------


def test_retention_deletes_only_old_hour_partitions(tmp_path):
    root = tmp_path / "store"
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    layout = {
        "requests/date=2023-11-14/hour=18/a-00001.parquet": True,  # ended 18:59, > 3 h ago
        "requests/date=2023-11-14/hour=19/a-00002.parquet": False,  # ended 20:00 > cutoff 19:13
        "requests/date=2023-11-14/hour=22/b-00001.parquet": False,
        "messages/date=2023-11-13/hour=23/a-00003.parquet": True,
        "captures/date=1970-01-01/hour=00/x-00001.parquet": True,  # rows without any time
        "requests/date=2023-11-14/hour=99/odd.parquet": False,  # not a partition name
        "requests/date=2023-11-14/notes/keep.txt": False,
        "requests/README": False,
        "not_a_table/date=2000-01-01/hour=00/keep.parquet": False,
        ".staging/c/requests/date=2000-01-01/hour=00/c-00001.parquet": False,
    }
    for rel in layout:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
    result = retention.prune_store(root, retention_hours=3, now=now)
    assert not result.errors
    for rel, deleted in layout.items():
        assert (root / rel).exists() != deleted, rel
    assert sorted(p.relative_to(root).as_posix() for p in result.removed) == [
        "captures/date=1970-01-01/hour=00",
        "messages/date=2023-11-13/hour=23",
        "requests/date=2023-11-14/hour=18",
    ]
    assert not (root / "messages/date=2023-11-13").exists()  # emptied date folders go too
    assert not (root / "captures/date=1970-01-01").exists()
    assert retention.prune_store(root, retention_hours=3, now=now).removed == []
    assert retention.partition_start("date=2023-11-14", "hour=19") == 1_699_988_400.0
    assert retention.partition_start("date=2023-02-30", "hour=01") is None


def test_prune_kept_files_by_age_and_count(tmp_path):
    now = time.time()
    for i, age_h in enumerate([30, 5, 4, 3, 2]):
        p = tmp_path / f"f{i}.pcap"
        p.write_bytes(b"x")
        os.utime(p, (now - age_h * 3600, now - age_h * 3600))
    removed = retention.prune_files(tmp_path, retention_hours=24, max_files=3, now=now)
    assert sorted(p.name for p in removed) == ["f0.pcap", "f1.pcap"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f2.pcap", "f3.pcap", "f4.pcap"]


# -- spool and worker ----------------------------------------------------------------------


def _tiny_pcap(t0_ns: int, port: int = 40000) -> bytes:
    syn = ether(ipv4("10.0.0.1", "10.0.0.2", tcp(port, 50051, seq=1, flags=0x02)))
    synack = ether(ipv4("10.0.0.2", "10.0.0.1", tcp(50051, port, seq=9, ack=2, flags=0x12)))
    data = ether(ipv4("10.0.0.1", "10.0.0.2", tcp(port, 50051, seq=2, ack=10, payload=b"hello")))
    return pcap([(t0_ns, syn), (t0_ns + 100_000, synack), (t0_ns + 200_000, data)], nano=True)


def test_has_packets_tells_header_only_files():
    import capture_builders as cb

    assert not has_packets_bytes(pcap([]))
    assert has_packets_bytes(_tiny_pcap(10**18))
    assert not has_packets_bytes(b"")
    assert not has_packets_bytes(cb.shb() + cb.idb())
    assert has_packets_bytes(cb.shb() + cb.idb() + cb.epb(0, 1, b"\x00" * 60))
    assert has_packets_bytes(b"garbage, let ingest say what is wrong")


def has_packets_bytes(data: bytes) -> bool:
    import tempfile

    with tempfile.NamedTemporaryFile() as fh:
        fh.write(data)
        fh.flush()
        return has_packets(Path(fh.name))


def test_worker_ingests_fails_and_bounds_the_spool(tmp_path):
    spool = Spool(tmp_path / "spool")
    spool.prepare()
    store = Store(tmp_path / "store")
    metrics = DaemonMetrics()
    worker = Worker(
        spool, store, metrics, WorkerSettings(IngestOptions(), max_files=2),
        open_files=lambda: {spool.root / "tailtap-1-0009.pcap"}, capturing=lambda: True,
    )
    good = spool.root / "tailtap-1-0001.pcap"
    good.write_bytes(_tiny_pcap(time.time_ns()))
    empty = spool.root / "tailtap-1-0002.pcap"
    empty.write_bytes(pcap([]))
    bad = spool.root / "tailtap-1-0010.pcap"
    bad.write_bytes(b"this is not a capture file at all" * 4)
    writing = spool.root / "tailtap-1-0009.pcap"
    writing.write_bytes(b"")
    (spool.root / "unrelated.txt").write_text("not ours")
    # natural order (0009 before 0010), the open file excluded, foreign files ignored
    assert [p.name for p in spool.completed({writing}, capturing=True)] == [good.name, empty.name, bad.name]
    # without /proc the newest file is the one being written
    assert [p.name for p in spool.completed(None, capturing=True)] == [good.name, empty.name, writing.name]
    assert len(spool.completed(set(), capturing=False)) == 4
    for path in (good, empty, bad):
        worker.ingest(path)
    assert not good.exists() and not empty.exists() and not bad.exists()
    assert metrics.value("tailtap_captures_ingested_total") == 1 and metrics.value("tailtap_ingested_packets_total") == 3
    assert metrics.value("tailtap_spool_empty_files_total") == 1
    assert metrics.value("tailtap_ingest_errors_total") == 1
    assert (spool.failed_dir / bad.name).exists()
    assert str(bad) in (spool.failed_dir / f"{bad.name}.error").read_text()
    assert spool.failed_count() == 1
    assert connect(store).execute("SELECT count(*) FROM connections").fetchone()[0] == 1
    # ring-buffer bound: more than max_files waiting -> the oldest go, counted
    writing.unlink()
    waiting = []
    for i in range(4):
        p = spool.root / f"tailtap-2-{i:04d}.pcap"
        p.write_bytes(pcap([]))
        waiting.append(p)
    kept = worker._bound(spool.completed(set(), capturing=False))
    assert kept == waiting[2:]
    assert metrics.value("tailtap_spool_dropped_files_total") == 2
    assert not waiting[0].exists() and waiting[3].exists()


def test_files_of_one_run_are_one_chain_until_a_new_run_or_a_gap(tmp_path):
    assert run_of(Path("tailtap-1795335105168-20261122T081151.pcap")) == ("1795335105168", None)
    assert run_of(Path("tailtap-1795335105168-20261122T081151.pcap3")) == ("1795335105168", None)
    assert run_of(Path("tailtap-17953_00004_20261122081151.pcapng")) == ("17953", 4)
    assert run_of(Path("other.pcap")) is None

    spool = Spool(tmp_path / "spool")
    spool.prepare()
    store = Store(tmp_path / "store")
    worker = Worker(spool, store, DaemonMetrics(), WorkerSettings(IngestOptions()), lambda: set(), lambda: True)
    t0 = time.time_ns()

    def feed(name: str, i: int) -> bool:
        path = spool.root / name
        path.write_bytes(_tiny_pcap(t0 + i * 10**9, 40000 + i))  # a new connection each time, left open
        worker.ingest(path)
        return worker._chain.open

    connections = "SELECT count(*) FROM connections"
    assert feed("tailtap-7_00001_1.pcapng", 0)
    assert feed("tailtap-7_00002_1.pcapng", 1)
    assert connect(store).execute(connections).fetchone()[0] == 0  # both still open in the chain
    assert feed("tailtap-7_00004_1.pcapng", 2)  # 3 is missing: the chain so far is closed
    assert connect(store).execute(connections).fetchone()[0] == 2
    assert feed("tailtap-8_00001_1.pcapng", 3)  # the capture restarted: a new run
    assert connect(store).execute(connections).fetchone()[0] == 3
    worker.close_chain()  # what the worker does when it exits
    assert not worker._chain.open
    assert connect(store).execute(connections).fetchone()[0] == 4
    assert worker.metrics.value("tailtap_captures_ingested_total") == 4


def test_spool_is_locked_by_one_daemon(tmp_path):
    from telemetry.daemon.worker import SpoolBusy

    first = Spool(tmp_path / "spool")
    first.prepare()
    try:
        with pytest.raises(SpoolBusy, match=f"pid {os.getpid()}"):
            Spool(tmp_path / "spool").prepare()
    finally:
        first.release()
    second = Spool(tmp_path / "spool")
    second.prepare()
    second.release()


def test_capture_commands_and_tool_counters(tmp_path):
    from telemetry.daemon.capture import CaptureConfig, Capturer

    config = CaptureConfig("eth1", tmp_path, rotate_seconds=30, rotate_mb=100, bpf="tcp port 50051", snaplen=9000, buffer_mb=64)
    cmd = Capturer(config, "/usr/sbin/tcpdump").command()
    assert cmd[:3] == ["/usr/sbin/tcpdump", "-i", "eth1"] and cmd[-1] == "tcp port 50051"
    assert ["-G", "30"] == cmd[cmd.index("-G") : cmd.index("-G") + 2] and "-C" in cmd and "-W" not in cmd  # -W would exit
    assert cmd[cmd.index("-B") + 1] == "65536"  # KiB
    assert re.fullmatch(re.escape(str(tmp_path)) + r"/tailtap-\d{13}-%Y%m%dT%H%M%S\.pcap", cmd[cmd.index("-w") + 1])
    dump = Capturer(config, "/usr/bin/dumpcap").command()
    assert ["-b", "duration:30", "-b", "filesize:100000"] == dump[4:8] and dump[-2:] == ["-f", "tcp port 50051"]

    cap = Capturer(config, "/usr/sbin/tcpdump")
    # SIGUSR1 line, then the exit lines: cumulative per process, handed out as deltas
    cap._parse_stats("tcpdump: 10 packets captured, 12 packets received by filter, 2 packets dropped by kernel")
    assert cap.take_stats() == (12, 2)
    cap._parse_stats("15 packets received by filter")
    cap._parse_stats("3 packets dropped by kernel")
    cap._parse_stats("1 packet dropped by interface")
    assert cap.take_stats() == (3, 1) and cap.take_stats() == (0, 0)
    cap._seen = [0, 0]  # what start() does for a new process
    cap._parse_stats("Packets received/dropped on interface 'Loopback: lo': 7/1 (pcap:1/dumpcap:0/flushed:0/ps_ifdrop:0) (12.5%)")
    assert cap.take_stats() == (7, 1)


# -- CLI errors ----------------------------------------------------------------------------


def test_missing_interface_is_one_clear_line(tmp_path):
    result = CliRunner().invoke(daemon_app, ["run", "-i", "nope-tailtap0", "--store", str(tmp_path / "s"), "--spool", str(tmp_path / "sp")])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "interface 'nope-tailtap0' not found (available:" in errors[0], result.output
    assert "Traceback" not in result.output


def test_missing_tcpdump_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no tcpdump here
    result = CliRunner().invoke(daemon_app, ["run", "-i", "lo", "--store", str(tmp_path / "s"), "--spool", str(tmp_path / "sp")])
    assert result.exit_code == 1, result.output
    assert "tcpdump not found on PATH" in result.output and "Traceback" not in result.output


@needs_capture
def test_bad_filter_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(daemon_app, ["run", "-i", "lo", "-f", "tcp prot 80", "--store", str(tmp_path / "s"), "--spool", str(tmp_path / "sp")])
    assert result.exit_code == 2, result.output
    assert "bad capture filter 'tcp prot 80'" in result.output


# -- the real thing ------------------------------------------------------------------------


grpc = pytest.importorskip("grpc")


FAIL_METHOD = "/tailtap.test.LLM/Overloaded"


def _overloaded(request: bytes, context):
    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "overloaded")


def _generate(request: bytes, context):
    n = int(request.decode())
    time.sleep(0.005)
    for i in range(n):
        yield f"token-{i:03d}".encode()
        time.sleep(0.003)


class _GrpcLoad:
    """A server-streaming gRPC service and a client thread calling it on fresh connections
    (a local subchannel pool per channel: every call has its own HPACK context), or, with
    ``one_channel``, every call on one long-lived connection."""

    def __init__(self, one_channel: bool = False, fail_every: int = 0) -> None:
        self.one_channel = one_channel
        self.fail_every = fail_every  # every n-th call goes to a method that fails (0: none)
        self.failed = 0
        self.port = _free_port()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler("tailtap.test.LLM", {
            "Generate": grpc.unary_stream_rpc_method_handler(_generate),
            "Overloaded": grpc.unary_unary_rpc_method_handler(_overloaded),
        })
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.calls = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> _GrpcLoad:
        self.server.start()
        self._thread.start()
        return self

    def _channel(self):
        return grpc.insecure_channel(f"127.0.0.1:{self.port}", options=[("grpc.use_local_subchannel_pool", 1)])

    def _run(self) -> None:
        shared = self._channel() if self.one_channel else None
        try:
            while not self._stop.is_set():
                if self.fail_every and (self.calls + self.failed) % self.fail_every == self.fail_every - 1:
                    self._fail(shared)
                    continue
                try:
                    if shared is not None:
                        got = list(shared.unary_stream(METHOD)(str(TOKENS).encode(), timeout=5))
                    else:
                        with self._channel() as ch:
                            got = list(ch.unary_stream(METHOD)(str(TOKENS).encode(), timeout=5))
                    assert len(got) == TOKENS
                    self.calls += 1
                except Exception as exc:  # reported by the test, not raised in a thread
                    self.errors.append(repr(exc))
                self._stop.wait(0.03)
        finally:
            if shared is not None:
                shared.close()

    def _fail(self, shared) -> None:
        try:
            if shared is not None:
                shared.unary_unary(FAIL_METHOD)(b"", timeout=5)
            else:
                with self._channel() as ch:
                    ch.unary_unary(FAIL_METHOD)(b"", timeout=5)
            self.errors.append("the failing method answered")
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                self.errors.append(repr(exc))
        self.failed += 1
        self._stop.wait(0.03)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(10)
        self.server.stop(grace=None)


def _daemon(tmp_path: Path, port: int, metrics_port: int, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "telemetry.daemon", "run", "-i", "lo", "-f", f"tcp port {port}",
        "--store", str(tmp_path / "store"), "--spool", str(tmp_path / "spool"), "--rotate-seconds", "1",
        "--metrics-addr", f"127.0.0.1:{metrics_port}", "--metrics-refresh-seconds", "1",
        "--metrics-window-seconds", "600", "--window-seconds", "2", *extra,
    ]
    log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115 (kept open for the child)
    return subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def _prometheus(tmp_path: Path, target: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: tailtap\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", "--enable-feature=exemplar-storage"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"),  # noqa: SIM115
    )
    return proc, port


def _log(tmp_path: Path) -> str:
    path = tmp_path / "daemon.log"
    return path.read_text(errors="replace") if path.exists() else ""


@needs_capture
@needs_prometheus
def test_daemon_captures_ingests_serves_metrics_and_stops_cleanly(tmp_path):
    load = _GrpcLoad(fail_every=4).start()
    metrics_port = _free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    # a real Prometheus, started early: it takes a moment to come up
    prom, prom_port = _prometheus(tmp_path, f"127.0.0.1:{metrics_port}")
    daemon = _daemon(tmp_path, load.port, metrics_port)
    seen_children: set[int] = set()
    try:
        _wait_for("the capture to be up", 20, lambda: _total(_get(metrics_url), "tailtap_capture_up") == 1)
        seen_children |= set(_children(daemon.pid))

        # files rotate (1 s) and get ingested while traffic flows
        def ingested() -> str | None:
            t = _get(metrics_url)
            ok = _total(t, "tailtap_captures_ingested_total") >= 2 and _total(t, "tailtap_requests_total") > 0
            return t if ok else None

        text = _wait_for("two ingested files with requests", 25, ingested)
        assert any(METHOD in labels for labels, v in _samples(text, "tailtap_requests_total") if v > 0), text

        # a capture process that dies is reported and restarted
        tools = {pid: comm for pid, comm in _children(daemon.pid).items() if comm == "tcpdump"}
        assert len(tools) == 1, _children(daemon.pid)
        (old_pid,) = tools
        ingested_before = _total(text, "tailtap_captures_ingested_total")
        os.kill(old_pid, signal.SIGKILL)
        _wait_for(
            "the capture to be restarted", 15,
            lambda: _total(t := _get(metrics_url), "tailtap_capture_restarts_total") >= 1
            and _total(t, "tailtap_capture_up") == 1,
        )
        new_tools = [pid for pid, comm in _children(daemon.pid).items() if comm == "tcpdump"]
        assert new_tools and old_pid not in new_tools
        seen_children |= set(new_tools)
        _wait_for(
            "files of the restarted capture to be ingested", 15,
            lambda: _total(_get(metrics_url), "tailtap_captures_ingested_total") >= ingested_before + 2,
        )
        assert f"tcpdump (pid {old_pid}) was killed by SIGKILL" in _log(tmp_path) and "restarting in 1 s" in _log(tmp_path)

        # /metrics is valid Prometheus text
        text = _get(metrics_url)
        _promtool_check(text)
        assert _total(text, "tailtap_ingest_errors_total") == 0, _log(tmp_path)
        assert _total(text, "tailtap_ingested_packets_total") > 0
        assert _total(text, "tailtap_request_ttft_seconds_count") > 0
        assert _samples(text, "tailtap_recent_request_latency_seconds"), text
        assert _total(text, "tailtap_last_ingest_timestamp_seconds") > time.time() - 30
        lag = _total(text, "tailtap_ingest_lag_seconds")
        assert 0 <= lag < 30, lag

        # a real Prometheus scrapes it
        def scraped():
            body = json.loads(_get(f"http://127.0.0.1:{prom_port}/api/v1/query?query=tailtap_requests_total"))
            values = [float(r["value"][1]) for r in body["data"]["result"]]
            return values if values and max(values) > 0 else None

        values = _wait_for("Prometheus to scrape tailtap_requests_total", 20, scraped)
        assert max(values) > 0
        up = json.loads(_get(f"http://127.0.0.1:{prom_port}/api/v1/query?query=up"))["data"]["result"]
        assert [r["value"][1] for r in up] == ["1"], up

        # it stored the exemplars: each names a request the store holds
        prom_api = f"http://127.0.0.1:{prom_port}/api/v1"

        def exemplars():
            query = urllib.parse.urlencode({"query": "tailtap_request_latency_seconds_bucket", "start": time.time() - 600, "end": time.time() + 60})
            body = json.loads(_get(f"{prom_api}/query_exemplars?{query}"))
            found = [e["labels"]["request"] for series in body["data"] for e in series["exemplars"]]
            return found or None

        requests = _wait_for("Prometheus to return exemplars", 20, exemplars)
        stored = {k for (k,) in connect(Store(tmp_path / "store")).execute("SELECT conn_id || ':' || stream_id FROM requests").fetchall()}
        assert set(requests) <= stored, (requests, sorted(stored)[:5])

        # every panel of the live dashboard answers with rows (its variables as "All")
        def panels_answer():
            empty = []
            for panel in LIVE.panels:
                answers = [json.loads(_get(f"{prom_api}/query?" + urllib.parse.urlencode({"query": render_promql(expr, "30s")})))
                           for expr in (panel.query, *(q for q, _ in panel.more))]
                assert all(a["status"] == "success" for a in answers), (panel.title, answers)
                if not any(a["data"]["result"] for a in answers):
                    empty.append(panel.title)
            return empty

        empty = panels_answer()
        if empty:  # rates need two scrapes of the new series
            time.sleep(3)
            empty = panels_answer()
        assert not empty, empty
        load.stop()
        assert load.calls > 0 and load.failed > 0 and not load.errors, load.errors

        # SIGTERM: capture stopped, current ingest finished, exit 0, no child left
        seen_children |= set(_children(daemon.pid))
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(20) == 0, _log(tmp_path)
        for pid in seen_children:
            assert not _alive(pid), f"child {pid} survived the daemon"
        assert "SIGTERM: stopping" in _log(tmp_path) and "stopped" in _log(tmp_path)
        assert "Traceback" not in _log(tmp_path), _log(tmp_path)
    finally:
        for proc in (daemon, prom):
            if proc is not None and proc.poll() is None:
                _kill(proc.pid)
                proc.wait(10)
        for pid in seen_children:
            _kill(pid)
        load.stop()

    rows = connect(Store(tmp_path / "store")).execute(
        "SELECT count(*), count(*) FILTER (WHERE path = ? AND response_messages = ? AND grpc_status = 0) FROM requests",
        [METHOD, TOKENS],
    ).fetchone()
    assert rows[1] > 0 and rows[1] >= 0.5 * rows[0], rows  # most calls whole inside one file
    assert not list((tmp_path / "spool" / "failed").iterdir())


@needs_capture
@pytest.mark.parametrize("capturer", ["tcpdump", "dumpcap"])
def test_bounded_run_ingests_leftovers_and_keeps_bad_files(tmp_path, capturer):
    if shutil.which(capturer) is None:
        pytest.skip(f"{capturer} not installed")
    spool = tmp_path / "spool"
    spool.mkdir()
    # files an earlier run left: ingested first; the bad one is kept in failed/ with its error
    (spool / "tailtap-1-20200101T000000.pcap").write_bytes(_tiny_pcap(1_577_836_800 * 10**9))
    (spool / "tailtap-1-20200101T000001.pcap").write_bytes(pcap([]))
    (spool / "tailtap-1-20200101T000002.pcap").write_bytes(b"\xd4\xc3\xb2\xa1 truncated header")
    load = _GrpcLoad().start()
    daemon = _daemon(tmp_path, load.port, _free_port(), "--duration", "3", "--retention-hours", "100000", "--capturer", capturer)
    try:
        assert daemon.wait(40) == 0, _log(tmp_path)
    finally:
        if daemon.poll() is None:
            _kill(daemon.pid)
            daemon.wait(10)
        load.stop()
    log = _log(tmp_path)
    assert "3 capture file(s) left by an earlier run" in log
    assert "--duration reached" in log and "Traceback" not in log, log
    assert not [p for p in spool.iterdir() if p.name.startswith("tailtap-")], "bounded run must drain the spool"
    failed = spool / "failed" / "tailtap-1-20200101T000002.pcap"
    assert failed.exists() and (spool / "failed" / f"{failed.name}.error").read_text().strip()
    con = connect(Store(tmp_path / "store"))
    captures = con.execute("SELECT count(*), min(first_ts) FROM captures").fetchone()
    assert captures[0] >= 2  # the leftover + at least one live file
    requests = con.execute("SELECT count(*) FROM requests WHERE path = ?", [METHOD]).fetchone()[0]
    assert requests > 0 and load.calls > 0


@needs_capture
def test_long_lived_connection_keeps_its_methods_across_rotated_files(tmp_path):
    """One gRPC connection for every call, files rotated each second: the files of a run are
    one ingest chain, so calls in the later files still have their method (HPACK context
    carried over) and a call crossing a rotation is one row."""
    load = _GrpcLoad(one_channel=True)
    metrics_port = _free_port()
    daemon = _daemon(tmp_path, load.port, metrics_port, "--duration", "6", "--retention-hours", "100000")
    try:
        # the connection opens once the capture runs: its first HEADERS are in the first file
        _wait_for("the capture to be up", 20, lambda: _total(_get(f"http://127.0.0.1:{metrics_port}/metrics"), "tailtap_capture_up") == 1)
        load.start()
        assert daemon.wait(40) == 0, _log(tmp_path)
    finally:
        if daemon.poll() is None:
            _kill(daemon.pid)
            daemon.wait(10)
        load.stop()
    assert load.calls > 0 and not load.errors, load.errors
    log = _log(tmp_path)
    assert "Traceback" not in log and "end of the ingest chain" in log, log
    con = connect(Store(tmp_path / "store"))
    # requests per capture file, in capture order (the closing commit has no packets)
    per_file = con.execute(
        "SELECT c.first_ts, count(r.stream_id), count(r.path) FILTER (WHERE r.path = ?), "
        "count(*) FILTER (WHERE NOT r.headers_known) "
        "FROM captures c JOIN requests r USING (capture_id) WHERE c.packets > 0 GROUP BY ALL ORDER BY 1",
        [METHOD],
    ).fetchall()
    assert len(per_file) >= 3, per_file  # the connection spans several files
    for _first_ts, n, with_method, unknown in per_file[1:]:
        assert n > 0 and with_method == n and unknown == 0, per_file
    conns = con.execute("SELECT count(DISTINCT conn_id) FROM requests").fetchone()[0]
    assert conns == 1
    # one row per call: no (stream) split in two at a rotation
    dupes = con.execute("SELECT stream_id FROM requests GROUP BY ALL HAVING count(*) > 1").fetchall()
    assert dupes == []
    total, whole = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE response_messages = ? AND grpc_status = 0) FROM requests", [TOKENS]
    ).fetchone()
    assert whole >= total - 1  # every call whole, but the last one the capture's end may cut
