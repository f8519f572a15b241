"""Services mode's web tier on one host: several Daphne processes on one port.

One Daphne process runs Python on one core at a time (the GIL). Profiled
under load (bench/README.md), the web process was the part of the engine
that held its GIL most while the machine still had idle CPU; a second web
process on the same port took blocking sends at c=8 from about 1.25x to
1.5x the SDK on PostgreSQL. Every web process is alike and keeps nothing of
its own (README, Scale-out), so this command only shares the port out:

- each child gets a listening socket of its own on the same port
  (SO_REUSEPORT), which the kernel balances new connections across; where
  that option is missing, all children share one socket;
- this process keeps every socket open, so connections that arrive for a
  child that died wait in its socket's queue until the child started in its
  place takes them;
- SIGTERM or SIGINT stop the children gracefully, then this process exits;
- on Linux a child is told to stop when this process dies, even by SIGKILL,
  so no orphan keeps the port.
"""

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

# A child that dies within this many seconds of its start counts as failing to start.
START_GRACE = 5.0
# How long stopped children get to close their connections before they are killed.
STOP_TIMEOUT = 10.0
# Give up after this many failed starts in a row (a broken setting, not a crash).
MAX_FAILED_STARTS = 5
PR_SET_PDEATHSIG = 1


def default_processes() -> int:
    return settings.WEB_PROCESSES or os.cpu_count() or 1


def _die_with_parent():
    """A preexec_fn that has the child sent SIGTERM when the launcher dies (Linux), or None.

    prctl is looked up here, in the launcher: between fork and exec the child
    should only make the call.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Command(BaseCommand):
    help = "Serve the web tier of services mode: PROCESSES Daphne processes on one port."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--processes",
            type=int,
            default=None,
            help="Daphne processes (default: WEB_PROCESSES, else one per CPU)",
        )
        parser.add_argument(
            "--proxy-headers",
            action="store_true",
            help="Take the client's address from X-Forwarded-For (behind a proxy)",
        )

    def handle(self, *args, host, port, processes, proxy_headers, **options):
        processes = processes or default_processes()
        if processes < 1:
            raise CommandError("--processes must be at least 1")
        try:
            listeners = listen(host, port, processes)
        except OSError as exc:
            raise CommandError(f"Cannot listen on {host}:{port}: {exc}") from None
        # -v 0: no access line per request from Daphne (the platform logs its own, A2A_ACCESS_LOG).
        daphne_options = ["-v", "0", "--application-close-timeout", "30"]
        daphne_options += ["--proxy-headers"] if proxy_headers else []
        self.stdout.write(f"Web tier serving on http://{host}:{port} with {processes} Daphne processes")
        self.stdout.flush()
        Supervisor(listeners, daphne_options).run()


def listen(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on host:port, one per child (or one shared without SO_REUSEPORT)."""
    if not hasattr(socket, "SO_REUSEPORT"):
        shared = socket.create_server((host, port), backlog=1024)
        return [shared] * count
    first = socket.create_server((host, port), backlog=1024, reuse_port=True)
    # The others on the port the first got (port 0: any free port, chosen once).
    bound = first.getsockname()[1]
    others = [socket.create_server((host, bound), backlog=1024, reuse_port=True) for _ in range(count - 1)]
    return [first, *others]


class Supervisor:
    """Keeps one Daphne child serving each listening socket until told to stop."""

    def __init__(self, listeners: list[socket.socket], daphne_options: list[str]):
        self.listeners = listeners
        self.daphne_options = daphne_options
        # slot (index into listeners) -> (child, when it started)
        self.children: dict[int, tuple[subprocess.Popen, float]] = {}
        self.stopping = False
        self.failed_starts = 0
        self.preexec = _die_with_parent()

    def run(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._stop)
        try:
            while not self.stopping:
                for slot in range(len(self.listeners)):
                    if slot not in self.children and not self.stopping:
                        self._start(slot)
                self._reap(timeout=0.5)
        finally:
            self._stop_children()
            for listener in set(self.listeners):
                listener.close()

    def _start(self, slot: int) -> None:
        fd = self.listeners[slot].fileno()
        command = [sys.executable, "-m", "daphne", "--fd", str(fd), *self.daphne_options]
        command.append("a2a_platform.asgi:application")
        child = subprocess.Popen(command, pass_fds=(fd,), preexec_fn=self.preexec)
        self.children[slot] = (child, time.monotonic())

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
                    f"Web process {child.pid} exited ({code}) after {lived:.1f} s; starting another",
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
                    raise CommandError(f"Web processes keep exiting at start (last status {code})")
                time.sleep(min(0.1 * 2**self.failed_starts, 5.0))
                return
            time.sleep(0.05)

    def _stop(self, signum, frame) -> None:
        self.stopping = True

    def _stop_children(self) -> None:
        for child, _started in self.children.values():
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT
        for child, _started in self.children.values():
            try:
                child.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
