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

import os
import socket
import subprocess
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from a2a_platform.supervisor import Supervisor

# How long stopped children get to close their connections before they are killed.
STOP_TIMEOUT = 10.0


def default_processes() -> int:
    return settings.WEB_PROCESSES or os.cpu_count() or 1


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
            help="Take the client's address from X-Forwarded-For, as the proxies in front wrote it "
            "(TRUSTED_PROXY_COUNT of them, default 1, connecting from TRUSTED_PROXIES)",
        )

    def handle(self, *args, host, port, processes, proxy_headers, **options):
        processes = default_processes() if processes is None else processes
        if processes < 1:
            raise CommandError("--processes must be at least 1")
        try:
            listeners = listen(host, port, processes)
        except OSError as exc:
            raise CommandError(f"Cannot listen on {host}:{port}: {exc}") from None
        # -v 0: no access line per request from Daphne (the platform logs its own, A2A_ACCESS_LOG).
        daphne_options = ["-v", "0", "--application-close-timeout", "30"]
        # Not Daphne's --proxy-headers: it takes X-Forwarded-For's leftmost entry, which the client
        # writes. The application reads the header from the right (a2a_platform/forwarded.py).
        env = dict(os.environ)
        if proxy_headers:
            env["TRUSTED_PROXY_COUNT"] = str(settings.TRUSTED_PROXY_COUNT or 1)
        self.stdout.write(f"Web tier serving on http://{host}:{port} with {processes} Daphne processes")
        self.stdout.flush()
        try:
            start = _daphne_starter(listeners, daphne_options, env)
            Supervisor(processes, start, "Web process", STOP_TIMEOUT).run()
        finally:
            for listener in set(listeners):
                listener.close()


def _daphne_starter(listeners: list[socket.socket], daphne_options: list[str], env: dict[str, str]):
    """Starts the Daphne child of a slot on that slot's listening socket."""

    def start(slot: int, preexec_fn) -> subprocess.Popen:
        fd = listeners[slot].fileno()
        command = [sys.executable, "-m", "daphne", "--fd", str(fd), *daphne_options]
        command.append("a2a_platform.asgi:application")
        return subprocess.Popen(command, pass_fds=(fd,), preexec_fn=preexec_fn, env=env)

    return start


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
