"""Executors used only by the tests, loaded through A2A_EXTRA_HANDLERS."""

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part, TaskState


class CrashingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).update_status(TaskState.TASK_STATE_WORKING)
        raise ValueError("the model returned nonsense")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class CancelledInsideExecutor(AgentExecutor):
    """Reports progress and an artifact, then lets out a cancellation of its own.

    As an agent whose gather() had a child cancelled does: its execute() ends
    cancelled, though nobody cancelled the turn.
    """

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        import asyncio

        from a2a.types import a2a_pb2 as pb

        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.update_status(TaskState.TASK_STATE_WORKING)
        await updater.add_artifact([pb.Part(text="half done")], name="draft")
        raise asyncio.CancelledError()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class SilentExecutor(AgentExecutor):
    """Ends its turn without ever reaching a final state."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class StubbornExecutor(AgentExecutor):
    """Works forever and swallows every cancellation it gets: only force stops it."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        import asyncio

        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).update_status(TaskState.TASK_STATE_WORKING)
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class SleeperExecutor(AgentExecutor):
    """Sleeps for the seconds its config names, then completes (turn time limits).

    `blocking`: sleeps with time.sleep, holding its loop, as an agent that calls a
    synchronous client from its async execute() does.
    """

    def __init__(self, config: dict | None = None):
        self.seconds = float((config or {}).get("seconds", 5))
        self.blocking = bool((config or {}).get("blocking", False))

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        import asyncio
        import time

        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.update_status(TaskState.TASK_STATE_WORKING)
        if self.blocking:
            time.sleep(self.seconds)
        else:
            await asyncio.sleep(self.seconds)
        await updater.update_status(TaskState.TASK_STATE_COMPLETED)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class MessageReplyExecutor(AgentExecutor):
    """Answers with a Message and no task, as a TCK-style agent does for a quick exchange."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        from a2a.helpers import new_text_message
        from a2a.types import Role

        text = context.get_user_input()
        reply = new_text_message(f"You said: {text}", context_id=context.context_id, role=Role.ROLE_AGENT)
        await event_queue.enqueue_event(reply)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class GatedReplyExecutor(AgentExecutor):
    """Says it always answers with a task, waits until the file its message names exists,
    then answers with a Message alone anyway (the stream-order tests)."""

    answers_with_task = True

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        import asyncio
        from pathlib import Path

        from a2a.helpers import new_text_message
        from a2a.types import Role

        gate = Path(context.get_user_input())
        for _ in range(300):
            if gate.exists():
                break
            await asyncio.sleep(0.1)
        reply = new_text_message(
            f"Gate {gate.name} opened", context_id=context.context_id, role=Role.ROLE_AGENT
        )
        await event_queue.enqueue_event(reply)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class AskThenGateExecutor(AgentExecutor):
    """Asks for input; given a path for an answer, waits until that file exists, then completes."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        import asyncio
        from pathlib import Path

        from a2a.helpers import new_text_message

        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        answer = context.get_user_input()
        if not answer.startswith("/"):
            await updater.requires_input(new_text_message("Which gate?"))
            return
        await updater.start_work()
        for _ in range(300):
            if Path(answer).exists():
                break
            await asyncio.sleep(0.1)
        await updater.complete(new_text_message(f"Gate {Path(answer).name} opened"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def cancels_file(task_id: str):
    """Where AskThenLingerExecutor notes each cancel() its task's agent gets, one line each."""
    import tempfile
    from pathlib import Path

    return Path(tempfile.gettempdir()) / f"a2a-test-cancels-{task_id}"


class AskThenLingerExecutor(AgentExecutor):
    """Asks for input after a second, then runs on (closing a client, say) until the file its message names
    exists. The turn's watcher listens by then, and its next renewal (which stops the execution
    once the turn is closed) comes up to a heartbeat after the question."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        import asyncio
        from pathlib import Path

        from a2a.helpers import new_text_message

        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        gate = Path(context.get_user_input())
        await asyncio.sleep(1.0)
        await updater.requires_input(new_text_message("Which way?"))
        for _ in range(300):
            if gate.exists():
                break
            await asyncio.sleep(0.1)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        with cancels_file(context.task_id).open("a") as noted:
            noted.write("cancel()\n")


class UnstorableExecutor(AgentExecutor):
    """Emits what the store cannot hold, as a remote agent might pass on: the message text says what.

    "long-id": an artifact whose artifactId is 300 characters; "nul": an artifact whose text holds
    a NUL; "nul-metadata": a status update whose metadata does.
    """

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        what = context.get_user_input()
        if what == "nul-metadata":
            await updater.update_status(TaskState.TASK_STATE_WORKING, metadata={"note": "a\x00b"})
        else:
            text = "a\x00b" if what == "nul" else "fine"
            artifact_id = "x" * 300 if what == "long-id" else "out"
            await updater.add_artifact([Part(text=text)], artifact_id=artifact_id, name="out")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class OpenGatedReplyExecutor(GatedReplyExecutor):
    """GatedReplyExecutor without answers_with_task: its task is not shown before its Message,
    which makes the exchange a message exchange (the resent-stream tests)."""

    answers_with_task = False


class TickerExecutor(AgentExecutor):
    """Works outside the platform as it runs: a line in the file $A2A_TEST_TICKS every 0.1 s.

    Each line names the task, this execution (a new id each time execute() runs)
    and the wall-clock time. Every fifth tick it reports a WORKING status, so the
    turn writes to the database as it goes; it completes after `seconds` (config).
    The lease fence's fault test reads the lines: two executions of one turn must
    never tick at the same time.
    """

    def __init__(self, config: dict | None = None):
        self.seconds = float((config or {}).get("seconds", 5))
        # Swallows its cancellation (and a closed queue's refusal) and ticks on, reporting no more.
        self.swallow = bool((config or {}).get("swallow", False))

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        import asyncio
        import os
        import time
        import uuid

        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        execution = uuid.uuid4().hex
        ends = time.monotonic() + self.seconds
        tick = 0
        stopped = False
        while time.monotonic() < ends:
            with open(os.environ["A2A_TEST_TICKS"], "a") as ticks:
                ticks.write(f"{task.id} {execution} {time.time():.3f}\n")
            try:
                if tick % 5 == 0 and not stopped:
                    await updater.update_status(TaskState.TASK_STATE_WORKING)
                await asyncio.sleep(0.1)
            except (asyncio.CancelledError, Exception):
                if not self.swallow:
                    raise
                stopped = True
            tick += 1
        await updater.update_status(TaskState.TASK_STATE_COMPLETED)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None
