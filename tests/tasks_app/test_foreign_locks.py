"""A write to a task of another tenant is refused without waiting for that task's own writers.

A follow-up, a cancel and a new webhook config lock their task's row. Locked
before it was checked, another tenant's row made its caller wait while that
tenant's turn or operator held the lock: how long an answer took told whether
the task exists and is busy.
"""

import threading
import time
import uuid

import pytest
from a2a.utils.errors import TaskNotFoundError
from django.db import connection, transaction

from agents.models import Agent
from tasks_app.access import Caller
from tasks_app.services import task_cancel
from tasks_app.turns.lease import lock_task
from tenants.models import Tenant
from tests.conftest import SERVICES_MODE
from tests.tasks_app.turn_rows import running_turn

pytestmark = pytest.mark.skipif(not SERVICES_MODE, reason="SQLite has no row locks (one writer at a time)")

HELD = 2.0  # seconds the task's own writer holds its row


def test_a_cancel_of_another_tenants_busy_task_is_refused_at_once(stored):
    task, _ = running_turn(attempts=1, lease_seconds=60)
    other = Tenant.objects.create(slug=f"other-{uuid.uuid4().hex[:8]}", name="Other")
    agent = Agent.objects.create(tenant=other, slug="echo", name="Echo", handler="echo")
    caller = Caller(tenant=other, agent=agent, principal="client:other", sees_all=True)
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
            task_cancel(caller, str(task.pk))
        waited = time.monotonic() - started
    finally:
        holder.join(10)
    assert waited < HELD / 2, f"the refusal waited {waited:.2f} s for the other tenant's writer"
    task.refresh_from_db()
    assert task.state == "working"
