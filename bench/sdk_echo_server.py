"""The official a2a-sdk server with an echo executor: the baseline of bench/run.py.

Nothing of the platform is used here, only a2a-sdk 1.3: `DefaultRequestHandler`
with a task store, `create_agent_card_routes` + `create_jsonrpc_routes` in
Starlette, served by the same ASGI server as the platform (Daphne):

    BENCH_SDK_URL=http://127.0.0.1:9999 python -m daphne -b 127.0.0.1 -p 9999 bench.sdk_echo_server:app

BENCH_SDK_STORE picks the task store:

- `memory` (default): `InMemoryTaskStore`; nothing is written anywhere before the answer.
  A bench-only `POST /_bench/fill {"total": N}` copies the newest stored task until the
  store holds N tasks (ListTasks at scale); `POST /_bench/fill {"task_id": ID, "history": N}`
  prepends copies of that task's own history messages (new messageIds) until its history
  holds N (GetTask at history length). The SQL store is filled with SQL instead.
- `sql`: `DatabaseTaskStore` on the SQLAlchemy async URL in BENCH_SDK_DB_URL
  (`postgresql+asyncpg://...`), its table created on first use.
"""

import os
import uuid

from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

URL = os.environ.get("BENCH_SDK_URL", "http://127.0.0.1:9999")
STORE = os.environ.get("BENCH_SDK_STORE", "memory")
DB_URL = os.environ.get("BENCH_SDK_DB_URL", "")


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


def build_store(kind: str = STORE, db_url: str = DB_URL) -> TaskStore:
    if kind == "memory":
        return InMemoryTaskStore()
    if kind == "sql":
        from a2a.server.tasks import DatabaseTaskStore
        from sqlalchemy.ext.asyncio import create_async_engine

        if not db_url:
            raise RuntimeError("BENCH_SDK_STORE=sql needs BENCH_SDK_DB_URL")
        # SQLAlchemy's default pool (5 + 10 overflow), as a user of the SDK gets it.
        return DatabaseTaskStore(create_async_engine(db_url))
    raise RuntimeError(f"unknown BENCH_SDK_STORE {kind!r}")


def fill_history(store: InMemoryTaskStore, task_id: str, length: int) -> JSONResponse:
    """Bench only: prepend copies of the task's history messages, in turn, until it holds `length`."""
    impl = store._impl  # the dict behind the SDK's in-memory store
    with impl.lock:
        task = next((tasks[task_id] for tasks in impl.tasks.values() if task_id in tasks), None)
        if task is None or not task.history:
            return JSONResponse({"error": f"no task {task_id} with a history"}, status_code=404)
        own = list(task.history)
        copies = []
        for n in range(length - len(own)):
            copy = type(own[0])()
            copy.CopyFrom(own[n % len(own)])
            copy.message_id = str(uuid.uuid4())
            copies.append(copy)
        task.ClearField("history")
        task.history.extend(copies + own)
        return JSONResponse({"history": len(task.history)})


def fill_route(store: InMemoryTaskStore) -> Route:
    """Bench only: copy the newest task of each owner until the owner holds `total` tasks
    (or, given `task_id` and `history`, fill that task's history: fill_history)."""

    async def fill(request: Request) -> JSONResponse:
        body = await request.json()
        if "task_id" in body:
            return fill_history(store, str(body["task_id"]), int(body["history"]))
        total = int(body["total"])
        impl = store._impl  # the dict behind the SDK's in-memory store
        with impl.lock:
            counts = {}
            for owner, tasks in impl.tasks.items():
                template = max(tasks.values(), key=lambda t: t.status.timestamp.ToNanoseconds())
                base_ns = template.status.timestamp.ToNanoseconds()
                for n in range(len(tasks), total):
                    copy = type(template)()
                    copy.CopyFrom(template)
                    copy.id = str(uuid.uuid4())
                    copy.ClearField("history")
                    copy.status.timestamp.FromNanoseconds(base_ns - (n + 1) * 1_000_000)
                    tasks[copy.id] = copy
                counts[owner] = len(tasks)
        return JSONResponse({"tasks": counts})

    return Route("/_bench/fill", fill, methods=["POST"])


def build_app(url: str = URL) -> Starlette:
    card = build_card(url)
    store = build_store()
    handler = DefaultRequestHandler(agent_executor=BenchEchoExecutor(), task_store=store, agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/")
    if isinstance(store, InMemoryTaskStore):
        routes.append(fill_route(store))
    return Starlette(routes=routes)


app = build_app()
