"""``python -m fuzz TARGET [libFuzzer flags, e.g. -runs=100000]``: one target under atheris,
seeded from fuzz/seeds (made by fuzz/seeds.py from the project's captures) and the
target's regressions; a crash's input is written to fuzz/regressions/TARGET/."""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent

with atheris.instrument_imports(include=["parsers"]):
    from fuzz.targets import TARGETS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: python -m fuzz {{{','.join(TARGETS)}}} [-runs=N ...]")
    name = sys.argv[1]
    target = TARGETS[name]
    crashes = HERE / "regressions" / name
    crashes.mkdir(parents=True, exist_ok=True)
    corpus = HERE / "seeds" / name
    from fuzz.seeds import write_seeds

    if not corpus.is_dir():
        write_seeds(HERE / "seeds")
    corpus.mkdir(parents=True, exist_ok=True)  # without the shared captures a target may have no seed
    max_len = 16384 if name == "capture" else 65536  # whole captures: keep each run short
    args = [sys.argv[0], *sys.argv[2:], f"-artifact_prefix={crashes}/", "-rss_limit_mb=2048", "-timeout=10",
            f"-max_len={max_len}", str(corpus), str(crashes)]  # fmt: skip
    atheris.Setup(args, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
