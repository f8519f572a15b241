"""Database work for async code, on a pool of threads of its own.

asgiref's thread-sensitive sync_to_async runs every call of a request (or of
a whole worker process, outside a request) on one thread, one call at a time:
under load the database work of unrelated requests and turns queued behind
each other. Calls made through `db()` run on any free thread of a bounded
pool instead; each thread has its own connection (checked out of the psycopg
pool, or a persistent SQLite connection), healed before and released after
every call as Django does around a request.

No transaction spans two calls: each function passed here opens and commits
its own.
"""

import asyncio
import contextvars
import functools
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections

_executor: ThreadPoolExecutor | None = None

# Errors that mean "the database cannot be reached", as opposed to a bad query.
UNAVAILABLE_ERRORS = (OperationalError, InterfaceError)


def executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=settings.A2A_DB_THREADS, thread_name_prefix="db")
    return _executor


def _call(fn, args, kwargs):
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        close_old_connections()


async def db(fn, /, *args, **kwargs):
    """Run fn(*args, **kwargs) on a database thread and return its result."""
    loop = asyncio.get_running_loop()
    # In the caller's context: its log lines carry the caller's request or task id.
    context = contextvars.copy_context()
    return await loop.run_in_executor(executor(), context.run, functools.partial(_call, fn, args, kwargs))
