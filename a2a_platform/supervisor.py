"""Keep a fixed number of child processes running: services mode's launchers on one host.

`manage.py webserve` runs Daphne processes on one port and `manage.py
workserve` Celery worker processes on one queue through it. One Python
process runs Python on one core at a time (the GIL), so a host serves with
one such process per CPU (README, Scale-out).

- Each slot holds one child; a child that exits is started again in its slot.
- A child that dies within START_GRACE seconds of its start counts as a
  failed start; after MAX_FAILED_STARTS in a row (a broken setting looks the
  same as a child killed that fast, over and over) the launcher stops with an
  error instead of restarting forever.
- SIGTERM or SIGINT stop the children gracefully (SIGTERM), kill those still
  running after `stop_timeout`, then the launcher returns.
- On Linux a child is sent SIGTERM when its launcher dies, even by SIGKILL,
  so no orphan is left behind.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from django.core.management.base import CommandError

# A child that dies within this many seconds of its start counts as failing to start.
START_GRACE = 5.0
# Give up after this many failed starts in a row (a broken setting, not a crash).
MAX_FAILED_STARTS = 5
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """A preexec_fn that has the child sent SIGTERM when the launcher dies (Linux), or None.

    prctl is looked up here, in the launcher: between fork and exec the child
    should only make the call.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    launcher = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher:
            os._exit(1)  # the launcher died before the call: no signal will come

    return preexec


class Supervisor:
    """Keeps one child running in each of `slots` slots until told to stop.

    start(slot, preexec_fn) starts the child of a slot (a subprocess.Popen
    given that preexec_fn); `label` names the children in what this prints
    ("Web process 1234 exited (-9) after 12.0 s; starting another").
    """

    def __init__(
        self,
        slots: int,
        start: Callable[[int, Callable | None], subprocess.Popen],
        label: str,
        stop_timeout: float,
    ):
        self.slots = slots
        self.start = start
        self.label = label
        self.stop_timeout = stop_timeout
        # slot -> (child, when it started)
        self.children: dict[int, tuple[subprocess.Popen, float]] = {}
        self.stopping = False
        self.failed_starts = 0
        self.preexec = die_with_parent()

    def run(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._stop)
        try:
            while not self.stopping:
                for slot in range(self.slots):
                    if slot not in self.children and not self.stopping:
                        self.children[slot] = (self.start(slot, self.preexec), time.monotonic())
                self._reap(timeout=0.5)
        finally:
            self._stop_children()

    def _reap(self, timeout: float) -> None:
        """Wait up to `timeout` for a child to exit; forget it (run() starts another in its slot)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping:
            for slot, (child, started) in list(self.children.items()):
                code = child.poll()
                if code is None:
                    continue
                del self.children[slot]
                lived = time.monotonic() - started
                print(
                    f"{self.label} {child.pid} exited ({code}) after {lived:.1f} s; starting another",
                    file=sys.stderr,
                    flush=True,
                )
                if lived >= START_GRACE:
                    self.failed_starts = 0
                    return
                # Dying at start is a broken setting, not a crash: back off, then give up.
                self.failed_starts += 1
                if self.failed_starts >= MAX_FAILED_STARTS:
                    self.stopping = True
                    label = self.label.lower()
                    raise CommandError(f"Each {label} exits at start (last status {code}); giving up")
                time.sleep(min(0.1 * 2**self.failed_starts, 5.0))
                return
            time.sleep(0.05)

    def _stop(self, signum, frame) -> None:
        self.stopping = True

    def _stop_children(self) -> None:
        for child, _started in self.children.values():
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + self.stop_timeout
        for child, _started in self.children.values():
            try:
                child.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
