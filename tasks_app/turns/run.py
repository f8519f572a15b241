"""Running a turn: claimed and set up, the agent's execute() on the thread's loop, watched, closed."""

import asyncio
import logging
import math
import time

from django.conf import settings
from django.utils import timezone

from agents.outbound import lookups_charged_to
from agents.registry import HandlerNotAvailable
from tasks_app import engine, metrics
from tasks_app.db import UNAVAILABLE_ERRORS, db
from tasks_app.events import Feed, cancel_group_name
from tasks_app.turns.batches import TurnEventQueue
from tasks_app.turns.cancel import AGENT_CANCEL_TIMEOUT, cancel_agent
from tasks_app.turns.closing import turn_finish
from tasks_app.turns.keeper import keeper
from tasks_app.turns.lease import (
    CANCELED,
    FENCE_BEFORE,
    LAPSING,
    LOST,
    RENEW_AHEAD,
    TIMED_OUT,
    Turn,
    TurnAborted,
    TurnTimedOut,
    retrying,
    turn_renew,
)
from tasks_app.turns.setup import Claim, claim_and_prepare

# One logger for the package, under the name it had as one module (log filters, alerts).
logger = logging.getLogger("tasks_app.turns")

# How long a cancelled helper (the agent's execution, the watcher) gets to
# stop. Code can swallow a cancellation; the turn must finish regardless.
STOP_TIMEOUT = 5.0

# The least a stopped agent gets to let go of its cancellation.
STOP_AT_LEAST = 0.1

# Seconds a turn runs before it listens for its task's cancellation.
LISTEN_AFTER = 0.25

# Seconds the watcher waits on the channel layer beyond what it asked for.
FEED_GRACE = 1.0


class AgentCancelledItself(Exception):
    """The agent's execute() ended cancelled though the turn was not: it let a cancellation out."""


def turn_run(*, task_id: str, message_pk: int) -> None:
    """Run one turn on this worker thread: claim it and run it on the thread's own loop."""
    engine.run_here(turn_drive(task_id, message_pk))


async def turn_drive(task_pk, message_pk: int) -> None:
    started = time.perf_counter()
    error: BaseException | None = None
    executor = None
    turn = None
    queue = None
    cancel_given = False
    lost = False
    try:
        setup = await retrying(claim_and_prepare, task_pk, message_pk, Claim())
        if setup is None:
            return
        turn, executor, request_context, view = setup
        # What the agent looks up (an a2a_proxy's remote) counts as its tenant's, for this whole turn.
        lookups_charged_to(turn.tenant_pk)
        queue = TurnEventQueue(turn, view)
        if isinstance(executor, Exception):
            failed, executor = executor, None
            raise failed
        # An agent that blocks this thread's loop holds the watcher up too: the keeper renews meanwhile.
        keeper.hold(turn, until=time.monotonic() + turn.timeout + STOP_TIMEOUT)
        # At debug level: the turn's end says all at INFO, one line a turn.
        logger.debug(
            "Turn %s of task %s started (handler %s, attempt %s)",
            message_pk,
            task_pk,
            type(executor).__name__,
            turn.attempt,
        )
        execution = asyncio.ensure_future(executor.execute(request_context, queue))
        fence = Fence(turn, execution, queue)
        engine.after_each_call(fence.check)
        fence.check()  # the setup may have taken long (an outage): before the agent's first step
        watcher = asyncio.ensure_future(_watch(turn, fence))
        await asyncio.wait({execution, watcher}, return_when=asyncio.FIRST_COMPLETED)
        fence.disarm()
        if fence.fired:
            # One that swallows its cancellation is abandoned, and its loop closed, while
            # the lease is surely still this worker's: it takes no step during the re-run.
            await _stop(task_pk, execution, watcher, timeout=fence.stop_within())
            lost = True
            logger.warning(
                "Turn %s of task %s could not renew its lease: its agent was stopped before the lease "
                "lapses, and the turn runs again once the database is back",
                message_pk,
                task_pk,
            )
        elif execution.done():
            watcher.cancel()
            await asyncio.wait({watcher}, timeout=STOP_TIMEOUT)
            if execution.cancelled():
                # Nobody cancelled it (the watcher did not stop it): the agent let a cancellation of
                # its own out (a gather() with a child cancelled). An agent error like any other.
                error = AgentCancelledItself("the agent's execute() ended cancelled, from within")
            else:
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
            # A lost lease is another attempt's already: its agent gets no more than a fenced one.
            await _stop(
                task_pk,
                execution,
                timeout=min(STOP_TIMEOUT, _stop_margin()) if reason == LOST else STOP_TIMEOUT,
            )
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
                cancel_given = True
                # Give the executor its chance to clean up; its events are not stored. Unless the
                # agent's own last batch had closed the turn (it asked for input, and went on
                # running): the cancel found no turn running, and sent cancel() itself.
                if not queue.finished:
                    await cancel_agent(task_pk, executor, timeout=STOP_TIMEOUT)
    except HandlerNotAvailable as exc:
        error = exc
    except Exception as exc:
        logger.exception("Turn %s of task %s crashed", message_pk, task_pk)
        error = exc
    finally:
        if turn is not None:
            keeper.drop(turn)
        outcome = _outcome(error, lost, cancel_given)
        if turn is not None:
            metrics.turn_done(turn.handler, outcome, time.perf_counter() - started)
        if turn is not None and not lost and not (queue is not None and queue.finished):
            if isinstance(error, TurnAborted):
                error = None
            canceled = await retrying(
                turn_finish, task_pk, message_pk, error, attempt=turn.attempt, finished_at=timezone.now()
            )
            if canceled and not cancel_given and not queue.ended_task:
                # Canceled from outside while this turn was still running, but not
                # stopped by the watcher: the execution had already returned (the
                # task went input-required, say) or ran into the CANCELED state.
                # task_cancel saw this turn running and left the agent's cancel()
                # to it.
                await cancel_agent(task_pk, executor, timeout=AGENT_CANCEL_TIMEOUT)
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


