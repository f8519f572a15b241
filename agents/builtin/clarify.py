"""Asks one clarifying question before it answers: the input-required round trip.

First turn: the task goes INPUT_REQUIRED with the question as its status
message. The next message on the same task is the answer; the task completes
with an artifact holding both the original request and that answer.
"""

from a2a.helpers import new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import TaskState

from agents.builtin.history import earlier_user_messages, message_text
from agents.registry import NoConfig

QUESTION = "Before I start: who is this for, and how detailed should the answer be?"


class ClarifyAgentExecutor(AgentExecutor):
    title = "Clarify (input-required)"
    description = (
        "Asks a clarifying question (input-required), then answers with your request and your reply."
    )
    config_model = NoConfig
    answers_with_task = True
    default_skills = [
        {
            "id": "clarify",
            "name": "Clarify",
            "description": (
                "Asks one question (input-required) and completes once it is answered, "
                "with an artifact holding the request and the answer."
            ),
            "tags": ["input-required", "multi-turn"],
            "examples": ["Write a summary of our quarterly results"],
        }
    ]

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        earlier = earlier_user_messages(context)
        if not earlier:
            await updater.requires_input(new_text_message(QUESTION))
            return
        # The first user message is the request; whatever came since answers the question.
        request = message_text(earlier[0])
        answer = message_text(context.message)
        await updater.start_work(new_text_message("Thanks, working on it..."))
        await updater.add_artifact(
            [new_text_part(f"Request: {request}\nAnswer: {answer}", media_type="text/plain")],
            name="clarified-request",
        )
        await updater.complete(new_text_message("Done: your request and your answer are in the artifact."))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        await TaskUpdater(event_queue, task.id, task.context_id).update_status(TaskState.TASK_STATE_CANCELED)
