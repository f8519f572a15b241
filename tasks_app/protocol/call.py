"""What an operation is called with: the Call, and the marks that let a binding hand over a PendingCall.

Apart from operations.py so that every module of operations (push_operations.py)
can use them without importing operations.py back.
"""

from dataclasses import dataclass

from tasks_app.access import Caller
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
