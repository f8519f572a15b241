"""The worker side: run one agent turn and make every event it emits durable.

A turn is started by a user message. A worker claims it with a conditional
UPDATE that counts an attempt and takes a lease (a redelivered job finds it
claimed and returns; on PostgreSQL the UPDATE and the turn's first read are
one statement), then runs it on its thread's own loop (engine.run_here,
its database calls on that thread): it builds
the a2a-sdk RequestContext and runs the handler's AgentExecutor.execute()
with a TurnEventQueue.

Events are stored in batches: what the agent emits in one burst is written in
one transaction (the task's row locked, the log appended with one INSERT, the
task updated once) a few milliseconds after the burst's first event, and at
once for an event that ends or interrupts the task; the batch is published
after commit. Every batch checks that this worker still holds the turn's
lease, so a worker that lost it (presumed dead, its turn run again
elsewhere) writes nothing more.

While the agent runs, a watcher renews the lease every A2A_TURN_HEARTBEAT
seconds, listens for the task's cancellation, and stops the turn at the
agent's time limit. A stopped agent gets STOP_TIMEOUT seconds to let go of
its cancellation; one that swallows it is abandoned on its thread's loop,
and the worker thread is free again.

A turn run again (attempt 2 or later, after its worker was lost) first undoes
what the lost attempt wrote to the task (its agent messages and artifact
changes; its log entries stay, the log is append-only) and logs a WORKING
status that says so. Agent authors: execute() may run more than once for one
turn.

A task canceled while no turn runs (it waits for input, or its turn is still
queued) gets its agent's cancel() from a job of its own (agent_cancel), so an
agent holding something outside the platform (the a2a_proxy agent's remote
task) can let it go.
"""

import asyncio
import copy
import functools
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidAgentResponseError
from django.conf import settings
from django.db import connection, transaction
from django.db.models import DateTimeField, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from google.protobuf.json_format import ParseDict

from agents.approvals import AUTHORIZATION_KEY
from agents.models import Agent
from agents.registry import HandlerNotAvailable, build_executor
from tasks_app import engine, metrics
from tasks_app.access import Caller, parse_task_uuid, tasks_visible_to
from tasks_app.db import UNAVAILABLE_ERRORS, db
from tasks_app.dispatch import agent_cancel_dispatch
from tasks_app.events import SETTLED_STATES, Feed, cancel_group_name, log_entries, log_publish, task_state
from tasks_app.models import (
    TERMINAL_STATES,
    Artifact,
    Context,
    Message,
    PushConfig,
    Task,
    TaskEvent,
    TaskState,
)
from tasks_app.protocol.convert import (
    PROTO_TO_STATE,
    message_dict,
    proto_to_dict,
    status_update_dict,
    task_dict,
)
from tasks_app.push import push_deliveries_queue
from tasks_app.selectors import DEFAULT_HISTORY_LENGTH
from tenants import sql
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# How long a cancelled helper (the agent's execution, the watcher) gets to
# stop. Code can swallow a cancellation; the turn must finish regardless.
STOP_TIMEOUT = 5.0
# How long an agent's cancel() may take when no turn of its task is running.
AGENT_CANCEL_TIMEOUT = 30.0
# Seconds a turn runs before it listens for its task's cancellation.
LISTEN_AFTER = 0.25
# A write the database refused for being unreachable is tried again for this long.
DB_RETRY_FOR = 60.0

# Why the watcher stopped a turn.
CANCELED = "canceled"
LOST = "lost"
TIMED_OUT = "timed out"


class TurnAborted(Exception):
    """The task ended (canceled, say), or this worker lost the turn, while the agent still emitted events."""


@dataclass(frozen=True)
class Turn:
    task_pk: str
    message_pk: int
    attempt: int
    timeout: float
    # The agent's handler name, for the turn metrics.
    handler: str = ""


# --- Claim and run -------------------------------------------------------------
def _claim_statement() -> str:
    return (
        f"UPDATE {sql.table(Message)} SET turn = %s, turn_started_at = %s, lease_until = %s, "
        "turn_attempts = turn_attempts + 1 WHERE id = %s AND task_id = %s AND turn = %s"
    )


def _claim_params(task_pk, message_pk: int) -> list:
    now = timezone.now()
    return [
        Message.Turn.RUNNING,
        sql.prep(Message, "turn_started_at", now),
        sql.prep(Message, "lease_until", now + timedelta(seconds=settings.A2A_TURN_LEASE)),
        message_pk,
        sql.prep(Message, "task", task_pk),
        Message.Turn.PENDING,
    ]


def turn_claim(task_pk, message_pk: int) -> bool:
    """Take a queued turn of the task: count an attempt, hold its lease. False if another worker has it."""
    return bool(sql.execute(_claim_statement(), _claim_params(task_pk, message_pk)))


def turn_run(*, task_id: str, message_pk: int) -> None:
    """Run one turn on this worker thread: claim it and run it on the thread's own loop."""
    engine.run_here(turn_drive(task_id, message_pk))


@dataclass
class _Claim:
    held: bool = False


