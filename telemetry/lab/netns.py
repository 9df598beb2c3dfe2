"""Network namespaces, veth pairs and offloads for the lab, plus cleanup.

Topology (all names are per-run, ``ttlab-<runner pid>-<n>-{c,b,s}``)::

    client ns                 bridge ns                    server ns
    c0 10.77.1.1/24  <--veth-->  bc  [bridge.py]  bs  <--veth-->  s0 10.77.1.2/24

The bridge namespace has no addresses: the bridge moves frames between ``bc`` and ``bs``
with AF_PACKET sockets, so client and server share one L2 segment through it. The
addresses exist only inside the namespaces created here; traffic never leaves them.

Offloads (TSO, GSO, GRO, scatter-gather, tx checksum) are switched off on all four veths
with the SIOCETHTOOL ioctl before any connection is made, so the kernel builds MSS-sized
segments and captured frames stay within the MTU (with offloads on, veths carry 64 KB
super-frames). The ioctl has to run inside each namespace: a short-lived thread joins it
with setns(2) (which only moves that thread) and opens the socket there.
"""

from __future__ import annotations

import array
import ctypes
import fcntl
import os
import re
import socket
import struct
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

PREFIX = "ttlab"
CLIENT_IF, BRIDGE_CLIENT_IF, BRIDGE_SERVER_IF, SERVER_IF = "c0", "bc", "bs", "s0"
CLIENT_IP, SERVER_IP, PREFIX_LEN = "10.77.1.1", "10.77.1.2", 24
MTU = 1500

SIOCETHTOOL = 0x8946
CLONE_NEWNET = 0x40000000
# (name, get command, set command) of the legacy ethtool value commands.
OFFLOADS = (
    ("tso", 0x1E, 0x1F),
    ("gso", 0x23, 0x24),
    ("gro", 0x2B, 0x2C),
    ("sg", 0x18, 0x19),
    ("tx_csum", 0x16, 0x17),
)

T = TypeVar("T")


def run(argv: list[str], check: bool = True, timeout: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=timeout)


