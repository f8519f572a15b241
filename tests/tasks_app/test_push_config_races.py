"""A webhook config created or deleted while a turn's batch holds, or waits for, the task's row.

A batch locks its task, logs its events and queues one delivery per config of
the task (push_deliveries_queue). On PostgreSQL two races lost or failed
deliveries:
- a config stored while the batch waited for the lock was not seen by it
  (a subquery of the locking read saw the configs as they were when the
  statement began), so its events never went to the webhook the client had
  been told was stored;
- a config deleted without the task's lock, while a batch had queued a
  delivery for it, failed that batch at its COMMIT (the delivery's foreign
  key) and with it the turn.
"""

import threading
import time
import uuid

import pytest
from a2a.types import a2a_pb2 as pb
from django.db import connection, transaction

from tasks_app.access import Caller
from tasks_app.events import log_append
from tasks_app.models import PushConfig, PushDelivery, Task, TaskEvent
from tasks_app.push import push_config_create, push_config_delete, push_deliveries_queue
from tasks_app.turns.lease import lock_task
from tests.conftest import SERVICES_MODE
from tests.tasks_app.turn_rows import running_turn

pytestmark = pytest.mark.skipif(not SERVICES_MODE, reason="SQLite has no row locks (one writer at a time)")

HELD = 1.0  # seconds the first writer keeps the task's row after its write
# Discard port: the session's worker, sent the deliveries, fails them; no one listens there.
HOOK = "http://127.0.0.1:9/hook"


def _operator(task: Task) -> Caller:
    return Caller(tenant=task.tenant, agent=task.agent, principal="user:operator", sees_all=True)


def _batch(task_pk, *, written: threading.Event | None = None) -> TaskEvent:
    """What a turn's batch does under its task's lock: log an entry, queue its deliveries."""
    with transaction.atomic():
        task = lock_task(task_pk)
        (event,) = log_append(task, [(TaskEvent.Kind.STATUS, {"statusUpdate": {"taskId": str(task_pk)}})])
        Task.objects.filter(pk=task_pk).update(event_seq=task.event_seq)
        push_deliveries_queue(task, [event])
        if written is not None:
            written.set()
            time.sleep(HELD)
    return event


def _in_thread(work, outcome: dict) -> threading.Thread:
    def run() -> None:
        try:
            outcome["result"] = work()
        except Exception as exc:  # reported by the test
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.fixture
def hooks_to_loopback(settings):
    settings.PUSH_ALLOW_PRIVATE_NETWORKS = True


def test_a_batch_that_waited_for_its_task_while_a_config_was_stored_queues_its_event_for_it(
    stored, hooks_to_loopback
):
    task, _ = running_turn(attempts=1, lease_seconds=600)
    batcher = None
    try:
        config = pb.TaskPushNotificationConfig(task_id=str(task.pk), id=f"race-{uuid.uuid4()}", url=HOOK)
        caller = _operator(task)
        batch: dict = {}
        with transaction.atomic():
            # The config's create, as push_config_create runs it, holding the task's row.
            Task.objects.select_for_update().get(pk=task.pk)
            batcher = _in_thread(lambda: _batch(task.pk), batch)
            time.sleep(0.3)  # the batch's locking read has begun, and waits for the row
            push_config_create(caller, config)
        batcher.join(10)

        assert "error" not in batch, batch
        assert PushDelivery.objects.filter(config__config_id=config.id, event=batch["result"]).exists(), (
            "the event logged after the config was stored was never queued for it"
        )
    finally:
        if batcher is not None:
            batcher.join(10)
        task.context.delete()


def test_a_config_deleted_while_a_batch_queued_a_delivery_for_it_fails_neither(stored, hooks_to_loopback):
    task, _ = running_turn(attempts=1, lease_seconds=600)
    batcher = None
    try:
        config = pb.TaskPushNotificationConfig(task_id=str(task.pk), id=f"race-{uuid.uuid4()}", url=HOOK)
        caller = _operator(task)
        push_config_create(caller, config)
        written = threading.Event()
        batch: dict = {}
        batcher = _in_thread(lambda: _batch(task.pk, written=written), batch)
        assert written.wait(10), batch
        push_config_delete(caller, str(task.pk), config.id)  # while the batch holds its queued delivery
        batcher.join(10)

        assert "error" not in batch, batch
        assert TaskEvent.objects.filter(pk=batch["result"].pk).exists()
        assert not PushConfig.objects.filter(task=task).exists()
        assert Task.objects.get(pk=task.pk).push_config_count == 0
    finally:
        if batcher is not None:
            batcher.join(10)
        task.context.delete()
