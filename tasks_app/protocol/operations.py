"""A2A 1.0 operations, shared by every binding.

Each takes the Call (protocol/call.py) and the parsed request proto. Unary operations
return the result as ProtoJSON; streaming ones return an async iterator of
(seq, StreamResponse dict) after all validation is done, so errors found before
the first event still go back as a plain error response.
"""

import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from django.conf import settings

from agents.cards import card_dict
from tasks_app.access import Caller, get_task_for_caller
from tasks_app.commits import CommitUnknown
from tasks_app.db import UNAVAILABLE_ERRORS, db
from tasks_app.events import HEARTBEAT, QUIET, Feed, follow, payload_state, wait_until_settled
from tasks_app.models import INTERRUPTED_STATES, TERMINAL_STATES, Task
from tasks_app.protocol.auth import CALLER_REFUSED, CallerRefused, check_tenant, judged_again
from tasks_app.protocol.call import Call, in_one_trip, takes_pending_call
from tasks_app.protocol.convert import PROTO_TO_STATE
from tasks_app.protocol.errors import StoreUnavailable
from tasks_app.selectors import (
    DEFAULT_HISTORY_LENGTH,
    history_to_read,
    send_answer,
    send_answer_at,
    task_list,
    with_history_length,
)
from tasks_app.services import (
    SendOutcome,
    message_send,
    task_answer,
    task_cancel,
    task_reveal,
)

logger = logging.getLogger(__name__)

COMMIT_UNKNOWN = (
    "The task store (database) went away as the message was being stored, and it may have been. "
    "Retry later with the same request and Idempotency-Key (a draft tasks/send: the same body) "
    "to have it stored once."
)
# The same without a key, whose retry could not be matched to this message.
COMMIT_UNKNOWN_WITHOUT_KEY = (
    "The task store (database) went away as the message was being stored, and it may have been. "
    "Look for it (GetTask, or ListTasks by its contextId) once the store is back, before sending it "
    "again: sent again, it is stored again. An Idempotency-Key makes such a retry safe."
)


def _history_length(request) -> int | None:
    holder = request.configuration if isinstance(request, pb.SendMessageRequest) else request
    if not holder.HasField("history_length"):
        return None
    if holder.history_length < 0:
        raise InvalidParamsError(message="historyLength must not be negative")
    return holder.history_length


@takes_pending_call
async def send_message(call, request: pb.SendMessageRequest, *, send=message_send) -> dict:
    """SendMessage. `send` stores the message: message_send, or a dialect's wrapper around it.

    A blocking call that starts a task names the task first and joins its
    group before storing it: no event of the task can come before the
    subscription, so the wait needs no look at the store first.
    """
    blocking = not request.configuration.return_immediately
    new_task = uuid.uuid4() if blocking and not request.message.task_id else None
    feed = None
    if new_task is not None:
        feed = Feed(new_task)
        await feed.join()
    try:
        call, outcome = await _accept(send, call, request, checks=_send_checks, task_pk=new_task)
        history_length = _history_length(request)  # checked before the accept
        # Accepted means accepted: from here on the stored task is the answer,
        # whatever the channel layer or the database does meanwhile.
        if blocking:
            joined = feed is not None and feed.joined and outcome.task.pk == new_task
            try:
                settled = await wait_until_settled(
                    outcome.task.pk, feed=feed if joined else None, after_seq=outcome.seq_before
                )
            except UNAVAILABLE_ERRORS as exc:
                logger.warning("Waiting for task %s: the database is unavailable (%r)", outcome.task.pk, exc)
                settled = None
            if settled is not None and "message" in settled:
                return settled  # a message exchange: the agent's Message is the whole answer
            if settled is not None and (history_length is None or history_length <= DEFAULT_HISTORY_LENGTH):
                # The worker published the task as it stored it: no need to read it again.
                return {"task": with_history_length(settled["task"], history_length)}
    finally:
        if feed is not None:
            await feed.close()
    if not blocking and outcome.snapshot is not None:
        # A new task, answered as the accept stored it: no second read.
        return {"task": with_history_length(outcome.snapshot, history_length)}
    try:
        return await db(_answer, outcome.task, history_length)
    except UNAVAILABLE_ERRORS as exc:
        logger.warning("Reading task %s: the database is unavailable (%r)", outcome.task.pk, exc)
        return {"task": outcome.accepted}


