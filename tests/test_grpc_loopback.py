"""Real gRPC traffic made by the test: a grpcio server-streaming service on loopback,
captured with tcpdump, analyzed by tailtap, compared with what the client measured.

The client and tcpdump share the host clock (CLOCK_REALTIME), so times compare directly:
every message tailtap reports was captured before the client received it and shortly
before; the request was captured after the client started it; message counts are exact.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from concurrent import futures
from pathlib import Path

import pytest

from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

grpc = pytest.importorskip("grpc")

TCPDUMP = shutil.which("tcpdump")
pytestmark = pytest.mark.skipif(
    TCPDUMP is None or os.geteuid() != 0, reason="needs tcpdump and root to capture on loopback"
)

TOKENS = [5, 12, 1, 20, 8, 3]
TOKEN_INTERVAL_S = 0.004


def _generate(request: bytes, context):
    n = int(request.decode())
    time.sleep(0.010)  # "prefill"
    for i in range(n):
        yield f"token-{i:03d}".encode()
        time.sleep(TOKEN_INTERVAL_S)


@pytest.fixture
def grpc_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        "tailtap.test.LLM",
        {"Generate": grpc.unary_stream_rpc_method_handler(_generate)},
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(grace=None)


def _start_tcpdump(port: int, out: Path) -> subprocess.Popen:
    """tcpdump on lo, returned once it demonstrably captures: a probe connection shows up
    in the file. --immediate-mode: without it libpcap hands packets over in blocks with a
    1 s timeout, and what is still in the block when tcpdump is stopped is lost."""
    proc = subprocess.Popen(
        [TCPDUMP, "-i", "lo", "-U", "--immediate-mode", "-n", "-Z", "root", "--time-stamp-precision=nano", "-w", str(out), f"tcp port {port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 10
    line = b""
    while time.monotonic() < deadline and b"listening on" not in line:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
    if b"listening on" not in line:
        proc.kill()
        pytest.fail(f"tcpdump did not start: {line!r}")
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
        time.sleep(0.05)
        if out.exists() and out.stat().st_size > 24:  # more than the pcap file header
            return proc
    proc.kill()
    pytest.fail("tcpdump captured nothing of a probe connection")


def test_ttft_and_messages_match_the_client(tmp_path, grpc_server):
    port = grpc_server
    capture = tmp_path / "grpc.pcap"
    dump = _start_tcpdump(port, capture)
    measured = []
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_stream("/tailtap.test.LLM/Generate")
            for n in TOKENS:
                start = time.time_ns()
                arrivals = [time.time_ns() for _ in call(str(n).encode(), timeout=10)]
                measured.append({"tokens": n, "start": start, "arrivals": arrivals, "end": time.time_ns()})
        time.sleep(0.2)  # let the last ACKs and the connection close reach tcpdump
    finally:
        dump.send_signal(signal.SIGINT)
        _, tail = dump.communicate(timeout=10)
    store = Store(tmp_path / "store")
    result = ingest_file(capture, store, IngestOptions())
    assert result.error is None, f"{result.error}; tcpdump said: {tail.decode(errors='replace')}"
    rows = connect(store).execute(
        "SELECT stream_id, path, kind, response_messages, grpc_status, epoch_ns(request_start), "
        "epoch_ns(first_message), epoch_ns(last_message), ttft_ms FROM requests ORDER BY stream_id"
    ).fetchall()
    assert len(rows) == len(TOKENS)
    ttft_errors = []
    for (stream_id, path, kind, messages, status, req_start, first, last, ttft_ms), truth in zip(rows, measured, strict=True):
        assert path == "/tailtap.test.LLM/Generate"
        assert status == 0
        assert messages == truth["tokens"], f"stream {stream_id}"
        assert kind == ("server_stream" if truth["tokens"] > 1 else "unary")
        # causality on one clock: the capture sees the request after the client sent it,
        # and each response before the client receives it
        assert truth["start"] <= req_start <= truth["arrivals"][0]
        assert first <= truth["arrivals"][0] and last <= truth["arrivals"][-1]
        # and shortly before: loopback plus grpcio's Python delivery
        assert truth["arrivals"][0] - first < 20_000_000
        client_ttft_ms = (truth["arrivals"][0] - truth["start"]) / 1e6
        ttft_errors.append(abs(client_ttft_ms - ttft_ms))
    ttft_errors.sort()
    assert ttft_errors[len(ttft_errors) // 2] < 5.0, ttft_errors
