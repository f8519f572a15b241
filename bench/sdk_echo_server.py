"""Baseline for `bench/run.py`: the official a2a-sdk server hosting an echo agent.

The agent does what the platform's built-in `echo` handler does (WORKING status,
one text artifact, COMPLETED), on the SDK's own stack: `DefaultRequestHandler`,
`InMemoryTaskStore`, and the SDK's Starlette routes for the agent card and
JSON-RPC. Serve it with the same ASGI server as the platform:

    BENCH_SDK_URL=http://127.0.0.1:9999 python -m daphne -b 127.0.0.1 -p 9999 bench.sdk_echo_server:app

Tasks live in memory only: nothing is written anywhere before the answer.
"""

import os

from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette

URL = os.environ.get("BENCH_SDK_URL", "http://127.0.0.1:9999")


class BenchEchoExecutor(AgentExecutor):
    """Same events as `agents.builtin.echo.EchoAgentExecutor`."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            # The SDK leaves creating the task to the executor on a first message.
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
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


def build_card(url: str) -> AgentCard:
    return AgentCard(
        name="Hello World Agent",
        description="Answers every message with the text it received.",
        version="1.0.0",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        capabilities=AgentCapabilities(streaming=True),
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")],
        skills=[
            AgentSkill(
                id="echo_bot",
                name="Echo Bot",
                description="Echoes the request back as an artifact.",
                tags=["echo", "hello world"],
                examples=["hi", "hello world"],
            )
        ],
    )


def build_app(url: str = URL) -> Starlette:
    card = build_card(url)
    handler = DefaultRequestHandler(
        agent_executor=BenchEchoExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    return Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))


app = build_app()