def _answer(task: Task, history_length: int | None) -> dict:
    """SendMessage's answer read from the store: a task shown to its caller stays a task."""
    task_reveal(task)
    return send_answer(task.pk, history_length=history_length)


def _send_checks(call: Call, request: pb.SendMessageRequest) -> None:
    """What a SendMessage checks once its caller is known, before anything is stored."""
    check_tenant(call, request)
    _history_length(request)


async def _accept(
    send, call, request: pb.SendMessageRequest, *, checks, **options
) -> tuple[Call, SendOutcome]:
    """Store the message (one transaction): the Call, resolved, and the outcome.

    `checks(call, request)` runs first, once the caller is known. A database
    that cannot be reached stored nothing: 503. One that went away as it
    committed and stayed away (CommitUnknown) may have: 503, saying so.
    """
    try:
        return await db(_resolved_send, send, call, request, checks, **options)
    except UNAVAILABLE_ERRORS as exc:
        logger.warning("SendMessage refused, the database is unavailable: %r", exc)
        raise StoreUnavailable() from None


def _resolved_send(send, call, request: pb.SendMessageRequest, checks, **options) -> tuple[Call, SendOutcome]:
    call = call.resolve()
    checks(call, request)
    try:
        return call, send(call.caller, request, idempotency_key=call.idempotency_key, **options)
    except CommitUnknown as exc:
        logger.warning("SendMessage may have been stored, the database went away as it committed: %r", exc)
        raise StoreUnavailable(
            COMMIT_UNKNOWN if call.idempotency_key else COMMIT_UNKNOWN_WITHOUT_KEY
        ) from None


@takes_pending_call
async def send_streaming_message(call, request: pb.SendMessageRequest, *, send=message_send) -> AsyncIterator:
    """SendStreamingMessage; `send` as for send_message."""
    call, outcome = await _accept(send, call, request, checks=check_tenant)
    # Accepted: from here on the stream is the answer, as for send_message.
    new_task = outcome.seq_before == 0 and not outcome.duplicate
    # Last-Event-ID resumes a stream of a task the client knows: a resent message's, or the task a
    # follow-up continues. A task that did not exist before this request has no stream to resume:
    # its log positions match the header by chance, and its first entries (the Task) were skipped.
    if call.last_event_id is not None and not new_task:
        try:
            log_end = await db(_log_end, outcome.task.pk)
        except UNAVAILABLE_ERRORS as exc:
            # The log as it ended when the message was accepted: it only grows.
            logger.warning("Reading task %s: the database is unavailable (%r)", outcome.task.pk, exc)
            log_end = outcome.task.event_seq
        if call.last_event_id <= log_end:
            # The entries up to the message's are its task's earlier turns: the one before it
            # ended waiting for this message, which must not end this stream.
            return _stream(
                outcome.task.pk,
                after=call.last_event_id,
                snapshot=False,
                keep_open_through=outcome.seq_before,
                caller=call.caller,
            )
        if outcome.duplicate:
            # A resent message resuming from an id its stream never sent.
            raise _beyond_log(call.last_event_id, log_end)
        # A follow-up, and an id beyond its task's log: not about this stream; serve it from the start.
    if new_task:
        # A new task: its log starts with the Task itself, so the stream is the log. Its
        # first entry is the Task as the accept stored it: sent from here, not read back.
        first = (1, {"task": outcome.snapshot})
        hold = outcome.task.reply == Task.Reply.OPEN
        return _stream(
            outcome.task.pk, after=1, snapshot=False, first=first, hold_first=hold, caller=call.caller
        )
    # A resent message whose agent has not spoken yet may still answer with a Message alone.
    hold = outcome.task.reply == Task.Reply.OPEN
    return _stream(
        outcome.task.pk, after=None, snapshot=True, hold_first=hold, accepted=outcome, caller=call.caller
    )


@takes_pending_call
async def get_task(call, request: pb.GetTaskRequest) -> dict:
    return await db(_get_task, call, request)


