"""Canonical dump of every table tailtap writes for a set of captures, to check that a
refactoring leaves the outputs unchanged (row order and file layout may differ).

Usage: python bench/golden_outputs.py OUT.json CAPTURE... ; diff two OUT.json files with
``--compare A.json B.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parsers.tls import KeyLog  # noqa: E402
from telemetry.ingest import IngestOptions, ingest_file  # noqa: E402
from telemetry.ingest import split as ingest_split  # noqa: E402
from telemetry.store.parquet import Store  # noqa: E402
from telemetry.store.schema import TABLES  # noqa: E402

# capture_id: the file's hash, no parse result (its scheme changed: XXH3-128 since f8545e3)
VOLATILE = {"ingest_time", "path", "capture_id"}
# columns whose values come from a closed vocabulary (parsers/records.py): their distinct
# values are dumped too, so a test can check each against its vocabulary
VOCABULARY_COLUMNS = {"tcp_events": ("kind", "prompt"), "h2_events": ("kind",), "rtt_samples": ("source",),
                      "connections": ("history",)}


def dump(captures: list[str], processes: int = 1, keylog: KeyLog | None = None) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for cap in captures:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(tmp)
            options = IngestOptions(force=True, processes=processes, store_models=False, keylog=keylog)
            res = ingest_file(cap, store, options)
            tables: dict[str, object] = {"error": res.error, "issues": sorted(i.kind for i in res.issues)}
            vocabulary: dict[str, set[str]] = {}
            for table in TABLES:
                files = store.table_files(table)
                rows: list[str] = []
                for f in files:
                    t = pq.read_table(f)
                    cols = [c for c in t.column_names if c not in VOLATILE and c not in ("date", "hour")]
                    t = t.select(cols)
                    for i, f in enumerate(t.schema):
                        if pa.types.is_timestamp(f.type):  # ns timestamps do not fit datetime
                            t = t.set_column(i, f.name, t.column(i).cast(pa.int64()))
                    for row in t.to_pylist():
                        rows.append(json.dumps(row, sort_keys=True, default=str))
                rows.sort()
                for col in VOCABULARY_COLUMNS.get(table, ()):
                    vocabulary.setdefault(f"{table}.{col}", set()).update(
                        v for f in files for v in pq.read_table(f, columns=[col]).column(0).to_pylist() if v is not None)
                digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()
                tables[table] = {"rows": len(rows), "sha": digest, "sample": rows[:3]}
            tables["vocabulary"] = {k: sorted(v) for k, v in sorted(vocabulary.items())}
            out[f"{Path(cap).parent.name}/{Path(cap).name}"] = tables  # samples share a file name
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("captures", nargs="*")
    ap.add_argument("--compare", nargs=2)
    ap.add_argument("--split", action="store_true", help="split every capture between two processes, however small")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        bad = 0
        for cap in sorted(set(a) | set(b)):
            for table in sorted(set(a.get(cap, {})) | set(b.get(cap, {}))):
                x, y = a.get(cap, {}).get(table), b.get(cap, {}).get(table)
                if x != y:
                    bad += 1
                    print(f"DIFF {cap} {table}: {json.dumps(x)[:300]} != {json.dumps(y)[:300]}")
        print("identical" if not bad else f"{bad} differences")
        sys.exit(1 if bad else 0)
    if args.split:
        ingest_split.SPLIT_MIN_BYTES = 0
    Path(args.out).write_text(json.dumps(dump(args.captures, 2 if args.split else 1), indent=1))


if __name__ == "__main__":
    main()
