import asyncio
import logging
import queue
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from a2a_platform.collector import freeze_startup_objects
from tasks_app.protocol.grpc_binding import grpc_server

logger = logging.getLogger(__name__)
# Seconds running rpcs get to finish when the server stops (streams are cut after that).
STOP_GRACE = 5.0


async def run_grpc(host: str, port: int, base_url: str, bound: queue.Queue, stop=None) -> None:
    """Serve gRPC until `stop` is set (or forever); puts the bound port, or the error, on `bound`."""
    try:
        server = grpc_server(base_url)
        actual = server.add_insecure_port(f"{host}:{port}")
        await server.start()
    except Exception as exc:  # grpc raises RuntimeError when the address is taken
        bound.put(exc)
        return
    bound.put(actual)
    if stop is None:
        await server.wait_for_termination()
        return
    await stop.wait()
    await server.stop(STOP_GRACE)


def bound_port(bound: queue.Queue, host: str, port: int) -> int:
    result = bound.get(timeout=60)
    if isinstance(result, Exception):
        raise CommandError(f"gRPC cannot listen on {host}:{port} ({result}); choose another port")
    return result


def start_grpc_thread(host: str, port: int, base_url: str) -> int:
    """The embedded default: gRPC on a thread with an event loop of its own, next to Daphne's.

    Returns the port it listens on once it does; CommandError if it cannot.
    """
    bound: queue.Queue = queue.Queue()
    thread = threading.Thread(
        target=lambda: asyncio.run(run_grpc(host, port, base_url, bound)), name="grpc-server", daemon=True
    )
    thread.start()
    return bound_port(bound, host, port)


class Command(BaseCommand):
    help = "Serve the A2A gRPC binding (lf.a2a.v1.A2AService) for every agent, as its own process."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=settings.A2A_GRPC_PORT)
        parser.add_argument(
            "--base-url",
            default=settings.PUBLIC_BASE_URL or "http://127.0.0.1:8000",
            help="HTTP base of the web processes, for the URLs in extended cards (default: PUBLIC_BASE_URL)",
        )

    def handle(self, *args, host, port, base_url, **options):
        freeze_startup_objects()  # a2a_platform/collector.py
        asyncio.run(self._serve(host, port, base_url.rstrip("/")))

    async def _serve(self, host: str, port: int, base_url: str) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        bound: queue.Queue = queue.Queue()
        serving = asyncio.create_task(run_grpc(host, port, base_url, bound, stop))
        # run_grpc reports before its first await past start(): the queue is filled by now or soon.
        while bound.empty() and not serving.done():
            await asyncio.sleep(0.01)
        actual = bound_port(bound, host, port)
        shown = settings.A2A_GRPC_PUBLIC_URL or f"{host}:{actual}"
        self.stdout.write(f"A2A gRPC binding serving on {shown} (lf.a2a.v1.A2AService, every agent)")
        self.stdout.write("  Address an agent with the request's tenant field: '<tenant>/<agent>'")
        self.stdout.flush()
        await serving
