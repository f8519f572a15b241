"""The agent's events: batched, stored in one transaction a batch, published after commit."""

import asyncio
import copy
import time
from dataclasses import dataclass

from a2a.server.events import EventQueue
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidAgentResponseError, InvalidParamsError
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from tasks_app.events import SETTLED_STATES, log_entries, log_publish
from tasks_app.models import (
    TERMINAL_STATES,
    Artifact,
    Message,
    Task,
    TaskEvent,
    TaskState,
)
from tasks_app.protocol.convert import (
    PROTO_TO_STATE,
    proto_to_dict,
    status_update_dict,
)
from tasks_app.protocol.validation import check_values
from tasks_app.push import push_deliveries_queue
from tasks_app.turns.lease import Turn, TurnAborted, lock_task, owned_turn_statement, retrying
from tasks_app.turns.view import TaskView
from tenants import sql


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
        self.background: set[asyncio.Task] = set()  # batches being written behind the agent's back
        # Set once one of the agent's own events ended the task.
        self.ended_task = False
        # Set once a batch closed the turn (a terminal state): nothing is left to finish.
        self.finished = False
        self.closed = False
        self.error: BaseException | None = None

    def close(self) -> None:
        """No more events are taken, and no batch is written any more: the turn was stopped."""
        self.closed = True
        self.pending.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        # A batch trying again through an outage would write, and renew the lease, once it ends.
        for flush in self.background:
            flush.cancel()

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
        flush = asyncio.ensure_future(self._flush_in_background())
        self.background.add(flush)
        flush.add_done_callback(self.background.discard)

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
            stored = await retrying(events_store, self.turn, batch, self.view, _Written())
            if stored is None:
                self.close()
                raise TurnAborted()
            if stored in SETTLED_STATES:
                self.finished = True
            if stored in TERMINAL_STATES:
                self.ended_task = True


@dataclass
class _Written:
    """What one try of a batch was about to log first, kept for the next try (retrying).

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
    started = time.monotonic()  # before the batch's `now`: the lease it renews lasts at least from here
    with transaction.atomic():
        task = lock_task(turn.task_pk)
        if written is not None and written.stored(task):
            if task.is_terminal and task.state != written.state:
                return None  # ended since, by another (a cancel): as any batch finds it then
            if task.state in SETTLED_STATES:
                turn.lease.release()  # the try whose commit went through closed the turn
            if view is not None:
                stored = TaskView.of(task)
                view.messages, view.artifacts = stored.messages, stored.artifacts
            return task.state
        if task.is_terminal:
            return None
        if view is not None:
            view.attach_status_message(task)
        writer = BatchWriter(task, turn, view)
        for event in batch:
            writer.apply(event)
        if written is not None and writer.entries:
            written.seq, written.payload, written.state = task.event_seq + 1, writer.entries[0][1], task.state
        # The batch renews the turn's lease too (a turn that stores events is alive),
        # and closes the turn when it settles the task: in the statement of its rows.
        # A batch that changes the task's metadata notes there what it was, if the turn has not yet.
        now, done = timezone.now(), task.state in SETTLED_STATES
        owned = owned_turn_statement(turn, now, done=done, metadata_base=writer.metadata_base)
        if not writer.commit(owned=owned):
            # Another attempt holds the turn: this one writes nothing (all of it undone).
            transaction.set_rollback(True)
            return None
    if done:
        turn.lease.release()
    else:
        turn.lease.renewed(started)
    if view is not None and writer.view_after is not None:
        # Only once committed: a batch tried again after a failed commit must not count twice.
        view.messages, view.artifacts = writer.view_after.messages, writer.view_after.artifacts
    return task.state


class BatchWriter:
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
        # The task's metadata before this batch changed it (None: unchanged), for a re-run.
        self.metadata_base: dict | None = None

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
        if self.entries and self.task.become_task():
            # The first word is not a bare Message: its caller is shown the task, and ListTasks lists it.
            self.fields.add("reply")

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
            _storable(metadata, "status update's metadata")
            # A status update's metadata is merged into the task's: the one place an
            # executor can keep state across turns (the a2a_proxy agent keeps its
            # remote task id here and reads it back from current_task.metadata).
            if "metadata" not in self.fields:
                self.metadata_base = task.metadata
            task.metadata = {**task.metadata, **metadata}
            self.fields.add("metadata")
        self.entries.append((TaskEvent.Kind.STATUS, {"statusUpdate": status_update_dict(task, metadata)}))

    def _agent_message(self, message: pb.Message) -> Message:
        data = _storable(proto_to_dict(message), "message")
        _not_longer(message.message_id, MESSAGE_ID_MAX, "message's messageId")
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
        _not_longer(artifact_id, ARTIFACT_ID_MAX, "artifact's artifactId")
        _not_longer(event.artifact.name, ARTIFACT_NAME_MAX, "artifact's name")
        chunk = _storable(proto_to_dict(event.artifact), "artifact")
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
            update["metadata"] = _storable(proto_to_dict(event.metadata), "artifact update's metadata")
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
        `owned`: the turn's lease renewal (owned_turn_statement), run in that same
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


# What the store holds of an agent's ids and names (the columns' lengths).
MESSAGE_ID_MAX = Message._meta.get_field("message_id").max_length
ARTIFACT_ID_MAX = Artifact._meta.get_field("artifact_id").max_length
ARTIFACT_NAME_MAX = Artifact._meta.get_field("name").max_length


def _storable(data: dict, what: str) -> dict:
    """An agent's event content, if the store can hold it (no NUL, no unpaired surrogate, bounded nesting).

    A remote agent (the a2a_proxy) passes on whatever its peer sent: refused
    here, its turn fails saying why, not with the database's DataError.
    """
    try:
        check_values(data)
    except InvalidParamsError as exc:
        reason = exc.message.removeprefix("Invalid params: ")
        raise InvalidAgentResponseError(message=f"The agent's {what} cannot be stored: {reason}") from None
    return data


def _not_longer(value: str, most: int, what: str) -> None:
    if len(value) > most:
        raise InvalidAgentResponseError(message=f"The agent's {what} is longer than {most} characters")
