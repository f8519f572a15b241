"""Executors used only by the tests, loaded through A2A_EXTRA_HANDLERS."""

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import TaskState


class CrashingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).update_status(TaskState.TASK_STATE_WORKING)
        raise ValueError("the model returned nonsense")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


class SilentExecutor(AgentExecutor):
    """Ends its turn without ever reaching a final state."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None
