"""Database work for async code, and the connections of the threads that do it.

asgiref's thread-sensitive sync_to_async runs every call of a request (or of
a whole worker process, outside a request) on one thread, one call at a time:
under load the database work of unrelated requests queued behind each other.
Calls made through `db()` run on any free thread of a bounded pool instead;
on a worker thread's own loop (tasks_app.engine.run_here: an agent turn) they
run on that thread, between two steps of its loop: the turn waits for them
either way, and no hand-over to another thread is paid.

Each of those threads keeps its connection from call to call (checked out of
the psycopg pool once, or a persistent SQLite connection), and a worker
thread keeps its own from job to job: handing it back and checking one out
again around every call cost a health-check round trip and the pool's
bookkeeping each time, twice per request. A connection that sat idle for
HEALTH_CHECK_AFTER seconds is checked before it is used (it may have died
with a database restart), and one that failed for being unreachable is
dropped, so the next call connects again.

No transaction spans two calls: each function passed here opens and commits
its own.
"""

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, connections
from django.db.models import DateTimeField, Value
from django.db.models.functions import Now
from django.utils import timezone

from tasks_app import engine

# Errors that mean "the database cannot be reached", as opposed to a bad query.
UNAVAILABLE_ERRORS = (OperationalError, InterfaceError)
# A thread's connection unused for this long is checked before its next use.
HEALTH_CHECK_AFTER = 1.0

_last_used = threading.local()


DbCall = Callable[[], object]  # a call a database thread makes for a coroutine


class _Threads:
    """db()'s threads: up to `size`, taking calls off one queue; a call that finds none idle starts one.

    What loop.run_in_executor does with a ThreadPoolExecutor, with less on the
    way: the thread settles the caller's asyncio future on the caller's loop
    itself, where the executor goes through a concurrent Future of its own (a
    lock, a condition, a callback that copies its state across). That was
    about half of what a hop cost, and the web makes one or two per request.

    `idle` counts threads free for a call, as the executor's semaphore does: a
    submit takes one, so calls made in the same instant each find a thread of
    their own (or start one) and none waits behind another while the bound
    allows more threads.
    """

    def __init__(self, size: int):
        self.size = size
        self.calls: queue.SimpleQueue = queue.SimpleQueue()  # of (loop, future, call)
        self.lock = threading.Lock()
        self.started = 0
        self.idle = 0

    def submit(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future, call: DbCall) -> None:
        """Run call() on a thread and settle `future` (of `loop`) with its result or its exception.

        A call whose future is cancelled before a thread takes it is dropped.
        The call runs in no context of the caller's: the caller passes one in.
        """
        name = None
        with self.lock:
            if self.idle:
                self.idle -= 1
            elif self.started < self.size:
                self.started += 1
                name = f"db_{self.started}"
            # else: it waits for the first thread to be done.
        if name is not None:
            try:
                threading.Thread(target=self._serve, name=name, daemon=True).start()
            except BaseException:
                with self.lock:
                    self.started -= 1
                raise  # nothing was queued: the caller has the error, and no call runs behind its back
        self.calls.put((loop, future, call))

    def _serve(self) -> None:
        while True:
            loop, future, call = self.calls.get()
            outcome = None
            if not future.cancelled():  # else its caller gave up before it ran (as run_in_executor drops it)
                try:
                    outcome = (call(), None)
                except StopIteration as exc:
                    # An asyncio future refuses StopIteration (TypeError in _settle): its caller would hang.
                    outcome = (None, RuntimeError(f"a database call raised {exc!r}"))
                except BaseException as exc:
                    outcome = (None, exc)
            # Free before the caller hears: its next call finds this thread.
            with self.lock:
                self.idle += 1
            if outcome is not None:
                try:
                    loop.call_soon_threadsafe(_settle, future, *outcome)
                except RuntimeError:
                    pass  # the caller's loop is closed: nobody waits for this any more
            # Nothing of this call stays alive while the thread waits for the next.
            del loop, future, call, outcome


def _settle(future: asyncio.Future, result, error: BaseException | None) -> None:
    # The caller may have been cancelled since the thread looked.
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_threads: _Threads | None = None
_threads_lock = threading.Lock()


def _db_threads() -> _Threads:
    global _threads
    if _threads is None:
        with _threads_lock:
            if _threads is None:
                _threads = _Threads(settings.A2A_DB_THREADS)
    return _threads


def connection_checked_if_idle() -> None:
    """Close this thread's connection if it sat idle for HEALTH_CHECK_AFTER and no longer works.

    Before each db() call, and before each worker job. One round trip, only
    after an idle spell. Not Django's CONN_HEALTH_CHECKS: for a pooled
    PostgreSQL connection that check does nothing (it trusts the pool, which
    checks a connection only as it hands it out, and these threads keep theirs).
    """
    connection = connections["default"]
    if connection.connection is None:
        return
    if time.monotonic() - getattr(_last_used, "at", 0.0) > HEALTH_CHECK_AFTER and not connection.is_usable():
        connection.close()


def _call(fn, args, kwargs):
    connection_checked_if_idle()
    try:
        return fn(*args, **kwargs)
    except UNAVAILABLE_ERRORS:
        # Dead or dying: the next call on this thread connects again.
        connections["default"].close()
        raise
    finally:
        _last_used.at = time.monotonic()


def on_this_thread(fn, /, *args, **kwargs):
    """fn(*args, **kwargs) on this thread, with its connection kept as db()'s threads keep theirs.

    For a thread of its own that does database work now and then (the lease
    keeper): a connection idle for a while is checked first, one that failed
    for being unreachable is dropped.
    """
    return _call(fn, args, kwargs)


def connection_dropped_if_broken() -> None:
    """After a worker job: close the thread's connection if the job left it broken; keep it otherwise.

    What Django's close_if_unusable_or_obsolete does at the end of a request,
    but for age: with the pool (CONN_MAX_AGE=0) every connection counts as
    obsolete, and the thread would check one out again for its next job.
    """
    _last_used.at = time.monotonic()
    connection = connections["default"]
    if connection.connection is None:
        return
    if not connection.get_autocommit():
        connection.close()  # a transaction left open: never carry it into the next job
    elif connection.errors_occurred:
        if connection.is_usable():
            connection.errors_occurred = False
        else:
            connection.close()


async def db(fn, /, *args, **kwargs):
    """Run fn(*args, **kwargs) on a database thread (a turn: on its own thread) and return its result."""
    loop = asyncio.get_running_loop()
    if engine.drives(loop):
        return await engine.call_here(_call, fn, args, kwargs)
    # In the caller's context: its log lines carry the caller's request or task id.
    context = contextvars.copy_context()
    future = loop.create_future()
    _db_threads().submit(loop, future, lambda: context.run(_call, fn, args, kwargs))
    return await future


def database_now():
    """Now, on the clock that times shared between processes are kept on, for an ORM filter or update.

    On PostgreSQL the database server's (Django's Now(): the start of the
    statement that uses it), so a time one process writes and another judges
    (a turn's lease, a queued turn's dispatch, a webhook attempt in flight)
    is never off by the difference between their hosts' clocks. On SQLite (the
    embedded default: one process on one host) this host's clock.
    """
    if connection.vendor == "postgresql":
        return Now()
    return timezone.now()


def database_now_column():
    """database_now() as a column a query reads back with its rows (annotate)."""
    return datetime_column(database_now())


def datetime_column(at):
    """A time, or the database's clock (database_now()), as a value an ORM update or annotate takes."""
    return at if hasattr(at, "resolve_expression") else Value(at, output_field=DateTimeField())
