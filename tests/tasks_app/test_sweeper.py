"""The sweeper gives up on a turn whose every attempt lost its worker, and never reruns a superseded one.

Service-level: the rows are made as a lost worker leaves them (RUNNING, lease
expired); requeueing a live case is what tests/faults/test_worker_kill.py does
with real processes.
"""

import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from tasks_app.models import Message, Task, TaskEvent, TaskState
from tasks_app.sweeper import turn_sweep
from tasks_app.turns import Turn
from tasks_app.turns.lease import turn_claim, turn_renew
from tests.conftest import SERVICES_MODE
from tests.tasks_app.turn_rows import running_turn


def _lost_turn(*, attempts: int, state: str = TaskState.WORKING) -> tuple[Task, Message]:
    return running_turn(attempts=attempts, lease_seconds=-1, state=state)


def test_a_turn_lost_on_its_last_attempt_fails_its_task_saying_why(stored):
    task, message = _lost_turn(attempts=settings.A2A_TURN_MAX_ATTEMPTS)
    turn_sweep(task_pks=[task.pk])
    task.refresh_from_db()
    message.refresh_from_db()
    assert task.state == TaskState.FAILED
    assert "attempted 3 times" in task.status_message.parts[0]["text"]
    assert message.turn == Message.Turn.DONE
    assert TaskEvent.objects.filter(task=task, kind=TaskEvent.Kind.STATUS).count() == 1


def test_a_lost_turn_with_a_later_turn_on_its_task_is_closed_not_rerun(stored):
    task, message = _lost_turn(attempts=1, state=TaskState.SUBMITTED)
    Message.objects.create(
        tenant=task.tenant,
        task=task,
        context=task.context,
        message_id=f"answer-{uuid.uuid4()}",
        role=Message.Role.USER,
        parts=[{"text": "the answer"}],
        turn=Message.Turn.DONE,
    )
    turn_sweep(task_pks=[task.pk])
    task.refresh_from_db()
    message.refresh_from_db()
    assert message.turn == Message.Turn.DONE
    assert message.turn_attempts == 1
    assert task.state == TaskState.SUBMITTED


@pytest.mark.skipif(not SERVICES_MODE, reason="leases are on the database's clock on PostgreSQL")
def test_a_lease_is_written_and_judged_on_the_databases_clock_whatever_the_hosts(stored, monkeypatch):
    # tests/faults/test_clock_skew.py does this with whole worker processes under libfaketime.
    real_now = timezone.now

    def lease_left(message: Message) -> float:
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            (database_now,) = cursor.fetchone()
        message.refresh_from_db()
        return (message.lease_until - database_now).total_seconds()

    task, message = running_turn(attempts=0, lease_seconds=0)
    Message.objects.filter(pk=message.pk).update(turn=Message.Turn.PENDING, lease_until=None)
    monkeypatch.setattr(timezone, "now", lambda: real_now() - timedelta(hours=1))  # this host an hour behind
    assert turn_claim(task.pk, message.pk)
    assert settings.A2A_TURN_LEASE - 1 < lease_left(message) <= settings.A2A_TURN_LEASE
    turn = Turn(task_pk=str(task.pk), message_pk=message.pk, attempt=1, timeout=60.0)
    assert turn_renew(turn) is None
    assert settings.A2A_TURN_LEASE - 1 < lease_left(message) <= settings.A2A_TURN_LEASE
    # The sweeper an hour ahead.
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(hours=1))
    assert turn_sweep(task_pks=[task.pk]) == {"requeued": 0, "failed": 0, "redispatched": 0}
    message.refresh_from_db()
    assert (message.turn, message.turn_attempts) == (Message.Turn.RUNNING, 1)
