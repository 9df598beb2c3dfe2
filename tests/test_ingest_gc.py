"""The ingest makes no reference cycles.

A file is ingested without automatic cycle collection (telemetry.ingest.commit): the
pipeline frees what it allocates by reference counting. Anything of ours left in a cycle
would stay until the file ends, growing with the file; these tests ingest real captures
of each protocol path (gRPC over h2c, TLS decrypted with its key log, HTTP/1.1 through a
CONNECT proxy) and collect afterwards: no object of the parsers or the ingest may be
among what the collector frees.
"""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path

import pytest
from shared_paths import CAPTURES

from parsers.tls import KeyLog
from telemetry.ingest import IngestOptions, ingest_file
from telemetry.ingest.commit import no_cycle_collection
from telemetry.store.parquet import Store

SAMPLES = Path(__file__).resolve().parents[1] / "samples"

CASES = {
    "grpc-h2c": (SAMPLES / "baseline" / "capture.pcap", None),
    "grpc-tls-decrypted": (SAMPLES / "sweep" / "tls_probe" / "capture.pcap", SAMPLES / "sweep" / "tls_probe" / "keys.txt"),
    "h2-tls12-decrypted": (CAPTURES / "http2-16-ssl.pcapng", CAPTURES / "http2-16-ssl.keylog"),
    "http1-connect-proxy": (CAPTURES / "grpc-node_via_connect_proxy.pcap", None),
}


def _ours(obj: object) -> bool:
    owner = getattr(obj, "__self__", None) if type(obj).__name__ == "method" else None
    module = type(owner if owner is not None else obj).__module__ or ""
    return module.split(".")[0] in ("parsers", "telemetry")


def _ingest(path: Path, keylog_path: Path | None, root: Path):
    options = IngestOptions(store_models=False)
    if keylog_path is not None:
        options.keylog = KeyLog()
        options.keylog.add_text(keylog_path.read_text(), str(keylog_path))
    return ingest_file(path, Store(root), options)


@pytest.mark.parametrize("case", sorted(CASES))
def test_ingest_leaves_no_cycles(tmp_path, case):
    path, keylog = CASES[case]
    if not path.exists():
        pytest.skip(f"capture not found: {path}")
    assert _ingest(path, keylog, tmp_path / "first").error is None  # first-use imports' own cycles
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection frees is kept in gc.garbage, to be read
    try:
        result = _ingest(path, keylog, tmp_path / "second")
        gc.collect()
        ours = Counter(type(o).__qualname__ for o in gc.garbage if _ours(o))
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
    assert result.error is None and result.packets > 0 and result.requests > 0, result
    assert not ours, f"left in reference cycles by the ingest of {path.name}: {dict(ours)}"


def test_cycle_collection_off_while_ingesting_and_back_after():
    assert gc.isenabled()
    with no_cycle_collection():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with no_cycle_collection():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
