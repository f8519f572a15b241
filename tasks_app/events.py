"""A task's event log and its live feed.

Writers append to the log inside their transaction (one INSERT for a whole
batch) and publish the batch on the task's channel-layer group after commit,
as one message. Readers join the group first, then read the log from where
they are, then take live events, so nothing published in between is lost. A
live event whose seq does not follow on sends the reader back to the log; the
log, not the channel layer, is the source of truth.

The channel layer may fail (Redis restarting): publishing never raises into
the writer, and a reader that loses its subscription reads the log every
half second until it can subscribe again, then fills the gap from the log.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from tasks_app import engine
from tasks_app.db import UNAVAILABLE_ERRORS, db
from tasks_app.models import INTERRUPTED_STATES, TERMINAL_STATES, Task, TaskEvent
from tasks_app.protocol.convert import PROTO_NAME_TO_STATE
from tenants import sql

logger = logging.getLogger(__name__)

SETTLED_STATES = TERMINAL_STATES | INTERRUPTED_STATES
HEARTBEAT = object()
# follow() found nothing new for a while (at most every QUIET_WAIT seconds); not sent to anyone.
QUIET = object()
# The longest a reader waits without looking at the log (it heals a notification lost between processes).
QUIET_WAIT = 5.0
# While the channel layer is unreachable, readers look at the log this often.
DEGRADED_POLL = 0.5
# Seconds a reader that could not join waits to give its channel back.
LEAVE_TIMEOUT = 1.0


def group_name(task_pk) -> str:
    return f"task.{str(task_pk).replace('-', '')}"


def cancel_group_name(task_pk) -> str:
    """The group a running turn listens on for its task's cancellation (and nothing else)."""
    return f"cancel.{str(task_pk).replace('-', '')}"


def tenant_group_name(tenant_pk) -> str:
    return f"tenant.{tenant_pk}"


def log_append(
    task: Task, entries: list[tuple[str, dict]], *, snapshot: dict | None = None, live: bool = True
) -> list[TaskEvent]:
    """Append events to the log of a task whose row the caller has locked (or is creating).

    Advances task.event_seq in memory; the caller writes it with its own
    INSERT or UPDATE of the task, in the same transaction. Publishes the batch
    after that transaction commits, with `snapshot` (the task as a reader
    reads it, for a batch that settles the task) when the writer has it.

    live=False (a new task's first entry) publishes only the tenant's note:
    every reader joins the task's group before it reads the log, so a reader
    of a task that did not exist a moment ago finds that entry in the log.
    """
    events = log_entries(task, entries)
    sql.insert(events)
    log_publish(task, events, snapshot=snapshot, live=live)
    return events


def log_entries(task: Task, entries: list[tuple[str, dict]]) -> list[TaskEvent]:
    """log_append's entries, not yet stored: the caller inserts them with its other rows
    (sql.insert_all), then calls log_publish, in the same transaction."""
    events = []
    for kind, payload in entries:
        task.event_seq += 1
        events.append(TaskEvent(task=task, seq=task.event_seq, kind=kind, payload=payload))
    return events


def log_publish(
    task: Task, events: list[TaskEvent], *, snapshot: dict | None = None, live: bool = True
) -> None:
    """Publish stored entries after the transaction that stores them commits (log_append's second half)."""
    batch = {"type": "task.events", "events": [[event.seq, event.payload] for event in events]}
    if snapshot is not None:
        batch["task"] = snapshot
    # Console feed: one small note per batch on the tenant's group, so lists and
    # queues can refresh without joining every task's group. No agent content.
    note = {"type": "tenant.task", "task": str(task.pk), "state": str(task.state), "seq": task.event_seq}
    messages = [(tenant_group_name(task.tenant_id), note)]
    if live:
        messages.insert(0, (group_name(task.pk), batch))
    transaction.on_commit(lambda: publish_soon(messages), robust=True)


async def publish(messages: list[tuple[str, dict]]) -> None:
    """Send (group, message) pairs on the channel layer; a failure is logged, never raised."""
    layer = get_channel_layer()
    for group, message in messages:
        try:
            await layer.group_send(group, message)
        except Exception as exc:
            # Readers fall back to the log; nobody misses an event for this.
            logger.warning("Could not publish on %s: %r", group, exc)


def publish_soon(messages: list[tuple[str, dict]]) -> None:
    """From synchronous code: publish without waiting.

    On the loop of the worker thread that runs this turn, if there is one
    (engine.run_here publishes before the thread takes its next job); else
    on the process's engine loop.
    """
    coro = publish(messages)
    if not engine.fire_here(coro):
        engine.fire(coro, "publish")


