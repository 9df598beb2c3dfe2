"""Grafana dashboards: the committed JSON is what the code defines, it is valid, and every
panel's query runs against a real store through the DuckDB file the data source reads.

No Grafana server can run here, so `push` is checked against a local HTTP listener that
records what grafana-client sends (the request Grafana's API would receive).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import duckdb
import pytest

from telemetry.dashboards import DASHBOARDS, DASHBOARDS_DIR, dashboard_json, push, render_macros
from telemetry.db import export_database
from telemetry.ingest import IngestOptions, ingest_file
from telemetry.store import Store

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def test_committed_json_is_the_code():
    for d in DASHBOARDS:
        committed = json.loads((DASHBOARDS_DIR / f"{d.uid}.json").read_text())
        assert committed == dashboard_json(d), f"dashboards/{d.uid}.json is stale: run `tailtap dashboards export`"


def test_dashboard_json_is_well_formed():
    uids = set()
    for d in DASHBOARDS:
        j = dashboard_json(d)
        assert j["uid"] not in uids
        uids.add(j["uid"])
        ids = [p["id"] for p in j["panels"]]
        assert len(ids) == len(set(ids))
        for p in j["panels"]:
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
            assert p["datasource"]["uid"] == "tailtap"
            (target,) = p["targets"]
            assert target["rawSql"] and target["format"] in ("time_series", "table")
            if p["type"] == "timeseries":
                assert "AS time" in target["rawSql"]


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "store")
    sample = SAMPLES / "loss_burst" / "capture.pcap"
    sources = [sample] if sample.exists() else sorted(CAPTURES.glob("grpc-go_*.pcapng"))
    if not sources:
        pytest.skip("no capture to build a store from")
    for src in sources:
        assert ingest_file(src, store, IngestOptions()).error is None
    return store


def test_every_panel_query_runs_on_a_real_store(tmp_path):
    store = _store(tmp_path)
    db = export_database(store, tmp_path / "tailtap.duckdb", {"window_s": 2.0})
    con = duckdb.connect(str(db), read_only=True)  # as the Grafana plugin opens it
    lo, hi = con.execute("SELECT min(first_ts), max(last_ts) FROM captures").fetchone()
    assert lo is not None
    nonempty = 0
    for d in DASHBOARDS:
        for p in d.panels:
            sql = render_macros(p.sql, f"{lo:%Y-%m-%dT%H:%M:%SZ}", f"{hi + dt.timedelta(seconds=1):%Y-%m-%dT%H:%M:%SZ}")
            try:
                rows = con.execute(sql).fetchall()
            except duckdb.Error as exc:
                pytest.fail(f"{d.uid} / {p.title}: {exc}")
            nonempty += bool(rows)
    assert nonempty >= len([p for d in DASHBOARDS for p in d.panels]) // 2


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Recorder.seen.append((self.path, self.headers.get("Authorization", ""), body))
        uid = body["dashboard"]["uid"]
        answer = json.dumps({"status": "success", "uid": uid, "url": f"/d/{uid}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


def test_push_sends_every_dashboard_with_the_token():
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.seen.clear()
    try:
        urls = push(f"http://127.0.0.1:{server.server_port}", "secret-token", folder_uid="ops")
    finally:
        server.shutdown()
    assert urls == [f"/d/{d.uid}" for d in DASHBOARDS]
    for (path, auth, body), d in zip(_Recorder.seen, DASHBOARDS, strict=True):
        assert path == "/api/dashboards/db"
        assert auth == "Bearer secret-token"
        assert body["overwrite"] is True and body["folderUid"] == "ops"
        assert body["dashboard"] == dashboard_json(d)
