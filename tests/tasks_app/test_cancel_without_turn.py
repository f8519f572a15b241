"""A task canceled while no turn of it runs still gets its agent's cancel().

The end-to-end case (the a2a_proxy agent lets its remote task go) is in
tests/agents/test_a2a_proxy_agent.py. These check the generic path: the
worker-side function run in this process against the test database, with
executors of their own, and what CancelTask does to a turn still queued.
"""

import asyncio
import concurrent.futures
import time
from datetime import timedelta

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import TaskState
from django.db import OperationalError
from django.utils import timezone

from agents.models import Agent
from tasks_app import engine, services
from tasks_app.access import Caller
from tasks_app.models import Message, Task
from tasks_app.turns import agent_cancel
from tasks_app.turns import setup as turn_setup
from tasks_app.turns.cancel import DiscardingEventQueue, cancel_agent
from tasks_app.turns.setup import Claim, _prepare
from tenants.models import Tenant
from tests.agents.conftest import new_id
from tests.conftest import user_message


class RecordingExecutor(AgentExecutor):
    def __init__(self):
        self.calls: list[tuple[RequestContext, EventQueue]] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise AssertionError("no turn runs on a canceled task")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.calls.append((context, event_queue))
        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).cancel()


class RaisingExecutor(RecordingExecutor):
    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise RuntimeError("the remote said no")


class HangingExecutor(RecordingExecutor):
    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await asyncio.Event().wait()


class SwallowingExecutor(RecordingExecutor):
    """A cancel() that hangs and swallows every cancellation it gets."""

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue


def _agent(slug: str, handler: str) -> str:
    Agent.objects.update_or_create(
        tenant=Tenant.objects.get(slug="demo"),
        slug=slug,
        defaults={"name": slug, "handler": handler, "visibility": Agent.Visibility.PUBLIC, "enabled": True},
    )
    return slug


def _waiting_task(rpc, agent: str, text: str) -> dict:
    task = rpc("SendMessage", user_message(text, new_id()), agent=agent)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


