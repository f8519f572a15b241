"""The sweeper gives up on a turn whose every attempt lost its worker, and never reruns a superseded one.

Service-level: the rows are made as a lost worker leaves them (RUNNING, lease
expired); requeueing a live case is what tests/faults/test_worker_kill.py does
with real processes. Beat's sweeps: of a backlog of them one runs (their slot in Redis).
"""

import threading
import time
import uuid

import pytest
from django.conf import settings
from django.db import connection, transaction

from tasks_app import metrics
from tasks_app.dispatch import redis_client
from tasks_app.models import Message, Task, TaskEvent, TaskState
from tasks_app.sweeper import sweep_slot, turn_sweep
from tasks_app.tasks import sweep_turns
from tasks_app.turns.lease import lock_task
from tests.conftest import SERVICES_MODE
from tests.live import free_port
from tests.tasks_app.turn_rows import running_turn


def _lost_turn(*, attempts: int, state: str = TaskState.WORKING) -> tuple[Task, Message]:
    return running_turn(attempts=attempts, lease_seconds=-1, state=state)


def test_a_turn_lost_on_its_last_attempt_fails_its_task_saying_why(stored):
    task, message = _lost_turn(attempts=settings.A2A_TURN_MAX_ATTEMPTS)
    # What its task's metadata was before the lost attempt changed it.
    Message.objects.filter(pk=message.pk).update(turn_metadata_base={"step": 1})
    failed = metrics.SWEPT_TURNS.labels("failed")._value.get()
    turn_sweep(task_pks=[task.pk])
    assert metrics.SWEPT_TURNS.labels("failed")._value.get() == failed + 1
    task.refresh_from_db()
    message.refresh_from_db()
    assert task.state == TaskState.FAILED
    assert "attempted 3 times" in task.status_message.parts[0]["text"]
    assert message.turn == Message.Turn.DONE
    # Closed as any turn is: its end noted (the console's turn charts), no metadata to restart from.
    assert message.turn_finished_at is not None and message.turn_metadata_base is None
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


def test_a_lost_turn_whose_task_is_canceled_meanwhile_is_closed_not_requeued(stored):
    # The sweep reads the turn lost and its task working; then a cancel (holding the task's lock)
    # commits before the turn is put back. Put back unlocked, the cancel saw the turn neither
    # running nor queued and sent the agent its cancel(), and the worker that claimed the requeued
    # turn on a canceled task sent a second one.
    task, message = _lost_turn(attempts=1)
    locked, done = threading.Event(), threading.Event()

    def cancel_holding_the_lock() -> None:
        try:
            with transaction.atomic():
                lock_task(task.pk)
                Task.objects.filter(pk=task.pk).update(state=TaskState.CANCELED)
                locked.set()
                time.sleep(1.0)
        finally:
            connection.close()
            done.set()

    threading.Thread(target=cancel_holding_the_lock).start()
    assert locked.wait(10)
    started = time.monotonic()
    turn_sweep(task_pks=[task.pk])  # read before the cancel commits; its requeue waits for the lock
    assert time.monotonic() - started > 0.5  # the lock is held for 1 s
    assert done.wait(10)
    message.refresh_from_db()
    assert message.turn == Message.Turn.RUNNING  # not requeued: left to the next sweep
    assert message.turn_attempts == 1
    turn_sweep(task_pks=[task.pk])
    message.refresh_from_db()
    assert message.turn == Message.Turn.DONE
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELED


def sweep_settings(settings, redis_url: str) -> None:
    settings.REDIS_URL = redis_url
    settings.CELERY_TASK_DEFAULT_QUEUE = f"slots-{uuid.uuid4().hex[:8]}"  # keys of this test only


@pytest.mark.skipif(not SERVICES_MODE, reason="the slots are in Redis (services mode)")
def test_of_a_backlog_of_beat_sweeps_one_runs_and_the_others_return(settings, stored):
    sweep_settings(settings, settings.REDIS_URL)
    settings.A2A_SWEEP_INTERVAL = 20.0
    assert sweep_slot("turns", 20.0) is True
    # Taken for half the interval, on Redis' clock.
    key = f"{settings.CELERY_TASK_DEFAULT_QUEUE}:sweep-slot:turns"
    assert 9_000 < redis_client(settings.REDIS_URL).pttl(key) <= 10_000
    assert [sweep_slot("turns", 20.0) for _ in range(5)] == [False] * 5
    assert sweep_slot("push", 20.0) is True  # each kind has a slot of its own
    # Beat's sweep job itself returns, without sweeping, while its slot is taken ...
    assert sweep_turns.run() == {"skipped": True}
    # ... and sweeps once it is free again (the next sweep, one interval on).
    redis_client(settings.REDIS_URL).delete(key)
    assert "skipped" not in sweep_turns.run()
    assert sweep_turns.run() == {"skipped": True}


def test_without_redis_or_when_redis_does_not_answer_every_sweep_runs(settings):
    sweep_settings(settings, "")
    assert sweep_slot("turns", 10.0) and sweep_slot("turns", 10.0)
    sweep_settings(settings, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    assert sweep_slot("turns", 10.0) and sweep_slot("turns", 10.0)