def _get_task(call, request: pb.GetTaskRequest) -> dict:
    # The task read with the agent and (PostgreSQL) its page of history: one statement. A
    # negative historyLength reads none, and is refused after the agent's and tenant's checks.
    asked = request.history_length if request.HasField("history_length") else None
    history = history_to_read(asked) if asked is None or asked > 0 else 0
    call, found = call.resolve_with_task(request.id, history=history)
    check_tenant(call, request)
    return task_answer(found, history_length=_history_length(request))


@in_one_trip
def cancel_task(call: Call, request: pb.CancelTaskRequest) -> dict:
    check_tenant(call, request)
    return task_cancel(call.caller, request.id)


async def subscribe_to_task(call: Call, request: pb.SubscribeToTaskRequest) -> AsyncIterator:
    check_tenant(call, request)
    task = await db(get_task_for_caller, call.caller, request.id)
    if task is None:
        raise TaskNotFoundError()
    if call.last_event_id is not None:
        if call.last_event_id > task.event_seq:
            # Not an id this task's stream ever sent: waiting for it would never end.
            raise _beyond_log(call.last_event_id, task.event_seq)
        # Resuming: what the client missed, then live events. A client that saw
        # the final event gets an empty stream that closes at once.
        return _stream(task.pk, after=call.last_event_id, snapshot=False, caller=call.caller)
    if task.is_terminal:
        raise UnsupportedOperationError(
            message=f"Task {task.id} is in a terminal state; nothing to subscribe to"
        )
    # The task as it is now, read before the stream starts: a store that fails this read (or the
    # task gone since) is answered as an error, not as a stream cut right after its 200.
    try:
        now = await db(send_answer_at, task.pk)
    except Task.DoesNotExist:
        raise TaskNotFoundError() from None
    # A subscriber to a task waiting for input stays on until the task moves on.
    return _stream(
        task.pk, after=None, snapshot=True, wait_past_interruption=True, read=now, caller=call.caller
    )


class Recheck:
    """A stream outlives its request: its caller is judged again as it goes.

    At most every A2A_STREAM_RECHECK seconds, before the next event, heartbeat or
    quiet moment (events.QUIET, every few seconds). A token revoked or expired, a session
    signed out, a person who left the tenant, an agent no longer public: the
    stream ends with the refusal (protocol/auth.py) its binding frames. An agent
    disabled or deleted: the stream ends, and a reconnect hears "no agent". A
    database that does not answer ends nothing: the stream goes on, as it does
    through an outage, and the next event checks again.
    """

    def __init__(self, caller: Caller | None):
        self.caller = caller
        self.checked_at = time.monotonic()

    async def still_served(self) -> bool:
        """False once the agent is no longer served; raises CallerRefused once the caller may not call."""
        if self.caller is None or self.caller.recheck is None:
            return True
        if time.monotonic() - self.checked_at < settings.A2A_STREAM_RECHECK:
            return True
        try:
            served = await db(judged_again, self.caller)
        except CALLER_REFUSED as exc:
            raise CallerRefused(self.caller.agent, exc) from None
        except UNAVAILABLE_ERRORS as exc:
            logger.warning("Could not check a stream's caller again: %r", exc)
            return True
        self.checked_at = time.monotonic()
        return served


def _log_end(task_pk) -> int:
    return Task.objects.values_list("event_seq", flat=True).get(pk=task_pk)


def _beyond_log(last_event_id: int, log_end: int) -> InvalidParamsError:
    return InvalidParamsError(
        message=f"Last-Event-ID {last_event_id} is beyond the task's log, which ends at event {log_end}"
    )


