"""Setting a claimed turn up: its task read (with the claim, on PostgreSQL), a lost attempt undone,
the agent's RequestContext built.
"""

import time
from dataclasses import dataclass
from datetime import datetime

from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as pb
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from google.protobuf.json_format import ParseDict

from agents.approvals import AUTHORIZATION_KEY
from agents.models import Agent
from agents.registry import build_executor
from tasks_app.access import Caller, parse_task_uuid, tasks_visible_to
from tasks_app.db import UNAVAILABLE_ERRORS
from tasks_app.dispatch import agent_cancel_dispatch
from tasks_app.models import (
    Artifact,
    Context,
    Message,
    Task,
    TaskState,
)
from tasks_app.protocol.convert import (
    message_dict,
    task_dict,
)
from tasks_app.turns.batches import BatchWriter
from tasks_app.turns.lease import (
    Turn,
    claim_statement,
    closed_turn_fields,
    lock_task,
    owned_turn,
    turn_claim,
)
from tasks_app.turns.view import TaskView
from tenants import sql
from tenants.models import Tenant


@dataclass
class Claim:
    held: bool = False
    # The turn_started_at this worker's claim wrote, chosen before it runs: it names the claim.
    started_at: datetime | None = None
    # time.monotonic() just before started_at was read: where the claim's lease starts (LeaseClock).
    clock: float = 0.0

    def start(self) -> datetime:
        self.clock = time.monotonic()
        self.started_at = timezone.now()
        return self.started_at


def claim_and_prepare(task_pk, message_pk: int, claim: Claim):
    """Claim the turn and set it up, in one database call; None if there is nothing to run.

    The claim is made once: a try again after an outage (`retrying`) finds it
    held, or, when the database went away as the claim committed (the
    statement raised, yet it was stored), finds its turn_started_at on the row.
    """
    loaded = None
    if not claim.held:
        if claim.started_at is not None and _claimed_by(task_pk, message_pk, claim.started_at):
            claim.held = True  # this worker's own claim, whose answer was lost
        elif connection.vendor == "postgresql":
            # One statement: the claim's UPDATE, and the turn's read of what it claimed.
            loaded = _load(task_pk, message_pk, claim=claim)
        else:
            claim.held = turn_claim(task_pk, message_pk, claim.start())
        if not claim.held:
            return None  # another delivery of this turn got there first
    return _prepare(task_pk, message_pk, claim, loaded)


def _claimed_by(task_pk, message_pk: int, started_at: datetime) -> bool:
    """Whether the turn is running under the claim that started it at `started_at`."""
    return Message.objects.filter(
        pk=message_pk, task_id=task_pk, turn=Message.Turn.RUNNING, turn_started_at=started_at
    ).exists()


def _load(task_pk, message_pk: int, *, claim: Claim | None = None) -> tuple[Task, TaskView, Message] | None:
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
        claiming_statement, claiming_params = claim_statement(task_pk, message_pk, claim.start())
        claiming, source = f"WITH m AS ({claiming_statement} RETURNING *) ", "m"
        params = [*claiming_params, *params]
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


def _prepare(task_pk, message_pk: int, claim: Claim, loaded: tuple[Task, TaskView, Message] | None = None):
    """The claimed turn set up to run: (turn, executor, request context, view); None if nothing to run.

    The executor is the exception instead if the turn cannot run (turn_drive fails it).

    `loaded`: what _load read already (with the claim), else read here.
    """
    loaded = loaded or _load(task_pk, message_pk)
    if loaded is None:
        return None
    task, view, user_message = loaded
    if (
        user_message is None
        or user_message.turn != Message.Turn.RUNNING
        or user_message.turn_started_at != claim.started_at
    ):
        # The sweeper took it back meanwhile (a try again after an outage finds the turn
        # another worker's since: it must not take that attempt's number as its own).
        return None
    turn = Turn(
        task_pk=str(task.pk),
        message_pk=message_pk,
        attempt=user_message.turn_attempts,
        timeout=float(task.agent.turn_timeout),
        handler=task.agent.handler,
        tenant_pk=task.tenant_id,
    )
    turn.lease.renewed(claim.clock)
    if task.is_terminal:
        # Canceled between the claim and this read (on SQLite they are two statements).
        _close_on_ended_task(turn, task)
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
        raise  # retrying tries again; the claim is held
    except Exception as exc:
        # The handler is missing, or refuses the agent's config: the turn is claimed, and
        # fails now with the reason. Left running, it would wait out its lease on every
        # attempt and end FAILED as if its workers had been lost.
        return turn, exc, None, view
    return turn, executor, request_context, view


def _close_on_ended_task(turn: Turn, task: Task) -> None:
    """Close a claimed turn whose task ended before it ran; a canceled task's agent gets its cancel().

    task_cancel saw this turn running and left the agent's cancel() to it.
    """
    closed = owned_turn(turn).update(**closed_turn_fields(timezone.now()))
    if closed and task.state == TaskState.CANCELED:
        task_pk = task.pk
        transaction.on_commit(lambda: agent_cancel_dispatch(task_pk), robust=True)


def _restart(turn: Turn) -> bool:
    """Undo what a lost attempt of this turn wrote to its task, and log that the turn starts over.

    False if there is nothing to run: another attempt holds the turn, or its task ended.
    """
    restart_id = f"restart-{turn.message_pk}-{turn.attempt}"
    with transaction.atomic():
        task = lock_task(turn.task_pk)
        # Still ours at the COMMIT: the sweeper puts a lost turn back only under this lock too
        # (sweeper._requeue), so no other attempt can claim it in between.
        owned = owned_turn(turn).values("turn_metadata_base").first()
        if owned is None:
            return False
        if task.is_terminal:
            # Ended since the claim read it (a cancel): closed now, not left to its lease.
            _close_on_ended_task(turn, task)
            return False
        if Message.objects.filter(task=task, message_id=restart_id).exists():
            # Done already: a try whose COMMIT went through as the database went away
            # (retrying tries again). Undone again, its own status would be logged twice.
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
        writer = BatchWriter(task, turn)
        if owned["turn_metadata_base"] is not None:
            # What the lost attempt merged into the task's metadata goes too: a re-run that
            # found it would take the lost attempt's notes (a proxy's remote task) for its own.
            task.metadata = owned["turn_metadata_base"]
            writer.fields.add("metadata")
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


def cancel_context(task_pk) -> RequestContext:
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
