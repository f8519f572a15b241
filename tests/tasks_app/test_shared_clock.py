"""Times one process writes and another judges are on the database's clock (PostgreSQL).

A turn's lease, a queued turn's dispatch time and a webhook attempt's start
are written and compared on PostgreSQL's clock (tasks_app/turns/lease.py,
tasks_app/db.py database_now), so how far this host's clock is off changes
nothing. Here this process's clock (django.utils.timezone.now, which the
platform reads) is moved an hour; tests/faults/test_clock_skew.py moves whole
Celery workers' clocks with libfaketime.
"""

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from tasks_app.models import Message, PushConfig, PushDelivery, TaskEvent
from tasks_app.push import _claim_next, _record, stuck_configs
from tasks_app.sweeper import turn_sweep
from tasks_app.turns import Turn
from tasks_app.turns.lease import turn_claim, turn_renew
from tenants import sql
from tests.conftest import SERVICES_MODE
from tests.tasks_app.turn_rows import running_turn

pytestmark = pytest.mark.skipif(not SERVICES_MODE, reason="on PostgreSQL; SQLite keeps one host's clock")

NOTHING_SWEPT = {"requeued": 0, "failed": 0, "redispatched": 0}


@pytest.fixture
def host_clock(monkeypatch):
    """Moves this process's clock: host_clock(timedelta) from the real one."""
    real_now = timezone.now

    def move(by: timedelta) -> None:
        monkeypatch.setattr(timezone, "now", lambda: real_now() + by)

    return move


def seconds_from_database_now(moment) -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        (database_now,) = cursor.fetchone()
    return (moment - database_now).total_seconds()


def lease_left(message: Message) -> float:
    """Seconds from now to the message's lease_until, both by the database's clock."""
    message.refresh_from_db()
    return seconds_from_database_now(message.lease_until)


def queued_turn() -> Message:
    task, message = running_turn(attempts=0, lease_seconds=0)
    Message.objects.filter(pk=message.pk).update(
        turn=Message.Turn.PENDING, lease_until=None, dispatched_at=timezone.now()
    )
    message.refresh_from_db()
    return message


def test_a_lease_is_written_and_judged_on_the_databases_clock(stored, host_clock):
    message = queued_turn()
    host_clock(timedelta(hours=-1))  # the worker an hour behind
    assert turn_claim(message.task_id, message.pk)
    assert settings.A2A_TURN_LEASE - 1 < lease_left(message) <= settings.A2A_TURN_LEASE
    turn = Turn(task_pk=str(message.task_id), message_pk=message.pk, attempt=1, timeout=60.0)
    assert turn_renew(turn) is None
    assert settings.A2A_TURN_LEASE - 1 < lease_left(message) <= settings.A2A_TURN_LEASE
    host_clock(timedelta(hours=1))  # the sweeper an hour ahead
    assert turn_sweep(task_pks=[message.task_id]) == NOTHING_SWEPT
    message.refresh_from_db()
    assert (message.turn, message.turn_attempts) == (Message.Turn.RUNNING, 1)


def test_a_turn_just_dispatched_is_not_sent_again_by_a_sweeper_whose_clock_is_ahead(stored, host_clock):
    message = queued_turn()
    dispatched_at = message.dispatched_at
    host_clock(timedelta(hours=1))
    assert turn_sweep(task_pks=[message.task_id]) == NOTHING_SWEPT
    message.refresh_from_db()
    assert (message.turn, message.dispatched_at) == (Message.Turn.PENDING, dispatched_at)


def test_a_turn_queued_by_a_web_host_whose_clock_is_behind_is_not_sent_again_at_once(stored, host_clock):
    # The accept's INSERT (tenants/sql.py) writes the dispatch time on the database's clock.
    task, message = running_turn(attempts=0, lease_seconds=0)
    host_clock(timedelta(hours=-1))
    queued = Message(
        tenant_id=task.tenant_id,
        task=task,
        context_id=task.context_id,
        message_id=f"queued-{message.message_id}",
        role=Message.Role.USER,
        parts=[{"text": "queued"}],
        turn=Message.Turn.PENDING,
        dispatched_at=timezone.now(),
    )
    sql.insert([queued])
    host_clock(timedelta(0))
    queued.refresh_from_db()
    assert abs((queued.dispatched_at - timezone.now()).total_seconds()) < 60, queued.dispatched_at
    assert turn_sweep(task_pks=[task.pk])["redispatched"] == 0
    assert Message.objects.get(pk=queued.pk).redispatches == 0


def webhook() -> tuple[PushConfig, TaskEvent]:
    """A push config of a new task, and the task's first event."""
    message = queued_turn()
    event = TaskEvent.objects.create(task_id=message.task_id, seq=1, kind=TaskEvent.Kind.STATUS, payload={})
    config = PushConfig.objects.create(
        tenant_id=message.tenant_id, task_id=message.task_id, config_id="skew", url="http://127.0.0.1:9/hook"
    )
    return config, event


def test_a_webhook_attempt_in_flight_is_not_taken_over_by_a_worker_whose_clock_is_ahead(stored, host_clock):
    config, event = webhook()
    delivery = PushDelivery.objects.create(
        config=config, event=event, seq=1, status=PushDelivery.Status.SENDING, started_at=timezone.now()
    )
    host_clock(timedelta(seconds=settings.PUSH_SENDING_LEASE + 60))
    assert _claim_next(config.pk, 1) is None
    started_at = delivery.started_at
    delivery.refresh_from_db()
    assert (delivery.status, delivery.started_at) == (PushDelivery.Status.SENDING, started_at)


def test_a_webhook_retry_falls_due_by_the_databases_clock(stored, host_clock, settings):
    settings.PUSH_RETRY_BASE_DELAY = 30.0  # its job comes long after this test
    config, event = webhook()
    delivery = PushDelivery.objects.create(
        config=config, event=event, seq=1, status=PushDelivery.Status.SENDING, started_at=timezone.now()
    )
    host_clock(timedelta(hours=-1))  # the worker whose attempt failed is an hour behind
    assert _record(delivery, 500, "HTTP 500 Internal Server Error") is False
    retry = PushDelivery.objects.get(config=config, attempt=2)
    assert 25 < seconds_from_database_now(retry.not_before) <= 30
    host_clock(timedelta(hours=1))  # a worker an hour ahead neither sends it early nor finds it lost
    assert _claim_next(config.pk, None) is None
    assert config.pk not in set(stuck_configs())
    retry.refresh_from_db()
    assert retry.status == PushDelivery.Status.RETRYING


def test_a_new_webhook_attempt_is_not_found_lost_when_its_worker_is_behind(stored, host_clock):
    config, event = webhook()
    host_clock(timedelta(hours=-1))  # the worker whose turn queued it is an hour behind
    sql.insert([PushDelivery(config=config, event=event, seq=1)])
    host_clock(timedelta(0))
    assert config.pk not in set(stuck_configs())
