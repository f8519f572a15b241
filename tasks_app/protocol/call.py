"""What an operation is called with: the Call, and the marks that let a binding hand over a PendingCall.

Apart from operations.py so that every module of operations (push_operations.py)
can use them without importing operations.py back.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass

from agents.access import get_enabled_agent
from agents.models import Agent
from tasks_app.access import (
    Caller,
    FoundTask,
    get_agent_and_task,
    get_task_and_artifacts_for_caller,
    task_and_artifacts_for_caller,
)
from tasks_app.db import db


@dataclass
class Call:
    caller: Caller
    # From the SSE Last-Event-ID header: resume the task's log after this seq.
    last_event_id: int | None = None
    # Scheme, host and port for URLs in answers (the extended card).
    base_url: str = ""
    # From the Idempotency-Key header of a SendMessage: makes its retries safe.
    idempotency_key: str = ""

    def resolve(self) -> "Call":
        """Already resolved: itself (a PendingCall's resolve() looks its agent up)."""
        return self

    def resolve_with_task(self, task_id: str, *, history: int = 0) -> tuple["Call", FoundTask | None]:
        """Itself, and the caller's task with its artifacts (get_task_and_artifacts_for_caller) or None."""
        return self, get_task_and_artifacts_for_caller(self.caller, task_id)


class Pending(ABC):
    """What the bindings' PendingCalls share (http.py, grpc_binding.py): a Call resolved on a database thread.

    A PendingCall has `tenant_slug` and `agent_slug` and resolves the Call
    with `resolve_for(agent)`, which raises the binding's refusals (no agent
    first: agent None).
    """

    tenant_slug: str
    agent_slug: str

    @abstractmethod
    def resolve_for(self, agent: Agent | None) -> Call: ...

    def resolve(self) -> Call:
        """The Call. Runs on a database thread."""
        return self.resolve_for(get_enabled_agent(self.tenant_slug, self.agent_slug))

    def resolve_with_task(self, task_id: str, *, history: int = 0) -> tuple[Call, FoundTask | None]:
        """The Call, and the caller's task with its artifacts or None: GetTask's read with the agent's.

        One statement for both (access.get_agent_and_task), then the same
        checks in the same order as resolve() and get_task_and_artifacts_for_caller.
        `history`: how many of the task's newest messages to read with it (PostgreSQL).
        """
        found = get_agent_and_task(self.tenant_slug, self.agent_slug, task_id, history=history)
        if found is None:
            return self.resolve_for(None), None  # resolve_for raises the binding's "no agent"
        agent, read = found
        call = self.resolve_for(agent)
        return call, task_and_artifacts_for_caller(read, call.caller)


def takes_pending_call(operation):
    """Mark an operation that resolves its call in its first trip to a database thread.

    The JSON-RPC, REST and gRPC bindings then give it a PendingCall (http.py,
    grpc_binding.py) instead of looking the agent up and resolving the caller
    first: one hand-off to a database thread per request fewer (on GetTask at
    c=1, 0.4-0.5 ms of 5: bench/README.md). The operation calls its call's
    resolve() there, which for a Call (from a dialect) is the Call itself.
    """
    operation.takes_pending_call = True
    return operation


def in_one_trip(work):
    """The operation whose whole work is `work(call, request)`, run on a database thread."""

    @takes_pending_call
    async def operation(call, request) -> dict:
        return await db(_resolved_then, work, call, request)

    operation.__name__ = operation.__qualname__ = work.__name__
    return operation


def _resolved_then(work, call, request):
    return work(call.resolve(), request)
