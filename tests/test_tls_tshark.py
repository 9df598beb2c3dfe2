"""TLS decrypted by tailtap against tshark with the same keys: on the shared captures
(gRPC over TLS 1.2 with an RSA Session-ID key log, nghttp2 over TLS 1.2 with CLIENT_RANDOM,
two TLS 1.3 captures carrying Decryption Secrets Blocks), every HTTP/2 stream tshark
decodes is a request with the same path, status, grpc-status, number of response messages
and first/last message times; the DSB captures with no --keylog as well as with one.
Without keys the same connections stay measurable: requests estimated from the records."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_paths import CAPTURES
from tshark_ref import TSHARK, compare_streams, h2_streams

from parsers.tls import KeyLog
from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

# (capture, key log file or None (the capture's own DSB), whether tailtap is given it)
CASES = [
    ("grpc_person_search_protobuf_and_json_tls.pcapng", "grpc_person_search_protobuf_and_json_tls.keylog.txt", True),
    ("http2-16-ssl.pcapng", "http2-16-ssl.keylog", True),
    ("firefox-tls13-facebook-dsb.pcapng", None, False),
    ("firefox-tls13-facebook-dsb.pcapng", "firefox-tls13-facebook-dsb.keylog", True),
    ("http2-google-tls13-dsb.pcapng", None, False),
    ("http2-google-tls13-dsb.pcapng", "http2-google-tls13-dsb.keylog", True),
]

needs_captures = pytest.mark.skipif(not CAPTURES.is_dir(), reason=f"shared captures not found at {CAPTURES}")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed (make test installs it when root)")

COLUMNS = (
    "client_port, server_port, stream_id, path, http_status, grpc_status, response_messages, "
    "epoch_ns(first_message) AS first_ns, epoch_ns(last_message) AS last_ns, protocol, encrypted, estimated"
)


def _store(tmp_path: Path, name: str, keylog: KeyLog | None):
    store = Store(tmp_path / "store")
    result = ingest_file(CAPTURES / name, store, IngestOptions(keylog=keylog))
    assert result.error is None, result.error
    return connect(store), result


def _rows(con) -> list[dict]:
    cur = con.execute(f"SELECT {COLUMNS} FROM requests")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _keylog(name: str) -> KeyLog:
    keylog = KeyLog()
    keylog.add_text((CAPTURES / name).read_text(), name)
    assert keylog and not keylog.problems
    return keylog


@needs_captures
@needs_tshark
@pytest.mark.tshark
@pytest.mark.parametrize(("name", "keys", "given"), CASES, ids=[f"{c[0]}-{'keylog' if c[2] else 'dsb'}" for c in CASES])
def test_decrypted_streams_match_tshark(tmp_path, name, keys, given):
    ref = h2_streams(CAPTURES / name, keylog=CAPTURES / keys if keys else None)
    assert ref, f"tshark decoded no HTTP/2 stream in {name}"
    con, _ = _store(tmp_path, name, _keylog(keys) if given else None)
    rows = _rows(con)
    ours = {(frozenset((r["client_port"], r["server_port"])), r["stream_id"]): r for r in rows}
    problems = compare_streams(name, ref, ours)
    assert not problems, "\n".join(problems)
    assert rows and all(r["protocol"] == "h2-tls" and r["encrypted"] and not r["estimated"] for r in rows)
    facts = con.execute("SELECT DISTINCT tls_decrypted, tls_alpn, tls_version FROM connections WHERE protocol = 'h2-tls'").fetchall()
    assert facts and all(f[0] for f in facts)


@needs_captures
@pytest.mark.parametrize("name", ["grpc_person_search_protobuf_and_json_tls.pcapng", "http2-16-ssl.pcapng"])
def test_without_keys_requests_are_estimated(tmp_path, name):
    con, result = _store(tmp_path, name, None)
    rows = _rows(con)
    assert rows and all(r["protocol"] == "tls" and r["encrypted"] and r["estimated"] for r in rows)
    assert all(r["first_ns"] is not None for r in rows)
    conns = con.execute("SELECT tls_version, tls_alpn, tls_decrypted, tls_note FROM connections WHERE protocol = 'tls'").fetchall()
    assert conns and all(c[0] == "TLS 1.2" and not c[2] and "no key log" in c[3] for c in conns)
    labels = {r[0] for r in con.execute("SELECT DISTINCT method_label FROM requests_in_range").fetchall()}
    assert all(label.startswith("TLS ") for label in labels)


@needs_captures
def test_wrong_keys_say_why_and_estimate(tmp_path):
    """A key log for another session: the connection is estimated, and a warning says why."""
    keylog = _keylog("http2-16-ssl.keylog")  # not this capture's session
    con, result = _store(tmp_path, "grpc_person_search_protobuf_and_json_tls.pcapng", keylog)
    notes = [r[0] for r in con.execute("SELECT tls_note FROM connections WHERE protocol = 'tls'").fetchall()]
    assert len(notes) == 2 and all("no master secret for this session" in n for n in notes)
    assert any(i.kind == "tls_not_decrypted" for i in result.issues)
    assert all(r["estimated"] for r in _rows(con))
