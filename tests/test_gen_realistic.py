"""The realistic benchmark capture's generator writes HTTP/2 a peer would accept."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gen_realistic import MAX_FRAME, _data_frames, _grpc  # noqa: E402


def _frames(buf: bytes) -> list[tuple[int, int, int, bytes]]:
    out, i = [], 0
    while i < len(buf):
        length = int.from_bytes(buf[i:i + 3], "big")
        ftype, flags, sid = buf[i + 3], buf[i + 4], struct.unpack(">I", buf[i + 5:i + 9])[0]
        out.append((ftype, flags, sid, buf[i + 9:i + 9 + length]))
        i += 9 + length
    assert i == len(buf)
    return out


def test_data_frames_never_exceed_the_default_max_frame_size() -> None:
    # the largest unary response the generator draws: 16,384 bytes + the 5-byte gRPC prefix
    # (one DATA frame of 16,389 bytes made the decoder lose frame sync 3 times in 10M packets)
    for size in (1, 16_379, 16_380, 16_384, 40_000):
        msg = _grpc(bytes(range(256)) * (size // 256) + bytes(size % 256))
        frames = _frames(_data_frames(7, msg))
        assert all(ftype == 0 and flags == 0 and sid == 7 for ftype, flags, sid, _ in frames)
        assert all(len(p) <= MAX_FRAME for *_, p in frames)
        assert len(frames) == -(-len(msg) // MAX_FRAME)
        assert b"".join(p for *_, p in frames) == msg
