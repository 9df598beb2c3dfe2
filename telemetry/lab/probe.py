"""UDP echo probe: measures the path's round trip and gives the bridge tests traffic whose
every packet can be found again in a capture (the payload starts with a sequence number).

    python -m telemetry.lab.probe echo PORT SECONDS
    python -m telemetry.lab.probe send HOST PORT COUNT INTERVAL_MS OUT.json [SIZE]

``send`` writes ``{"sent": [[seq, t_send_ns], ...], "recv": [[seq, t_recv_ns], ...]}``.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import sys
import time

HEADER = struct.Struct("!Iq")  # seq, send time ns


def echo(port: int, seconds: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    print("READY", flush=True)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        r, _, _ = select.select([s], [], [], min(left, 0.2))
        if r:
            data, addr = s.recvfrom(65536)
            s.sendto(data, addr)


def send(host: str, port: int, count: int, interval_ms: float, out: str, size: int = 64) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((host, port))
    s.setblocking(False)
    sent: list[list[int]] = []
    recv: list[list[int]] = []
    pad = b"\0" * max(0, size - HEADER.size)
    t_next = time.monotonic()
    for seq in range(count):
        t_ns = time.time_ns()
        s.send(HEADER.pack(seq, t_ns) + pad)
        sent.append([seq, t_ns])
        t_next += interval_ms / 1000
        while (wait := t_next - time.monotonic()) > 0:
            r, _, _ = select.select([s], [], [], wait)
            if r:
                _drain(s, recv)
    end = time.monotonic() + 0.5  # late replies (delay windows)
    while (wait := end - time.monotonic()) > 0:
        r, _, _ = select.select([s], [], [], wait)
        if r:
            _drain(s, recv)
    with open(out, "w") as f:
        json.dump({"sent": sent, "recv": recv}, f)


def _drain(s: socket.socket, recv: list[list[int]]) -> None:
    while True:
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return
        recv.append([HEADER.unpack_from(data)[0], time.time_ns()])


def main(argv: list[str]) -> None:
    if argv[0] == "echo":
        echo(int(argv[1]), float(argv[2]))
    elif argv[0] == "send":
        send(argv[1], int(argv[2]), int(argv[3]), float(argv[4]), argv[5],
             int(argv[6]) if len(argv) > 6 else 64)  # fmt: skip
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
