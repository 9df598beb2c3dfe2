"""`tailtap analyze` over damaged copies of a real capture (fuzz/damaged.py; `make damaged`
runs every sample and shared capture): no traceback, no exit code but 0 or 1, within
4 GiB and 300 s. Its first run found a capture with packets stamped 1970 growing
`analyze` past 18 GB."""

from __future__ import annotations

import random
from pathlib import Path

from fuzz import damaged

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "mixed" / "capture.pcap"


def test_every_kind_of_damage_is_analysed_or_refused_in_one_line(tmp_path):
    runs = damaged.run([SAMPLE], copies=1, seed=55)
    assert sorted(r.kind for r in runs) == sorted(damaged.KINDS)
    assert not [r for r in runs if r.failed], damaged.report(runs, 55)
    assert all(r.code == 0 for r in runs if r.kind != "cut_short")  # something of each was read
    assert max(r.peak_mib for r in runs) < 1024


def test_the_damage_is_what_it_says():
    data = SAMPLE.read_bytes()
    order, _, packets = damaged.read_pcap(data)
    rng = random.Random(1)
    _, _, zeroed = damaged.read_pcap(damaged.damage(data, "stamped_zero", rng))
    assert len(zeroed) == len(packets) and 0 < sum(p[0] == 0 for p in zeroed) < len(packets) // 10
    _, _, doubled = damaged.read_pcap(damaged.damage(data, "doubled", rng))
    assert len(doubled) == 2 * len(packets)
    _, _, cut = damaged.read_pcap(damaged.damage(data, "cut_short", rng))
    assert len(cut) < len(packets) and [p[2] for p in cut[:-1]] == [p[2] for p in packets[: len(cut) - 1]]
    _, _, flipped = damaged.read_pcap(damaged.damage(data, "flip_payload", rng))
    changed = [a for a, b in zip(packets, flipped, strict=True) if a[2] != b[2]]
    assert changed and all(a[2][:damaged._HEADERS] == b[2][:damaged._HEADERS] for a, b in zip(packets, flipped, strict=True))
