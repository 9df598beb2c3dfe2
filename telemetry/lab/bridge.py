"""User-space impairment bridge: moves Ethernet frames between two veths with AF_PACKET
sockets and impairs them per direction on a schedule (see ``impair.py``).

Runs inside the lab's middle namespace (the kernel has no netem), ideally under
``chrt -r 10``. Started by the runner as ``python -m telemetry.lab.bridge CONFIG.json``;
prints ``READY`` once both sockets are bound, then reads one line ``T0 <ns>`` on stdin
that fixes the schedule's time origin (windows in the config are offsets from it), and
runs until ``max_runtime_s`` or SIGTERM/SIGINT. On exit it writes ``out`` (JSON): stats,
the measured added delay of unimpaired frames, the periods in which it was disturbed
(late by more than ``late_threshold_ms``), and one row per frame that arrived inside a
window (columns in ``EVENT_COLUMNS``).

Timing: arrival times are the kernel's receive timestamps (SO_TIMESTAMPNS, the same
CLOCK_REALTIME tcpdump stamps with); an unimpaired frame is sent straight from the
receive loop; delayed frames wait in a heap keyed by release time and the loop sleeps in
``select`` (microsecond timeout) until the earliest one is due.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from array import array
from heapq import heappop, heappush
from typing import Any

from telemetry.lab.impair import (
    DIRECTIONS,
    DROP,
    NS_PER_MS,
    PASS,
    Impairer,
    Window,
)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
MAX_FRAME = 1514  # Ethernet header + 1500 MTU; bigger frames mean offloads are still on

EVENT_COLUMNS = (
    "t_rx_ns",  # kernel receive time at the bridge
    "direction",  # to_server | to_client
    "window",  # window name
    "action",  # forward | delay | hold | drop | backlog
    "by",  # model kind that acted (or "fifo")
    "release_ns",  # planned release (null when dropped)
    "t_tx_ns",  # when the bridge actually sent it (null when dropped)
    "frame_len",
    "src_port",
    "dst_port",
    "tcp_seq",
    "payload_len",
    "ip_id",
)


def open_packet_socket(ifname: str) -> socket.socket:
    # Bound with protocol 0 first so nothing from other interfaces is queued before bind.
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    except OSError:
        pass  # old kernel: outgoing copies are filtered by pkttype below
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((ifname, ETH_P_ALL))
    s.setblocking(False)
    return s


def packet_stats(s: socket.socket) -> tuple[int, int]:
    """(packets, drops) since the last call (the kernel resets them on read)."""
    raw = s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
    return struct.unpack("II", raw)


def parse_frame(f: bytes) -> tuple[bool, int, int, int, int, int]:
    """(is_ipv4, src_port, dst_port, tcp_seq, payload_len, ip_id); ports etc. 0 if not TCP."""
    if len(f) < 34 or f[12] != 0x08 or f[13] != 0x00:
        return False, 0, 0, 0, 0, 0
    ihl = (f[14] & 0x0F) * 4
    total, ip_id = struct.unpack_from("!HH", f, 16)
    if f[23] != 6 or len(f) < 14 + ihl + 20:
        return True, 0, 0, 0, 0, ip_id
    o = 14 + ihl
    sport, dport, seq = struct.unpack_from("!HHI", f, o)
    doff = (f[o + 12] >> 4) * 4
    return True, sport, dport, seq, max(0, total - ihl - doff), ip_id


def percentiles(values: array, qs: tuple[float, ...] = (50, 90, 99, 99.9)) -> dict[str, float]:
    if not values:
        return {"n": 0}
    v = sorted(values)
    out: dict[str, float] = {"n": len(v)}
    for q in qs:
        k = min(len(v) - 1, max(0, int(round(q / 100 * (len(v) - 1)))))
        out[f"p{q:g}"] = v[k] / NS_PER_MS
    out["max"] = v[-1] / NS_PER_MS
    out["mean"] = sum(v) / len(v) / NS_PER_MS
    return out


def merge_periods(events: list[tuple[int, int]], gap_ns: int) -> list[dict[str, Any]]:
    """Cluster (t_ns, late_ns) events closer than gap_ns into disturbed periods."""
    out: list[dict[str, Any]] = []
    for t, late in sorted(events):
        if out and t - out[-1]["end_ns"] <= gap_ns:
            o = out[-1]
            o["end_ns"] = max(o["end_ns"], t + late)
            o["events"] += 1
            o["max_late_ms"] = max(o["max_late_ms"], late / NS_PER_MS)
        else:
            out.append(
                {"start_ns": t, "end_ns": t + late, "events": 1, "max_late_ms": late / NS_PER_MS}
            )
    return out


class Bridge:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.socks = [open_packet_socket(cfg["if_client"]), open_packet_socket(cfg["if_server"])]
        for s in self.socks:  # reset the kernel counters
            packet_stats(s)
        self.impairer: Impairer | None = None
        self.heap: list[tuple[int, int, int, bytes, int, list | None]] = []
        self.seq = 0
        self.pending = [0, 0]  # frames in the heap per output socket
        self.stop = False
        self.events: list[list[Any]] = []
        self.idle_delay = array("q")  # t_tx - t_rx of frames outside windows (ns)
        self.late: list[tuple[int, int]] = []  # (t_ns, late_ns) beyond the threshold
        self.late_ns = int(float(cfg.get("late_threshold_ms", 1.0)) * NS_PER_MS)
        self.counts: dict[str, int] = {}
        self.stats = {
            "frames": [0, 0],
            "bytes": [0, 0],
            "oversize_frames": 0,
            "max_frame_len": 0,
            "send_retries": 0,
            "send_errors": 0,
            "left_in_heap": 0,
            "socket_drops": [0, 0],
            "loop_stalls": 0,
        }

    def set_t0(self, t0_ns: int) -> None:
        ws = [
            Window(
                w["name"],
                w["direction"],
                t0_ns + int(w["start_s"] * 1e9),
                t0_ns + int(w["end_s"] * 1e9),
                w["models"],
                seed=int(self.cfg.get("seed", 0)),
            )
            for w in self.cfg.get("windows", [])
        ]
        self.impairer = Impairer(ws, base=self.cfg.get("base", {}), seed=int(self.cfg.get("seed", 0)))
        self.t0_ns = t0_ns

    def _send(self, out: int, frame: bytes, release: int, row: list | None) -> bool:
        try:
            self.socks[out].send(frame)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:  # ENOBUFS and the like: retry shortly, count it
            if e.errno != 105:
                self.stats["send_errors"] += 1
                return True
            return False
        now = time.time_ns()
        if row is not None:
            row[6] = now
        late = now - release
        if late > self.late_ns:
            self.late.append((release, late))
        return True

    def _schedule(self, out: int, frame: bytes, release: int, t_rx: int, row: list | None) -> None:
        self.seq += 1
        self.pending[out] += 1
        heappush(self.heap, (release, self.seq, out, frame, t_rx, row))

    def _receive(self, i: int) -> None:
        s = self.socks[i]
        out = 1 - i
        imp = self.impairer
        for _ in range(256):
            try:
                frame, anc, _flags, addr = s.recvmsg(65536, 64)
            except (BlockingIOError, InterruptedError):
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            t_rx = 0
            for level, typ, data in anc:
                if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", data[:16])
                    t_rx = sec * 1_000_000_000 + nsec
            if not t_rx:
                t_rx = time.time_ns()
            n = len(frame)
            self.stats["frames"][i] += 1
            self.stats["bytes"][i] += n
            if n > MAX_FRAME:
                self.stats["oversize_frames"] += 1
            if n > self.stats["max_frame_len"]:
                self.stats["max_frame_len"] = n
            is_ip, sport, dport, seq, payload, ip_id = parse_frame(frame)
            if imp is None:
                d_release, d_action, d_window, d_by = t_rx, PASS, None, ""
            else:
                d = imp.decide(i, t_rx, n, payload, is_ip)
                d_release, d_action, d_window, d_by = d.release_ns, d.action, d.window, d.by
            row = None
            if d_action != PASS:
                key = f"{d_window}:{DIRECTIONS[i]}:{d_action}"
                self.counts[key] = self.counts.get(key, 0) + 1
                row = [
                    t_rx,
                    DIRECTIONS[i],
                    d_window,
                    d_action,
                    d_by,
                    d_release,
                    None,
                    n,
                    sport,
                    dport,
                    seq,
                    payload,
                    ip_id,
                ]
                self.events.append(row)
            if d_action == DROP or d_release is None:
                continue
            # Straight out only when nothing of this direction waits in the heap; otherwise
            # through the heap, behind the older frames (FIFO; the heap orders by release).
            if d_release <= time.time_ns() and not self.pending[out]:
                if self._send(out, frame, max(d_release, t_rx), row):
                    if d_action == PASS:
                        self.idle_delay.append(time.time_ns() - t_rx)
                    continue
                self.stats["send_retries"] += 1
            self._schedule(out, frame, d_release, t_rx, row)

    def _release_due(self, limit: int = 64) -> None:
        """Send due frames, at most ``limit`` per call so that a long due backlog (a queue
        emptying at a window's end) is interleaved with receiving, not sent in one block."""
        heap = self.heap
        now = time.time_ns()
        while heap and heap[0][0] <= now and limit > 0:
            release, seq, out, frame, t_rx, row = heap[0]
            if not self._send(out, frame, release, row):
                self.stats["send_retries"] += 1
                heappop(heap)  # retry shortly, keeping its place relative to later frames
                heappush(heap, (now + 50_000, seq, out, frame, t_rx, row))
                return
            heappop(heap)
            self.pending[out] -= 1
            now = time.time_ns()
            if row is None:  # an unimpaired frame that queued behind older ones
                # (with a path delay configured, what the bridge added beyond it)
                self.idle_delay.append(now - (release if self.cfg.get("base") else t_rx))
            limit -= 1

    def run(self) -> None:
        deadline = time.time_ns() + int(float(self.cfg.get("max_runtime_s", 120)) * 1e9)
        stdin_fd = sys.stdin.fileno()
        rlist: list[Any] = [self.socks[0], self.socks[1], stdin_fd]
        stdin_buf = b""
        while not self.stop:
            now = time.time_ns()
            if now >= deadline:
                break
            if self.heap:
                timeout = max(0.0, min(0.05, (self.heap[0][0] - now) / 1e9))
            else:
                timeout = 0.05
            try:
                ready, _, _ = select.select(rlist, [], [], timeout)
            except InterruptedError:
                continue
            after = time.time_ns()
            if not ready and after - now - int(timeout * 1e9) > self.late_ns:
                self.stats["loop_stalls"] += 1
                self.late.append((now + int(timeout * 1e9), after - now - int(timeout * 1e9)))
            for r in ready:
                if r == stdin_fd:
                    chunk = os.read(stdin_fd, 4096)
                    if not chunk:
                        rlist.remove(stdin_fd)
                        continue
                    stdin_buf += chunk
                    while b"\n" in stdin_buf:
                        line, stdin_buf = stdin_buf.split(b"\n", 1)
                        self._command(line.decode().strip())
                else:
                    self._receive(0 if r is self.socks[0] else 1)
            self._release_due()

    def _command(self, line: str) -> None:
        if line.startswith("T0 "):
            self.set_t0(int(line.split()[1]))
        elif line == "STOP":
            self.stop = True

    def report(self) -> dict[str, Any]:
        self.stats["left_in_heap"] = len(self.heap)
        for i, s in enumerate(self.socks):
            self.stats["socket_drops"][i] = packet_stats(s)[1]
        gap = int(float(self.cfg.get("disturbed_merge_ms", 250)) * NS_PER_MS)
        return {
            "config": self.cfg,
            "t0_ns": getattr(self, "t0_ns", None),
            "stats": self.stats,
            "counts": self.counts,
            "idle_delay_ms": percentiles(self.idle_delay),
            "late_threshold_ms": self.late_ns / NS_PER_MS,
            "disturbed": merge_periods(self.late, gap),
            "event_columns": list(EVENT_COLUMNS),
            "events": self.events,
        }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` dumps every thread's stack
    with open(argv[0]) as f:
        cfg = json.load(f)
    bridge = Bridge(cfg)
    # The event log grows to many thousands of lists; the cyclic GC would walk them all in
    # multi-ms pauses while frames wait. The bridge makes no reference cycles worth collecting.
    gc.disable()

    def _stop(signum: int, frame: Any) -> None:
        bridge.stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if "t0_ns" in cfg:
        bridge.set_t0(int(cfg["t0_ns"]))
    print("READY", flush=True)
    try:
        bridge.run()
    finally:
        rep = bridge.report()
        tmp = cfg["out"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rep, f)
        os.replace(tmp, cfg["out"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
