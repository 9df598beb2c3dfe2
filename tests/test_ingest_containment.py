"""A connection whose decoders raise (a bug of ours, such as the list-valued "object" the
llm_shapes fuzz target found in an event) stops being decoded and says so; the rest of the
capture is read as without it. The capture is real (samples/mixed: gRPC over HTTP/2, on the
C path and on the pure one); the fault is put into one connection's decoder."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsers.h2 import _conn
from telemetry.ingest import ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

REPO = Path(__file__).resolve().parent.parent
MIXED = REPO / "samples" / "mixed" / "capture.pcap"


def _by_conn(store: Store, sql: str) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for conn_id, *row in connect(store).execute(sql).fetchall():
        out.setdefault(conn_id, []).append(tuple(row))
    return out


def _tables(store: Store) -> dict[str, dict[str, list[tuple]]]:
    return {
        "requests": _by_conn(store, "SELECT conn_id, stream_id, method, grpc_status, response_messages, latency_ms "
                                    "FROM requests ORDER BY ALL"),
        "messages": _by_conn(store, "SELECT conn_id, stream_id, direction, \"index\", ts, size FROM messages ORDER BY ALL"),
        "connections": _by_conn(store, "SELECT conn_id, packets_to_server, packets_to_client, retransmissions_to_client "
                                       "FROM connections ORDER BY ALL"),
        "tcp_events": _by_conn(store, "SELECT conn_id, ts, kind, seq FROM tcp_events ORDER BY ALL"),
    }  # fmt: skip


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, dict[str, list[tuple]]]:
    store = Store(tmp_path_factory.mktemp("clean") / "store")
    assert ingest_file(MIXED, store).error is None
    return _tables(store)


def _fault(monkeypatch, method: str, after: int) -> list[int]:
    """``H2Connection.<method>`` raises on one connection (the first to call it) from its
    ``after``-th call on; returns the id() of that connection, once known."""
    original = getattr(_conn.H2Connection, method)
    victim: list[int] = []
    calls = [0]

    def faulty(self, *args, **kwargs):
        if not victim:
            victim.append(id(self))
        if id(self) == victim[0]:
            calls[0] += 1
            if calls[0] >= after:
                raise TypeError("a decoder's bug")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(_conn.H2Connection, method, faulty)
    return victim


@pytest.mark.parametrize("method, after", [("feed_run", 1), ("drain_columns", 2), ("finish", 1)])
def test_a_connection_whose_decoder_raises_stops_and_the_capture_goes_on(tmp_path, monkeypatch, clean, method, after):
    _fault(monkeypatch, method, after)
    store = Store(tmp_path / "store")
    result = ingest_file(MIXED, store)
    assert result.error is None
    (issue,) = [i for i in result.issues if i.kind == "session_internal_error"]
    assert "decoding of this connection stopped" in issue.message and "TypeError: a decoder's bug" in issue.message
    if method == "feed_run":  # where: the packet the reader was at
        assert issue.frame_no > 0
    got = _tables(store)
    # every connection is there with its TCP figures; one lost some of its requests and
    # messages (those its decoder had not handed out), the others none
    assert got["connections"] == clean["connections"] and got["tcp_events"] == clean["tcp_events"]
    short = [c for c in clean["requests"] if got["requests"].get(c) != clean["requests"][c]]
    assert len(short) == 1, short
    for table in ("requests", "messages"):
        for conn_id, rows in clean[table].items():
            if conn_id in short:  # what was handed out is right (message rows go out as they come)
                assert set(got[table].get(conn_id, [])) <= set(rows)
            else:
                assert got[table][conn_id] == rows
    assert len(got["requests"].get(short[0], [])) < len(clean["requests"][short[0]])


def test_the_pure_path_contains_it_too(tmp_path, monkeypatch, clean):
    """Without the C extension (the HTTP/2 reader chunk by chunk), the same."""
    monkeypatch.setattr(_conn, "_speedups", None)
    _fault(monkeypatch, "drain_columns", 2)
    store = Store(tmp_path / "store")
    result = ingest_file(MIXED, store)
    assert result.error is None
    assert [i.kind for i in result.issues].count("session_internal_error") == 1
    got = _tables(store)
    assert got["connections"] == clean["connections"]
    assert sum(1 for c in clean["requests"] if got["requests"].get(c) != clean["requests"][c]) == 1


def test_a_broken_http1_session_keeps_what_it_handed_out_and_reads_no_more(monkeypatch):
    """Over HTTP/1.1 (an event stream, where the fuzz target's event raised): the first
    exchange is read, the second's event raises out of the session; once broken, the
    session reads nothing more and its end says what happened, with the first request."""
    from parsers.llm import semantics
    from parsers.records import PayloadChunk
    from parsers.session import AppSession

    def exchange(text: bytes) -> tuple[bytes, bytes]:
        body = b"data: " + text + b"\n\n"
        return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}",
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip

    original = semantics.LlmStream.event

    def faulty(self, etype: str, data: str):
        if "boom" in data:
            raise TypeError("a decoder's bug")
        return original(self, etype, data)

    monkeypatch.setattr(semantics.LlmStream, "event", faulty)
    session = AppSession(1, 40000, 8080)
    offsets, frame = [0, 0], 0

    def feed(d: int, data: bytes) -> None:
        nonlocal frame
        frame += 1
        session.feed(PayloadChunk(1, d, data, 10**18 + frame * 10**6, frame, offsets[d]))
        offsets[d] += len(data)

    for text in (b'{"choices":[{"delta":{"content":"a"}}]}', b'{"boom": 1}'):
        request, response = exchange(text)
        feed(0, request)
        try:
            feed(1, response)
        except TypeError as exc:
            session.broke(exc, frame)
    feed(0, exchange(b"{}")[0])  # read no more
    result = session.finish(10**18 + 10**9)
    assert [r.path for r in result.requests] == ["/v1/chat/completions"] and result.protocol == "http1"
    (issue,) = [i for i in result.issues if i.kind == "session_internal_error"]
    assert issue.frame_no == 4 and issue.message.startswith("http1 decoding of this connection stopped: TypeError")
