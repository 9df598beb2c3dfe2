"""Ring-buffer capture with tcpdump (``-G``/``-C``) or dumpcap (``-b duration:/filesize:``)
into a spool folder, and detection of the files the capture tool has finished writing.

The capture tool runs as a child in its own session (so a terminal's Ctrl-C reaches only
the daemon, which stops it in order) and with PR_SET_PDEATHSIG (so it dies with the
daemon even on SIGKILL). A file is complete when the tool no longer has it open
(/proc/PID/fd); without /proc, every file but the newest.

Privileges: run as root, tcpdump opens the interface and then drops to its own user
(``-Z``, Debian's ``tcpdump``): the spool is handed to that user so that it can create the
next file. Where that user does not exist or cannot reach the spool (a folder above it is
closed to others), tcpdump stays root and the log says why. dumpcap has no such switch and
keeps the daemon's user.

Kernel drops: tcpdump prints its counters on SIGUSR1 and at exit, dumpcap at exit only
(it writes no interface statistics into ring files), so both are read from stderr.
"""

from __future__ import annotations

import ctypes
import grp
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from telemetry.exit_codes import EXIT_INPUT, EXIT_USAGE

log = logging.getLogger("tailtap.daemon")

PREFIX = "tailtap-"  # every spool file the daemon's capture writes starts with this
TOOLS = ("tcpdump", "dumpcap")
CAPTURE_USER = "tcpdump"  # Debian's tcpdump package creates it