async def _stop(
    task_pk, execution: asyncio.Future, *others: asyncio.Future, timeout: float = STOP_TIMEOUT
) -> None:
    """Cancel the agent's execution (and the others) and give them `timeout` seconds to end.

    An agent that swallows its cancellation is abandoned on the thread's loop,
    which the thread closes once the turn is over (engine.retire_loop).
    """
    for stopped in (execution, *others):
        stopped.cancel()
    await asyncio.wait({execution, *others}, timeout=timeout)
    if not execution.done():
        engine.retire_loop()
        logger.warning("The agent of task %s ignored its cancellation; abandoned", task_pk)


def _stop_margin() -> float:
    """Half the fence's share of the lease: a stopped agent is abandoned this long before the lapse."""
    return FENCE_BEFORE / 2 * settings.A2A_TURN_LEASE


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


class Fence:
    """Stops the agent before the turn's lease could lapse, if nothing renewed it in time.

    Once the lease has lapsed, the sweeper gives the turn to another worker; the
    lease checks in every write keep this one's events out of the task, but
    not what its agent does elsewhere (a call to another service). So an agent
    whose lease was not renewed by LeaseClock.fence_at() (the database is down,
    or out of this worker's reach) is stopped first: cancelled, its pending
    and in-flight batches dropped, the turn left to run again.

    check() runs on a timer of the loop's at that time, and after each of the
    turn's database calls (engine.after_each_call): a call that waited for an
    unreachable database holds the thread, the agent with it, for up to
    DB_POOL_TIMEOUT, and the agent must not take another step once the time
    has passed. The timer does not depend on the watcher, which may be waiting
    on the database or on Redis.
    """

    def __init__(self, turn: Turn, execution: asyncio.Future, queue: TurnEventQueue):
        self.turn = turn
        self.execution = execution
        self.queue = queue
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.fired = False

    def check(self) -> None:
        """Stop the agent if its time has come; else be back at that time."""
        if self.fired or self.execution.done():
            self.disarm()
            return
        at = self.turn.lease.fence_at()
        if time.monotonic() < at:
            if at == math.inf:
                self.disarm()  # the turn was closed: nothing left to fence
            elif self.timer is None or self.timer.when() != at:
                self.disarm()
                # The loop's clock is time.monotonic(), the lease clock's.
                self.timer = self.loop.call_at(at, self._on_time)
            return
        self.fired = True
        self.disarm()
        # The turn runs again elsewhere: its lease is left to lapse. A renewal the keeper
        # had already begun may still land, and only delays that run by a lease.
        keeper.drop(self.turn)
        self.queue.close()
        self.execution.cancel()

    def stop_within(self) -> float:
        """Seconds a fenced agent gets to stop: until half-way from the fence to the lapse.

        Fenced late (a database call held the thread past the fence), still
        STOP_AT_LEAST, for an agent that needs a step or two to let go.
        """
        left = self.turn.lease.until - time.monotonic() - _stop_margin()
        return max(STOP_AT_LEAST, min(STOP_TIMEOUT, left))

    def _on_time(self) -> None:
        self.timer = None
        self.check()

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


async def _bounded(awaitable, timeout: float):
    """The awaitable's result, or None once `timeout` has passed (it is cancelled)."""
    try:
        async with asyncio.timeout(timeout):
            return await awaitable
    except TimeoutError:
        return None


async def _watch(turn: Turn, fence: Fence) -> str:
    """Why the turn must stop: canceled, lease lost or lapsing, out of time. Renews the lease meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + turn.timeout
    # Most turns end within moments, before a cancel could matter: only a turn
    # that runs on listens for one. Once it listens it looks at the store at
    # once (a renewal reads the task's state), for a cancel sent before that.
    await asyncio.sleep(min(LISTEN_AFTER, turn.timeout))
    next_renewal = loop.time()
    feed = Feed(turn.task_pk, group=cancel_group_name(turn.task_pk))
    # A Redis that does not answer must not hold the renewals up: a cancel is
    # also found by the renewals, which read the task's state.
    await _bounded(feed.join(), FEED_GRACE)
    try:
        while True:
            if fence.fired:
                return LAPSING
            now = loop.time()
            if now >= deadline:
                return TIMED_OUT
            # Renewed ahead of the fence whatever the heartbeat: a turn that writes
            # nothing for a while is never stopped while the database answers.
            renew_at = min(next_renewal, turn.lease.fence_at() - RENEW_AHEAD * settings.A2A_TURN_LEASE)
            timeout = max(min(renew_at, deadline) - now, 0.01)
            message = await _bounded(feed.receive(timeout=timeout), timeout + FEED_GRACE)
            if message is not None and message.get("type") == "task.cancel":
                return CANCELED
            if loop.time() >= renew_at:
                try:
                    status = await db(turn_renew, turn)
                except UNAVAILABLE_ERRORS as exc:
                    # The fence stops the agent if the lease cannot be renewed in time.
                    logger.warning("Could not renew the lease of turn %s: %r", turn.message_pk, exc)
                    status = None
                if status is not None:
                    return status
                next_renewal = loop.time() + settings.A2A_TURN_HEARTBEAT
    finally:
        # Bounded: a fenced turn's agent is stopped only once the watcher is back.
        await _bounded(feed.close(), FEED_GRACE)
