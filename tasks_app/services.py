"""Binding-independent A2A operations. Every binding and the console call these.

Each function validates first and writes second, inside one transaction, so bad
input never leaves anything behind; work for the worker is enqueued only after
the transaction commits.
"""

import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.approvals import requested_decision
from agents.registry import answers_with_task
from tasks_app.access import Caller, FoundTask, get_task_for_caller
from tasks_app.commits import atomic_checked, rechecked
from tasks_app.db import UNAVAILABLE_ERRORS
from tasks_app.dispatch import agent_cancel_dispatch, turn_dispatch
from tasks_app.events import cancel_group_name, log_append, log_entries, log_publish, publish_soon
from tasks_app.models import Context, IdempotencyKey, Message, Task, TaskEvent, TaskState
from tasks_app.protocol.convert import (
    STATE_TO_PROTO_NAME,
    proto_to_dict,
    status_update_dict,
    task_dict,
)
from tasks_app.push import PushConfigInput, push_config_clean, push_config_save, push_deliveries_queue
from tasks_app.quotas import quota_turn_claim, quota_turns_early
from tasks_app.selectors import snapshot_of, task_snapshot
from tenants import sql

logger = logging.getLogger(__name__)


@dataclass
class SendOutcome:
    task: Task
    # The last log entry before this message was accepted; streams resume after it.
    seq_before: int
    duplicate: bool = False
    # A new task as the accept stored it (its first log entry): the answer of a
    # returnImmediately send, with no second read.
    snapshot: dict | None = None
    # The user message stored (None for a repeat).
    message: Message | None = None

    @property
    def accepted(self) -> dict:
        """The task as it was accepted: the answer when the store cannot be read again."""
        return task_dict(self.task)


class IdempotencyKeyReused(InvalidParamsError):
    """An Idempotency-Key sent again with a different request (HTTP 422, JSON-RPC -32602)."""


def message_send(
    caller: Caller,
    request: pb.SendMessageRequest,
    *,
    idempotency_key: str = "",
    reply_as_message: bool = True,
    decision: str | None = None,
    task_pk: uuid.UUID | None = None,
    count_turn: bool = True,
    with_task: Callable[[SendOutcome], None] | None = None,
    key_from_request: bool = False,
) -> SendOutcome:
    """Store a user message and queue the agent turn it starts.

    A message without taskId creates a task (in the caller's context with that
    contextId, or a new context); one with taskId continues an interrupted
    task. A messageId carries no meaning here: a repeated one is a new message.

    An idempotency_key (the Idempotency-Key header) makes a retry safe: the
    same key from the same caller to the same agent with the same request
    within A2A_IDEMPOTENCY_TTL answers with the task the first request started,
    and starts no second turn; with another request it is IdempotencyKeyReused.

    reply_as_message: the caller will not see the task before the agent's
    first word (a blocking call or a stream), so an agent that answers with a
    Message alone makes it a message exchange (Task.Reply.MESSAGE). Not for
    a handler that declares answers_with_task, nor for a send with a push
    config (its webhook gets the Task first): the task is shown at once.

    One transaction stores everything (context, task, message, the first log
    entry, the key); the turn is dispatched and the entry published after it
    commits, and a failure there is only logged: the task is accepted, the
    sweeper dispatches it again. A COMMIT whose answer is lost (the database
    went away as it answered) is no refusal: the store is asked whether the
    message is there (commits.atomic_checked), a send stored after all is accepted
    and what was to run after its COMMIT runs; one that cannot be told raises
    CommitUnknown.

    A message to an auth-required task from an approver who is not its
    requester carries that approver's decision to the agent (`_approval`);
    `decision` is the operator's explicit grant or denial, else the message's
    words decide.

    task_pk: the id a new task gets (a caller that listens for the task's
    events before it exists); a new random one without it.

    count_turn: the turn counts against the tenant's max_running_turns
    (quotas.quota_turn_claim, in the transaction, after the idempotency key:
    a repeat is answered with its task whatever the count; a refusal rolls
    back what the send wrote so far). The console's answers pass False: an
    operator's answer is never sent back for a later try.

    with_task(outcome): more to store with a new message, in its transaction
    (the draft dialect's alias of a task its client named); not for a repeat.

    key_from_request: idempotency_key was made from the whole request by a dialect
    with no key of its own (the draft: its retry is the same body). Its body is
    not compared again, and a key met again on a follow-up whose task waits for
    input once more is a new answer in the same words ("yes" twice), not a resend.
    A resend of the message that created the task stays a resend.
    """
    message = request.message
    if message.role != pb.ROLE_USER:
        raise InvalidParamsError(message="message.role must be ROLE_USER")
    push_config = None
    if request.configuration.HasField("task_push_notification_config"):
        push_config = push_config_clean(request.configuration.task_push_notification_config)
    if not idempotency_key:
        body_hash = ""
    elif key_from_request:
        body_hash = hashlib.sha256(idempotency_key.encode()).hexdigest()
    else:
        body_hash = hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()

    def write() -> tuple[SendOutcome, Message | None]:
        outcome, stored = _send_stored(
            caller,
            request,
            idempotency_key=idempotency_key,
            body_hash=body_hash,
            push_config=push_config,
            reply_as_message=reply_as_message,
            decision=decision,
            task_pk=task_pk,
            count_turn=count_turn,
            key_from_request=key_from_request,
        )
        outcome.message = stored
        if stored is not None and with_task is not None:
            with_task(outcome)
        return outcome, stored

    if count_turn and not message.task_id:
        # Before the transaction, once the request is known to be good (quotas.quota_turns_early).
        quota_turns_early(caller, idempotency_key)
    return atomic_checked(write, same=("task_id", "message_id"))