_PR_SET_PDEATHSIG = 1
try:  # resolved before fork: the child must not load libraries
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_parent() -> None:
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class CaptureError(Exception):
    """A one-line problem the user can act on; exit_code follows the CLI's convention."""

    def __init__(self, message: str, exit_code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class CaptureConfig:
    interface: str
    spool: Path
    rotate_seconds: int = 60
    rotate_mb: int = 0  # 0: rotate on time only
    bpf: str = ""
    snaplen: int = 0  # 0: the tool's default (whole packets)
    buffer_mb: int = 0  # kernel capture buffer; 0: the tool's default
    tool: str = "tcpdump"


def find_tool(tool: str) -> str:
    if tool not in TOOLS:
        raise CaptureError(f"unknown capture tool {tool!r}: use {' or '.join(TOOLS)}", EXIT_USAGE)
    path = shutil.which(tool)
    if path is None:
        other = "dumpcap" if tool == "tcpdump" else "tcpdump"
        hint = "apt-get install tcpdump" if tool == "tcpdump" else "apt-get install wireshark-common"
        raise CaptureError(f"{tool} not found on PATH: install it ({hint}) or use --capturer {other}", EXIT_INPUT)
    return path


def check_interface(name: str) -> None:
    """Fail early with the list of interfaces, instead of a tool error after start."""
    net = Path("/sys/class/net")
    if name == "any" or not net.is_dir():
        return  # other systems: the tool's own check (check_filter) will tell
    if not (net / name).exists():
        names = ", ".join(sorted(p.name for p in net.iterdir()))
        raise CaptureError(f"interface {name!r} not found (available: {names}, any)", EXIT_USAGE)


def check_filter(tool_path: str, config: CaptureConfig) -> None:
    """Compile the BPF filter on the interface (``-d``): catches a bad filter, a missing
    interface and missing capture permission before the daemon starts."""
    tool = Path(tool_path).name
    if tool == "dumpcap":
        cmd = [tool_path, "-i", config.interface, "-d"] + (["-f", config.bpf] if config.bpf else [])
    else:
        cmd = [tool_path, "-i", config.interface, "-d"] + ([config.bpf] if config.bpf else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        raise CaptureError(f"{tool} did not answer in 20 s while checking the filter", EXIT_INPUT) from None
    if proc.returncode == 0 and re.search(r"^\(\d{3}\)", proc.stdout, re.MULTILINE):
        return
    message = _first_error(proc.stderr) or f"exit status {proc.returncode}"
    lowered = message.lower()
    if "permission" in lowered or "operation not permitted" in lowered:
        raise CaptureError(f"{tool}: no permission to capture on {config.interface!r} (run as root or grant CAP_NET_RAW): {message}", EXIT_INPUT)
    if "no such device" in lowered or "no device named" in lowered:
        raise CaptureError(f"interface {config.interface!r} not found ({tool}: {message})", EXIT_USAGE)
    if "filter" in lowered:
        raise CaptureError(f"bad capture filter {config.bpf!r}: {message}", EXIT_USAGE)
    raise CaptureError(f"{tool} cannot capture on {config.interface!r}: {message}", EXIT_INPUT)


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        line = line.strip()
        if not line or line.startswith(("Capturing on", "listening on", "(")):
            continue
        return line.removeprefix("tcpdump: ").removeprefix("dumpcap: ")
    return ""


# tcpdump: "N packets received by filter", "N packets dropped by kernel" (SIGUSR1: one line)
_TCPDUMP_RECEIVED = re.compile(r"(\d+) packets? received by filter")
_TCPDUMP_DROPPED = re.compile(r"(\d+) packets? dropped by kernel")
# dumpcap at exit: "Packets received/dropped on interface 'lo': 10/0 (pcap:0/dumpcap:0/...)"
_DUMPCAP_STATS = re.compile(r"received/dropped on interface .*?: (\d+)/(\d+)")
_INFO = re.compile(
    r"listening on|Capturing on|^File: |packets? captured|received by filter|dropped by kernel|"
    r"received/dropped|^Packets captured|^\d+ packets? (captured|received|dropped)"
)


def _unprivileged_user(spool: Path) -> tuple[str, str]:
    """(user, why not) for tcpdump's ``-Z``: its own user when it exists and every folder
    above the spool lets it through (the spool itself is handed to it); else root."""
    try:
        entry = pwd.getpwnam(CAPTURE_USER)
    except KeyError:
        return "root", f"there is no user {CAPTURE_USER!r} to drop to"
    groups = {entry.pw_gid, *(g.gr_gid for g in grp.getgrall() if CAPTURE_USER in g.gr_mem)}
    for folder in spool.resolve().parents:
        st = folder.stat()
        if st.st_uid == entry.pw_uid:
            passes = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            passes = st.st_mode & stat.S_IXGRP
        else:
            passes = st.st_mode & stat.S_IXOTH
        if not passes:
            return "root", f"user {CAPTURE_USER!r} cannot reach the spool {spool} ({folder} is closed to it)"
    return CAPTURE_USER, ""


class Capturer:
    """One capture tool process at a time, restartable; thread-safe reads of its state."""

    def __init__(self, config: CaptureConfig, tool_path: str) -> None:
        self.config = config
        self.tool_path = tool_path
        self.tool = Path(tool_path).name
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None
        self._stderr_tail: deque[str] = deque(maxlen=5)
        # counters reported by the tool are cumulative per process: hand out deltas
        self._pending = [0, 0]  # packets received, kernel drops
        self._capture_user: str | None = None
        self._seen = [0, 0]

    @property
    def capture_user(self) -> str:
        """The user tcpdump drops to once the interface is open: its own, when the system
        has one and can reach the spool; else root (said once, with the reason)."""
        if self._capture_user is None:
            self._capture_user, why = _unprivileged_user(self.config.spool)
            if why:
                log.warning("capture runs as root: %s", why)
        return self._capture_user

    def _hand_spool_to_capture_user(self) -> None:
        """The dropped user creates the next files; the daemon (root) still reads and deletes them."""
        if self.tool != "tcpdump" or os.geteuid() != 0 or self.capture_user == "root":
            return
        entry = pwd.getpwnam(self.capture_user)
        if self.config.spool.stat().st_uid != entry.pw_uid:
            os.chown(self.config.spool, entry.pw_uid, entry.pw_gid)

    def command(self) -> list[str]:
        c = self.config
        run = str(time.time_ns() // 1_000_000)  # a restart never reuses (overwrites) a name
        if self.tool == "dumpcap":
            cmd = [self.tool_path, "-i", c.interface, "-q", "-b", f"duration:{c.rotate_seconds}"]
            if c.rotate_mb:
                cmd += ["-b", f"filesize:{c.rotate_mb * 1000}"]  # kB
            if c.snaplen:
                cmd += ["-s", str(c.snaplen)]
            if c.buffer_mb:
                cmd += ["-B", str(c.buffer_mb)]  # MiB
            cmd += ["-w", str(c.spool / f"{PREFIX}{run}.pcapng")]
            if c.bpf:
                cmd += ["-f", c.bpf]
            return cmd
        cmd = [self.tool_path, "-i", c.interface, "-n", "--time-stamp-precision=nano", "-G", str(c.rotate_seconds)]
        if c.rotate_mb:
            cmd += ["-C", str(c.rotate_mb)]  # millions of bytes
        if c.snaplen:
            cmd += ["-s", str(c.snaplen)]
        if c.buffer_mb:
            cmd += ["-B", str(c.buffer_mb * 1024)]  # KiB
        if os.geteuid() == 0:
            cmd += ["-Z", self.capture_user]
        cmd += ["-w", str(c.spool / f"{PREFIX}{run}-%Y%m%dT%H%M%S.pcap")]
        if c.bpf:
            cmd.append(c.bpf)
        return cmd

    def start(self) -> None:
        with self._lock:
            self._ready.clear()
            self._seen = [0, 0]
            self._stderr_tail.clear()
            cmd = self.command()
            self._hand_spool_to_capture_user()
            log.info("capture: %s", " ".join(cmd))
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=_die_with_parent,
            )
            self.started_at = time.monotonic()
            self._reader = threading.Thread(target=self._read_stderr, args=(self.proc,), name="capture-stderr", daemon=True)
            self._reader.start()

    def _read_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            if "listening on" in line or "Capturing on" in line:
                self._ready.set()
            self._parse_stats(line)
            if not _INFO.search(line):
                self._stderr_tail.append(line)
                log.warning("%s: %s", self.tool, line)

    def _parse_stats(self, line: str) -> None:
        received = dropped = None
        if m := _DUMPCAP_STATS.search(line):
            received, dropped = int(m.group(1)), int(m.group(2))
        else:
            if m := _TCPDUMP_RECEIVED.search(line):
                received = int(m.group(1))
            if m := _TCPDUMP_DROPPED.search(line):
                dropped = int(m.group(1))
        with self._lock:
            for i, value in ((0, received), (1, dropped)):
                if value is not None and value >= self._seen[i]:
                    self._pending[i] += value - self._seen[i]
                    self._seen[i] = value

    def take_stats(self) -> tuple[int, int]:
        """(packets received, kernel drops) reported since the last call."""
        with self._lock:
            out = (self._pending[0], self._pending[1])
            self._pending = [0, 0]
        return out

    def request_stats(self) -> None:
        """Ask tcpdump to print its counters (SIGUSR1); dumpcap reports only at exit."""
        proc = self.proc
        if self.tool == "tcpdump" and proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ready.wait(0.1):
                return True
            if not self.alive():
                return False
        return self._ready.is_set()

    def alive(self) -> bool:
        proc = self.proc
        return proc is not None and proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def error_tail(self) -> str:
        self._join_reader(1.0)
        return " | ".join(self._stderr_tail)

    def _join_reader(self, timeout: float) -> None:
        if self._reader is not None:
            self._reader.join(timeout)

    def open_files(self) -> set[Path] | None:
        """Spool files the tool has open now; None when that cannot be known."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return set()
        fd_dir = Path(f"/proc/{proc.pid}/fd")
        try:
            entries = list(fd_dir.iterdir())
        except OSError:
            return None
        spool = self.config.spool.resolve()
        out: set[Path] = set()
        for entry in entries:
            try:
                target = Path(os.readlink(entry))
            except OSError:
                continue  # fd closed meanwhile
            if target.parent == spool:
                out.add(target)
        return out

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM by pid (the tool flushes and closes its file), SIGKILL if it hangs."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) ignored SIGTERM for %.0f s: killing it", self.tool, proc.pid, timeout)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        self._join_reader(2.0)  # its final counters
        return proc.returncode
