"""The lab on the OpenAI-compatible protocols (issue 13), and over TLS (issue 12): the ``resource_exhausted``
scenario run against the lab's streaming server on uvicorn (HTTP/1.1) and on hypercorn
(h2c), through the bridge, captured at the server's veth.

What is checked: the client's requests (port, stream id / exchange index, request id)
match the capture (tshark); tailtap finds every one of them, with the client's token
count as ``completion_tokens``, one message per chunk and no ``[DONE]`` message, the
model as sent, each 429 as the client got it; and its client-side TTFT agrees with the
client's wire (the client's veth is captured too): the raw estimate from the client's
ACKs, with the client's held ACKs undone (the TTFT attribution judges by), is within
1 ms median of the wire's, both counted from the request's last byte. The client's
own TTFT (an asyncio Python process on a shared machine) is printed beside it. How attribution scores on such runs is
measured by ``bench/score_attribution.py`` (the lab runs are not kept in the repository).
"""

from __future__ import annotations

import shutil
from collections import Counter
from statistics import median

import pytest

from telemetry.lab.runner import missing_requirements

pytestmark = pytest.mark.lab

_missing = missing_requirements()
if _missing:
    pytest.skip("lab tests need " + ", ".join(_missing), allow_module_level=True)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark (apt-get install tshark)")
@pytest.mark.parametrize("protocol", ["openai-http1", "openai-h2c"])
def test_openai_protocol_lab_run(tmp_path, protocol):
    pytest.importorskip("uvicorn", reason="needs uvicorn (pip install -e '.[test]')")
    pytest.importorskip("hypercorn", reason="needs hypercorn (pip install -e '.[test]')")
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.lab.runner import run_scenario
    from telemetry.models.db import connect
    from telemetry.store.parquet import Store

    out = tmp_path / "run"
    labels = run_scenario("resource_exhausted", out, duration=6.0, seed=3, protocol=protocol, client_capture=True,
                          log=lambda *_: None)  # fmt: skip
    assert labels["protocol"] == protocol
    check = labels["client_check"]
    assert check["checked"] and check["ok"], check
    assert not [p for p in labels["problems"] if "tcpdump" in p or "client" in p], labels["problems"]

    store = Store(tmp_path / "store")
    assert ingest_file(out / "capture.pcap", store, IngestOptions()).error is None
    con = connect(store)
    con.execute(f"CREATE TABLE truth AS SELECT * FROM read_parquet('{out / 'client.parquet'}')")
    rows = con.execute("""
        SELECT t.method, t.grpc_status_name, t.messages,
               -- the client's TTFT from its request's last byte, as tailtap's TTFT is (the
               -- client's TTFT runs from its first byte: the capture shows what lies between)
               t.ttft_ms - (epoch_ns(r.request_end) - epoch_ns(r.request_start)) / 1e6,
               r.http_status, r.kind, r.model, r.completion_tokens, r.response_messages, r.ttft_client_est_ms
        FROM truth AS t JOIN requests AS r ON t.conn_local_port = r.client_port AND t.stream_id = r.stream_id
    """).fetchall()
    n_truth = con.execute("SELECT count(*) FROM truth").fetchone()[0]
    assert len(rows) == n_truth > 30  # every request of the client found
    gen = [r for r in rows if r[0] == "Generate" and r[1] == "OK"]
    assert gen
    for _m, _s, messages, _t, status, kind, model, tokens, resp_msgs, _e in gen:
        assert (status, kind, model, tokens, resp_msgs) == (200, "sse", "lab-llm", messages, messages + 3)
    rejected = [r for r in rows if r[1] == "RESOURCE_EXHAUSTED"]
    assert rejected and all(r[4] == 429 for r in rejected), rejected
    # kernel TCP through the bridge: the C readers of events as Python
    from test_real_stacks import check_c_reader, check_h2_c_events

    (check_c_reader if protocol == "openai-http1" else check_h2_c_events)(out / "capture.pcap")
    # The client-side TTFT is of the client's wire: what its own capture shows, from the
    # request's last byte leaving to the first token arriving. An ACK bounds the arrival
    # from above only (Linux holds ACKs, more so over h2c where streams share the
    # connection: the raw estimate is up to 16 ms late there); with held ACKs undone, the
    # TTFT attribution judges by (request_metrics.ttft_eff_ms) is 0.01-0.4 ms median from
    # the wire's, p90 0.06-2.0 ms, the host busy or not. The client's process reads the
    # token later again (an asyncio loop on a shared host: 1-4 ms here), which no packet
    # shows: that figure is printed, not bounded.
    eff_err, _n = _wire_ttft_errors(out, tmp_path, store.root)
    assert len(eff_err) > 0.9 * len(gen)
    app_err = sorted(abs(r[9] - r[3]) for r in gen if r[9] is not None and r[3] is not None)
    print(protocol, "raw estimate vs the client's process: median", round(median(app_err), 3), "ms")
    _bound_wire_errors(protocol, eff_err, len(gen))


