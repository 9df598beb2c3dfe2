"""The lab's labelled samples (samples/<scenario>/: capture.pcap, labels.json,
client.parquet) as the tests use them: analyzed into a fresh store, with the client's own
records beside the views as table ``truth``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from telemetry.ingest import IngestOptions, ingest_file
from telemetry.models.db import connect
from telemetry.store.parquet import Store

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.name for p in SAMPLES.iterdir() if (p / "labels.json").exists()) if SAMPLES.is_dir() else []


def labels(name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / name / "labels.json").read_text())


def analyzed(tmp_path: Path, name: str, params: dict[str, Any] | None = None):
    """A DuckDB connection over the sample's store (model parameters ``params``), with
    the lab client's records as table ``truth``."""
    run = SAMPLES / name
    store = Store(tmp_path / name)
    assert ingest_file(run / "capture.pcap", store, IngestOptions()).error is None
    con = connect(store, params)
    con.execute(f"CREATE TABLE truth AS SELECT * FROM read_parquet('{run / 'client.parquet'}')")
    return con