def _send_stored(
    caller: Caller,
    request: pb.SendMessageRequest,
    *,
    idempotency_key: str,
    body_hash: str,
    push_config: PushConfigInput | None,
    reply_as_message: bool,
    decision: str | None,
    task_pk: uuid.UUID | None,
    count_turn: bool,
    key_from_request: bool = False,
) -> tuple[SendOutcome, Message | None]:
    """message_send's writes, in its transaction: the outcome, and the user message (None for a repeat)."""
    message = request.message
    if message.task_id:
        task = _task_to_continue(caller, message)
    else:
        reply = Task.Reply.TASK
        # A webhook is shown the Task at once (its first event): no exchange then.
        if (
            reply_as_message
            and not request.configuration.return_immediately
            and push_config is None
            and not answers_with_task(caller.agent.handler)
        ):
            reply = Task.Reply.OPEN
        task = _new_task(caller, message, reply, task_pk)
    if idempotency_key:
        seq_before = task.event_seq if message.task_id else 0
        previous = _key_claim(
            caller, idempotency_key, body_hash, task, seq_before, answers_again=key_from_request
        )
        if previous is not None:
            # A retry: roll back what this request made (a new context, say);
            # its task was never saved and no turn is dispatched.
            transaction.set_rollback(True)
            return SendOutcome(task=previous.task, seq_before=previous.seq_before, duplicate=True), None
    if message.task_id:
        # Before the quota: a follow-up that can never be stored hears why, not "retry later".
        _follow_up_check(task, message)
    if count_turn:
        # After the key: a send stored already is answered with its task, whatever the quota.
        quota_turn_claim(caller.tenant)
    if message.task_id:
        seq_before, stored = _continue_task(caller, task, message, push_config, decision)
        return SendOutcome(task=task, seq_before=seq_before), stored
    snapshot, stored = _create_task(caller, task, message, push_config)
    return SendOutcome(task=task, seq_before=0, snapshot=snapshot), stored


def _key_claim(
    caller: Caller, key: str, body_hash: str, task: Task, seq_before: int, *, answers_again: bool = False
) -> IdempotencyKey | None:
    """Record that `key` stored a message to `task` after log entry `seq_before`; or answer
    the record of an earlier use of the key (its task, and where its message stood in the log).

    answers_again: a key recorded for a follow-up to `task` (locked), which waits for
    input again, is this message's now (message_send's key_from_request).

    The insert comes first: a concurrent request with the same key waits on the
    unique index until this transaction ends, then finds this record. A task's
    row need not exist yet (the foreign key is checked at commit).
    """
    now = timezone.now()
    fields = {"tenant": caller.tenant, "agent": caller.agent, "caller": caller.principal, "key": key}
    for _ in range(3):
        try:
            with transaction.atomic():
                IdempotencyKey.objects.create(
                    **fields, body_hash=body_hash, task_id=task.pk, seq_before=seq_before, created_at=now
                )
            return None
        except IntegrityError:
            pass
        found = (
            IdempotencyKey.objects.filter(agent=caller.agent, caller=caller.principal, key=key)
            .select_related("task__context", "task__status_message")
            .first()
        )
        if found is None:
            continue  # removed meanwhile (it had expired): try again
        if found.created_at <= now - timedelta(seconds=settings.A2A_IDEMPOTENCY_TTL):
            found.delete()  # expired: the key is free again (lazy cleanup)
            continue
        if found.body_hash != body_hash:
            raise IdempotencyKeyReused(
                message=f"Idempotency-Key '{key}' was already used with a different request; "
                "send a new key with a new request"
            )
        if answers_again and found.seq_before and found.task_id == task.pk and task.is_interrupted:
            # The turn of the follow-up the key was made for has run, and asked again.
            found.seq_before, found.created_at = seq_before, now
            found.save(update_fields=["seq_before", "created_at"])
            return None
        return found
    raise IdempotencyKeyReused(message=f"Idempotency-Key '{key}' is in use by a concurrent request; retry")


