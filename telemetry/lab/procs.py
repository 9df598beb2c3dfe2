"""The lab's child processes: started in their own session, killed by process group, and
stopped at exit or on a signal whatever happened (with the namespaces); the slow-reader
freezer that stops and resumes one of them."""

from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from telemetry.lab.netns import LabNet

REPO_ROOT = Path(__file__).resolve().parents[2]

_live_procs: list[Proc] = []
_live_nets: list[LabNet] = []


class Proc:
    """A child process in its own session (killed by process group), stdout piped for its
    READY line, stderr to a log file."""

    def __init__(self, name: str, argv: list[str], log: Path, stdin: bool = True) -> None:
        self.name = name
        self.log = log
        self.python = "telemetry.lab." in " ".join(argv)
        self.err = open(log, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        self.p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env=env,
            start_new_session=True,
        )
        _live_procs.append(self)

    @property
    def pid(self) -> int:
        return self.p.pid

    def wait_line(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        buf = b""
        assert self.p.stdout is not None
        fd = self.p.stdout.fileno()
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
                for line in buf.decode(errors="replace").splitlines():
                    if line.startswith(prefix):
                        return line
            elif self.p.poll() is not None:
                break
        raise RuntimeError(f"{self.name} did not become ready: {self.tail()}")

    def wait_log(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log.read_text(errors="replace"):
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start: {self.tail()}")

    def send(self, line: str) -> None:
        if self.p.stdin and self.p.poll() is None:
            try:
                self.p.stdin.write((line + "\n").encode())
                self.p.stdin.flush()
            except BrokenPipeError:
                pass

    def tail(self, n: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kill_group(self, sig: int) -> None:
        try:
            os.killpg(self.p.pid, sig)  # the group we created with start_new_session
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 5.0, sig: int = signal.SIGTERM) -> int | None:
        if self.p.poll() is None:
            self.kill_group(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                if self.python:  # faulthandler in our modules: stacks into its log
                    self.kill_group(signal.SIGUSR1)
                    time.sleep(0.5)
                self.kill_group(signal.SIGKILL)
                self.p.wait(3)
        else:
            self.kill_group(signal.SIGKILL)  # leftovers of its group, if any
        for f in (self.p.stdin, self.p.stdout):
            if f:
                try:
                    f.close()
                except OSError:
                    pass
        self.err.close()
        if self in _live_procs:
            _live_procs.remove(self)
        return self.p.returncode


def _emergency_cleanup() -> None:
    for p in list(_live_procs):
        try:
            p.stop(timeout=1.0)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    for n in list(_live_nets):
        n.destroy()
        _live_nets.remove(n)


atexit.register(_emergency_cleanup)


class _Terminated(Exception):
    pass


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated(f"signal {signum}")


class Freezer:
    """Slow-reader windows: freeze a lab process (SIGSTOP) for ``freeze_ms`` of every
    ``freeze_ms + run_ms`` inside the window, by pid; always SIGCONT at the end."""

    def __init__(self, pid: int, windows: list[dict[str, Any]]) -> None:
        import threading

        self.pid = pid
        self.windows = windows
        self.frozen: list[tuple[int, int]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if self.windows:
            self.thread.start()

    def _run(self) -> None:
        try:
            for w in self.windows:
                freeze, run_ = w["params"]["freeze_ms"] / 1000, w["params"]["run_ms"] / 1000
                if self.done.wait(max(0.0, (w["start_ns"] - time.time_ns()) / 1e9)):
                    return
                while time.time_ns() < w["end_ns"] and not self.done.is_set():
                    t_stop = time.time_ns()
                    os.kill(self.pid, signal.SIGSTOP)
                    self.done.wait(freeze)
                    os.kill(self.pid, signal.SIGCONT)
                    self.frozen.append((t_stop, time.time_ns()))
                    self.done.wait(run_)
        except ProcessLookupError:
            pass
        finally:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join(5)
