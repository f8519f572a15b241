"""Who holds a turn: its claim, its lease, the task's lock, and tries again through an outage.

A worker claims a queued turn with a conditional UPDATE that counts an attempt
and takes a lease; every write of the turn checks it still holds that lease
(_owned), so a worker presumed dead writes nothing more once another attempt
has the turn. The worker follows how long its lease surely lasts (LeaseClock),
so that run.Fence can stop the agent before another attempt could start.

On PostgreSQL a lease is written and judged on the database server's clock
(lease_until_sql here, db.database_now in the sweeper): how far the workers'
clocks are off from it, or from each other, does not change who holds a
turn. SQLite (the embedded default) is one process on one host: its leases
are on that host's clock.
"""

import asyncio
import functools
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import DateTimeField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from tasks_app.db import UNAVAILABLE_ERRORS, datetime_column, db
from tasks_app.events import task_state
from tasks_app.models import (
    TERMINAL_STATES,
    Context,
    Message,
    Task,
)
from tenants import sql

# One logger for the package, under the name it had as one module (log filters, alerts).
logger = logging.getLogger("tasks_app.turns")

# A write the database refused for being unreachable is tried again for this long.
DB_RETRY_FOR = 60.0

# Why the watcher stopped a turn.
CANCELED = "canceled"
LOST = "lost"
LAPSING = "lease lapsing"  # not renewed in time: the fence stopped the agent (run.Fence)
TIMED_OUT = "timed out"

# A running turn's watcher renews its lease at the latest this share of the lease
# before its fence, whatever the heartbeat (run._watch; keeper.AHEAD just after it).
RENEW_AHEAD = 0.1

# A turn that could not renew its lease stops its agent this share of the lease
# before the lease lapses: the margin for the worker's clock running at another
# rate than the database's, and for the agent to let go of its cancellation.
FENCE_BEFORE = 0.2


class TurnAborted(Exception):
    """The task ended (canceled, say), or this worker lost the turn, while the agent still emitted events."""


class LeaseClock:
    """Until when this worker surely holds a turn's lease, on its monotonic clock.

    Moved on by every committed write that renewed the lease (the claim, the
    watcher's renewals, each batch of events, the keeper's renewals): the
    write stores a lease_until A2A_TURN_LEASE after the moment it is written
    (lease_until_sql), and the worker read time.monotonic() before it began,
    so `until` is never later than the lease_until stored, whatever the
    offset between the worker's clock and the database's. The sweeper gives
    the turn to another worker once that has passed; run.Fence stops the
    agent FENCE_BEFORE of the lease ahead of it. A closed turn (released) has
    no lease left to watch.
    """

    def __init__(self):
        self.until = 0.0
        # The turn's thread and the process's lease keeper (keeper.py) both renew:
        # a renewal never moves the clock back, nor reopens a released lease.
        self.lock = threading.Lock()

    def renewed(self, started: float) -> None:
        """A write that took its `now` at time.monotonic() `started` renewed the lease, and committed."""
        with self.lock:
            self.until = max(self.until, started + settings.A2A_TURN_LEASE)

    def release(self) -> None:
        """The turn is closed: nothing runs under its lease any more."""
        with self.lock:
            self.until = math.inf

    def fence_at(self) -> float:
        """When the agent must be stopped, unless the lease is renewed before (time.monotonic())."""
        return self.until - FENCE_BEFORE * settings.A2A_TURN_LEASE

    def renewal_due(self, after: float, ahead: float) -> float:
        """When to renew: `after` s past the last renewal, and at latest `ahead` s before the fence."""
        last = self.until - settings.A2A_TURN_LEASE
        return min(last + after, self.fence_at() - ahead)


@dataclass(frozen=True)
class Turn:
    task_pk: str
    message_pk: int
    attempt: int
    timeout: float
    # The agent's handler name, for the turn metrics.
    handler: str = ""
    # The task's tenant: the agent's outbound lookups count as its (agents/outbound.py).
    tenant_pk: int | None = None
    lease: LeaseClock = field(default_factory=LeaseClock, compare=False, repr=False)


