"""Celery tasks: each loads ids and calls the engine. Dispatched by name (tasks_app/dispatch.py)."""

import logging
from collections.abc import Callable

from celery import shared_task
from django.conf import settings
from structlog.contextvars import bound_contextvars

from tasks_app.dispatch import redis_client
from tasks_app.push import push_deliver, push_sweep
from tasks_app.retention import retention_sweep
from tasks_app.sweeper import turn_sweep
from tasks_app.turns import agent_cancel, turn_run

logger = logging.getLogger(__name__)


@shared_task(name="tasks_app.tasks.run_turn", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_turn(task_id: str, message_pk: int) -> None:
    # The turn's lease in the database, not this message, is what brings a lost
    # turn back (tasks_app/sweeper.py); a redelivery finds the turn claimed.
    # Every log line of the turn carries its task id, on whichever thread it is written.
    with bound_contextvars(task_id=task_id):
        turn_run(task_id=task_id, message_pk=message_pk)


@shared_task(name="tasks_app.tasks.cancel_agent", ignore_result=True)
def cancel_agent(task_id: str) -> None:
    # The agent's cancel() for a task canceled while no turn of it was running. Best
    # effort and at most once: the broker keeps no copy of a job a worker took (no ack
    # emulation, settings.py), so a lost worker's job is not delivered again and the
    # agent never gets a second cancel() (a second remote CancelTask for a2a_proxy).
    with bound_contextvars(task_id=task_id):
        agent_cancel(task_id=task_id)


@shared_task(
    name="tasks_app.tasks.deliver_push", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def deliver_push(config_pk: int, seq: int | None = None) -> None:
    # Sends this config's queued events in order, not only `seq`; jobs that find the work claimed return.
    push_deliver(config_pk, seq)


# --- Beat's sweeps: one per interval, on the broker's clock ------------------------
# Beat sends a sweep every interval whether or not a worker is there to run it, so
# workers back from an outage find one queued for every interval they missed. Celery's
# own remedy, an expiry, is judged on the worker's clock against beat's: a worker that
# far ahead drops every sweep, and with only such workers a lost turn never ran again.
# Instead each sweep first takes its kind's slot in Redis (SET NX with a time to live of
# half the interval, on Redis' one clock): those queued behind it find the slot taken
# and return at once, a Redis call each, and a worker's clock plays no part.


def sweep_slot(kind: str, interval: float) -> bool:
    """Whether this sweep of `kind` runs: no other began within half of `interval` seconds.

    True as well without Redis (embedded) or when Redis does not answer: a sweep
    is safe beside another, only a flood of them is waste.
    """
    if not settings.REDIS_URL:
        return True
    key = f"{settings.CELERY_TASK_DEFAULT_QUEUE}:sweep-slot:{kind}"
    try:
        return bool(redis_client(settings.REDIS_URL).set(key, "1", nx=True, px=max(1, int(interval * 500))))
    except Exception as exc:
        logger.warning("Could not take the %s sweep's slot; sweeping anyway: %r", kind, exc)
        return True


def _beat_sweep(kind: str, interval: float, sweep: Callable[[], dict]) -> dict:
    return sweep() if sweep_slot(kind, interval) else {"skipped": True}


@shared_task(name="tasks_app.tasks.sweep_turns", ignore_result=True)
def sweep_turns() -> dict:
    return _beat_sweep("turns", settings.A2A_SWEEP_INTERVAL, turn_sweep)


@shared_task(name="tasks_app.tasks.sweep_push", ignore_result=True)
def sweep_push() -> dict:
    return _beat_sweep("push", settings.A2A_PUSH_SWEEP_INTERVAL, push_sweep)


@shared_task(name="tasks_app.tasks.sweep_retention", ignore_result=True)
def sweep_retention() -> dict:
    return _beat_sweep("retention", settings.A2A_RETENTION_INTERVAL, retention_sweep)
