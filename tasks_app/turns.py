"""The worker side: run one agent turn and make every event it emits durable.

A turn is started by a user message. The worker claims it with a conditional
UPDATE (a redelivered Celery message finds it claimed and returns), builds the
a2a-sdk RequestContext, and runs the handler's AgentExecutor.execute() with an
EventQueue that stores each event, appends it to the task's log and publishes
it before the executor carries on.

A task canceled while no turn runs (it waits for input, or its turn is still
queued) gets its agent's cancel() from a job of its own (agent_cancel), so an
agent holding something outside the platform (the a2a_proxy agent's remote
task) can let it go.
"""

import asyncio
import logging
from contextlib import suppress
from datetime import timedelta

from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidAgentResponseError
from asgiref.sync import async_to_sync, sync_to_async
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import InMemoryChannelLayer, channel_layers
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from google.protobuf.json_format import ParseDict

from agents.registry import HandlerNotAvailable, build_executor
from tasks_app.events import Subscription, event_append
from tasks_app.models import TERMINAL_STATES, Artifact, Message, Task, TaskEvent, TaskState
from tasks_app.protocol.convert import (
    PROTO_TO_STATE,
    message_dict,
    proto_to_dict,
    status_update_dict,
)
from tasks_app.services import agent_cancel_dispatch, task_snapshot, turn_dispatch

logger = logging.getLogger(__name__)


# How long a cancelled helper (the agent's execution, the cancel watcher) gets
# to stop. Code can swallow a cancellation; the turn must finish regardless.
STOP_TIMEOUT = 5.0
# How long an agent's cancel() may take when no turn of its task is running.
AGENT_CANCEL_TIMEOUT = 30.0


class TurnAborted(Exception):
    """The task ended (canceled, typically) while its agent was still emitting events."""


class StoredEventQueue(EventQueue):
    """Every enqueued event is stored and published before enqueue_event returns."""

    def __init__(self, task_pk):
        self.task_pk = task_pk
        # Set once one of the agent's own events ended the task.
        self.ended_task = False

    async def enqueue_event(self, event) -> None:
        if not await sync_to_async(event_apply)(self.task_pk, event):
            raise TurnAborted()
        if _ends_task(event):
            self.ended_task = True


class DiscardingEventQueue(EventQueue):
    """Given to executor.cancel(): the task is already CANCELED in the store."""

    async def enqueue_event(self, event) -> None:
        return None


def turn_run(*, task_id: str, message_pk: int) -> None:
    claimed = Message.objects.filter(pk=message_pk, turn=Message.Turn.PENDING).update(
        turn=Message.Turn.RUNNING, turn_started_at=timezone.now()
    )
    if not claimed:
        return  # another delivery of this turn got there first
    async_to_sync(_drive)(task_id, message_pk)


