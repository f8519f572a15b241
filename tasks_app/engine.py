"""The process's engine loop: one asyncio loop, on a thread of its own, for the life of the process.

Agent turns run on it (a Celery thread hands its turn over and waits), and
every channel-layer publish made from synchronous code goes through it. One
long-lived loop instead of a loop per turn or per publish means one set of
Redis connections per process, reused, and no loop or thread set up per turn.
A turn whose agent ignores cancellation stays behind on this loop as an
abandoned coroutine; the thread that waited for it is free again.

Agent code must not block this loop (the a2a-sdk contract: execute() is a
coroutine that awaits, as it is under the SDK's own server).
"""

import asyncio
import logging
import threading
from concurrent.futures import Future

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def loop() -> asyncio.AbstractEventLoop:
    """The engine loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="a2a-engine", daemon=True).start()
        return _loop


def submit(coro) -> Future:
    """Schedule a coroutine on the engine loop; returns a concurrent Future."""
    return asyncio.run_coroutine_threadsafe(coro, loop())


def run(coro, timeout: float | None = None):
    """Run a coroutine on the engine loop and wait for its result (from a thread that is not the loop's)."""
    return submit(coro).result(timeout)


def fire(coro, what: str) -> None:
    """Schedule a coroutine and let it go; a failure is logged, never raised to the caller."""

    def done(future: Future) -> None:
        if not future.cancelled() and future.exception() is not None:
            logger.warning("%s failed: %r", what, future.exception())

    submit(coro).add_done_callback(done)
