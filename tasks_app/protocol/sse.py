"""Server-Sent Events framing shared by the bindings."""

import json
import logging
from collections.abc import AsyncIterator, Callable

from django.http import StreamingHttpResponse

from tasks_app.events import HEARTBEAT

logger = logging.getLogger(__name__)


def last_event_id(request) -> int | None:
    """The Last-Event-ID a reconnecting client sent, if it is a log position."""
    value = request.headers.get("Last-Event-ID", "").strip()
    return int(value) if value.isdigit() else None


def sse_response(
    events: AsyncIterator,
    frame: Callable[[dict], dict],
    event_name: Callable[[dict], str | None] = None,
) -> StreamingHttpResponse:
    """Stream (seq, payload) items as SSE, with the seq as the event id.

    `frame` wraps each StreamResponse for the binding (JSON-RPC envelope or bare).
    A client going away only closes this stream; the task carries on.
    """

    async def body():
        async for item in events:
            if item is HEARTBEAT:
                yield ": keep-alive\n\n"
                continue
            seq, payload = item
            lines = [f"id: {seq}"] if seq is not None else []
            name = event_name(payload) if event_name else None
            if name:
                lines.append(f"event: {name}")
            lines.append("data: " + json.dumps(frame(payload), separators=(",", ":")))
            yield "\n".join(lines) + "\n\n"

    response = StreamingHttpResponse(body(), content_type="text/event-stream")
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    return response