async def _drive(task_pk, message_pk: int) -> None:
    error: BaseException | None = None
    executor = None
    queue = StoredEventQueue(task_pk)
    cancel_given = False
    try:
        setup = await sync_to_async(_prepare)(task_pk, message_pk)
        if setup is None:
            return
        executor, request_context = setup
        logger.info("Turn %s of task %s started (handler %s)", message_pk, task_pk, type(executor).__name__)
        execution = asyncio.ensure_future(executor.execute(request_context, queue))
        watcher = asyncio.ensure_future(_wait_for_end(task_pk))
        await asyncio.wait({execution, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not execution.done():
            execution.cancel()
            await asyncio.wait({execution}, timeout=STOP_TIMEOUT)
            # Give the executor its chance to clean up; its events are not stored.
            cancel_given = True
            await _cancel_agent(task_pk, executor, timeout=STOP_TIMEOUT)
        else:
            watcher.cancel()
            await asyncio.wait({watcher}, timeout=STOP_TIMEOUT)
            error = execution.exception()
            if error is not None and not isinstance(error, TurnAborted):
                logger.warning("The agent of task %s raised in turn %s", task_pk, message_pk, exc_info=error)
    except HandlerNotAvailable as exc:
        error = exc
    except Exception as exc:
        logger.exception("Turn %s of task %s crashed", message_pk, task_pk)
        error = exc
    finally:
        if isinstance(error, TurnAborted):
            error = None
        canceled = await sync_to_async(turn_finish)(task_pk, message_pk, error)
        if canceled and not cancel_given and not queue.ended_task:
            # Canceled from outside while this turn was still running, but not
            # stopped by the watcher: the execution had already returned (the
            # task went input-required, say) or ran into the CANCELED state.
            # task_cancel saw this turn running and left the agent's cancel()
            # to it.
            await _cancel_agent(task_pk, executor, timeout=AGENT_CANCEL_TIMEOUT)
        logger.info("Turn %s of task %s ended", message_pk, task_pk)


def _prepare(task_pk, message_pk: int):
    task = Task.objects.select_related("agent", "tenant", "context").get(pk=task_pk)
    if task.is_terminal:
        return None
    user_message = Message.objects.get(pk=message_pk)
    executor = build_executor(task.agent)
    return executor, _request_context(task, user_message)


def _cancel_context(task_pk) -> RequestContext:
    """The RequestContext an agent's cancel() gets: the stored (CANCELED) task, its last user message."""
    task = Task.objects.select_related("agent", "tenant", "context").get(pk=task_pk)
    last_user_message = (
        Message.objects.filter(task=task, role=Message.Role.USER).order_by("-created_at", "-pk").first()
    )
    return _request_context(task, last_user_message)


def _request_context(task: Task, user_message: Message | None) -> RequestContext:
    snapshot = task_snapshot(task.pk)
    current = ParseDict(snapshot, pb.Task(), ignore_unknown_fields=True)
    request = None
    related = []
    if user_message is not None:
        message = ParseDict(message_dict(user_message, task.context.context_id), pb.Message())
        request = pb.SendMessageRequest(message=message)
        related = [
            ParseDict(task_snapshot(related_pk), pb.Task(), ignore_unknown_fields=True)
            for related_pk in Task.objects.filter(
                tenant=task.tenant, pk__in=_uuids(user_message.reference_task_ids)
            ).values_list("pk", flat=True)
        ]
    call_context = ServerCallContext(
        tenant=task.tenant.slug,
        state={
            "tenant": task.tenant.slug,
            "agent": task.agent.slug,
            "agent_config": task.agent.config,
            "principal": task.owner,
        },
    )
    return RequestContext(
        call_context,
        request=request,
        task_id=str(task.pk),
        context_id=task.context.context_id,
        task=current,
        related_tasks=related,
    )


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
    async_to_sync(_cancel_agent)(task_id)


def _build_executor_of(task_pk):
    return build_executor(Task.objects.select_related("agent").get(pk=task_pk).agent)


async def _cancel_agent(task_pk, executor=None, *, timeout: float = AGENT_CANCEL_TIMEOUT) -> None:
    """Call executor.cancel() (a fresh executor of the task's agent if none is given), bounded.

    Never raises (but for a cancellation of the caller): a handler that is
    missing, fails or takes too long is logged, and the task stays CANCELED.
    """
    try:
        if executor is None:
            executor = await sync_to_async(_build_executor_of)(task_pk)
        request_context = await sync_to_async(_cancel_context)(task_pk)
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
        async with asyncio.timeout(timeout):
            await executor.cancel(request_context, DiscardingEventQueue())
    except HandlerNotAvailable as exc:
        logger.warning("Agent cancel of task %s: %s", task_pk, exc)
    except TimeoutError:
        logger.warning("Agent cancel of task %s did not finish within %s s", task_pk, timeout)
    except Exception:
        logger.warning("Agent cancel of task %s raised", task_pk, exc_info=True)
    else:
        logger.info("Agent cancel of task %s done (handler %s)", task_pk, type(executor).__name__)


def _ends_task(event) -> bool:
    """Whether an event the agent emitted puts its task in a terminal state."""
    if isinstance(event, pb.Message):
        return True  # a direct reply completes the task
    if isinstance(event, pb.TaskStatusUpdateEvent | pb.Task):
        return PROTO_TO_STATE.get(event.status.state) in TERMINAL_STATES
    return False


def _uuids(values: list[str]) -> list[str]:
    from tasks_app.access import parse_task_uuid

    return [str(u) for u in (parse_task_uuid(v) for v in values) if u is not None]


async def _wait_for_end(task_pk) -> None:
    """Return when the task is canceled (or otherwise ended) from outside."""
    subscription = Subscription(task_pk)
    # A channels_redis layer object receives on one event loop at a time ("Two
    # event loops are trying to receive() on one channel layer at once!"), and
    # each worker thread runs its turn on a loop of its own: two concurrent turns
    # sharing the process-wide layer made one watcher crash, which aborted its
    # turn. So each turn watches through a layer object of its own. The embedded
    # in-process layer must stay shared (it is the only copy of the messages).
    private_layer = not isinstance(subscription.layer, InMemoryChannelLayer)
    if private_layer:
        subscription.layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    try:
        async with subscription:
            while True:
                if await sync_to_async(_is_terminal)(task_pk):
                    return
                message = await subscription.receive(timeout=5.0)
                if message is not None and message.get("type") == "task.cancel":
                    return
    finally:
        if private_layer:
            with suppress(Exception):
                await subscription.layer.close_pools()


def _is_terminal(task_pk) -> bool:
    return Task.objects.get(pk=task_pk).is_terminal


def _locked_task(task_pk) -> Task:
    return (
        Task.objects.select_for_update(of=("self",))
        .select_related("context", "status_message")
        .get(pk=task_pk)
    )


def event_apply(task_pk, event) -> bool:
    """Apply one executor event to the stored task. False if the task has already ended."""
    with transaction.atomic():
        task = _locked_task(task_pk)
        if task.is_terminal:
            return False
        if isinstance(event, pb.TaskStatusUpdateEvent):
            _check_task_id(task, event.task_id)
            _apply_status(
                task,
                event.status,
                proto_to_dict(event.metadata) if event.HasField("metadata") else None,
            )
        elif isinstance(event, pb.TaskArtifactUpdateEvent):
            _check_task_id(task, event.task_id)
            _apply_artifact(task, event)
        elif isinstance(event, pb.Message):
            # A direct reply: the task it answers is done, the reply is its final word.
            status = pb.TaskStatus(state=pb.TASK_STATE_COMPLETED, message=event)
            _apply_status(task, status, None)
        elif isinstance(event, pb.Task):
            _check_task_id(task, event.id)
            for artifact in event.artifacts:
                _apply_artifact(task, pb.TaskArtifactUpdateEvent(artifact=artifact))
            if event.status.state != pb.TASK_STATE_UNSPECIFIED:
                _apply_status(task, event.status, None)
        else:
            raise InvalidAgentResponseError(message=f"Unknown event type {type(event).__name__}")
    return True


def _check_task_id(task: Task, task_id: str) -> None:
    if task_id and task_id != str(task.pk):
        raise InvalidAgentResponseError(message=f"Event for task {task_id} sent on task {task.pk}")


def _apply_status(task: Task, status: pb.TaskStatus, metadata: dict | None) -> None:
    state = PROTO_TO_STATE.get(status.state)
    if state is None:
        raise InvalidAgentResponseError(message="Status update without a valid state")
    task.status_message = _store_agent_message(task, status.message) if status.HasField("message") else None
    task.state = state
    task.status_timestamp = timezone.now()
    fields = ["state", "status_message", "status_timestamp", "updated_at"]
    if metadata:
        # A status update's metadata is merged into the task's: the one place an
        # executor can keep state across turns (the a2a_proxy agent keeps its
        # remote task id here and reads it back from current_task.metadata).
        task.metadata = {**task.metadata, **metadata}
        fields.append("metadata")
    task.save(update_fields=fields)
    event_append(task, TaskEvent.Kind.STATUS, {"statusUpdate": status_update_dict(task, metadata)})


def _store_agent_message(task: Task, message: pb.Message) -> Message:
    data = proto_to_dict(message)
    fields = {
        "tenant_id": task.tenant_id,
        "task": task,
        "context": task.context,
        "role": Message.Role.AGENT,
        "parts": data.get("parts", []),
        "metadata": data.get("metadata", {}),
        "extensions": data.get("extensions", []),
        "reference_task_ids": data.get("referenceTaskIds", []),
    }
    message_id = message.message_id or f"agent-{task.pk}-{task.event_seq + 1}"
    try:
        with transaction.atomic():
            return Message.objects.create(message_id=message_id, **fields)
    except IntegrityError:
        # Agents sometimes reuse ids; keep the message under a fresh one.
        return Message.objects.create(message_id=f"{message_id}-{task.pk}-{task.event_seq + 1}", **fields)


def _apply_artifact(task: Task, event: pb.TaskArtifactUpdateEvent) -> None:
    if not event.artifact.artifact_id:
        raise InvalidAgentResponseError(message="Artifact without an artifactId")
    chunk = proto_to_dict(event.artifact)
    stored = Artifact.objects.filter(task=task, artifact_id=event.artifact.artifact_id).first()
    if stored is not None and event.append:
        stored.parts = stored.parts + chunk.get("parts", [])
        stored.chunk_count += 1
        stored.metadata = {**stored.metadata, **chunk.get("metadata", {})}
    else:
        stored = stored or Artifact(task=task, artifact_id=event.artifact.artifact_id)
        stored.parts = chunk.get("parts", [])
        stored.chunk_count = 1
        stored.metadata = chunk.get("metadata", {})
        stored.name = chunk.get("name", "")
        stored.description = chunk.get("description", "")
        stored.extensions = chunk.get("extensions", [])
    stored.complete = bool(event.last_chunk) or not event.append
    stored.save()
    update = {"taskId": str(task.pk), "contextId": task.context.context_id, "artifact": chunk}
    if event.append:
        update["append"] = True
    if event.last_chunk:
        update["lastChunk"] = True
    if event.HasField("metadata"):
        update["metadata"] = proto_to_dict(event.metadata)
    event_append(task, TaskEvent.Kind.ARTIFACT, {"artifactUpdate": update})


def turn_finish(task_pk, message_pk: int, error: BaseException | None) -> bool:
    """Close a turn. A task the agent left unsettled ends FAILED with the reason.

    True if the task was CANCELED when the turn closed. The turn is marked done
    while holding the task's lock, which task_cancel takes too: a cancel either
    sees this turn running (and leaves the agent's cancel() to it) or done.
    """
    with transaction.atomic():
        task = _locked_task(task_pk)
        Message.objects.filter(pk=message_pk).update(turn=Message.Turn.DONE)
        if task.is_terminal or task.is_interrupted:
            return task.state == TaskState.CANCELED
        if Message.objects.filter(task=task, role=Message.Role.USER, pk__gt=message_pk).exists():
            # The agent asked, and the answer came before this turn closed: the
            # task belongs to the answer's turn now, not to this one.
            return False
        if error is not None:
            reason = f"The agent failed: {error.__class__.__name__}: {error}"
        else:
            reason = "The agent ended its turn without reaching a final state."
        status = pb.TaskStatus(
            state=pb.TASK_STATE_FAILED,
            message=pb.Message(role=pb.ROLE_AGENT, parts=[pb.Part(text=reason)]),
        )
        _apply_status(task, status, None)
    return False


def turn_sweep() -> dict:
    """Re-dispatch turns a broker outage left queued; fail turns a dead worker left running."""
    now = timezone.now()
    stale_queued = Message.objects.filter(
        turn=Message.Turn.PENDING,
        created_at__lt=now - timedelta(seconds=settings.A2A_TURN_REDISPATCH_AFTER),
    ).values_list("pk", "task_id")
    redispatched = 0
    for message_pk, task_pk in stale_queued:
        turn_dispatch(task_pk, message_pk)
        redispatched += 1
    lost = Message.objects.filter(
        turn=Message.Turn.RUNNING,
        turn_started_at__lt=now - timedelta(seconds=settings.A2A_TURN_LEASE),
    ).values_list("pk", "task_id")
    failed = 0
    for message_pk, task_pk in lost:
        if turn_finish(task_pk, message_pk, RuntimeError("the worker running this turn was lost")):
            # Canceled while the lost turn "ran": nobody gave the agent its cancel() yet.
            agent_cancel_dispatch(task_pk)
        failed += 1
    return {"redispatched": redispatched, "failed": failed}