def _new_task(caller: Caller, message: pb.Message, reply: str, task_pk: uuid.UUID | None) -> Task:
    """The task a message without taskId starts: not saved yet, its context found or made."""
    if message.context_id:
        # The caller's own context of that id: another caller's is never joined.
        context, _ = Context.objects.get_or_create(
            tenant=caller.tenant, owner=caller.principal, context_id=message.context_id
        )
    else:
        context = Context(tenant=caller.tenant, owner=caller.principal, context_id=str(uuid.uuid4()))
        sql.insert([context])
    return Task(
        id=task_pk or uuid.uuid4(),
        tenant=caller.tenant,
        agent=caller.agent,
        context=context,
        state=TaskState.SUBMITTED,
        status_timestamp=timezone.now(),
        owner=caller.principal,
        reply=reply,
        # The log starts with the Task itself (appended below).
        event_seq=1,
    )


def _task_to_continue(caller: Caller, message: pb.Message) -> Task:
    task = get_task_for_caller(caller, message.task_id, for_update=True)
    if task is None:
        raise TaskNotFoundError(message=f"Task {message.task_id} not found")
    return task


def _create_task(
    caller: Caller, task: Task, message: pb.Message, push_config: PushConfigInput | None
) -> tuple[dict, Message]:
    """Store a new task, its first message and log entry (one statement on PostgreSQL).

    The task as stored, and its user message.
    """
    user_message = _user_message(caller, task, message)
    task.event_seq = 0
    snapshot = task_dict(task, messages=[user_message])
    events = log_entries(task, [(TaskEvent.Kind.TASK, {"task": snapshot})])
    sql.insert_all([[task], [user_message], events])
    log_publish(task, events, live=False)
    if push_config is not None:
        # Stored before the first event is queued, so the webhook gets the Task itself too.
        push_config_save(task, push_config)
        push_deliveries_queue(task, events)
    _dispatch_after_commit(task, user_message)
    return snapshot, user_message


def _follow_up_check(task: Task, message: pb.Message) -> None:
    """Whether `message` may continue `task` (locked): its context, and the task waiting for input."""
    if message.context_id and message.context_id != task.context.context_id:
        raise InvalidParamsError(message="contextId does not match the task's context")
    if task.is_terminal:
        raise UnsupportedOperationError(
            message=f"Task {task.id} is in terminal state: {STATE_TO_PROTO_NAME[task.state]}"
        )
    if not task.is_interrupted:
        raise UnsupportedOperationError(
            message=f"Task {task.id} is not waiting for input (state {STATE_TO_PROTO_NAME[task.state]})"
        )


def _continue_task(
    caller: Caller,
    task: Task,
    message: pb.Message,
    push_config: PushConfigInput | None,
    decision: str | None = None,
) -> tuple[int, Message]:
    """Store a follow-up to a task that _follow_up_check let through."""
    seq_before = task.event_seq
    if push_config is not None:
        # A config sent with a follow-up message covers the task from this turn on.
        push_config_save(task, push_config)
    approval = _approval(caller, task, message, decision)
    user_message = _store_user_message(caller, task, message, approval)
    # The answer is in: the task leaves the operator queues at once.
    _status_stored(task, TaskState.SUBMITTED)
    _dispatch_after_commit(task, user_message)
    return seq_before, user_message


def _approval(caller: Caller, task: Task, message: pb.Message, decision: str | None) -> dict | None:
    """The decision this message carries to the agent, or None when it carries none.

    Only for an auth-required task, only from a caller with the right to
    approve, and never from the requester itself: entering AUTH_REQUIRED is
    not permission, and neither is the requester saying "approve".
    """
    if task.state != TaskState.AUTH_REQUIRED or not caller.may_approve or caller.principal == task.owner:
        return None
    decision = decision or requested_decision(message)
    if decision is None:
        return None
    return {"decision": decision, "by": caller.name or caller.principal, "principal": caller.principal}


def _store_user_message(
    caller: Caller, task: Task, message: pb.Message, approval: dict | None = None
) -> Message:
    stored = _user_message(caller, task, message, approval)
    sql.insert([stored])
    return stored


def _user_message(caller: Caller, task: Task, message: pb.Message, approval: dict | None = None) -> Message:
    """The user's message as it is stored, with its turn to run (not saved yet)."""
    data = proto_to_dict(message)
    return Message(
        tenant=caller.tenant,
        task=task,
        context=task.context,
        message_id=message.message_id,
        role=Message.Role.USER,
        parts=data.get("parts", []),
        metadata=data.get("metadata", {}),
        extensions=data.get("extensions", []),
        reference_task_ids=list(message.reference_task_ids),
        turn=Message.Turn.PENDING,
        dispatched_at=timezone.now(),  # now, on the database's clock (sql.DatabaseClockField)
        sender=caller.principal,
        approval=approval,
    )


