"""The daemon with ``--keylog``: the key log is read at start and again as it grows, so a
TLS client that starts (and writes its secrets) after the daemon is decrypted. Python's
OpenSSL on both ends over loopback, captured by the daemon's own tcpdump; and the
follower's handling of lines still being written and of a rotated key log, on real files."""

from __future__ import annotations

import logging
import os
import signal
import socket
import ssl

import pytest
from test_daemon import _daemon, _free_port, _get, _kill, _log, _total, _wait_for, needs_capture
from test_tls_stacks import _openssl_exchange, self_signed

from telemetry.daemon.keylogs import KeyLogFollower
from telemetry.models.db import connect
from telemetry.store.parquet import Store

RANDOM = "ab" * 32
SECRET = "cd" * 32


def _line(label: str, random: str = RANDOM, secret: str = SECRET) -> str:
    return f"{label} {random} {secret}\n"


def test_follower_reads_complete_lines_as_they_come_and_a_rotated_file_again(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tailtap.daemon")
    path = tmp_path / "keys.txt"
    path.write_text("# SSLKEYLOGFILE\n")
    follower = KeyLogFollower((path,))
    follower.read_start()
    assert follower.keylog.lines == 0 and not follower.keylog.problems

    # a line still being written waits for its newline
    with path.open("a") as f:
        f.write(_line("CLIENT_TRAFFIC_SECRET_0")[:50])
    assert follower.read_new() == 0
    with path.open("a") as f:
        f.write(_line("CLIENT_TRAFFIC_SECRET_0")[50:] + _line("SERVER_TRAFFIC_SECRET_0") + "GARBAGE x y\n")
    assert follower.read_new() == 2
    assert follower.keylog.tls13_secret("SERVER_TRAFFIC_SECRET_0", bytes.fromhex(RANDOM)) == bytes.fromhex(SECRET)
    assert follower.keylog.problems == [f"{path} line 4: unknown label 'GARBAGE'"]  # numbered in the whole file
    assert follower.read_new() == 0  # nothing new: nothing read twice

    # rotated: a new, shorter file under the same name is read from its start
    other = "ef" * 32
    path.unlink()
    path.write_text(_line("CLIENT_RANDOM", other, "01" * 48))
    assert follower.read_new() == 1
    assert follower.keylog.master_secret(bytes.fromhex(other), b"") == bytes.fromhex("01" * 48)

    # gone: said once, read again when it is back
    path.unlink()
    assert follower.read_new() == 0 and follower.read_new() == 0
    assert len([r for r in caplog.records if "read again when it is back" in r.getMessage()]) == 1
    path.write_text(_line("CLIENT_RANDOM", "02" * 32, "03" * 48))
    assert follower.read_new() == 1


def test_follower_start_takes_a_last_line_without_newline_and_names_a_missing_file(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text(_line("CLIENT_RANDOM", RANDOM, "01" * 48).rstrip("\n"))
    follower = KeyLogFollower((path,))
    follower.read_start()
    assert follower.keylog.lines == 1
    missing = KeyLogFollower((tmp_path / "nope.txt",))
    try:
        missing.read_start()
    except FileNotFoundError as exc:
        assert exc.filename == str(tmp_path / "nope.txt")
    else:
        raise AssertionError("a missing key log was not refused at start")


def _poke(port: int) -> None:
    """A refused connection (SYN, RST): tcpdump starts its next file only at a packet."""
    with socket.socket() as s:
        s.settimeout(0.5)
        s.connect_ex(("127.0.0.1", port))


@needs_capture
@pytest.mark.parametrize("with_keys", [True, False], ids=["keylog", "no-keylog"])
def test_daemon_decrypts_a_session_whose_keys_were_written_after_it_started(tmp_path, with_keys):
    """With --keylog the session is decrypted; without, it is estimated from its records
    and the daemon's metrics say so (tailtap_tls_estimated_requests_total)."""
    keys = tmp_path / "keys.txt"
    keys.write_text("")  # the client appends when it connects, after the daemon started
    cert, key = self_signed(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    client.keylog_filename = str(keys)

    port, metrics_port = _free_port(), _free_port()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    daemon = _daemon(tmp_path, port, metrics_port, *(("--keylog", str(keys)) if with_keys else ()))
    try:
        _wait_for("the capture to be up", 20, lambda: _total(_get(url), "tailtap_capture_up") == 1)
        assert "SECRET" not in keys.read_text()  # (Python writes a comment line when the context is made)
        body = os.urandom(30_000)
        _openssl_exchange(port, server, client, body)
        assert "CLIENT_TRAFFIC_SECRET_0" in keys.read_text()
        _wait_for("the TLS request ingested", 30, lambda: _poke(port) or _total(_get(url), "tailtap_requests_total") >= 1)
        estimated = _total(_get(url), "tailtap_tls_estimated_requests_total")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0, _log(tmp_path)
    finally:
        if daemon.poll() is None:
            _kill(daemon.pid)
    con = connect(Store(tmp_path / "store"))
    rows = con.execute("SELECT path, http_status, response_bytes, protocol, encrypted, estimated FROM requests").fetchall()
    facts = con.execute("SELECT tls_version, tls_decrypted FROM connections WHERE tls_version IS NOT NULL").fetchall()
    if with_keys:
        assert rows == [("/big", 200, len(body), "http1-tls", True, False)], (rows, _log(tmp_path))
        assert facts == [("TLS 1.3", True)], facts
        assert estimated == 0
        assert "new secret(s)" in _log(tmp_path)
    else:
        assert [r[3:] for r in rows] == [("tls", True, True)], (rows, _log(tmp_path))
        assert facts == [("TLS 1.3", False)], facts
        assert estimated == 1
