"""End to end against tshark: every HTTP/2 stream tshark decodes on the cleartext
HTTP/2 and gRPC captures in ../shared/captures is found by tailtap with the same :path,
:status, grpc-status, number of response messages, and first/last message times equal
to tshark's frame times. Where tshark shows nothing (HPACK context missing), tailtap
still reports the stream's timings.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_paths import CAPTURES
from tshark_ref import TSHARK, compare_streams, h2_streams

from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

# (file, ports tshark needs -d for). tailtap itself is given no port: it must detect HTTP/2.
CLEARTEXT = [
    ("grpc-go_unary.pcapng", (50051,)),
    ("grpc-go_server_streaming.pcapng", (50051,)),
    ("grpc-go_client_streaming.pcapng", (50051,)),
    ("grpc-go_bidi_streaming.pcapng", (50051,)),
    ("grpc_person_search.pcapng", (50051,)),
    ("grpc_person_search_protobuf_with_image.pcapng", (50051,)),
    ("grpc_person_search_json_with_image.pcapng", (50052,)),
    ("client-grpc-web-proto-http2-send-two-unary.pcapng", (57228,)),
    ("grpc-node_via_connect_proxy.pcap", (6233,)),
    ("http2-h2c.pcap", ()),
    ("http2-nghttp2-push.pcap", (80,)),
    ("packet-h2-14.pcapng", (3000,)),
    ("dns-over-http2-post.pcap", (80,)),
    ("h2c_python_sample.pcapng", (8097,)),
]

needs_captures = pytest.mark.skipif(not CAPTURES.is_dir(), reason=f"shared captures not found at {CAPTURES}")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed (make test installs it when root)")


def _requests(tmp_path: Path, name: str) -> list[dict]:
    store = Store(tmp_path / "store")
    result = ingest_file(CAPTURES / name, store, IngestOptions())
    assert result.error is None, result.error
    con = connect(store)
    cur = con.execute(
        "SELECT client_port, server_port, stream_id, path, http_status, grpc_status, response_messages, "
        "epoch_ns(first_message) AS first_ns, epoch_ns(last_message) AS last_ns, headers_known, "
        "epoch_ns(request_start) AS start_ns, epoch_ns(\"end\") AS end_ns FROM requests"
    )
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@needs_captures
@needs_tshark
@pytest.mark.tshark
@pytest.mark.parametrize(("name", "ports"), CLEARTEXT, ids=[c[0] for c in CLEARTEXT])
def test_streams_match_tshark(tmp_path, name, ports):
    ref = h2_streams(CAPTURES / name, ports)
    assert ref, f"tshark decoded no HTTP/2 stream in {name}"
    ours = {(frozenset((r["client_port"], r["server_port"])), r["stream_id"]): r for r in _requests(tmp_path, name)}
    problems = compare_streams(name, ref, ours)
    assert not problems, "\n".join(problems)


MIDSTREAM = [
    # (file, ports, streams tailtap must still time)
    ("derived_grpc-go_bidi_streaming_midstream.pcapng", 1),
    ("derived_dns-over-http2-post_midstream.pcap", 20),
    ("derived_packet-h2-14_midstream.pcapng", 5),
    ("grpc_person_search_protobuf_with_image-missing_headers.pcapng", 1),
    ("derived_http2-nghttp2-push_midframe.pcap", 1),
]


@needs_captures
@pytest.mark.parametrize(("name", "min_streams"), MIDSTREAM, ids=[c[0] for c in MIDSTREAM])
def test_midstream_captures_keep_timings(tmp_path, name, min_streams):
    """Captures that start mid-connection: no port given, HPACK context missing, yet every
    stream with response data keeps its timings, flagged headers_known = false where needed."""
    rows = _requests(tmp_path, name)
    timed = [r for r in rows if r["first_ns"] is not None or r["end_ns"] is not None]
    assert len(timed) >= min_streams, rows
    for r in timed:
        if r["first_ns"] is not None and r["last_ns"] is not None:
            assert r["last_ns"] >= r["first_ns"]