async def _stream(
    task_pk,
    *,
    after: int | None,
    snapshot: bool,
    wait_past_interruption: bool = False,
    first: tuple[int, dict] | None = None,
    hold_first: bool = False,
    accepted: SendOutcome | None = None,
    keep_open_through: int = 0,
    read: tuple[int, dict] | None = None,
    caller: Caller | None = None,
) -> AsyncIterator:
    """The task's events as (seq, payload), after `after`: the log, then live.

    keep_open_through: as for events.follow.
    read: the snapshot (send_answer_at), read already.
    caller: whose credentials are checked again while the stream lasts (Recheck).

    snapshot: first the task as it is now (`after` is then its log position).
    first: the log entry at `after`, already in hand (a new task's Task).
    hold_first: `first`, or a snapshot of a task whose log holds only its Task (the agent
    has not spoken), waits for the agent's first event; a Message alone replaces it.
    """
    held = None
    if snapshot:
        # The spec wants the current Task first; its id is the log position it reflects.
        # (A retried send of a message exchange gets the agent's Message, the whole answer.)
        try:
            after, current = read or await db(send_answer_at, task_pk)
        except UNAVAILABLE_ERRORS as exc:
            if accepted is None:
                raise
            # A send's stream: the task as it was accepted, then the log from there.
            logger.warning("Reading task %s: the database is unavailable (%r)", task_pk, exc)
            after, current = accepted.task.event_seq, {"task": accepted.accepted}
        state = payload_state(current)
        ends = "message" in current or state in TERMINAL_STATES
        ends = ends or (state in INTERRUPTED_STATES and not wait_past_interruption)
        if hold_first and after == 1 and not ends:
            held = (after, current)
        else:
            yield after, current
        if ends:
            return
    if first is not None:
        if hold_first:
            held = first
        else:
            yield first
    recheck = Recheck(caller)
    async with aclosing(follow(task_pk, after, keep_open_through=keep_open_through)) as events:
        async for item in events:
            # Raises what the binding ends the stream with, once the caller may no longer call. An
            # agent no longer served ends the stream (a held first frame still goes: its task's id).
            if not await recheck.still_served():
                break
            if item is QUIET:
                continue
            if item is HEARTBEAT:
                yield item
                continue
            seq, payload = item
            if held is not None:
                if "message" not in payload:
                    yield held
                held = None
            yield item
    if held is not None:
        yield held


MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 50


@in_one_trip
def list_tasks(call: Call, request: pb.ListTasksRequest) -> dict:
    check_tenant(call, request)
    page_size = request.page_size if request.HasField("page_size") else DEFAULT_PAGE_SIZE
    if page_size < 1 or page_size > MAX_PAGE_SIZE:
        raise InvalidParamsError(message=f"pageSize must be between 1 and {MAX_PAGE_SIZE}")
    state = None
    if request.status != pb.TASK_STATE_UNSPECIFIED:
        state = PROTO_TO_STATE.get(request.status)
        if state is None:
            raise InvalidParamsError(message="status is not a task state")
    status_after = (
        request.status_timestamp_after.ToDatetime(tzinfo=UTC)
        if request.HasField("status_timestamp_after")
        else None
    )
    return task_list(
        call.caller,
        context_id=request.context_id,
        state=state,
        status_after=status_after,
        page_size=page_size,
        page_token=request.page_token,
        history_length=_history_length(request),
        include_artifacts=request.include_artifacts,
    )


async def get_extended_agent_card(call: Call, request: pb.GetExtendedAgentCardRequest) -> dict:
    check_tenant(call, request)
    agent = call.caller.agent
    if agent.is_public:
        raise UnsupportedOperationError(message="This agent declares no extended agent card")
    if call.caller.principal == "anonymous":
        raise UnsupportedOperationError(message="The extended agent card needs an authenticated caller")
    # A 1.0 method: the card exactly as the 1.0 schema has it, without the 0.3 fields.
    return await db(card_dict, agent, call.base_url, extended=True, version="1.0")


METHODS = {
    "SendMessage": (pb.SendMessageRequest, send_message, False),
    "SendStreamingMessage": (pb.SendMessageRequest, send_streaming_message, True),
    "GetTask": (pb.GetTaskRequest, get_task, False),
    "CancelTask": (pb.CancelTaskRequest, cancel_task, False),
    "SubscribeToTask": (pb.SubscribeToTaskRequest, subscribe_to_task, True),
    "ListTasks": (pb.ListTasksRequest, list_tasks, False),
    "GetExtendedAgentCard": (pb.GetExtendedAgentCardRequest, get_extended_agent_card, False),
}

# Push-config operations live in their own module.
from tasks_app.protocol.push_operations import PUSH_METHODS  # noqa: E402

METHODS.update(PUSH_METHODS)