def in_netns(ns: str, fn: Callable[[], T]) -> T:
    """Run fn in a thread that has joined network namespace ns (setns moves one thread)."""
    libc = ctypes.CDLL(None, use_errno=True)
    box: dict[str, Any] = {}

    def target() -> None:
        fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns({ns})")
            box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e
        finally:
            os.close(fd)

    t = threading.Thread(target=target, name=f"netns-{ns}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _ethtool(sock: socket.socket, ifname: str, cmd: int, value: int = 0) -> int:
    buf = array.array("B", struct.pack("II", cmd, value))
    addr, _ = buf.buffer_info()
    ifreq = struct.pack("16sP", ifname.encode(), addr)
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
    return struct.unpack("II", buf.tobytes())[1]


def set_offloads(ifname: str, on: bool = False) -> dict[str, bool]:
    """Switch offloads of ifname (in the caller's netns) and return their state after."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _name, _get, set_cmd in OFFLOADS:
            try:
                _ethtool(s, ifname, set_cmd, int(on))
            except OSError:
                pass  # not supported on this device: the read-back below tells
        state = {}
        for name, get_cmd, _set in OFFLOADS:
            try:
                state[name] = bool(_ethtool(s, ifname, get_cmd))
            except OSError:
                state[name] = False
        return state


def list_lab_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"], check=False).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.startswith(PREFIX + "-")]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ns_pids(ns: str) -> list[int]:
    out = run(["ip", "netns", "pids", ns], check=False).stdout
    return [int(x) for x in out.split() if x.isdigit()]


def cleanup_stale() -> list[str]:
    """Delete lab namespaces left by runs whose runner process is gone (and kill what still
    runs inside them, by pid). Returns the names deleted."""
    removed = []
    for ns in list_lab_namespaces():
        m = re.match(rf"{PREFIX}-(\d+)-", ns)
        if m and pid_alive(int(m.group(1))):
            continue
        for pid in ns_pids(ns):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        run(["ip", "netns", "del", ns], check=False)
        removed.append(ns)
    return removed


_counter = 0


@dataclass
class LabNet:
    """The three namespaces and two veth pairs of one lab run."""

    congestion_control: str = "reno"
    sysctls: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> {key: value}
    suffix: str = ""
    created: list[str] = field(default_factory=list)
    offloads: dict[str, dict[str, bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        global _counter
        _counter += 1
        self.suffix = self.suffix or f"{os.getpid()}-{_counter}"
        self.ns = {r: f"{PREFIX}-{self.suffix}-{r[0]}" for r in ("client", "bridge", "server")}

    @property
    def client(self) -> str:
        return self.ns["client"]

    @property
    def bridge(self) -> str:
        return self.ns["bridge"]

    @property
    def server(self) -> str:
        return self.ns["server"]

    def exec_argv(self, role: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[role], *argv]

    def create(self) -> None:
        try:
            self._create()
        except BaseException:
            self.destroy()
            raise

    def _create(self) -> None:
        for role, ns in self.ns.items():
            run(["ip", "netns", "add", ns])
            self.created.append(ns)
            # No IPv6 (no router solicitations / MLD noise in captures); an explicit
            # congestion control, since the host default may be refused in a new netns.
            kv = {
                "net.ipv6.conf.all.disable_ipv6": "1",
                "net.ipv6.conf.default.disable_ipv6": "1",
                "net.ipv4.tcp_congestion_control": self.congestion_control,
                **self.sysctls.get(role, {}),
            }
            run(["ip", "netns", "exec", ns, "sysctl", "-qw", *[f"{k}={v}" for k, v in kv.items()]])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        c, b, s = self.client, self.bridge, self.server
        run(["ip", "link", "add", CLIENT_IF, "netns", c, "type", "veth", "peer", "name",
             BRIDGE_CLIENT_IF, "netns", b])  # fmt: skip
        run(["ip", "link", "add", SERVER_IF, "netns", s, "type", "veth", "peer", "name",
             BRIDGE_SERVER_IF, "netns", b])  # fmt: skip
        for ns, ifname in (
            (c, CLIENT_IF),
            (b, BRIDGE_CLIENT_IF),
            (b, BRIDGE_SERVER_IF),
            (s, SERVER_IF),
        ):
            run(["ip", "-n", ns, "link", "set", ifname, "mtu", str(MTU)])
            self.offloads[ifname] = in_netns(ns, lambda i=ifname: set_offloads(i, False))
        run(["ip", "-n", c, "addr", "add", f"{CLIENT_IP}/{PREFIX_LEN}", "dev", CLIENT_IF])
        run(["ip", "-n", s, "addr", "add", f"{SERVER_IP}/{PREFIX_LEN}", "dev", SERVER_IF])
        for ns, ifname in (
            (c, CLIENT_IF),
            (b, BRIDGE_CLIENT_IF),
            (b, BRIDGE_SERVER_IF),
            (s, SERVER_IF),
        ):
            run(["ip", "-n", ns, "link", "set", ifname, "up"])
        still_on = {i: [k for k, v in st.items() if v] for i, st in self.offloads.items()}
        if any(still_on.values()):
            raise RuntimeError(f"offloads still on after SIOCETHTOOL: {still_on}")

    def link_stats(self) -> dict[str, Any]:
        import json

        out = {}
        for role, ifname in (("client", CLIENT_IF), ("bridge", BRIDGE_CLIENT_IF),
                             ("bridge", BRIDGE_SERVER_IF), ("server", SERVER_IF)):  # fmt: skip
            r = run(["ip", "-n", self.ns[role], "-s", "-j", "link", "show", ifname], check=False)
            try:
                st = json.loads(r.stdout)[0]["stats64"]
                out[ifname] = {
                    "rx_packets": st["rx"]["packets"],
                    "rx_dropped": st["rx"]["dropped"],
                    "tx_packets": st["tx"]["packets"],
                    "tx_dropped": st["tx"]["dropped"],
                }
            except (ValueError, KeyError, IndexError):
                out[ifname] = {}
        return out

    def destroy(self) -> list[str]:
        """Kill whatever still runs in our namespaces (by pid) and delete them."""
        errors = []
        for ns in list(self.created):
            for pid in ns_pids(ns):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            r = run(["ip", "netns", "del", ns], check=False)
            if r.returncode != 0 and ns in list_lab_namespaces():
                errors.append(f"{ns}: {r.stderr.strip()}")
            else:
                self.created.remove(ns)
        return errors
