"""A write to a task its caller may not see is refused without waiting for that task's writers.

A follow-up, a cancel and a new webhook config lock their task's row (one
lookup, access.get_task_for_caller). Locked before it was checked, another
tenant's (or another caller's) row made its caller wait while that task's turn
or operator held the lock: how long an answer took told whether the task
exists and is busy.
"""

import threading
import time
import uuid

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError
from django.db import connection, transaction

from agents.models import Agent
from tasks_app.access import Caller
from tasks_app.models import Task
from tasks_app.services import message_send, task_cancel
from tasks_app.turns.lease import lock_task
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE
from tests.tasks_app.turn_rows import running_turn

pytestmark = pytest.mark.skipif(not SERVICES_MODE, reason="SQLite has no row locks (one writer at a time)")

HELD = 2.0  # seconds the task's own writer holds its row
OTHERS = "foreign-lock-"  # the slugs of the tenants these tests make


def _another_tenant(task: Task) -> Caller:
    other = Tenant.objects.create(slug=f"{OTHERS}{uuid.uuid4().hex[:8]}", name="Other")
    agent = Agent.objects.create(tenant=other, slug="echo", name="Echo", handler="echo")
    return Caller(tenant=other, agent=agent, principal="client:other", sees_all=True)


def _another_caller(task: Task) -> Caller:
    return Caller(tenant=task.tenant, agent=task.agent, principal="client:someone-else")


def _cancel(caller: Caller, task: Task) -> None:
    task_cancel(caller, str(task.pk))


def _follow_up(caller: Caller, task: Task) -> None:
    message = pb.Message(
        role=pb.ROLE_USER, message_id=f"m-{uuid.uuid4()}", task_id=str(task.pk), parts=[pb.Part(text="more")]
    )
    message_send(caller, pb.SendMessageRequest(message=message))


@pytest.mark.parametrize(
    "whose", [_another_tenant, _another_caller], ids=["another-tenant", "another-caller"]
)
@pytest.mark.parametrize("write", [_cancel, _follow_up], ids=["cancel", "follow-up"])
def test_a_write_to_a_busy_task_the_caller_may_not_see_is_refused_at_once(stored, whose, write):
    task, _ = running_turn(attempts=1, lease_seconds=60, state="input-required")
    try:
        _refused_at_once(task, whose(task), write)
    finally:
        # Its turn "runs" with no worker: gone, it holds no later test's quota or wait.
        task.delete()
        Tenant.objects.filter(slug__startswith=OTHERS).delete()


def _refused_at_once(task: Task, caller: Caller, write) -> None:
    locked = threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                lock_task(task.pk)
                locked.set()
                time.sleep(HELD)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        with pytest.raises(TaskNotFoundError):
            write(caller, task)
        waited = time.monotonic() - started
    finally:
        holder.join(10)
    assert waited < HELD / 2, f"the refusal waited {waited:.2f} s for the task's own writer"
    task.refresh_from_db()
    assert task.state == "input-required"
