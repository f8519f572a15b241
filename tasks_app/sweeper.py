"""The sweeper: finds turns no worker will run and hands them out again.

It runs every A2A_SWEEP_INTERVAL seconds: in services mode the beat process
schedules it and a worker runs it (of a backlog of sweeps only the first:
beat_sweep, below); embedded, a thread of `manage.py serve` runs it. Two
kinds of turns:

- running, with a lease nobody renewed for A2A_TURN_LEASE seconds: its worker
  died. The turn goes back to the queue, to be run again from its input
  (turns/setup.py undoes what the lost attempt wrote), unless it has used its
  A2A_TURN_MAX_ATTEMPTS: then its task ends FAILED, saying why.
- queued, and not handed to the workers for A2A_TURN_REDISPATCH_AFTER
  seconds: its job may have been lost with a broker outage or a killed
  worker's prefetch. It is sent again; a job for a turn already claimed
  returns. The sweeper cannot tell a lost job from one waiting in a backlog
  behind others, so each further copy of one turn waits twice as long as the
  one before, up to A2A_TURN_REDISPATCH_MAX: a backlog of N turns lasting T
  seconds gets a few copies of each, not N x T / A2A_TURN_REDISPATCH_AFTER.

Every change is a conditional UPDATE on what the sweep read, so two sweepers
(or a sweeper and a worker) never both act on one turn.
"""

import logging
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from tasks_app import metrics
from tasks_app.db import database_now
from tasks_app.dispatch import agent_cancel_dispatch, redis_client, turn_dispatch
from tasks_app.events import SETTLED_STATES
from tasks_app.models import Message, Task, TaskState
from tasks_app.turns import Turn, lock_task, owned_turn, task_fail
from tasks_app.turns.lease import closed_turn_fields

logger = logging.getLogger(__name__)

# A sweep looks at this many turns of each kind at most; the next sweep takes the rest.
SWEEP_BATCH = 500


def turn_sweep(*, task_pks=None) -> dict:
    """One sweep; `task_pks` limits it to those tasks (a targeted sweep, as the tests make)."""
    # On the clock leases and dispatch times are written on (the database's, on PostgreSQL):
    # how far this worker's clock is off changes nothing. An expression there, not a value.
    now = database_now()
    requeued = failed = redispatched = 0
    turns = Message.objects.all() if task_pks is None else Message.objects.filter(task_id__in=task_pks)
    expired = turns.filter(turn=Message.Turn.RUNNING, lease_until__lt=now).values_list(
        "pk", "task_id", "turn_attempts", "task__state"
    )[:SWEEP_BATCH]
    for message_pk, task_pk, attempts, state in expired:
        turn = Turn(task_pk=str(task_pk), message_pk=message_pk, attempt=attempts, timeout=0.0)
        superseded = Message.objects.filter(
            task_id=task_pk, role=Message.Role.USER, pk__gt=message_pk
        ).exists()
        if state in SETTLED_STATES or superseded or attempts >= settings.A2A_TURN_MAX_ATTEMPTS:
            # A task that ended, waits for an answer or has a later turn has nothing to run again.
            if _give_up(turn, now, superseded) and state not in SETTLED_STATES and not superseded:
                failed += 1
                metrics.turn_swept("failed")
            continue
        if _requeue(turn, now):
            logger.warning(
                "Turn %s of task %s lost its worker (attempt %s); running it again",
                message_pk,
                task_pk,
                attempts,
                extra={"task_id": str(task_pk)},
            )
            turn_dispatch(task_pk, message_pk, again=True)
            requeued += 1
            metrics.turn_swept("run_again")
    queued_quietly = turns.filter(turn=Message.Turn.PENDING).filter(_waited_out(now))
    found = queued_quietly.values_list("pk", "task_id", "turn_attempts")[:SWEEP_BATCH]
    for message_pk, task_pk, attempts in found:
        # Still as the sweep read it: of sweeps run side by side (a backlog, after an outage), one sends it.
        copy = {"dispatched_at": now, "redispatches": F("redispatches") + 1}
        if not queued_quietly.filter(pk=message_pk).update(**copy):
            continue
        logger.info(
            "Turn %s of task %s is still queued; sending it again",
            message_pk,
            task_pk,
            extra={"task_id": str(task_pk)},
        )
        # A turn attempted before lost its worker: its copy goes ahead of the turns queued since.
        if turn_dispatch(task_pk, message_pk, again=attempts > 0):
            redispatched += 1
            metrics.turn_swept("copied")
        else:
            # Not sent (the broker is out of reach): the next try waits as long as this one did.
            Message.objects.filter(pk=message_pk, turn=Message.Turn.PENDING).update(
                redispatches=F("redispatches") - 1
            )
    return {"requeued": requeued, "failed": failed, "redispatched": redispatched}


