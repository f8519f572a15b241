"""Event loops for synchronous threads: the process's engine loop, and a worker thread's own loop.

The engine loop is one asyncio loop on a thread of its own, for the life of
the process: a channel-layer publish made from synchronous code goes through
it, and an agent's cancel() outside a turn runs on it. One long-lived loop
instead of a loop per call means one set of Redis connections, reused.

A worker thread runs its agent turns on a loop of its own (run_here), made
once and kept: the thread drives it, and the database calls its coroutines
make (tasks_app.db.db) run on the thread itself, between two steps of the
loop, with the thread's connection. A turn is one coroutine at a time on one
thread, so nothing waits for that: what it saves is the three hand-overs
between threads a turn cost when it ran on the engine loop and its database
calls on a pool (Celery thread to engine loop, to a database thread and back,
twice), about a tenth of a worker's CPU per turn.

The price: while a database call runs, the rest of its turn (the watcher of
its lease, time limit and cancel, the agent's own I/O) waits too, where the
pool let them go on. A turn's calls are short transactions; one that waits
on the database (an outage: DB_POOL_TIMEOUT for a connection) delays the
turn's watcher by as much; after_each_call lets the turn's lease fence look
at the clock before anything else on the loop goes on.

Agent code should not block either loop (the a2a-sdk contract: execute() is a
coroutine that awaits, as it is under the SDK's own server). One that blocks a
turn's loop holds its watcher, time limit and cancel up until it gives the
loop back; its lease is kept meanwhile (tasks_app/turns/keeper.py). A turn whose
agent ignores cancellation leaves it behind on its loop as an abandoned
coroutine, and the thread closes that loop, without running it again, once
the turn is over (retire_loop): the agent takes no step after that, not even
during the thread's next turn. On the engine loop an abandoned coroutine stays.
"""

import asyncio
import contextvars
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from channels.layers import get_channel_layer

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
    submit(coro).add_done_callback(functools.partial(_log_failure, what))


def _log_failure(what: str, future: Future | asyncio.Future) -> None:
    """Done callback of something fired: its failure logged."""
    if not future.cancelled() and future.exception() is not None:
        logger.warning("%s failed: %r", what, future.exception())


# How long a finished turn's thread waits for what it fired (a publish) before it gives up on it.
FIRED_GRACE = 5.0


class _Driven:
    """A thread's own event loop, the synchronous calls its coroutines wait for, and what it must finish."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.calls: deque[tuple[contextvars.Context, object, tuple, asyncio.Future]] = deque()
        self.fired: set[asyncio.Task] = set()
        self.main: asyncio.Task | None = None
        self.grace: asyncio.TimerHandle | None = None
        self.after_calls: Callable[[], None] | None = None
        # Closed once run_here returns (retire_loop): a coroutine was abandoned on it.
        self.retired = False

    def settled(self) -> bool:
        # A retired loop does not wait for what was fired: it never runs again (retire_loop).
        return self.main is not None and self.main.done() and (not self.fired or self.retired)

    def stop_if_settled(self) -> None:
        if self.settled():
            self.loop.stop()

    def main_done(self, main: asyncio.Task) -> None:
        # What was fired, or is fired still (an abandoned coroutine's publish), gets
        # FIRED_GRACE: a publish stuck on a dead connection must not hold the thread.
        self.grace = self.loop.call_later(FIRED_GRACE, self.cancel_fired)
        self.stop_if_settled()

    def cancel_fired(self) -> None:
        for task in list(self.fired):
            task.cancel()

    def serve_calls(self) -> bool:
        """Run the calls queued; whether any ran."""
        served = False
        while self.calls:
            context, fn, args, future = self.calls.popleft()
            if future.cancelled():
                continue  # its caller gave up before it ran (as run_in_executor drops it)
            served = True
            # The loop is stopped while fn runs: nothing can cancel the future meanwhile.
            try:
                future.set_result(context.run(fn, *args))
            except Exception as exc:
                future.set_exception(exc)
        return served


_here = threading.local()


def run_here(coro):
    """Run a coroutine to its end on this thread's own loop, and return its result.

    The loop runs until the coroutine has ended and what it fired (fire_here:
    the publishes of its batches) is done, so a caller waiting for a publish
    hears it before this thread takes its next job. Not reentrant, and not for
    the engine loop's thread.
    """
    driven = getattr(_here, "driven", None)
    if driven is None:
        driven = _here.driven = _Driven()
    elif driven.main is not None:
        coro.close()
        raise RuntimeError("run_here() is running on this thread already")
    driven.main = driven.loop.create_task(coro)
    driven.main.add_done_callback(driven.main_done)
    ended = False
    try:
        while True:
            # Returns when a call is queued (call_here stops it) or all is done.
            driven.loop.run_forever()
            if driven.serve_calls() and driven.after_calls is not None:
                try:
                    driven.after_calls()
                except Exception:
                    logger.exception("The check after a worker thread's calls failed")
            if driven.settled():
                ended = True
                return driven.main.result()
    finally:
        driven.main = None
        driven.after_calls = None
        if driven.grace is not None:
            driven.grace.cancel()
            driven.grace = None
        if driven.retired:
            _here.driven = None
            _retire(driven.loop)
        elif not ended:
            # Out by an exception of the thread's own (KeyboardInterrupt, SystemExit):
            # nothing of this turn may run, or write, during the thread's next one.
            _here.driven = None
            for task in asyncio.all_tasks(driven.loop):
                task.cancel()
            driven.loop.close()


def _retire(loop: asyncio.AbstractEventLoop) -> None:
    """Close a thread's loop without running it again: what was abandoned on it takes no more steps.

    Its tasks are not cancelled (a cancel is a step: one that swallows it goes
    on) but left pending, and dropped with the loop without the error line
    asyncio logs for each such task it collects. Collected, a coroutine gets
    GeneratorExit: its own `finally` clauses are what may still run of it.
    The channel layer forgets the loop's connections instead of flushing
    them, which would run the loop; the loop's own close is called past the
    wrapper that flushes them.
    """
    tasks = asyncio.all_tasks(loop)
    try:
        for task in tasks:
            task._log_destroy_pending = False
        forget = getattr(get_channel_layer(), "forget_loop", None)
        if forget is not None:
            forget(loop)
    except Exception:
        # Never in place of the turn's own outcome (this runs as run_here returns it).
        logger.exception("Could not let go of a retired loop's channel layer connections")
    finally:
        type(loop).close(loop)
    logger.warning("Closed a worker thread's loop with %d task(s) abandoned on it", len(tasks))


def _driving() -> _Driven | None:
    """This thread's own loop while run_here drives it (a main coroutine is set), else None."""
    driven = getattr(_here, "driven", None)
    return driven if driven is not None and driven.main is not None else None


