"""A worker thread's own loop (tasks_app/engine.run_here): where a turn's database calls and publishes run.

A turn runs on a loop its worker thread drives; its database calls
(tasks_app.db.db) run on that thread, between two steps of the loop, and
what it fires (the publishes of its batches) is done before the thread takes
its next job. The thread keeps its database connection from job to job and
checks one that sat idle and drops one a job left broken.
"""

import asyncio
import contextvars
import gc
import threading
import time
import types

import psycopg
import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.db import OperationalError, connection

from a2a_platform.celery import app as celery_app
from tasks_app import engine
from tasks_app.db import HEALTH_CHECK_AFTER, connection_checked_if_idle, connection_dropped_if_broken, db
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


def test_a_check_after_each_call_runs_before_anything_else_on_the_loop_goes_on():
    # The lease fence's hook (turns.run.Fence): a call that held the thread past a deadline
    # is followed by the check, which stops the agent before it takes another step.
    steps: list[float] = []
    checks: list[float] = []

    async def agent():
        while True:
            steps.append(time.monotonic())
            await asyncio.sleep(0.01)

    async def turn():
        execution = asyncio.ensure_future(agent())
        deadline = time.monotonic() + 0.2

        def check():
            checks.append(time.monotonic())
            if time.monotonic() > deadline and not execution.done():
                execution.cancel()

        assert engine.after_each_call(check)
        await asyncio.sleep(0.05)
        await engine.call_here(time.sleep, 0.5)  # holds the thread, and the agent's timer expires
        await asyncio.wait({execution}, timeout=1)
        return execution.cancelled()

    async def next_turn():
        await engine.call_here(time.sleep, 0.01)

    # The thread's next turn, on the same loop: the check belonged to the turn that registered it.
    cancelled, _ = on_a_worker_thread(lambda: (engine.run_here(turn()), engine.run_here(next_turn())))
    assert cancelled
    assert len(checks) == 1
    assert steps and max(steps) < checks[0], "the agent took a step after the call, before the check"

    async def not_driven():
        return engine.after_each_call(lambda: None)

    assert asyncio.run(not_driven()) is False


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


def test_a_loop_that_a_coroutine_was_abandoned_on_is_closed_and_the_next_turn_gets_a_new_one(caplog):
    steps = []
    run_again = []

    async def stubborn():
        while True:
            try:
                await asyncio.sleep(0.01)
                steps.append(time.monotonic())
            except asyncio.CancelledError:
                continue  # swallowed

    async def stopped_by_force():
        agent = asyncio.ensure_future(stubborn())
        await asyncio.sleep(0.05)
        agent.cancel()
        await asyncio.wait({agent}, timeout=0.05)
        assert not agent.done()
        assert engine.retire_loop()  # as run._stop does when it abandons an agent
        loop = asyncio.get_running_loop()
        # As channels_redis wraps a loop's close to flush its connections, by running the loop.
        loop.close = types.MethodType(lambda loop: run_again.append(loop), loop)
        return loop

    async def next_turn():
        await asyncio.sleep(0.3)
        return asyncio.get_running_loop()

    def two_turns():
        first = engine.run_here(stopped_by_force())
        after = time.monotonic()
        second = engine.run_here(next_turn())
        return first, second, after

    first, second, after = on_a_worker_thread(two_turns)
    assert first.is_closed() and second is not first
    assert run_again == [], "the retired loop was closed through its wrapper, which runs it"
    assert steps and max(steps) < after, "the abandoned coroutine took a step during the next turn"
    del first
    gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text
    # Off a turn's loop (the engine loop) there is nothing to retire.
    assert engine.run(_retire_here(), timeout=10) is False


async def _retire_here() -> bool:
    return engine.retire_loop()


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


def test_celerys_django_fixup_leaves_a_worker_threads_connection_open(stored):
    # CELERY_DB_REUSE_MAX: the fixup's close around every job is off.
    fixup = DjangoWorkerFixup(celery_app)

    def job() -> bool:
        Tenant.objects.count()
        kept = connection.connection
        fixup.close_database()
        return kept is not None and connection.connection is kept

    assert on_a_worker_thread(job)


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def terminate(pid: int) -> None:
    """End a server process of the test database, as a database restart would, and wait for it to go."""
    params = connection.get_connection_params()
    with psycopg.connect(**{**params, "autocommit": True}) as other:
        assert other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid]).fetchone()[0]


@services_only
def test_a_worker_thread_keeps_its_connection_between_jobs_and_drops_a_broken_one(stored):
    def jobs() -> dict:
        async def turn():
            return await db(backend_pid)

        seen = {}
        connection_checked_if_idle()
        seen["first"] = engine.run_here(turn())
        connection_dropped_if_broken()
        seen["kept"] = connection.connection is not None
        connection_checked_if_idle()
        seen["second"] = engine.run_here(turn())
        connection_dropped_if_broken()
        # Its server process goes away between two jobs, and the next comes at once.
        terminate(seen["second"])
        connection_checked_if_idle()
        with pytest.raises(OperationalError):
            Tenant.objects.count()  # a job that is not a turn: nothing retries it
        connection_dropped_if_broken()
        seen["dropped"] = connection.connection is None
        connection_checked_if_idle()
        seen["third"] = backend_pid()
        connection_dropped_if_broken()
        return seen

    seen = on_a_worker_thread(jobs)
    assert seen["kept"] and seen["first"] == seen["second"]  # not closed, not checked out again
    assert seen["dropped"]  # the broken one is closed after its job ...
    assert seen["third"] != seen["second"]  # ... and the next job works on a new one


@services_only
def test_a_connection_that_died_while_its_thread_sat_idle_is_replaced_before_the_next_job(stored):
    def jobs() -> tuple[int, int]:
        connection_checked_if_idle()
        before = backend_pid()
        connection_dropped_if_broken()
        terminate(before)
        time.sleep(HEALTH_CHECK_AFTER + 0.2)
        connection_checked_if_idle()
        after = backend_pid()  # no error: checked, found dead, replaced
        connection_dropped_if_broken()
        return before, after

    before, after = on_a_worker_thread(jobs)
    assert after != before