def _wire_ttft_errors(out, tmp_path, store_root, keylog=None) -> tuple[list[float], int]:
    """|TTFT attribution judges by - the client's wire TTFT| per request, sorted (ms), and how
    many requests the capture at the server holds. The wire's is read from the run's capture
    at the client's veth; the judged one (request_metrics.ttft_eff_ms: held ACKs undone)
    from the store of its capture at the server, opened as ``tailtap sql`` opens it."""
    from telemetry.cli.sql import open_analysis
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.models.db import connect
    from telemetry.store.parquet import Store

    client_store = Store(tmp_path / "store_client")
    result = ingest_file(out / "capture_client.pcap", client_store, IngestOptions(keylog=keylog))
    assert result.error is None, result.error
    on_wire = {(port, sid): ttft for port, sid, ttft in
               connect(client_store).execute("SELECT client_port, stream_id, ttft_ms FROM requests").fetchall()}  # fmt: skip
    analysis = open_analysis(store_root)
    assert not isinstance(analysis, int)
    judged = analysis.execute("""
        SELECT r.client_port, r.stream_id, m.ttft_eff_ms
        FROM requests AS r JOIN request_metrics AS m USING (conn_id, stream_id)
        WHERE r.ttft_client_est_ms IS NOT NULL AND r.request_start IS NOT NULL AND r.request_end IS NOT NULL
    """).fetchall()  # fmt: skip
    n = analysis.execute("SELECT count(*) FROM requests").fetchone()[0]
    return sorted(abs(eff - on_wire[port, sid]) for port, sid, eff in judged if on_wire.get((port, sid)) is not None), n


def _bound_wire_errors(protocol: str, err: list[float], n_requests: int) -> None:
    print(protocol, "client TTFT vs the client's wire: median", round(median(err), 3), "ms, p90",
          round(err[int(0.9 * len(err))], 3), "ms, n", len(err))  # fmt: skip
    assert len(err) > 0.8 * n_requests
    assert median(err) < 1.0 and err[int(0.9 * len(err))] < 5.0, err


def _estimate_errors(con) -> dict[str, list[float]]:
    """Per request, |keyless - decrypted| of the times the record layer can show (ms)."""
    rows = con.execute("""
        SELECT abs(epoch_ns(n.request_start) - epoch_ns(k.request_start)) / 1e6,
               abs(epoch_ns(n."end") - epoch_ns(k."end")) / 1e6,
               abs(epoch_ns(n.first_byte) - epoch_ns(k.first_byte)) / 1e6,
               abs(n.gap_p50_ms - k.gap_p50_ms),
               k.ttft_ms - n.ttft_ms
        FROM keys.requests AS k JOIN nokeys.requests AS n USING (conn_id, stream_id)
    """).fetchall()
    names = ("start", "end", "first_byte", "gap_p50", "ttft_under")
    return {name: sorted(r[i] for r in rows if r[i] is not None) for i, name in enumerate(names)}


def _p99(values: list[float]) -> float:
    return values[int(0.99 * (len(values) - 1))]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark (apt-get install tshark)")
