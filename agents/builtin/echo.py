"""The official hello-world behaviour: a completed task whose artifact holds the user's text."""

from a2a.helpers import new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import TaskState

from agents.registry import NoConfig


class EchoAgentExecutor(AgentExecutor):
    title = "Echo"
    description = "Answers every message with the text it received: the hello world of A2A, to try first."
    config_model = NoConfig
    answers_with_task = True
    default_skills = [
        {
            "id": "echo_bot",
            "name": "Echo Bot",
            "description": "Echoes the request back as an artifact.",
            "tags": ["echo", "hello world"],
            "examples": ["hi", "hello world"],
        }
    ]

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.update_status(TaskState.TASK_STATE_WORKING, new_text_message("Processing request..."))
        text = context.get_user_input()
        await updater.add_artifact(
            [
                new_text_part(
                    text=f"Hello, World! I have received your request ({text})",
                    media_type="text/plain",
                )
            ],
            name="echo",
        )
        await updater.update_status(TaskState.TASK_STATE_COMPLETED, new_text_message("Request is completed!"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).cancel()
