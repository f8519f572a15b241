"""Celery tasks: each loads ids and calls the engine. Dispatched by name (tasks_app/dispatch.py)."""

from celery import shared_task
from django.conf import settings
from structlog.contextvars import bound_contextvars

from tasks_app.push import push_deliver, push_sweep
from tasks_app.retention import retention_sweep
from tasks_app.sweeper import beat_sweep, turn_sweep
from tasks_app.turns import agent_cancel, turn_run


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


@shared_task(name="tasks_app.tasks.sweep_turns", ignore_result=True)
def sweep_turns() -> dict:
    return beat_sweep("turns", settings.A2A_SWEEP_INTERVAL, turn_sweep)


@shared_task(name="tasks_app.tasks.sweep_push", ignore_result=True)
def sweep_push() -> dict:
    return beat_sweep("push", settings.A2A_PUSH_SWEEP_INTERVAL, push_sweep)


@shared_task(name="tasks_app.tasks.sweep_retention", ignore_result=True)
def sweep_retention() -> dict:
    return beat_sweep("retention", settings.A2A_RETENTION_INTERVAL, retention_sweep)
