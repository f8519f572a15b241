"""The agent's cancel(): for a task canceled while no turn ran, and for a stopped turn."""

import asyncio
import logging

from a2a.server.events import EventQueue

from agents.outbound import lookups_for
from agents.registry import HandlerNotAvailable, build_executor
from tasks_app import engine
from tasks_app.db import db
from tasks_app.models import (
    Task,
    TaskState,
)
from tasks_app.turns.setup import cancel_context

# One logger for the package, under the name it had as one module (log filters, alerts).
logger = logging.getLogger("tasks_app.turns")

# How long an agent's cancel() may take when no turn of its task is running.
AGENT_CANCEL_TIMEOUT = 30.0


class DiscardingEventQueue(EventQueue):
    """Given to executor.cancel(): the task is already CANCELED in the store."""

    async def enqueue_event(self, event) -> None:
        return None


def agent_cancel(*, task_id: str) -> None:
    """Give a task canceled while no turn ran its agent's cancel(), on a worker.

    The task is already CANCELED in the store; what the agent emits is discarded.
    """
    try:
        state, tenant_pk = Task.objects.values_list("state", "tenant_id").get(pk=task_id)
    except Task.DoesNotExist:
        logger.warning("Agent cancel of task %s: the task no longer exists", task_id)
        return
    if state != TaskState.CANCELED:
        logger.warning("Agent cancel of task %s skipped: the task is %s, not canceled", task_id, state)
        return
    # What cancel() looks up (an a2a_proxy's remote) counts as the tenant's; the engine loop's
    # task runs in a copy of this thread's context.
    with lookups_for(tenant_pk):
        engine.run(cancel_agent(task_id))


def _build_executor_of(task_pk):
    return build_executor(Task.objects.select_related("agent").get(pk=task_pk).agent)


async def _bounded(coro, timeout: float):
    """Await coro for at most `timeout` seconds (TimeoutError), on a task of its own.

    Not asyncio.timeout: that cancels the awaiting task itself, and an agent's
    coroutine that swallows the cancellation keeps its caller waiting for ever
    (and its worker thread with it). Here it is cancelled and abandoned on its
    loop, as a stopped turn's execute() is (on a turn's loop, which is closed
    after the turn: engine.retire_loop); its caller goes on.
    """
    running = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait({running}, timeout=timeout)
    except asyncio.CancelledError:
        running.cancel()
        raise
    if not done:
        running.cancel()
        engine.retire_loop()  # on a turn's loop: closed after the turn, the cancel() never goes on
        raise TimeoutError
    return running.result()


async def cancel_agent(task_pk, executor=None, *, timeout: float = AGENT_CANCEL_TIMEOUT) -> None:
    """Call executor.cancel() (a fresh executor of the task's agent if none is given), bounded.

    Never raises (but for a cancellation of the caller): a handler that is
    missing, fails or takes too long is logged, and the task stays CANCELED.
    """
    try:
        if executor is None:
            executor = await db(_build_executor_of, task_pk)
        request_context = await db(cancel_context, task_pk)
        await _bounded(executor.cancel(request_context, DiscardingEventQueue()), timeout)
    except HandlerNotAvailable as exc:
        logger.warning("Agent cancel of task %s: %s", task_pk, exc)
    except TimeoutError:
        logger.warning("Agent cancel of task %s did not finish within %s s", task_pk, timeout)
    except Exception:
        logger.warning("Agent cancel of task %s raised", task_pk, exc_info=True)
    else:
        logger.info("Agent cancel of task %s done (handler %s)", task_pk, type(executor).__name__)