@pytest.mark.parametrize("protocol", ["openai-http1", "grpc"])
def test_lab_over_tls_decrypted_and_estimated(tmp_path, protocol):
    """``tailtap lab run queueing --tls``: the server over TLS with a self-signed certificate
    (uvicorn HTTPS/1.1; grpcio with ALPN h2, called by httpx since grpcio cannot write a key
    log), httpx writing the key log. tshark decrypts every request with it; so does tailtap,
    and attributes the queueing window. Without the key log: over HTTP/1.1 each exchange is
    estimated from the record layer (start and end exact, first byte within a millisecond;
    its TTFT is the first response byte, which this server sends before the prefill) and
    the window's attribution reads the same; over HTTP/2 the estimates are per connection
    (``tls_burst``), not scored per request: as many as the streams, less by 5% at most, more
    by 10% at most. More, because httpx may write a request's HEADERS and its DATA in two
    records, and when the server sends a chunk of another stream between them the second
    record reads as a new request; how often depends on the scheduler: 237 to 251 bursts for
    235 streams over seven runs on a 2-core machine, five of them beside a CPU hog."""
    pytest.importorskip("uvicorn", reason="needs uvicorn (pip install -e '.[test]')")
    import duckdb

    from parsers.tls import KeyLog
    from telemetry.cli.sql import open_analysis
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.lab.runner import run_scenario
    from telemetry.lab.sweep_score import judge, tailtap_side, truth_of
    from telemetry.store.parquet import Store

    out = tmp_path / "run"
    labels = run_scenario("queueing", out, seed=7, protocol=protocol, tls=True, client_capture=True,
                          log=lambda *_: None)  # fmt: skip
    assert labels["tls"] == {"keylog": "keys.txt", "sni": "lab-llm.test"}
    check = labels["client_check"]
    assert check["checked"] and check["ok"], check  # tshark, decrypting with the client's key log
    truth = truth_of(out / "client.parquet")
    windows = {w["name"]: w for w in labels["windows"]}

    keys = KeyLog()
    keys.add_text((out / "keys.txt").read_text(), "keys.txt")
    assert keys and not keys.problems, keys.problems
    figures, stores = {}, {}
    for name, keylog in (("keys", keys), ("nokeys", None)):
        store = stores[name] = Store(tmp_path / name)
        result = ingest_file(out / "capture.pcap", store, IngestOptions(keylog=keylog))
        assert result.error is None, result.error
        con = open_analysis(store.root)  # as `tailtap sql --store` reads it
        assert not isinstance(con, int)
        protocols = con.execute("SELECT protocol, encrypted, estimated, count(*) FROM requests GROUP BY ALL").fetchall()
        if keylog is not None:
            decrypted = "http1-tls" if protocol == "openai-http1" else "h2-tls"
            assert protocols == [(decrypted, True, False, len(truth))], protocols
            statuses = con.execute("SELECT grpc_status, count(*) FROM requests GROUP BY ALL ORDER BY 1").fetchall()
            if protocol == "grpc":  # as the client got them
                want = {c: n for c, n in Counter(t["grpc_status"] for t in truth).items()}
                assert dict(statuses) == want, (statuses, want)
            # decrypted, the TTFT attribution judges by against the client's wire (its veth's
            # capture, decrypted with the same key log)
            err, n = _wire_ttft_errors(out, tmp_path, store.root, keylog)
            _bound_wire_errors(protocol, err, n)
        else:
            assert [p[:3] for p in protocols] == [("tls", True, True)], protocols
            over = 0.05 if protocol == "openai-http1" else 0.10
            assert -0.05 * len(truth) <= protocols[0][3] - len(truth) <= over * len(truth), (protocols, len(truth))
            kinds = con.execute("SELECT DISTINCT kind FROM requests").fetchall()
            assert kinds == [("tls_exchange" if protocol == "openai-http1" else "tls_burst",)], kinds
            if protocol != "openai-http1":
                continue  # per connection: no request to score
        figures[name] = judge(truth, tailtap_side(con), windows)

    for name, f in figures.items():
        (window,) = f["windows"]
        assert window["dominant"] == "queueing" and window["slow"] >= 10, (name, window)
        carried, slow = f["carry"][1], f["carry"][0]
        assert carried >= 0.8 * slow, (name, f["carry"], f["misses"][:5])
        assert f["outside"][1] <= 0.02 * f["outside"][0], (name, f["outside_blamed"][:5])
        print(name, "carry", f["carry"], "outside", f["outside"], "decomposition", f["decomp"])
    if protocol != "openai-http1":
        return
    assert abs(figures["keys"]["carry"][1] - figures["nokeys"]["carry"][1]) <= 0.1 * figures["keys"]["carry"][0]
    con = duckdb.connect()
    for name, store in stores.items():
        con.execute(f"ATTACH ':memory:' AS {name}")
        con.execute(f"CREATE VIEW {name}.requests AS SELECT * FROM read_parquet('{store.root}/requests/**/*.parquet')")
    err = _estimate_errors(con)
    print({k: (round(median(v), 3), round(_p99(v), 3)) for k, v in err.items()})  # median, p99 (ms)
    assert len(err["start"]) >= 0.95 * len(truth)
    assert _p99(err["start"]) < 0.5 and _p99(err["end"]) < 0.5
    assert median(err["first_byte"]) < 0.5 and _p99(err["first_byte"]) < 5.0
    assert median(err["gap_p50"]) < 0.5
    # the TTFT estimate is the first response byte: never later than the first token
    assert min(err["ttft_under"]) > -1.0
