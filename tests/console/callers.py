"""An A2A caller using the official a2a-sdk client in a thread of its own.

Browser tests drive Playwright's sync API on the main thread; the caller runs
its own event loop here and records what its streams saw on the object.
"""

import asyncio
import threading
import time
from dataclasses import dataclass, field

from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, SubscribeToTaskRequest, TaskState


def event_state(event):
    kind = event.WhichOneof("payload")
    if kind == "task":
        return event.task.status.state
    if kind == "status_update":
        return event.status_update.status.state
    return None


@dataclass
class StreamingCaller:
    """Sends one message with streaming; when the task is interrupted, subscribes and follows it."""

    url: str
    text: str
    task_id: str | None = None
    interrupted_state: int | None = None
    # time.monotonic() when the stream announced the interruption.
    interrupted_at: float | None = None
    subscribed: threading.Event = field(default_factory=threading.Event)
    interrupted: threading.Event = field(default_factory=threading.Event)
    final_state: int | None = None
    artifact_texts: list[str] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> "StreamingCaller":
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._call())
        except BaseException as exc:  # reported to the test, which fails on it
            self.error = exc
        finally:
            self.interrupted.set()
            self.subscribed.set()
            self.done.set()

    async def _call(self) -> None:
        client = await create_client(self.url, client_config=ClientConfig(streaming=True))
        try:
            request = SendMessageRequest(message=new_text_message(self.text, role=Role.ROLE_USER))
            async for event in client.send_message(request):
                if event.WhichOneof("payload") == "task":
                    self.task_id = event.task.id
                state = event_state(event)
                if state in (TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED):
                    self.interrupted_at = time.monotonic()
                    self.interrupted_state = state
            self.interrupted.set()
            # The send stream ends at the interruption; a subscription follows the task past it.
            async for event in client.subscribe(SubscribeToTaskRequest(id=self.task_id)):
                self.subscribed.set()
                if event.WhichOneof("payload") == "artifact_update":
                    self.artifact_texts += [p.text for p in event.artifact_update.artifact.parts if p.text]
                state = event_state(event)
                if state is not None:
                    self.final_state = state
        finally:
            await client.close()

    def wait(self, what: threading.Event, timeout: float = 30.0) -> None:
        assert what.wait(timeout), "the A2A caller did not get there in time"
        if self.error is not None:
            raise AssertionError(f"the A2A caller failed: {self.error!r}") from self.error
