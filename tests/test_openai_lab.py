"""The lab on the OpenAI-compatible protocols (issue 13): the ``resource_exhausted``
scenario run against the lab's streaming server on uvicorn (HTTP/1.1) and on hypercorn
(h2c), through the bridge, captured at the server's veth.

What is checked: the client's requests (port, stream id / exchange index, request id)
match the capture (tshark); tailtap finds every one of them, with the client's token
count as ``completion_tokens``, one message per chunk and no ``[DONE]`` message, the
model as sent, each 429 as the client got it; and its client-side TTFT estimate (from
the client's ACKs) agrees with the client's own TTFT, both counted from the request's
last byte (median within 3 ms: the client is an asyncio Python process on a shared
machine; over h2c it takes ~1.5 ms between its HEADERS and the end of its request body). How attribution scores on such runs is
measured by ``bench/score_attribution.py`` (the lab runs are not kept in the repository).
"""

from __future__ import annotations

import shutil
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
    from telemetry.db import connect
    from telemetry.ingest import IngestOptions, ingest_file
    from telemetry.lab.runner import run_scenario
    from telemetry.store import Store

    out = tmp_path / "run"
    labels = run_scenario("resource_exhausted", out, duration=6.0, seed=3, protocol=protocol, log=lambda *_: None)
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
    err = sorted(abs(r[9] - r[3]) for r in gen if r[9] is not None and r[3] is not None)
    assert len(err) > 0.9 * len(gen)
    assert median(err) < 3.0, err
