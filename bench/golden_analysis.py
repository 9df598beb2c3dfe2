"""Canonical dump of every analysis model (queries/) for a set of captures, to check that a
change to how the models are computed leaves their answers unchanged.

Each capture is ingested into its own store; every model is read through
``telemetry.models.db.connect`` with the default settings and, separately, with 2 s windows; rows are sorted, floats rounded to 6 significant digits (parallel sums may
differ in the last bits), and hashed.

Usage: python bench/golden_analysis.py OUT.json CAPTURE... ; compare two dumps with
``--compare A.json B.json`` (prints the models that differ, exit 1 if any).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from datetime import datetime
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from telemetry.ingest import IngestOptions, ingest_file  # noqa: E402
from telemetry.models.db import connect, load_models  # noqa: E402
from telemetry.store.parquet import Store  # noqa: E402


def _canon(value: object) -> object:
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, Decimal):
        return float(f"{float(value):.6g}")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    return value


def dump_models(store: Store, params: dict[str, object] | None, models: list[str],
                exclude: dict[str, list[str]]) -> dict[str, object]:
    con = connect(store, params)
    out: dict[str, object] = {}
    for name in models:
        present = {d[0] for d in con.execute(f"SELECT * FROM {name} LIMIT 0").description}
        left_out = [c for c in exclude.get(name, []) if c in present]
        drop = f" EXCLUDE ({', '.join(left_out)})" if left_out else ""
        cur = con.execute(f"SELECT *{drop} FROM {name}")
        cols = [d[0] for d in cur.description]
        rows = sorted(json.dumps(_canon(dict(zip(cols, r, strict=True))), sort_keys=True, default=str)
                      for r in cur.fetchall())
        out[name] = {"rows": len(rows), "sha": hashlib.sha256("\n".join(rows).encode()).hexdigest(),
                     "sample": rows[:2]}
    return out


def dump(captures: list[str], models: list[str], exclude: dict[str, list[str]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for cap in captures:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(tmp)
            res = ingest_file(cap, store, IngestOptions(force=True))
            key = f"{Path(cap).parent.name}/{Path(cap).name}"
            if res.error:
                out[key] = {"error": res.error}
                continue
            out[key] = {"default": dump_models(store, None, models, exclude),
                        "window=2": dump_models(store, {"window_s": 2.0}, models, exclude)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("captures", nargs="*")
    ap.add_argument("--compare", nargs=2)
    ap.add_argument("--models", help="comma-separated models (default: all in queries/)")
    ap.add_argument("--exclude", default="", help="comma-separated model.column left out (a column a change moved)")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        bad = 0
        for cap in sorted(set(a) | set(b)):
            for setting in sorted(set(a.get(cap, {})) | set(b.get(cap, {}))):
                x, y = a.get(cap, {}).get(setting, {}), b.get(cap, {}).get(setting, {})
                for model in sorted(set(x) | set(y)) if isinstance(x, dict) else [None]:
                    mx = x.get(model) if model else x
                    my = y.get(model) if model and isinstance(y, dict) else y
                    if mx != my:
                        bad += 1
                        print(f"DIFF {cap} {setting} {model}: {json.dumps(mx)[:240]} != {json.dumps(my)[:240]}")
        print("identical" if not bad else f"{bad} differences")
        sys.exit(1 if bad else 0)
    models = args.models.split(",") if args.models else [m.name for m in load_models()]
    exclude: dict[str, list[str]] = {}
    for item in filter(None, args.exclude.split(",")):
        model, column = item.split(".")
        exclude.setdefault(model, []).append(column)
    Path(args.out).write_text(json.dumps(dump(args.captures, models, exclude), indent=1))


if __name__ == "__main__":
    main()