def _status_stored(task: Task, state: str) -> list[TaskEvent]:
    """Set a locked task's state (no status message), log it and queue its webhooks: the log entry."""
    task.state = state
    task.status_message = None
    task.status_timestamp = timezone.now()
    fields = ["state", "status_message", "status_timestamp", "event_seq", "updated_at"]
    if task.become_task():  # not shown yet (a cancel before the agent's first word)
        fields.append("reply")
    events = log_append(task, [(TaskEvent.Kind.STATUS, {"statusUpdate": status_update_dict(task)})])
    task.save(update_fields=fields)
    push_deliveries_queue(task, events)
    return events


def _dispatch_after_commit(task: Task, message: Message) -> None:
    task_pk, message_pk = task.pk, message.pk
    transaction.on_commit(rechecked(lambda: turn_dispatch(task_pk, message_pk)), robust=True)


def task_reveal(task: Task) -> None:
    """The caller is about to be shown `task` as a task: from now on it stays one (Task.become_task).

    Only for a task whose agent has not spoken yet (Task.Reply.OPEN, its log
    holding only its Task): the agent's Message alone would otherwise make it a
    message exchange, a task its caller, who holds its id, no longer finds. A
    conditional UPDATE: an exchange the agent's Message made first stays one.
    """
    if task.reply == Task.Reply.OPEN and task.event_seq <= 1:
        Task.objects.filter(pk=task.pk, reply=Task.Reply.OPEN, event_seq=1).update(reply=Task.Reply.TASK)


def task_answer(found: FoundTask | None, *, history_length: int | None = None) -> dict:
    """GetTask's answer for the caller's task read with its artifacts (None: not found or not theirs).

    A page of history read with them was read for this history_length (selectors.history_to_read).
    """
    if found is None:
        raise TaskNotFoundError()
    task, artifacts, history = found
    return snapshot_of(task, history_length=history_length, artifacts=artifacts, history=history)


def task_cancel(caller: Caller, task_id: str) -> dict:
    """Cancel a task now, whatever its worker is doing.

    The CANCELED state is stored and announced here; a worker still running the
    turn sees it and stops, anything it emits afterwards is discarded, and that
    turn gives the agent its cancel(). When no turn is running (the task
    waits for input or authorization, or its turn is still queued) no turn will
    either: a queued one is marked done so it never starts, and a worker job
    (agent_cancel) gives the agent its cancel(), so that an agent holding
    something elsewhere (the a2a_proxy agent's remote task) lets it go.

    A COMMIT that got no answer is asked about as a send's is (commits.atomic_checked):
    a cancel stored after all is answered as done, and what was to follow it runs;
    one the store could not be asked about raises CommitUnknown.
    """
    task = atomic_checked(lambda: task_cancel_stored(caller, task_id), same=CANCEL_ENTRY)
    try:
        return task_snapshot(task.pk)
    except UNAVAILABLE_ERRORS as exc:
        # Canceled and stored; only reading the whole task back failed. Answered from the
        # task in hand (its status, without history or artifacts), never as "nothing stored".
        logger.warning("Task %s canceled; reading it back failed (%r)", task.pk, exc)
        return task_dict(task)


# What tells a cancel's log entry from any other row (commits.atomic_checked): with its time, as
# SQLite may give a rolled-back entry's id and position to the running turn's next one.
CANCEL_ENTRY = ("task_id", "seq", "created_at")


def task_cancel_stored(caller: Caller, task_id: str) -> tuple[Task, TaskEvent]:
    """task_cancel's writes, in the caller's transaction: the task, canceled, and its log entry
    saying so (the row an atomic_checked caller looks for, by CANCEL_ENTRY)."""
    task = get_task_for_caller(caller, task_id, for_update=True)
    if task is None:
        raise TaskNotFoundError()
    if task.is_terminal:
        raise TaskNotCancelableError(
            message=f"Task {task.id} cannot be canceled: it is {STATE_TO_PROTO_NAME[task.state]}"
        )
    events = _status_stored(task, TaskState.CANCELED)
    task_pk = task.pk
    # Under the task's lock, which turn_finish takes too, so a turn is either
    # seen running here (and gives the agent its cancel() itself) or done. A
    # queued turn's claim waits for this transaction, then finds it done.
    Message.objects.filter(task=task, turn=Message.Turn.PENDING).update(turn=Message.Turn.DONE)
    turn_running = Message.objects.filter(task=task, turn=Message.Turn.RUNNING).exists()
    transaction.on_commit(
        lambda: publish_soon([(cancel_group_name(task_pk), {"type": "task.cancel"})]), robust=True
    )
    if not turn_running:
        transaction.on_commit(rechecked(lambda: agent_cancel_dispatch(task_pk)), robust=True)
    return task, events[0]