def lease_end(now: datetime) -> datetime:
    """The lease_until of a lease taken or renewed at `now` (on this host's clock)."""
    return now + timedelta(seconds=settings.A2A_TURN_LEASE)


# On PostgreSQL: A2A_TURN_LEASE seconds after the moment the row is written, on the server's clock.
_LEASE_END_SQL = "clock_timestamp() + %s * interval '1 second'"


def lease_until_sql() -> tuple[str, list]:
    """The lease_until a write that takes or renews a lease stores, as SQL and its values.

    On PostgreSQL, on the database server's clock, which the sweeper compares
    it with (db.database_now: the start of its statement, never later than
    the moment it reads the row, so a lease renewed while the sweep waited
    for the task's lock counts as renewed). A worker whose clock is off stores
    the same lease as one whose clock is right. On SQLite, lease_end() of
    this host's clock.
    """
    if connection.vendor == "postgresql":
        return _LEASE_END_SQL, [float(settings.A2A_TURN_LEASE)]
    return "%s", [sql.prep(Message, "lease_until", lease_end(timezone.now()))]


def lease_until_value() -> RawSQL:
    """lease_until_sql for an ORM update()."""
    return RawSQL(*lease_until_sql(), output_field=DateTimeField())


class TurnTimedOut(Exception):
    pass


def claim_statement(task_pk, message_pk: int, now: datetime | None = None) -> tuple[str, list]:
    """The UPDATE that claims a queued turn, and its values; `now` is the claim's turn_started_at.

    turn_started_at names the claim (setup.Claim); the lease it takes is
    lease_until_sql's.
    """
    now = now or timezone.now()
    lease, lease_params = lease_until_sql()
    statement = (
        f"UPDATE {sql.table(Message)} SET turn = %s, turn_started_at = %s, lease_until = {lease}, "
        "turn_attempts = turn_attempts + 1 WHERE id = %s AND task_id = %s AND turn = %s"
    )
    params = [
        Message.Turn.RUNNING,
        sql.prep(Message, "turn_started_at", now),
        *lease_params,
        message_pk,
        sql.prep(Message, "task", task_pk),
        Message.Turn.PENDING,
    ]
    return statement, params


def turn_claim(task_pk, message_pk: int, now: datetime | None = None) -> bool:
    """Take a queued turn of the task: count an attempt, hold its lease. False if another worker has it."""
    return bool(sql.execute(*claim_statement(task_pk, message_pk, now)))