def drives(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether `loop` is the one this thread drives (run_here): call_here may be used on it."""
    driven = _driving()
    return driven is not None and driven.loop is loop


async def call_here(fn, *args):
    """From a coroutine on a loop that run_here drives: run fn(*args) on this thread, outside the loop.

    The loop pauses for it: Django runs database code only where no loop is
    running on the thread (SynchronousOnlyOperation otherwise).
    """
    driven = _here.driven
    future = driven.loop.create_future()
    # In the caller's context: its log lines carry the caller's task id.
    driven.calls.append((contextvars.copy_context(), fn, args, future))
    driven.loop.stop()
    return await future


def after_each_call(check: Callable[[], None]) -> bool:
    """From the coroutine run_here runs: check() runs after the thread's calls until run_here returns.

    It runs with the loop paused, after each round of call_here calls and
    before any coroutine takes its next step: a call that held the thread for
    long (a database that does not answer) is followed by it before anything
    that waited could go on. One check per run_here (a second replaces the
    first); one that raises is logged. False (nothing registered) where no
    run_here drives the caller's loop.
    """
    driven = _driving()
    if driven is None or driven.loop is not asyncio.get_running_loop():
        return False
    driven.after_calls = check
    return True


def retire_loop() -> bool:
    """From a coroutine run_here runs: close this thread's loop once run_here returns.

    For a coroutine abandoned because it swallowed its cancellation (an agent
    stopped by force): left on the loop, it would go on whenever the thread
    runs its next turn. Once the coroutine run_here runs has returned, its loop
    is closed instead, without waiting for what was fired on it, and never
    runs again (_retire); the thread's next run_here starts a new one. Until
    then the abandoned coroutine still takes steps whenever the loop does.
    False where no run_here drives the caller's loop (the engine loop: what is
    abandoned there stays).
    """
    driven = _driving()
    if driven is None or driven.loop is not asyncio.get_running_loop():
        return False
    driven.retired = True
    return True


def fire_here(coro) -> bool:
    """Schedule a coroutine on this thread's own loop while run_here runs it; False (not taken) if not.

    For synchronous code run by call_here (an on_commit hook): the coroutine
    runs once the loop goes on, and run_here finishes it before it returns.
    Not on a retired loop (retire_loop): that one is closed without waiting
    for it, and the caller uses the engine loop.
    """
    driven = _driving()
    if driven is None or driven.retired:
        return False
    task = driven.loop.create_task(coro)
    driven.fired.add(task)

    def done(task: asyncio.Task) -> None:
        driven.fired.discard(task)
        _log_failure("A coroutine fired on a worker thread's loop", task)
        driven.stop_if_settled()

    task.add_done_callback(done)
    return True