def publish_tenant(tenant_pk, message: dict) -> None:
    """From synchronous code: a note on a tenant's group (the console feed), without waiting."""
    publish_soon([(tenant_group_name(tenant_pk), message)])


def payload_state(payload: dict):
    """The task state an event announces, or None."""
    if "statusUpdate" in payload:
        return PROTO_NAME_TO_STATE.get(payload["statusUpdate"]["status"]["state"])
    if "task" in payload:
        return PROTO_NAME_TO_STATE.get(payload["task"]["status"]["state"])
    return None


def closes_stream(payload: dict) -> bool:
    return "message" in payload or payload_state(payload) in SETTLED_STATES


class Subscription:
    """Membership of one channel-layer group, joined before the log is read."""

    def __init__(self, task_pk, group: str | None = None):
        self.task_pk = task_pk
        self.group = group or group_name(task_pk)
        self.layer = get_channel_layer()
        self.channel = None

    async def __aenter__(self):
        self.channel = await self.layer.member_channel()
        try:
            await self.layer.group_add(self.group, self.channel)
        except BaseException:
            # channels_redis lists the channel in the group before it subscribes in Redis: a
            # failed join left it there, and the group, never empty again, was never left.
            # Bounded: a join that was itself bounded (a turn's watcher) must not hang here.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(LEAVE_TIMEOUT):
                    await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info):
        try:
            await self.layer.group_discard(self.group, self.channel)
        finally:
            await self.layer.release_channel(self.channel)

    async def receive(self, timeout: float) -> dict | None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a
        # cancellation that comes as the message arrives, and a watcher that
        # lost its cancellation kept its turn from ever ending.
        try:
            async with asyncio.timeout(timeout):
                return await self.layer.receive(self.channel)
        except TimeoutError:
            return None


class Feed:
    """A Subscription that outlives channel-layer failures.

    receive() returns a message, or None when the reader should look at the
    log: after a quiet spell, while the layer is unreachable, and once right
    after it could join the group again (to fill what it missed meanwhile).
    A quiet spell also renews the group membership, which a restarted Redis
    has forgotten.
    """

    def __init__(self, task_pk, group: str | None = None):
        self.subscription = Subscription(task_pk, group)
        self.joined = False

    async def join(self) -> bool:
        try:
            if self.joined:
                # The same channel again: refreshes the membership, adds none.
                await self.subscription.layer.group_add(self.subscription.group, self.subscription.channel)
            else:
                await self.subscription.__aenter__()
        except Exception as exc:
            logger.warning("Could not join %s: %r", self.subscription.group, exc)
            await self._leave()
        else:
            self.joined = True
        return self.joined

    async def _leave(self) -> None:
        """Give the channel back (the next join takes a new one), as far as the layer answers."""
        if self.joined:
            self.joined = False
            with contextlib.suppress(Exception):
                await self.subscription.__aexit__(None, None, None)

    async def receive(self, timeout: float) -> dict | None:
        if not self.joined:
            await asyncio.sleep(min(timeout, DEGRADED_POLL))
            await self.join()
            return None
        try:
            message = await self.subscription.receive(timeout)
        except Exception as exc:
            logger.warning("Lost the subscription to %s: %r", self.subscription.group, exc)
            await self._leave()
            return None
        if message is None:
            await self.join()  # refreshes a membership a restarted Redis has lost
        return message

    async def close(self) -> None:
        await self._leave()


def live_events(message: dict | None) -> list[tuple[int, dict]]:
    """The (seq, payload) pairs a task-group message carries."""
    if message is None or message.get("type") != "task.events":
        return []
    return [(seq, payload) for seq, payload in message["events"]]