def _redispatch_waits() -> list[float]:
    """Each copy's wait (the last one: every later copy's too): the first doubled up to the cap."""
    first = max(settings.A2A_TURN_REDISPATCH_AFTER, 0.0)
    most = max(settings.A2A_TURN_REDISPATCH_MAX, first)
    waits = [first]
    while 0 < waits[-1] < most:
        waits.append(min(waits[-1] * 2, most))
    return waits


def redispatch_wait(copies: int) -> float:
    """Seconds a queued turn sent again `copies` times waits before the sweeper sends it once more."""
    waits = _redispatch_waits()
    return waits[min(copies, len(waits) - 1)]


def _waited_out(now) -> Q:
    """Queued turns that have waited their redispatch_wait() since they were last handed out.

    One condition per number of copies below the cap, each comparing
    dispatched_at with a constant (the open turns' index finds the rows).
    """
    waits = _redispatch_waits()
    *below, cap = waits

    def quiet(wait: float):
        return now - timedelta(seconds=wait)

    waited = Q(redispatches__gte=len(below), dispatched_at__lt=quiet(cap))
    for copies, wait in enumerate(below):
        waited |= Q(redispatches=copies, dispatched_at__lt=quiet(wait))
    # Queued before this column said when (none of the platform's own writes leave it empty).
    return waited | Q(dispatched_at__isnull=True, created_at__lt=quiet(waits[0]))


def _requeue(turn: Turn, now) -> bool:
    """Put a lost turn back in the queue; False if it is not to be run again after all.

    Under its task's lock, which task_cancel takes too: a cancel finds the turn
    either running (left to the turn, or for a lost one to _give_up, to give the
    agent its cancel()) or queued (the cancel closes it and dispatches that
    cancel() itself), never neither, which gave the agent two. A task settled
    since the sweep read it keeps its turn as it is: the next sweep closes it
    (_give_up).
    """
    with transaction.atomic():
        try:
            if lock_task(turn.task_pk).state in SETTLED_STATES:
                return False
        except Task.DoesNotExist:
            return False  # deleted since (retention): its turns went with it
        return bool(
            owned_turn(turn)
            .filter(lease_until__lt=now)
            .update(turn=Message.Turn.PENDING, lease_until=None, dispatched_at=now, redispatches=0)
        )


def _give_up(turn: Turn, now, superseded: bool = False) -> bool:
    """Close a lost turn that is not run again; its task ends FAILED if nothing else settled it.

    `now`: database_now(), what its lease must have lapsed against.
    """
    with transaction.atomic():
        task = lock_task(turn.task_pk)
        lapsed = owned_turn(turn).filter(lease_until__lt=now)
        if not lapsed.update(**closed_turn_fields(now)):
            return False
        canceled = task.state == TaskState.CANCELED
        if not task.is_terminal and not task.is_interrupted and not superseded:
            task_fail(
                task,
                f"The turn was attempted {turn.attempt} times and the worker running it was lost each time.",
            )
            logger.warning(
                "Turn %s of task %s failed after %s attempts",
                turn.message_pk,
                turn.task_pk,
                turn.attempt,
                extra={"task_id": str(turn.task_pk)},
            )
    if canceled:
        # Canceled while the lost turn "ran": nobody gave the agent its cancel() yet.
        transaction.on_commit(lambda: agent_cancel_dispatch(turn.task_pk))
    return True


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


def beat_sweep(kind: str, interval: float, sweep: Callable[[], dict]) -> dict:
    """One of beat's sweeps (tasks_app/tasks.py): `sweep()`, or {"skipped": True} if its slot is taken."""
    return sweep() if sweep_slot(kind, interval) else {"skipped": True}
