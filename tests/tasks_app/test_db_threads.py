"""db() from a request's loop: calls run on a bounded set of database threads, in the caller's context.

The threads settle the caller's future on the caller's loop themselves
(tasks_app.db._Threads). What must hold: the result or the exception comes
back, in the caller's context; no more threads than A2A_DB_THREADS run calls
at once, and calls made in the same instant each get a thread while the
bound allows; a call whose caller gave up before a thread took it is not
run; a call whose loop closed before it ended does not take its thread down.
"""

import asyncio
import contextvars
import threading
import time

import pytest
from django.test import override_settings

from tasks_app import db as db_module
from tasks_app.db import _Threads, db
from tenants.models import Tenant
from tests.live import wait_for

request_id = contextvars.ContextVar("request_id", default="")


def test_a_call_runs_off_the_loop_in_the_callers_context_and_returns(stored):
    def where() -> tuple[int, str, int, str]:
        thread = threading.current_thread()
        return thread.ident, thread.name, Tenant.objects.filter(slug="demo").count(), request_id.get()

    async def request():
        request_id.set("req-7")
        return threading.get_ident(), await db(where)

    loop_thread, (call_thread, name, tenants, seen_id) = asyncio.run(request())
    assert call_thread != loop_thread and name.startswith("db_")
    assert (tenants, seen_id) == (1, "req-7")


def test_a_calls_exception_is_raised_to_its_caller_and_the_threads_go_on(stored):
    def fails():
        raise LookupError("no such thing")

    async def request():
        with pytest.raises(LookupError, match="no such thing"):
            await db(fails)
        return await db(lambda: "still here")

    assert asyncio.run(request()) == "still here"


def test_a_call_raising_stopiteration_is_an_error_to_its_caller_not_a_hang():
    threads = _Threads(1)

    def stops():
        raise StopIteration("end")

    async def request():
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        threads.submit(loop, future, stops)
        with pytest.raises(RuntimeError, match="StopIteration"):
            await asyncio.wait_for(future, 10)

    asyncio.run(request())


def test_no_more_threads_run_calls_at_once_than_the_bound():
    threads = _Threads(3)
    running, most, lock = set(), [0], threading.Lock()
    release = threading.Event()

    def call():
        with lock:
            running.add(threading.get_ident())
            most[0] = max(most[0], len(running))
        release.wait(10)
        with lock:
            running.discard(threading.get_ident())
        return threading.get_ident()

    async def many():
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in range(10)]
        try:
            for future in futures:
                threads.submit(loop, future, call)
            wait_for(lambda: len(running) == 3, "three calls running")
            time.sleep(0.1)  # room for a fourth, were the bound not kept
            assert threads.started == 3 and most[0] == 3
        finally:
            release.set()
        return await asyncio.gather(*futures)

    idents = asyncio.run(many())
    assert len(idents) == 10 and len(set(idents)) == 3
    assert threads.started == 3


def test_threads_are_reused_when_calls_come_one_after_another():
    threads = _Threads(8)

    async def one_by_one():
        loop = asyncio.get_running_loop()
        for _ in range(20):
            future = loop.create_future()
            threads.submit(loop, future, threading.get_ident)
            await future

    asyncio.run(one_by_one())
    assert threads.started == 1


def test_calls_made_at_once_each_get_a_thread_though_some_sat_idle():
    threads = _Threads(5)
    gate = threading.Barrier(3, timeout=10)

    async def burst():
        loop = asyncio.get_running_loop()
        # Two threads, both idle again.
        release = threading.Event()
        first = [loop.create_future() for _ in range(2)]
        for future in first:
            threads.submit(loop, future, lambda: release.wait(10))
        wait_for(lambda: threads.started == 2, "two threads")
        release.set()
        await asyncio.gather(*first)
        # Three calls in one instant, each waiting for the other two to run at once.
        futures = [loop.create_future() for _ in range(3)]
        for future in futures:
            threads.submit(loop, future, gate.wait)
        return await asyncio.wait_for(asyncio.gather(*futures), 15)

    assert sorted(asyncio.run(burst())) == [0, 1, 2]
    assert threads.started == 3


def test_a_call_whose_caller_gave_up_before_it_ran_is_not_run():
    threads = _Threads(1)
    busy, ran = threading.Event(), []

    async def request():
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        threads.submit(loop, first, lambda: busy.wait(10))
        threads.submit(loop, second, lambda: ran.append("second"))
        second.cancel()
        busy.set()
        assert await first is True
        after = loop.create_future()
        threads.submit(loop, after, lambda: ran.append("after"))
        await after

    asyncio.run(request())
    assert ran == ["after"]


def test_a_call_outliving_its_loop_leaves_its_thread_serving():
    threads = _Threads(1)
    started, finish = threading.Event(), threading.Event()

    async def abandoned():
        loop = asyncio.get_running_loop()
        threads.submit(loop, loop.create_future(), lambda: (started.set(), finish.wait(10)))
        started.wait(10)

    asyncio.run(abandoned())  # its loop is closed before the call ends
    finish.set()

    async def next_request():
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        threads.submit(loop, future, lambda: "served")
        return await asyncio.wait_for(future, 10)

    assert asyncio.run(next_request()) == "served"
    assert threads.started == 1


def test_the_bound_is_the_setting(monkeypatch):
    monkeypatch.setattr(db_module, "_threads", None)
    with override_settings(A2A_DB_THREADS=5):
        assert db_module._db_threads().size == 5