async def follow(
    task_pk, after_seq: int, *, heartbeat: float | None = None, keep_open_through: int = 0
) -> AsyncIterator[tuple[int, dict] | object]:
    """Yield (seq, payload) for every event after after_seq, stored then live.

    Stops after an event that closes a stream (not one at or before
    `keep_open_through`: a follow-up's stream replays its task's earlier turns,
    which ended waiting for it), and when the log has nothing
    after the reader's position and the task is over (a reader that resumed
    after the final event, or a task that is gone). A task waiting for input
    keeps its reader on. Yields HEARTBEAT when nothing happened for
    `heartbeat` seconds, and QUIET at each other quiet wait's end (for the
    reader's own checks).
    """
    heartbeat = heartbeat or settings.A2A_SSE_HEARTBEAT
    loop = asyncio.get_running_loop()
    last = after_seq
    quiet_since = loop.time()
    feed = Feed(task_pk)
    await feed.join()
    try:
        from_log = True
        while True:
            if from_log:
                try:
                    state, events = await db(_state_and_events_after, task_pk, last)
                except UNAVAILABLE_ERRORS as exc:
                    # The database restarts: keep the stream (and its heartbeats) on, read again soon.
                    logger.warning("Stream of task %s: the database is unavailable (%r)", task_pk, exc)
                    await asyncio.sleep(DEGRADED_POLL)
                    if loop.time() - quiet_since >= heartbeat:
                        quiet_since = loop.time()
                        yield HEARTBEAT
                    continue
                for seq, payload in events:
                    last, quiet_since = seq, loop.time()
                    yield seq, payload
                    if seq > keep_open_through and closes_stream(payload):
                        return
                if not events and (state is None or state in TERMINAL_STATES):
                    return
                from_log = False
            message = await feed.receive(timeout=min(heartbeat, QUIET_WAIT))
            if message is None:
                from_log = True
                if loop.time() - quiet_since >= heartbeat:
                    quiet_since = loop.time()
                    yield HEARTBEAT
                else:
                    yield QUIET
                continue
            for seq, payload in live_events(message):
                if seq <= last:
                    continue
                if seq != last + 1:
                    from_log = True
                    break
                last, quiet_since = seq, loop.time()
                yield last, payload
                if last > keep_open_through and closes_stream(payload):
                    return
    finally:
        await feed.close()


async def wait_until_settled(
    task_pk, *, timeout: float | None = None, feed: "Feed | None" = None, after_seq: int = 0
) -> dict | None:
    """Wait until the task is terminal or interrupted, or the timeout passes.

    Returns the answer as its writer published it when the news came live:
    {"message": ...} for a message exchange, else {"task": ...} (as
    task_snapshot() reads it with historyLength unset); None otherwise.

    `feed`: the task's group, joined before the task was stored (the caller
    closes it); nothing can have happened before it, so the store is read
    only after a quiet spell.

    `after_seq`: the log's last entry before the caller's message. An earlier
    turn's final batch, published late, is not this message's answer.
    """
    timeout = timeout if timeout is not None else settings.A2A_BLOCKING_TIMEOUT
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    own_feed = feed is None
    if own_feed:
        feed = Feed(task_pk)
        await feed.join()
    try:
        check_store = own_feed
        while True:
            if check_store:
                state = await db(task_state, task_pk)
                if state is None or state in SETTLED_STATES:
                    return None
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            message = await feed.receive(timeout=min(remaining, QUIET_WAIT))
            # Only a quiet spell (or a lost subscription) sends us back to the database.
            check_store = message is None
            events = [(seq, payload) for seq, payload in live_events(message) if seq > after_seq]
            if any(closes_stream(payload) for _, payload in events):
                reply = next((payload for _, payload in events if "message" in payload), None)
                if reply is not None:
                    return reply
                return {"task": message["task"]} if message.get("task") is not None else None
    finally:
        if own_feed:
            await feed.close()


def task_state(task_pk) -> str | None:
    """The task's stored state (None: no such task)."""
    return Task.objects.filter(pk=task_pk).values_list("state", flat=True).first()


_EVENT_FIELDS = ("id", "seq", "payload")


def _state_and_events_after(task_pk, seq: int) -> tuple[str | None, list[tuple[int, dict]]]:
    """The task's state and its events after seq (state None: no such task).

    One statement, so one snapshot: an event is stored in the transaction that
    sets the state it announces, so a terminal state read here comes with its
    event, in this list or an earlier one. Hand-written (tenants/sql.py):
    every stream and every blocking wait that reads the log starts here.
    """
    rows = sql.fetch_all(
        f"SELECT t.state, {sql.columns(TaskEvent, 'e', _EVENT_FIELDS)} FROM {sql.table(Task)} t "
        f"LEFT JOIN {sql.table(TaskEvent)} e ON e.task_id = t.id AND e.seq > %s "
        "WHERE t.id = %s ORDER BY e.seq",
        [seq, sql.prep(Task, "id", task_pk)],
    )
    if not rows:
        return None, []
    events = (sql.hydrate(TaskEvent, row, 1, _EVENT_FIELDS) for row in rows)
    return rows[0][0], [(event.seq, event.payload) for event in events if event is not None]