def _claim_and_prepare(task_pk, message_pk: int, claim: _Claim):
    """Claim the turn and set it up, in one database call; None if there is nothing to run.

    The claim is made once: a try again after an outage (`_retrying`) finds it held.
    """
    loaded = None
    if not claim.held:
        if connection.vendor == "postgresql":
            # One statement: the claim's UPDATE, and the turn's read of what it claimed.
            loaded = _load(task_pk, message_pk, claim=claim)
        elif turn_claim(task_pk, message_pk):
            claim.held = True
        if not claim.held:
            return None  # another delivery of this turn got there first
    return _prepare(task_pk, message_pk, loaded)


async def turn_drive(task_pk, message_pk: int) -> None:
    started = time.perf_counter()
    error: BaseException | None = None
    executor = None
    turn = None
    queue = None
    cancel_given = False
    lost = False
    try:
        setup = await _retrying(_claim_and_prepare, task_pk, message_pk, _Claim())
        if setup is None:
            return
        turn, executor, request_context, view = setup
        queue = TurnEventQueue(turn, view)
        if isinstance(executor, Exception):
            failed, executor = executor, None
            raise failed
        # At debug level: the turn's end says all at INFO, one line a turn.
        logger.debug(
            "Turn %s of task %s started (handler %s, attempt %s)",
            message_pk,
            task_pk,
            type(executor).__name__,
            turn.attempt,
        )
        execution = asyncio.ensure_future(executor.execute(request_context, queue))
        watcher = asyncio.ensure_future(_watch(turn))
        await asyncio.wait({execution, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if execution.done():
            watcher.cancel()
            await asyncio.wait({watcher}, timeout=STOP_TIMEOUT)
            error = execution.exception()
            if error is not None and not isinstance(error, TurnAborted):
                logger.warning("The agent of task %s raised in turn %s", task_pk, message_pk, exc_info=error)
            # What the agent emitted last may still wait for its batch.
            try:
                await queue.flush()
            except TurnAborted:
                pass
            except Exception as exc:
                error = error or exc
            # A batch written in the background that failed fails the turn with its own reason.
            error = error or queue.error
        else:
            reason = watcher.result()
            queue.close()
            execution.cancel()
            await asyncio.wait({execution}, timeout=STOP_TIMEOUT)
            if not execution.done():
                logger.warning("The agent of task %s ignored its cancellation; abandoned", task_pk)
            if reason == LOST and queue.finished:
                lost = True  # the agent's own last batch closed the turn; nothing was lost
            elif reason == LOST:
                lost = True
                logger.warning(
                    "Turn %s of task %s lost its lease; left to the worker that has it", message_pk, task_pk
                )
            elif reason == TIMED_OUT:
                error = TurnTimedOut(f"the turn ran longer than the agent's limit of {turn.timeout:g} s")
            else:
                # Give the executor its chance to clean up; its events are not stored.
                cancel_given = True
                await _cancel_agent(task_pk, executor, timeout=STOP_TIMEOUT)
    except HandlerNotAvailable as exc:
        error = exc
    except Exception as exc:
        logger.exception("Turn %s of task %s crashed", message_pk, task_pk)
        error = exc
    finally:
        outcome = _outcome(error, lost, cancel_given)
        if turn is not None:
            metrics.turn_done(turn.handler, outcome, time.perf_counter() - started)
        if turn is not None and not lost and not (queue is not None and queue.finished):
            if isinstance(error, TurnAborted):
                error = None
            canceled = await _retrying(turn_finish, task_pk, message_pk, error, attempt=turn.attempt)
            if canceled and not cancel_given and not queue.ended_task:
                # Canceled from outside while this turn was still running, but not
                # stopped by the watcher: the execution had already returned (the
                # task went input-required, say) or ran into the CANCELED state.
                # task_cancel saw this turn running and left the agent's cancel()
                # to it.
                await _cancel_agent(task_pk, executor, timeout=AGENT_CANCEL_TIMEOUT)
        if turn is not None:
            logger.info(
                "Turn %s of task %s ended: %s (handler %s, attempt %s, %.1f ms)",
                message_pk,
                task_pk,
                outcome,
                turn.handler,
                turn.attempt,
                1000 * (time.perf_counter() - started),
            )


class TurnTimedOut(Exception):
    pass


def _outcome(error: BaseException | None, lost: bool, canceled: bool) -> str:
    """How a turn ended, as the turn metrics label it."""
    if lost:
        return "lost"
    if isinstance(error, TurnTimedOut):
        return "timed_out"
    if canceled:
        return "canceled"
    if error is not None and not isinstance(error, TurnAborted):
        return "failed"
    return "ok"


async def _retrying(fn, *args, **kwargs):
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


async def _watch(turn: Turn) -> str:
    """Return why the turn must stop: canceled, lease lost, or out of time. Renews the lease meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + turn.timeout
    # Most turns end within moments, before a cancel could matter: only a turn
    # that runs on listens for one. Once it listens it looks at the store at
    # once (a renewal reads the task's state), for a cancel sent before that.
    await asyncio.sleep(min(LISTEN_AFTER, turn.timeout))
    next_renewal = loop.time()
    feed = Feed(turn.task_pk, group=cancel_group_name(turn.task_pk))
    await feed.join()
    try:
        while True:
            now = loop.time()
            if now >= deadline:
                return TIMED_OUT
            message = await feed.receive(timeout=max(min(next_renewal, deadline) - now, 0.01))
            if message is not None and message.get("type") == "task.cancel":
                return CANCELED
            if loop.time() >= next_renewal:
                try:
                    status = await db(turn_renew, turn)
                except UNAVAILABLE_ERRORS as exc:
                    # The lease may lapse meanwhile; the next batch's check tells.
                    logger.warning("Could not renew the lease of turn %s: %r", turn.message_pk, exc)
                    status = None
                if status is not None:
                    return status
                next_renewal = loop.time() + settings.A2A_TURN_HEARTBEAT
    finally:
        await feed.close()


def turn_renew(turn: Turn) -> str | None:
    """Extend the turn's lease. LOST if another attempt holds it, CANCELED if its task ended; else None."""
    renewed = owned_turn(turn).update(lease_until=timezone.now() + timedelta(seconds=settings.A2A_TURN_LEASE))
    if not renewed:
        return LOST
    state = task_state(turn.task_pk)
    if state is None or state in TERMINAL_STATES:
        return CANCELED
    return None


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


def _owned_turn_statement(turn: Turn, *, done: bool) -> tuple[str, list]:
    """The UPDATE that renews the lease of a batch's turn, or closes it (done).

    It changes no row if another attempt holds the turn. Run with the batch's
    INSERTs (_BatchWriter.commit).
    """
    now = timezone.now()
    if done:
        # A turn closed twice keeps its first end (the console's charts).
        changes = "turn = %s, lease_until = NULL, turn_finished_at = COALESCE(turn_finished_at, %s)"
        values = [Message.Turn.DONE, sql.prep(Message, "turn_finished_at", now)]
    else:
        changes = "lease_until = %s"
        values = [sql.prep(Message, "lease_until", now + timedelta(seconds=settings.A2A_TURN_LEASE))]
    statement = f"UPDATE {sql.table(Message)} SET {changes} WHERE {_owned_where()}"
    return statement, [*values, *_owned(turn).values()]


# --- Setting a turn up -----------------------------------------------------------
@dataclass
class TaskView:
    """What a turn knows of its task's messages and artifacts, in read order, kept up to date by its batches.

    From it the batch that settles the task publishes the task as a reader
    would read it, so a blocking caller is answered without reading it again.
    """

    messages: list[Message]
    artifacts: list[Artifact]

    @classmethod
    def of(cls, task: Task) -> "TaskView":
        """The task's messages and artifacts as stored now (two queries)."""
        return cls(
            messages=list(task.messages.order_by("created_at", "pk")),
            artifacts=list(task.artifacts.order_by("created_at", "pk")),
        )

    def message(self, pk: int) -> Message | None:
        return next((m for m in self.messages if m.pk == pk), None)

    def attach_status_message(self, task: Task) -> None:
        """Give the task its status message from here (it is one of the task's messages), not by a query."""
        if task.status_message_id is not None:
            known = self.message(task.status_message_id)
            if known is not None:
                task.status_message = known

    def add(self, messages: list[Message], artifacts: list[Artifact]) -> None:
        self.messages.extend(messages)
        for artifact in artifacts:
            index = next((i for i, a in enumerate(self.artifacts) if a.pk == artifact.pk), None)
            if index is None:
                self.artifacts.append(artifact)
            else:
                self.artifacts[index] = artifact

    def snapshot(self, task: Task) -> dict:
        """The task as task_snapshot() reads it with historyLength unset."""
        newest = self.messages[-(DEFAULT_HISTORY_LENGTH + 1) :]
        return task_dict(
            task, messages=newest, artifacts=self.artifacts, history_length=DEFAULT_HISTORY_LENGTH
        )


def _load(task_pk, message_pk: int, *, claim: _Claim | None = None) -> tuple[Task, TaskView, Message] | None:
    """The turn's task (with agent, tenant, context), its view, the turn's message; None if it is gone.

    With a claim (PostgreSQL only), the turn is claimed in the same statement:
    a data-modifying WITH whose UPDATE (turn_claim's) gives the message row as
    claimed, or nothing when it was not there to claim. claim.held tells which,
    as soon as the statement has run.
    """
    # One hand-written statement (tenants/sql.py): every turn starts here.
    params = [message_pk, sql.prep(Message, "task", task_pk)]
    claiming, source = "", f"{sql.table(Message)} m"
    if claim is not None:
        claiming, source = f"WITH m AS ({_claim_statement()} RETURNING *) ", "m"
        params = [*_claim_params(task_pk, message_pk), *params]
    row = sql.fetch_one(
        f"{claiming}SELECT {sql.columns(Message, 'm')}, {sql.columns(Task, 't')}, {sql.columns(Agent, 'a')}, "
        f"{sql.columns(Tenant, 'n')}, {sql.columns(Context, 'c')} "
        f"FROM {source} JOIN {sql.table(Task)} t ON t.id = m.task_id "
        f"JOIN {sql.table(Agent)} a ON a.id = t.agent_id JOIN {sql.table(Tenant)} n ON n.id = t.tenant_id "
        f"JOIN {sql.table(Context)} c ON c.id = t.context_id WHERE m.id = %s AND m.task_id = %s",
        params,
    )
    if row is None:
        return None
    if claim is not None:
        # Held from here on, before the reads below: if one fails, the retry must not claim again.
        claim.held = True
    user_message, task, agent, tenant, context = sql.hydrate_all(row, Message, Task, Agent, Tenant, Context)
    task.agent, task.tenant, task.context = agent, tenant, context
    user_message.task = task
    if task.event_seq == 1:
        # The log holds only the accept's Task entry: the task has the message it was
        # created with and nothing else. Every later message or artifact is written
        # with a log entry of its own (a follow-up's status, the agent's events, a
        # restart's status), so there is nothing more to read. The common first turn
        # costs one statement instead of three.
        view = TaskView(messages=[user_message], artifacts=[])
    else:
        view = TaskView.of(task)
        user_message = view.message(message_pk)
    view.attach_status_message(task)
    return task, view, user_message


def _prepare(task_pk, message_pk: int, loaded: tuple[Task, TaskView, Message] | None = None):
    """The claimed turn set up to run: (turn, executor, request context, view); None if nothing to run.

    The executor is the exception instead if the turn cannot run (turn_drive fails it).

    `loaded`: what _load read already (with the claim), else read here.
    """
    loaded = loaded or _load(task_pk, message_pk)
    if loaded is None:
        return None
    task, view, user_message = loaded
    if user_message is None or user_message.turn != Message.Turn.RUNNING:
        return None  # the sweeper took it back meanwhile
    turn = Turn(
        task_pk=str(task.pk),
        message_pk=message_pk,
        attempt=user_message.turn_attempts,
        timeout=float(task.agent.turn_timeout),
        handler=task.agent.handler,
    )
    if task.is_terminal:
        closed = owned_turn(turn).update(turn=Message.Turn.DONE, lease_until=None)
        if closed and task.state == TaskState.CANCELED:
            # Canceled between the claim and this read (on SQLite they are two statements):
            # task_cancel saw this turn running and left the agent's cancel() to it.
            agent_cancel_dispatch(task.pk)
        return None
    if turn.attempt > 1:
        if not _restart(turn):
            return None
        loaded = _load(task_pk, message_pk)
        if loaded is None:
            return None
        task, view, user_message = loaded
    try:
        executor = build_executor(task.agent)
        request_context = _request_context(task, user_message, view)
    except UNAVAILABLE_ERRORS:
        raise  # _retrying tries again; the claim is held
    except Exception as exc:
        # The handler is missing, or refuses the agent's config: the turn is claimed, and
        # fails now with the reason. Left running, it would wait out its lease on every
        # attempt and end FAILED as if its workers had been lost.
        return turn, exc, None, view
    return turn, executor, request_context, view


def _restart(turn: Turn) -> bool:
    """Undo what a lost attempt of this turn wrote to its task, and log that the turn starts over."""
    restart_id = f"restart-{turn.message_pk}-{turn.attempt}"
    with transaction.atomic():
        task = lock_task(turn.task_pk)
        if not owned_turn(turn).exists() or task.is_terminal:
            return False
        if Message.objects.filter(task=task, message_id=restart_id).exists():
            # Done already: a try whose COMMIT went through as the database went away
            # (_retrying tries again). Undone again, its own status would be logged twice.
            return True
        # What the lost attempt said: every agent message after the turn's own.
        later = Message.objects.filter(task=task, role=Message.Role.AGENT, pk__gt=turn.message_pk)
        if task.status_message_id is not None and later.filter(pk=task.status_message_id).exists():
            task.status_message = None
        later.delete()
        for artifact in Artifact.objects.filter(task=task, turn=turn.message_pk):
            if artifact.turn_base is None:
                artifact.delete()
            else:
                for name, value in artifact.turn_base.items():
                    setattr(artifact, name, value)
                artifact.turn, artifact.turn_base = None, None
                artifact.save()
        text = (
            f"The turn restarted (attempt {turn.attempt} of {settings.A2A_TURN_MAX_ATTEMPTS}): "
            "the worker running it was lost."
        )
        writer = _BatchWriter(task, turn)
        writer.apply(
            pb.TaskStatusUpdateEvent(
                status=pb.TaskStatus(
                    state=pb.TASK_STATE_WORKING,
                    message=pb.Message(
                        message_id=restart_id,
                        role=pb.ROLE_AGENT,
                        parts=[pb.Part(text=text)],
                    ),
                )
            )
        )
        writer.commit()
    return True


def _cancel_context(task_pk) -> RequestContext:
    """The RequestContext an agent's cancel() gets: the stored (CANCELED) task, its last user message."""
    task = Task.objects.select_related("agent", "tenant", "context", "status_message").get(pk=task_pk)
    last_user_message = (
        Message.objects.filter(task=task, role=Message.Role.USER).order_by("-created_at", "-pk").first()
    )
    return _request_context(task, last_user_message)


def _snapshot(task: Task) -> dict:
    view = TaskView.of(task)
    return task_dict(task, messages=view.messages, artifacts=view.artifacts)


def _request_context(
    task: Task, user_message: Message | None, view: TaskView | None = None
) -> RequestContext:
    history_pks = None
    if view is None:
        current = _snapshot(task)
    else:
        current = task_dict(task, messages=view.messages, artifacts=view.artifacts)
        # The messages of current's history, in order (task_dict leaves out the status message).
        history_pks = [m.pk for m in view.messages if m.pk != task.status_message_id]
    current = ParseDict(current, pb.Task(), ignore_unknown_fields=True)
    request = None
    related = []
    if user_message is not None:
        if history_pks is not None and user_message.pk in history_pks:
            # Parsed already, in current's history: ParseDict is pure Python, a tenth of a turn's CPU.
            message = current.history[history_pks.index(user_message.pk)]
        else:
            message = ParseDict(message_dict(user_message, task.context.context_id), pb.Message())
        request = pb.SendMessageRequest(message=message)
        related_pks = _uuids(user_message.reference_task_ids)
        if related_pks:
            # Only what the task's owner may read (GetTask's rule): the agent answers to the owner,
            # and a caller can name any id. Another caller's task is left out, as if it did not exist.
            owner = Caller(tenant=task.tenant, agent=task.agent, principal=task.owner)
            related = [
                ParseDict(_snapshot(related_task), pb.Task(), ignore_unknown_fields=True)
                for related_task in tasks_visible_to(owner)
                .filter(pk__in=related_pks)
                .select_related("context", "status_message")
            ]
    state = {
        "tenant": task.tenant.slug,
        "agent": task.agent.slug,
        "agent_config": task.agent.config,
        "principal": task.owner,
    }
    if user_message is not None and user_message.approval:
        # Only from the stored column: nothing a caller sent can put a decision here.
        state[AUTHORIZATION_KEY] = dict(user_message.approval)
    call_context = ServerCallContext(tenant=task.tenant.slug, state=state)
    return RequestContext(
        call_context,
        request=request,
        task_id=str(task.pk),
        context_id=task.context.context_id,
        task=current,
        related_tasks=related,
    )


def _uuids(values: list[str]) -> list[str]:
    return [str(u) for u in (parse_task_uuid(v) for v in values) if u is not None]


# --- Events: batched, stored, published ----------------------------------------------
def _settles(event) -> bool:
    """Whether an event ends or interrupts its task: such a batch is written at once."""
    if isinstance(event, pb.Message):
        return True
    if isinstance(event, pb.TaskStatusUpdateEvent | pb.Task):
        state = PROTO_TO_STATE.get(event.status.state)
        return state is not None and state not in (TaskState.SUBMITTED, TaskState.WORKING)
    return False


class TurnEventQueue(EventQueue):
    """The queue an agent's execute() gets: events are stored in batches, then published.

    enqueue_event returns at once for a progress event (it joins the open
    batch) and only once the batch is stored for an event that ends or
    interrupts the task, so an agent that returned has had its final word
    stored, and a blocking caller is answered from the store.
    """

    def __init__(self, turn: Turn, view: TaskView | None = None):
        self.turn = turn
        self.view = view
        self.pending: list = []
        self.lock = asyncio.Lock()
        self.timer: asyncio.TimerHandle | None = None
        self.background: asyncio.Task | None = None
        # Set once one of the agent's own events ended the task.
        self.ended_task = False
        # Set once a batch closed the turn (a terminal state): nothing is left to finish.
        self.finished = False
        self.closed = False
        self.error: BaseException | None = None

    def close(self) -> None:
        """No more events are taken: the turn was stopped."""
        self.closed = True
        self.pending.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def enqueue_event(self, event) -> None:
        if self.closed:
            raise TurnAborted()
        if self.error is not None:
            raise self.error
        self.pending.append(event)
        if _settles(event):
            await self.flush()
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(
                settings.A2A_EVENT_FLUSH_DELAY, self._flush_soon
            )

    def _flush_soon(self) -> None:
        self.timer = None
        self.background = asyncio.ensure_future(self._flush_in_background())

    async def _flush_in_background(self) -> None:
        try:
            await self.flush()
        except TurnAborted:
            pass
        except Exception as exc:
            # Raised into the agent at its next event, and fails the turn.
            self.error = exc

    async def flush(self) -> None:
        async with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            batch, self.pending = self.pending, []
            if not batch or self.closed:
                if self.closed:
                    raise TurnAborted()
                return
            stored = await _retrying(events_store, self.turn, batch, self.view, _Written())
            if stored is None:
                self.close()
                raise TurnAborted()
            if stored in SETTLED_STATES:
                self.finished = True
            if stored in TERMINAL_STATES:
                self.ended_task = True


@dataclass
class _Written:
    """What one try of a batch was about to log first, kept for the next try (_retrying).

    The database can go away as a COMMIT goes through: the transaction is
    stored and only its answer is lost. The next try finds the entry it was
    about to write at its place in the log, and writes nothing again.
    """

    seq: int | None = None
    payload: dict | None = None
    state: str | None = None  # the task's state after the batch

    def stored(self, task: Task) -> bool:
        if self.seq is None or task.event_seq < self.seq:
            return False
        logged = TaskEvent.objects.filter(task=task, seq=self.seq).values_list("payload", flat=True).first()
        return logged == self.payload


def events_store(
    turn: Turn, batch: list, view: TaskView | None = None, written: _Written | None = None
) -> str | None:
    """Store a batch of the agent's events in one transaction; the task's state after it.

    None if the turn may write no more (its task ended, or another attempt
    holds its lease). A batch that ends or interrupts the task closes the
    turn too: the answer to a question starts a turn of its own, which no
    late event of this one may write into, and which the sweeper must never
    mistake for this one's.

    `written`: the same for every try of one batch; a try after one whose
    commit went through stores nothing more (its readers catch up from the
    log, as they do with any notification lost).
    """
    with transaction.atomic():
        task = lock_task(turn.task_pk)
        if written is not None and written.stored(task):
            if task.is_terminal and task.state != written.state:
                return None  # ended since, by another (a cancel): as any batch finds it then
            if view is not None:
                stored = TaskView.of(task)
                view.messages, view.artifacts = stored.messages, stored.artifacts
            return task.state
        if task.is_terminal:
            return None
        if view is not None:
            view.attach_status_message(task)
        writer = _BatchWriter(task, turn, view)
        for event in batch:
            writer.apply(event)
        if written is not None and writer.entries:
            written.seq, written.payload, written.state = task.event_seq + 1, writer.entries[0][1], task.state
        # The batch renews the turn's lease too (a turn that stores events is alive),
        # and closes the turn when it settles the task: in the statement of its rows.
        if not writer.commit(owned=_owned_turn_statement(turn, done=task.state in SETTLED_STATES)):
            # Another attempt holds the turn: this one writes nothing (all of it undone).
            transaction.set_rollback(True)
            return None
    if view is not None and writer.view_after is not None:
        # Only once committed: a batch tried again after a failed commit must not count twice.
        view.messages, view.artifacts = writer.view_after.messages, writer.view_after.artifacts
    return task.state


class _BatchWriter:
    """Applies events to a locked task in memory, then writes them with a handful of statements."""

    def __init__(self, task: Task, turn: Turn, view: TaskView | None = None):
        self.task = task
        self.turn = turn
        self.view = view
        self.view_after: TaskView | None = None
        self.entries: list[tuple[str, dict]] = []
        self.messages: list[Message] = []
        self.artifacts: dict[str, Artifact] = {}
        self.changed_artifacts: dict[str, Artifact] = {}
        self.fields = {"state", "status_message", "status_timestamp", "updated_at", "event_seq"}

    def apply(self, event) -> None:
        if isinstance(event, pb.TaskStatusUpdateEvent):
            self._check_task_id(event.task_id)
            metadata = proto_to_dict(event.metadata) if event.HasField("metadata") else None
            self._status(event.status, metadata)
        elif isinstance(event, pb.TaskArtifactUpdateEvent):
            self._check_task_id(event.task_id)
            self._artifact(event)
        elif isinstance(event, pb.Message) and self._answers_as_message():
            self._message_reply(event)
        elif isinstance(event, pb.Message):
            # A reply to a task the caller knows: the task is done, the reply is its final word.
            self._status(pb.TaskStatus(state=pb.TASK_STATE_COMPLETED, message=event), None)
        elif isinstance(event, pb.Task):
            self._check_task_id(event.id)
            for artifact in event.artifacts:
                self._artifact(pb.TaskArtifactUpdateEvent(artifact=artifact))
            if event.status.state != pb.TASK_STATE_UNSPECIFIED:
                self._status(event.status, None)
        else:
            raise InvalidAgentResponseError(message=f"Unknown event type {type(event).__name__}")

    def _answers_as_message(self) -> bool:
        """Whether a Message is the agent's first word on a task the caller has not seen.

        The log then holds only the Task the accept wrote (streams hold it back
        until the agent's first event), so the Message can be the whole answer.
        """
        return self.task.reply == Task.Reply.OPEN and self.task.event_seq == 1 and not self.entries

    def _message_reply(self, message: pb.Message) -> None:
        """A message exchange: the reply is the answer, the task row only its durable record."""
        task = self.task
        task.status_message = self._agent_message(message)
        task.state = TaskState.COMPLETED
        task.status_timestamp = timezone.now()
        task.reply = Task.Reply.MESSAGE
        self.fields.add("reply")
        payload = proto_to_dict(message)
        payload["messageId"] = task.status_message.message_id
        payload["contextId"] = task.context.context_id
        # No task is shown to the caller, so the reply names none.
        payload.pop("taskId", None)
        self.entries.append((TaskEvent.Kind.MESSAGE, {"message": payload}))

    def _check_task_id(self, task_id: str) -> None:
        if task_id and task_id != str(self.task.pk):
            raise InvalidAgentResponseError(message=f"Event for task {task_id} sent on task {self.task.pk}")

    def _status(self, status: pb.TaskStatus, metadata: dict | None) -> None:
        state = PROTO_TO_STATE.get(status.state)
        if state is None:
            raise InvalidAgentResponseError(message="Status update without a valid state")
        task = self.task
        task.status_message = self._agent_message(status.message) if status.HasField("message") else None
        task.state = state
        task.status_timestamp = timezone.now()
        if metadata:
            # A status update's metadata is merged into the task's: the one place an
            # executor can keep state across turns (the a2a_proxy agent keeps its
            # remote task id here and reads it back from current_task.metadata).
            task.metadata = {**task.metadata, **metadata}
            self.fields.add("metadata")
        self.entries.append((TaskEvent.Kind.STATUS, {"statusUpdate": status_update_dict(task, metadata)}))

    def _agent_message(self, message: pb.Message) -> Message:
        data = proto_to_dict(message)
        stored = Message(
            tenant_id=self.task.tenant_id,
            task=self.task,
            context=self.task.context,
            message_id=message.message_id
            or f"agent-{self.task.pk}-{self.task.event_seq + len(self.entries) + 1}",
            role=Message.Role.AGENT,
            parts=data.get("parts", []),
            metadata=data.get("metadata", {}),
            extensions=data.get("extensions", []),
            reference_task_ids=data.get("referenceTaskIds", []),
        )
        self.messages.append(stored)
        return stored

    def _artifact(self, event: pb.TaskArtifactUpdateEvent) -> None:
        artifact_id = event.artifact.artifact_id
        if not artifact_id:
            raise InvalidAgentResponseError(message="Artifact without an artifactId")
        chunk = proto_to_dict(event.artifact)
        stored = self._stored_artifact(artifact_id)
        if stored.turn != self.turn.message_pk:
            # The first change of this turn: remember what was there, for a re-run.
            stored.turn_base = None if stored.pk is None else _artifact_state(stored)
            stored.turn = self.turn.message_pk
        existed = stored.pk is not None or artifact_id in self.changed_artifacts
        if existed and event.append:
            stored.parts = stored.parts + chunk.get("parts", [])
            stored.chunk_count += 1
            stored.metadata = {**stored.metadata, **chunk.get("metadata", {})}
        else:
            stored.parts = chunk.get("parts", [])
            stored.chunk_count = 1
            stored.metadata = chunk.get("metadata", {})
            stored.name = chunk.get("name", "")
            stored.description = chunk.get("description", "")
            stored.extensions = chunk.get("extensions", [])
        stored.complete = bool(event.last_chunk) or not event.append
        self.changed_artifacts[artifact_id] = stored
        update = {"taskId": str(self.task.pk), "contextId": self.task.context.context_id, "artifact": chunk}
        if event.append:
            update["append"] = True
        if event.last_chunk:
            update["lastChunk"] = True
        if event.HasField("metadata"):
            update["metadata"] = proto_to_dict(event.metadata)
        self.entries.append((TaskEvent.Kind.ARTIFACT, {"artifactUpdate": update}))

    def _stored_artifact(self, artifact_id: str) -> Artifact:
        if artifact_id not in self.artifacts:
            self.artifacts[artifact_id] = self._artifact_of(artifact_id) or Artifact(
                task=self.task, artifact_id=artifact_id
            )
        return self.artifacts[artifact_id]

    def _artifact_of(self, artifact_id: str) -> Artifact | None:
        if self.view is None:
            return Artifact.objects.filter(task=self.task, artifact_id=artifact_id).first()
        # The view holds the task's artifacts as its committed batches left them (the
        # turn's lease fences out every other writer), so no query. A copy: this batch's
        # changes reach the view only once committed.
        known = next((a for a in self.view.artifacts if a.artifact_id == artifact_id), None)
        return None if known is None else copy.copy(known)

    def commit(self, owned: tuple[str, list] | None = None) -> bool:
        """Write what apply() gathered: messages, artifacts, the log entries, the task row.

        The new rows (messages, artifacts, log entries) in one statement on
        PostgreSQL (sql.insert_all): none of them refers to another's new id.
        `owned`: the turn's lease renewal (_owned_turn_statement), run in that same
        statement; False if it changed nothing (another attempt holds the
        turn): the caller undoes the transaction, nothing more is written.
        """
        task = self.task
        new_artifacts = []
        for artifact in self.changed_artifacts.values():
            if artifact.pk is None:
                new_artifacts.append(artifact)
            else:
                sql.update(artifact, ARTIFACT_FIELDS)
        events = log_entries(task, self.entries)
        changed = sql.insert_all([self.messages, new_artifacts, events], also=[owned] if owned else [])
        if owned and not changed[0]:
            return False
        if self.messages and task.status_message is not None:
            # Assigned again, not by its id: setting the id drops the cached message
            # (its id changed), and the next read of it would be a query.
            task.status_message = task.status_message
        snapshot = None
        if self.view is not None:
            self.view_after = TaskView(messages=list(self.view.messages), artifacts=list(self.view.artifacts))
            self.view_after.add(self.messages, list(self.changed_artifacts.values()))
            if task.state in SETTLED_STATES:
                snapshot = self.view_after.snapshot(task)
        log_publish(task, events, snapshot=snapshot)
        sql.update(task, sorted(self.fields))
        push_deliveries_queue(task, events)
        return True


# What a batch may change in a stored artifact.
ARTIFACT_FIELDS = (
    "name",
    "description",
    "parts",
    "metadata",
    "extensions",
    "chunk_count",
    "complete",
    "turn",
    "turn_base",
    "updated_at",
)


def _artifact_state(artifact: Artifact) -> dict:
    return {
        "parts": artifact.parts,
        "metadata": artifact.metadata,
        "name": artifact.name,
        "description": artifact.description,
        "extensions": artifact.extensions,
        "chunk_count": artifact.chunk_count,
        "complete": artifact.complete,
    }


def lock_task(task_pk) -> Task:
    """The task, with its context and has_push_configs, its row locked for the rest of the transaction.

    Hand-written SQL (tenants/sql.py): every batch of every turn starts here.
    """
    # The status message is not joined: a batch replaces it or (with a view) finds it
    # there; only the rare reader without one loads it. SQLite has no row locks: its
    # write transactions (IMMEDIATE) run one at a time.
    lock = " FOR UPDATE OF t" if connection.features.has_select_for_update_of else ""
    row = sql.fetch_one(
        f"SELECT {sql.columns(Task, 't')}, {sql.columns(Context, 'c')}, "
        f"EXISTS (SELECT 1 FROM {sql.table(PushConfig)} p WHERE p.task_id = t.id) "
        f"FROM {sql.table(Task)} t JOIN {sql.table(Context)} c ON c.id = t.context_id WHERE t.id = %s{lock}",
        [sql.prep(Task, "id", task_pk)],
    )
    if row is None:
        raise Task.DoesNotExist(f"Task {task_pk} does not exist")
    task, context = sql.hydrate_all(row, Task, Context)
    task.context = context
    task.has_push_configs = bool(row[-1])
    return task


# --- Closing a turn ------------------------------------------------------------------
def _finished_now() -> dict:
    """The turn's end, for the console's charts; a turn closed twice keeps its first end."""
    now = Value(timezone.now(), output_field=DateTimeField())
    return {"turn_finished_at": Coalesce("turn_finished_at", now)}


def turn_finish(task_pk, message_pk: int, error: BaseException | None, *, attempt: int | None = None) -> bool:
    """Close a turn. A task the agent left unsettled ends FAILED with the reason.

    True if the task was CANCELED when the turn closed. The turn is marked done
    while holding the task's lock, which task_cancel takes too: a cancel either
    sees this turn running (and leaves the agent's cancel() to it) or done.
    With an attempt, nothing happens if another attempt holds the turn now.
    """
    with transaction.atomic():
        task = lock_task(task_pk)
        closing = Message.objects.filter(pk=message_pk)
        if attempt is not None:
            closing = closing.filter(turn=Message.Turn.RUNNING, turn_attempts=attempt)
        if not closing.update(turn=Message.Turn.DONE, lease_until=None, **_finished_now()):
            return False
        if task.is_terminal or task.is_interrupted:
            return task.state == TaskState.CANCELED
        if Message.objects.filter(task=task, role=Message.Role.USER, pk__gt=message_pk).exists():
            # The agent asked, and the answer came before this turn closed: the
            # task belongs to the answer's turn now, not to this one.
            return False
        if isinstance(error, TurnTimedOut):
            reason = f"The turn was stopped: {error}."
        elif error is not None:
            reason = f"The agent failed: {error.__class__.__name__}: {error}"
        else:
            reason = "The agent ended its turn without reaching a final state."
        task_fail(task, reason)
    return False


def task_fail(task: Task, reason: str) -> None:
    """End a locked task FAILED, saying why (inside the caller's transaction)."""
    writer = _BatchWriter(task, Turn(str(task.pk), 0, 0, 0.0))
    writer.apply(
        pb.TaskStatusUpdateEvent(
            status=pb.TaskStatus(
                state=pb.TASK_STATE_FAILED,
                message=pb.Message(role=pb.ROLE_AGENT, parts=[pb.Part(text=reason)]),
            )
        )
    )
    writer.commit()


# --- The agent's cancel() --------------------------------------------------------------
class DiscardingEventQueue(EventQueue):
    """Given to executor.cancel(): the task is already CANCELED in the store."""

    async def enqueue_event(self, event) -> None:
        return None


def agent_cancel(*, task_id: str) -> None:
    """Give a task canceled while no turn ran its agent's cancel(), on a worker.

    The task is already CANCELED in the store; what the agent emits is discarded.
    """
    try:
        state = Task.objects.values_list("state", flat=True).get(pk=task_id)
    except Task.DoesNotExist:
        logger.warning("Agent cancel of task %s: the task no longer exists", task_id)
        return
    if state != TaskState.CANCELED:
        logger.warning("Agent cancel of task %s skipped: the task is %s, not canceled", task_id, state)
        return
    engine.run(_cancel_agent(task_id))


def _build_executor_of(task_pk):
    return build_executor(Task.objects.select_related("agent").get(pk=task_pk).agent)


async def _bounded(coro, timeout: float):
    """Await coro for at most `timeout` seconds (TimeoutError), on a task of its own.

    Not asyncio.timeout: that cancels the awaiting task itself, and an agent's
    coroutine that swallows the cancellation keeps its caller waiting for ever
    (and its worker thread with it). Here it is cancelled and abandoned on its
    loop, as a stopped turn's execute() is; its caller goes on.
    """
    running = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait({running}, timeout=timeout)
    except asyncio.CancelledError:
        running.cancel()
        raise
    if not done:
        running.cancel()
        raise TimeoutError
    return running.result()


async def _cancel_agent(task_pk, executor=None, *, timeout: float = AGENT_CANCEL_TIMEOUT) -> None:
    """Call executor.cancel() (a fresh executor of the task's agent if none is given), bounded.

    Never raises (but for a cancellation of the caller): a handler that is
    missing, fails or takes too long is logged, and the task stays CANCELED.
    """
    try:
        if executor is None:
            executor = await db(_build_executor_of, task_pk)
        request_context = await db(_cancel_context, task_pk)
        await _bounded(executor.cancel(request_context, DiscardingEventQueue()), timeout)
    except HandlerNotAvailable as exc:
        logger.warning("Agent cancel of task %s: %s", task_pk, exc)
    except TimeoutError:
        logger.warning("Agent cancel of task %s did not finish within %s s", task_pk, timeout)
    except Exception:
        logger.warning("Agent cancel of task %s raised", task_pk, exc_info=True)
    else:
        logger.info("Agent cancel of task %s done (handler %s)", task_pk, type(executor).__name__)