def _cancel(rpc, agent: str, task: dict) -> None:
    canceled = rpc("CancelTask", {"id": task["id"]}, agent=agent)["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


def test_the_agent_gets_the_canceled_task_and_its_last_message_and_nothing_it_emits_is_stored(rpc, stored):
    agent = _agent("clarify-canceled", "clarify")
    task = _waiting_task(rpc, agent, "Plan the offsite")
    _cancel(rpc, agent, task)
    seq = Task.objects.get(pk=task["id"]).event_seq

    executor = RecordingExecutor()
    asyncio.run(cancel_agent(task["id"], executor))

    [(context, queue)] = executor.calls
    assert isinstance(queue, DiscardingEventQueue)
    assert context.current_task.id == task["id"]
    assert context.current_task.status.state == TaskState.TASK_STATE_CANCELED
    assert context.context_id == task["contextId"]
    assert context.get_user_input() == "Plan the offsite"
    after = Task.objects.get(pk=task["id"])
    assert after.state == "canceled"
    assert after.event_seq == seq


def test_a_handler_that_raises_hangs_or_is_gone_is_only_logged(rpc, stored, caplog):
    agent = _agent("clarify-then-gone", "clarify")
    task = _waiting_task(rpc, agent, "Plan the party")
    _cancel(rpc, agent, task)

    with caplog.at_level("INFO", logger="tasks_app.turns"):
        asyncio.run(cancel_agent(task["id"], RaisingExecutor()))
        started = time.monotonic()
        asyncio.run(cancel_agent(task["id"], HangingExecutor(), timeout=0.5))
        assert time.monotonic() - started < 5.0
        _agent(agent, "no-such-handler")
        agent_cancel(task_id=task["id"])
    assert "the remote said no" in caplog.text
    assert "did not finish within 0.5 s" in caplog.text
    assert "Handler 'no-such-handler' is not installed" in caplog.text
    assert Task.objects.get(pk=task["id"]).state == "canceled"


def test_a_cancel_that_swallows_its_cancellation_is_abandoned_at_its_time_limit(rpc, stored, caplog):
    agent = _agent("clarify-swallowed", "clarify")
    task = _waiting_task(rpc, agent, "Plan the picnic")
    _cancel(rpc, agent, task)

    with caplog.at_level("INFO", logger="tasks_app.turns"):
        # On the engine loop, as agent_cancel runs it: a long-lived loop, where the
        # abandoned cancel() stays behind, asleep, for the rest of the session (asyncio.run
        # would wait for it at its end).
        giving = engine.submit(cancel_agent(task["id"], SwallowingExecutor(), timeout=0.5))
        try:
            giving.result(timeout=10)
        except concurrent.futures.TimeoutError:
            giving.cancel()
            raise AssertionError("a cancel() that swallows its cancellation holds its caller") from None
    assert "did not finish within 0.5 s" in caplog.text
    assert Task.objects.get(pk=task["id"]).state == "canceled"


def test_a_stored_cancel_is_answered_as_stored_when_reading_it_back_fails(rpc, stored, monkeypatch):
    agent = _agent("clarify-read-back", "clarify")
    task = _waiting_task(rpc, agent, "Plan the dinner")
    found = Task.objects.select_related("tenant", "agent").get(pk=task["id"])
    caller = Caller(tenant=found.tenant, agent=found.agent, principal=found.owner)

    def unreachable(task_pk, **options):
        raise OperationalError("server closed the connection unexpectedly")

    # The database went away right after the cancel committed.
    monkeypatch.setattr(services, "task_snapshot", unreachable)
    answer = services.task_cancel(caller, task["id"])

    assert answer["id"] == task["id"] and answer["status"]["state"] == "TASK_STATE_CANCELED"
    assert Task.objects.get(pk=task["id"]).state == "canceled"


def test_a_task_that_is_not_canceled_gets_no_agent_cancel(rpc, stored, caplog):
    agent = _agent("clarify-not-canceled", "clarify")
    task = _waiting_task(rpc, agent, "Plan the trip")
    with caplog.at_level("INFO", logger="tasks_app.turns"):
        agent_cancel(task_id=task["id"])
    assert "skipped: the task is input-required" in caplog.text
    assert rpc("GetTask", {"id": task["id"]}, agent=agent)["result"]["status"]["state"] == (
        "TASK_STATE_INPUT_REQUIRED"
    )


def _first_turn_closed(task: dict) -> Task:
    """The task once its first turn (the question's) has closed, with its tenant and context."""
    deadline = time.monotonic() + 15
    while Message.objects.filter(task_id=task["id"], turn=Message.Turn.RUNNING).exists():
        assert time.monotonic() < deadline, "the first turn never ended"
        time.sleep(0.05)
    return Task.objects.select_related("tenant", "context").get(pk=task["id"])


def _answer(waiting: Task, text: str, **turn) -> Message:
    """The caller's answer to a waiting task, stored as the accept stores it, with its turn as given."""
    return Message.objects.create(
        tenant=waiting.tenant,
        task=waiting,
        context=waiting.context,
        message_id=new_id(),
        role=Message.Role.USER,
        parts=[{"text": text}],
        sender=waiting.owner,
        **turn,
    )


def test_a_turn_claimed_as_its_task_is_canceled_still_gets_the_agent_its_cancel(rpc, stored, monkeypatch):
    agent = _agent("clarify-raced", "clarify")
    task = _waiting_task(rpc, agent, "Book the band")
    waiting = _first_turn_closed(task)
    # The answer's turn, just claimed by a worker that has not read the task yet.
    claim = Claim()
    claimed = _answer(
        waiting,
        "A jazz trio",
        turn=Message.Turn.RUNNING,
        turn_attempts=1,
        turn_started_at=claim.start(),
        lease_until=timezone.now() + timedelta(seconds=60),
    )
    # CancelTask sees that turn running, and leaves the agent's cancel() to it.
    _cancel(rpc, agent, task)
    given = []
    monkeypatch.setattr(turn_setup, "agent_cancel_dispatch", given.append)

    assert _prepare(task["id"], claimed.pk, claim) is None  # nothing to run: the task is canceled

    claimed.refresh_from_db()
    assert claimed.turn == Message.Turn.DONE
    assert given == [waiting.pk]


def test_a_queued_turn_of_a_canceled_task_never_starts(rpc, stored):
    agent = _agent("clarify-queued", "clarify")
    task = _waiting_task(rpc, agent, "Book a venue")
    # The question's turn closes just after the task went input-required.
    waiting = _first_turn_closed(task)
    # The answer was accepted but its turn never reached a worker (a broker
    # outage: the sweeper would re-dispatch it later), as message_send leaves it.
    queued = _answer(waiting, "Forty guests", turn=Message.Turn.PENDING)
    Task.objects.filter(pk=waiting.pk).update(state="submitted")

    _cancel(rpc, agent, task)
    queued.refresh_from_db()
    assert queued.turn == Message.Turn.DONE
    final = rpc("GetTask", {"id": task["id"]}, agent=agent)["result"]
    assert final["status"]["state"] == "TASK_STATE_CANCELED"
    assert "artifacts" not in final
