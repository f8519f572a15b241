"""A worker thread's own loop (tasks_app/engine.run_here): where a turn's database calls and publishes run.

A turn runs on a loop its worker thread drives; its database calls
(tasks_app.db.db) run on that thread, between two steps of the loop, and
what it fires (the publishes of its batches) is done before the thread takes
its next job. The thread keeps its database connection from job to job and
drops one a job left broken (tasks_app.db.job_ended).
"""

import asyncio
import contextvars
import threading
import time

import psycopg
import pytest
from django.db import OperationalError, connection

from tasks_app import engine
from tasks_app.db import db, job_ended, job_started
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE

services_only = pytest.mark.skipif(not SERVICES_MODE, reason="a kept PostgreSQL connection")
request_id = contextvars.ContextVar("request_id", default="")


def on_a_worker_thread(fn):
    """Run fn() on a thread of its own, as a worker's job runs; its result or its exception."""
    outcome = {}

    def job():
        try:
            outcome["result"] = fn()
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=job)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the job did not end"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def test_a_turns_database_calls_run_on_its_own_thread(stored):
    def where() -> tuple[int, int, str]:
        return threading.get_ident(), Tenant.objects.filter(slug="demo").count(), request_id.get()

    async def turn():
        request_id.set("turn-1")
        # Two at once: each runs in turn on the thread, in its caller's context.
        return threading.get_ident(), await asyncio.gather(db(where), db(where))

    thread, answers = on_a_worker_thread(lambda: engine.run_here(turn()))
    assert answers == [(thread, 1, "turn-1"), (thread, 1, "turn-1")]


def test_a_failed_call_raises_into_the_turn_and_the_loop_goes_on(stored):
    def fails():
        raise ValueError("no such thing")

    async def turn():
        with pytest.raises(ValueError, match="no such thing"):
            await db(fails)
        return await db(lambda: Tenant.objects.filter(slug="demo").exists())

    assert on_a_worker_thread(lambda: engine.run_here(turn())) is True


def test_what_a_turn_fired_is_done_before_the_thread_goes_on(stored):
    done = []

    async def publish():
        await asyncio.sleep(0.2)
        done.append("published")

    def on_commit_hook():
        # As events.publish_soon runs after a batch commits: on the turn's loop.
        return engine.fire_here(publish())

    async def turn():
        return await db(on_commit_hook)

    assert on_a_worker_thread(lambda: (engine.run_here(turn()), list(done))) == (True, ["published"])
    # Off a turn's loop there is nothing to fire on: the caller uses the engine loop.
    coro = publish()
    assert engine.fire_here(coro) is False
    coro.close()


def test_a_stuck_publish_does_not_hold_the_thread(stored, monkeypatch):
    monkeypatch.setattr(engine, "FIRED_GRACE", 0.3)
    outcome = []

    async def stuck():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            outcome.append("given up")
            raise

    async def turn():
        await db(lambda: engine.fire_here(stuck()))
        return "ended"

    started = time.monotonic()
    assert on_a_worker_thread(lambda: engine.run_here(turn())) == "ended"
    assert time.monotonic() - started < 10
    assert outcome == ["given up"]


@services_only
def test_a_worker_thread_keeps_its_connection_between_jobs_and_drops_a_broken_one(stored):
    def backend_pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    def jobs() -> tuple[int, int, bool, int]:
        async def turn():
            return await db(backend_pid)

        job_started()
        first = engine.run_here(turn())
        job_ended()
        job_started()
        second = engine.run_here(turn())
        job_ended()
        # The connection's server goes away between two jobs (a database restart, say).
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [second])
        job_started()
        with pytest.raises(OperationalError):
            Tenant.objects.count()  # a job that is not a turn: nothing retries it
        job_ended()
        dropped = connection.connection is None
        job_started()
        third = backend_pid()
        job_ended()
        return first, second, dropped, third

    settings = connection.settings_dict
    dsn = f"host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} "
    dsn += f"user={settings['USER']} dbname={settings['NAME']}"
    first, second, dropped, third = on_a_worker_thread(jobs)
    assert first == second  # kept: not closed and checked out of the pool again
    assert dropped  # the broken one is closed after its job ...
    assert third != second  # ... and the next job works on a new one