async def retrying(fn, *args, **kwargs):
    """Run a database write, trying again while the database is unreachable (a restart)."""
    deadline = time.monotonic() + DB_RETRY_FOR
    delay = 0.1
    while True:
        try:
            return await db(fn, *args, **kwargs)
        except UNAVAILABLE_ERRORS as exc:
            if time.monotonic() + delay > deadline:
                raise
            logger.warning("Database unavailable (%r); trying again in %.1f s", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def turn_renew(turn: Turn) -> str | None:
    """Extend the turn's lease. LOST if another attempt holds it, CANCELED if its task ended; else None."""
    started = time.monotonic()
    if not owned_turn(turn).update(lease_until=lease_until_value()):
        return LOST
    turn.lease.renewed(started)
    state = task_state(turn.task_pk)
    if state is None or state in TERMINAL_STATES:
        return CANCELED
    return None


def leases_renew(turns: list[Turn]) -> list[Turn]:
    """Renew the leases of turns in one statement; those renewed (the rest: closed, or another attempt's)."""
    if not turns:
        return []
    started = time.monotonic()
    where = " OR ".join([f"({_owned_where()})"] * len(turns))
    lease, params = lease_until_sql()
    for turn in turns:
        params.extend(_owned(turn).values())
    statement = (
        f"UPDATE {sql.table(Message)} SET lease_until = {lease} WHERE {where} RETURNING {sql.quote('id')}"
    )
    renewed = {pk for (pk,) in sql.fetch_all(statement, params)}
    kept = [turn for turn in turns if turn.message_pk in renewed]
    for turn in kept:
        turn.lease.renewed(started)
    return kept


def _owned(turn: Turn) -> dict:
    """The one rule of a turn's ownership: its message is RUNNING, in this attempt."""
    return {"id": turn.message_pk, "turn": Message.Turn.RUNNING, "turn_attempts": turn.attempt}


@functools.cache
def _owned_where() -> str:
    """_owned as the WHERE clause of a hand-written statement (built once per process)."""
    names = _owned(Turn(task_pk="", message_pk=0, attempt=0, timeout=0.0))
    return " AND ".join(f"{sql.quote(Message._meta.get_field(name).column)} = %s" for name in names)


def owned_turn(turn: Turn):
    return Message.objects.filter(**_owned(turn))


def closed_turn_fields(at) -> dict:
    """What closing a turn writes, as an ORM update's fields (owned_turn_statement writes it in SQL).

    A closed turn is never run again, so it keeps no metadata to restart from;
    a turn closed twice keeps its first end (the console's charts). `at` may be
    the database's clock (db.database_now()).
    """
    return {
        "turn": Message.Turn.DONE,
        "lease_until": None,
        "turn_metadata_base": None,
        "turn_finished_at": Coalesce("turn_finished_at", datetime_column(at)),
    }


def owned_turn_statement(
    turn: Turn, now: datetime, *, done: bool, metadata_base: dict | None = None
) -> tuple[str, list]:
    """The UPDATE that renews the lease of a batch's turn, or closes it (done).

    It changes no row if another attempt holds the turn. Run with the batch's
    INSERTs (BatchWriter.commit). `metadata_base`: the task's metadata before
    the batch changed it, kept as the turn's turn_metadata_base unless an
    earlier batch of the turn noted one (setup._restart goes back to it); a
    closed turn keeps none. A renewal's lease_until is lease_until_sql's.
    """
    if done:
        # closed_turn_fields, as SQL: this runs with every batch, and is written by hand.
        changes = (
            "turn = %s, lease_until = NULL, turn_metadata_base = NULL, "
            "turn_finished_at = COALESCE(turn_finished_at, %s)"
        )
        values = [Message.Turn.DONE, sql.prep(Message, "turn_finished_at", now)]
    else:
        lease, values = lease_until_sql()
        changes = f"lease_until = {lease}"
    if not done and metadata_base is not None:
        changes += ", turn_metadata_base = COALESCE(turn_metadata_base, %s)"
        values.append(sql.prep(Message, "turn_metadata_base", metadata_base))
    statement = f"UPDATE {sql.table(Message)} SET {changes} WHERE {_owned_where()}"
    return statement, [*values, *_owned(turn).values()]


def lock_task(task_pk) -> Task:
    """The task, with its context, its row locked for the rest of the transaction.

    Hand-written SQL (tenants/sql.py): every batch of every turn starts here.
    """
    # The status message is not joined: a batch replaces it or (with a view) finds it
    # there; only the rare reader without one loads it. SQLite has no row locks: its
    # write transactions (IMMEDIATE) run one at a time.
    lock = " FOR UPDATE OF t" if connection.features.has_select_for_update_of else ""
    row = sql.fetch_one(
        f"SELECT {sql.columns(Task, 't')}, {sql.columns(Context, 'c')} "
        f"FROM {sql.table(Task)} t JOIN {sql.table(Context)} c ON c.id = t.context_id WHERE t.id = %s{lock}",
        [sql.prep(Task, "id", task_pk)],
    )
    if row is None:
        raise Task.DoesNotExist(f"Task {task_pk} does not exist")
    task, context = sql.hydrate_all(row, Task, Context)
    task.context = context
    return task
