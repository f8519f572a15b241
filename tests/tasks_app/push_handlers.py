"""Executors for the push tests, loaded through A2A_EXTRA_HANDLERS (see tests/live.py)."""

from a2a.helpers import new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Role, TaskState


class AskOnceExecutor(AgentExecutor):
    """Asks a question on a task's first turn (INPUT_REQUIRED); the answer completes it."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        asked = any(message.role == Role.ROLE_AGENT for message in task.history)
        if not asked:
            await updater.update_status(
                TaskState.TASK_STATE_INPUT_REQUIRED, new_text_message("Which colour?")
            )
            return
        await updater.add_artifact([new_text_part(text=f"Colour: {context.get_user_input()}")], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None
