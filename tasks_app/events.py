"""A task's event log and its live feed.

Writers append to the log inside their transaction and publish on the task's
channel-layer group after commit. Readers join the group first, then read the
log from where they are, then take live events, so nothing published in
between is lost. A live event whose seq does not follow on sends the reader
back to the log; the log, not the channel layer, is the source of truth.
"""

import asyncio
from collections.abc import AsyncIterator

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from tasks_app.models import INTERRUPTED_STATES, TERMINAL_STATES, Task, TaskEvent
from tasks_app.protocol.convert import PROTO_NAME_TO_STATE
from tasks_app.push import push_deliveries_queue

SETTLED_STATES = TERMINAL_STATES | INTERRUPTED_STATES
HEARTBEAT = object()


def group_name(task_pk) -> str:
    return f"task.{str(task_pk).replace('-', '')}"


def event_append(task: Task, kind: str, payload: dict) -> TaskEvent:
    """Append one event to the log of a task whose row the caller has locked.

    Publishes after the surrounding transaction commits.
    """
    task.event_seq += 1
    Task.objects.filter(pk=task.pk).update(event_seq=task.event_seq)
    event = TaskEvent.objects.create(task=task, seq=task.event_seq, kind=kind, payload=payload)
    # Same transaction: an event is queued for the task's webhooks exactly when it is logged.
    push_deliveries_queue(task, event)
    message = {"type": "task.event", "seq": event.seq, "payload": payload}
    transaction.on_commit(lambda: publish(task.pk, message))
    # Console feed: a small note per event on the tenant's group, so lists and
    # queues can refresh without joining every task's group. No agent content.
    note = {"type": "tenant.task", "task": str(task.pk), "state": str(task.state), "seq": event.seq}
    transaction.on_commit(lambda: publish_tenant(task.tenant_id, note))
    return event


def publish(task_pk, message: dict) -> None:
    async_to_sync(get_channel_layer().group_send)(group_name(task_pk), message)


def tenant_group_name(tenant_pk) -> str:
    return f"tenant.{tenant_pk}"


def publish_tenant(tenant_pk, message: dict) -> None:
    async_to_sync(get_channel_layer().group_send)(tenant_group_name(tenant_pk), message)


def payload_state(payload: dict):
    """The task state an event announces, or None."""
    if "statusUpdate" in payload:
        return PROTO_NAME_TO_STATE.get(payload["statusUpdate"]["status"]["state"])
    if "task" in payload:
        return PROTO_NAME_TO_STATE.get(payload["task"]["status"]["state"])
    return None


def closes_stream(payload: dict) -> bool:
    return "message" in payload or payload_state(payload) in SETTLED_STATES


def events_after(task_pk, seq: int) -> list[tuple[int, dict]]:
    return list(
        TaskEvent.objects.filter(task_id=task_pk, seq__gt=seq).order_by("seq").values_list("seq", "payload")
    )


class Subscription:
    """Membership of one task's group, joined before the log is read."""

    def __init__(self, task_pk):
        self.task_pk = task_pk
        self.layer = get_channel_layer()
        self.channel = None

    async def __aenter__(self):
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(group_name(self.task_pk), self.channel)
        return self

    async def __aexit__(self, *exc_info):
        await self.layer.group_discard(group_name(self.task_pk), self.channel)

    async def receive(self, timeout: float) -> dict | None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a
        # cancellation that comes as the message arrives, and a watcher that
        # lost its cancellation kept its turn from ever ending.
        try:
            async with asyncio.timeout(timeout):
                return await self.layer.receive(self.channel)
        except TimeoutError:
            return None


async def follow(
    task_pk, after_seq: int, *, heartbeat: float | None = None
) -> AsyncIterator[tuple[int, dict] | object]:
    """Yield (seq, payload) for every event after after_seq, stored then live.

    Stops after an event that closes a stream, and when the log has nothing
    after the reader's position and the task is over (a reader that resumed
    after the final event, or a task that is gone). A task waiting for input
    keeps its reader on. Yields HEARTBEAT when nothing happened for
    `heartbeat` seconds.
    """
    heartbeat = heartbeat or settings.A2A_SSE_HEARTBEAT
    loop = asyncio.get_running_loop()
    last = after_seq
    quiet_since = loop.time()
    async with Subscription(task_pk) as subscription:
        from_log = True
        while True:
            if from_log:
                state, events = await sync_to_async(_state_and_events_after)(task_pk, last)
                for seq, payload in events:
                    last, quiet_since = seq, loop.time()
                    yield seq, payload
                    if closes_stream(payload):
                        return
                if not events and (state is None or state in TERMINAL_STATES):
                    return
                from_log = False
            # Never wait longer than a few seconds without looking at the log:
            # it heals a notification lost between processes.
            message = await subscription.receive(timeout=min(heartbeat, 5.0))
            if message is None:
                from_log = True
                if loop.time() - quiet_since >= heartbeat:
                    quiet_since = loop.time()
                    yield HEARTBEAT
                continue
            if message.get("type") != "task.event" or message["seq"] <= last:
                continue
            if message["seq"] != last + 1:
                from_log = True
                continue
            last, quiet_since = message["seq"], loop.time()
            yield last, message["payload"]
            if closes_stream(message["payload"]):
                return


async def wait_until_settled(task_pk, *, timeout: float | None = None) -> None:
    """Wait until the task is terminal or interrupted, or the timeout passes."""
    timeout = timeout if timeout is not None else settings.A2A_BLOCKING_TIMEOUT
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with Subscription(task_pk) as subscription:
        check_store = True
        while True:
            if check_store:
                state = await sync_to_async(_current_state)(task_pk)
                if state is None or state in SETTLED_STATES:
                    return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            message = await subscription.receive(timeout=min(remaining, 5.0))
            # Only a quiet spell sends us back to the database.
            check_store = message is None
            if message and message.get("type") == "task.event" and closes_stream(message["payload"]):
                return


def _current_state(task_pk):
    return Task.objects.filter(pk=task_pk).values_list("state", flat=True).first()


def _state_and_events_after(task_pk, seq: int) -> tuple[str | None, list[tuple[int, dict]]]:
    """The task's state, then its events after seq.

    State first: an event is stored in the transaction that sets the state it
    announces, so a terminal state read here means its event is in the list
    that follows, or was already read.
    """
    return _current_state(task_pk), events_after(task_pk, seq)
