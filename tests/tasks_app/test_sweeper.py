"""The sweeper gives up on a turn whose every attempt lost its worker, and never reruns a superseded one.

Service-level: the rows are made as a lost worker leaves them (RUNNING, lease
expired); requeueing a live case is what tests/faults/test_worker_kill.py does
with real processes.
"""

import uuid

from django.conf import settings

from tasks_app import metrics
from tasks_app.models import Message, Task, TaskEvent, TaskState
from tasks_app.sweeper import turn_sweep
from tests.tasks_app.turn_rows import running_turn


def _lost_turn(*, attempts: int, state: str = TaskState.WORKING) -> tuple[Task, Message]:
    return running_turn(attempts=attempts, lease_seconds=-1, state=state)


def test_a_turn_lost_on_its_last_attempt_fails_its_task_saying_why(stored):
    task, message = _lost_turn(attempts=settings.A2A_TURN_MAX_ATTEMPTS)
    failed = metrics.SWEPT_TURNS.labels("failed")._value.get()
    turn_sweep(task_pks=[task.pk])
    assert metrics.SWEPT_TURNS.labels("failed")._value.get() == failed + 1
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
