"""``python -m fuzz TARGET [libFuzzer flags, e.g. -runs=100000]``: one target under atheris,
seeded from fuzz/seeds (made by fuzz/seeds.py from the project's captures) and the
target's regressions; a crash's input is written to fuzz/regressions/TARGET/.

More than ``SLICE_RUNS`` inputs run in slices of that many, one process each, one after the
other: under atheris a process grows with the inputs it runs (~36 KiB an input on the
session target, 1.2 GiB after 30,000; tracemalloc finds a sixth of it in numpy arrays of
the HTTP/2 frame scan kept alive, the rest is outside Python's heap), while the same
target run on mutated seeds without atheris stays flat; a run of 200,000 ran out of its
2 GiB. The slices share what they find: libFuzzer adds the inputs that
reach new code to the first corpus folder, fuzz/seeds/TARGET, which the next slice loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent

with atheris.instrument_imports(include=["parsers"]):
    from fuzz.targets import TARGETS


SLICE_RUNS = int(os.environ.get("TAILTAP_FUZZ_SLICE", "20000"))  # (smaller in the tests)
_RUNS = re.compile(r"-runs=(\d+)$")


def _in_slices(name: str, flags: list[str], runs: int) -> None:
    """``runs`` inputs as processes of at most SLICE_RUNS each; the first that fails
    (a crash, a timeout, memory) ends the run with its exit status."""
    others = [f for f in flags if not _RUNS.match(f)]
    done = 0
    while done < runs:
        n = min(SLICE_RUNS, runs - done)
        print(f"fuzz {name}: inputs {done + 1:,}-{done + n:,} of {runs:,}", file=sys.stderr, flush=True)
        code = subprocess.run([sys.executable, "-m", "fuzz", name, *others, f"-runs={n}"], cwd=HERE.parent).returncode
        if code:
            sys.exit(code)
        done += n


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: python -m fuzz {{{','.join(TARGETS)}}} [-runs=N ...]")
    name = sys.argv[1]
    runs = [int(m.group(1)) for f in sys.argv[2:] if (m := _RUNS.match(f))]
    if runs and runs[-1] > SLICE_RUNS:
        _in_slices(name, sys.argv[2:], runs[-1])
        return
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
