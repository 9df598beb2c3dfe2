"""`tailtap` run as a user runs it, in a process of its own: its JSON or CSV read back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def tailtap(*args: str) -> subprocess.CompletedProcess:
    """`tailtap ARGS` (exit code 0 asserted, with its standard error as the message)."""
    run = subprocess.run([sys.executable, "-m", "telemetry", *args], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run


def analyze_json(capture: Path, store: Path, *options: str) -> dict:
    """`tailtap analyze CAPTURE --out STORE --format json OPTIONS`, read."""
    return json.loads(tailtap("analyze", str(capture), "--out", str(store), "--format", "json", *options).stdout)


def sql_rows(store: Path, query: str) -> list[list[str]]:
    """`tailtap sql` on ``store`` as CSV: its rows after the header, as text."""
    return [line.split(",") for line in tailtap("sql", "--store", str(store), "--format", "csv", query).stdout.splitlines()[1:]]
