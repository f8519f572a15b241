"""Server-Sent Events framing shared by the bindings."""

import logging
import re
from collections.abc import AsyncIterator, Callable

from a2a.utils.errors import InvalidParamsError
from django.http import StreamingHttpResponse

from tasks_app.events import HEARTBEAT
from tasks_app.metrics import ACTIVE_STREAMS
from tasks_app.protocol.auth import CallerRefused
from tasks_app.protocol.wire_json import json_bytes

logger = logging.getLogger(__name__)


# Event ids are log positions, so decimal digits only (not str.isdigit(), which
# takes '²' and other digits int() refuses). A hundred digits is past any log
# and keeps int() far from its length limit.
EVENT_ID = re.compile(r"[0-9]{1,100}")


def last_event_id(request) -> int | None:
    """The log position a reconnecting client sent as Last-Event-ID, or None without one.

    Anything else in the header is the client's error: InvalidParams, never a
    silent fresh start (the client would get events it already had).
    """
    value = request.headers.get("Last-Event-ID", "").strip()
    if not value:
        return None
    if not EVENT_ID.fullmatch(value):
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise InvalidParamsError(
            message=f"Last-Event-ID must be an event id this server sent (a whole number >= 0), not {shown!r}"
        )
    return int(value)


def sse_response(
    events: AsyncIterator,
    frame: Callable[[dict], dict],
    event_name: Callable[[dict], str | None] = None,
    refused: Callable[[CallerRefused], dict] | None = None,
) -> StreamingHttpResponse:
    """Stream (seq, payload) items as SSE, with the seq as the event id.

    `frame` wraps each StreamResponse for the binding (JSON-RPC envelope or bare).
    `refused` frames the error that ends a stream whose caller's credentials went
    away meanwhile (operations.Recheck). A client going away only closes this
    stream; the task carries on.
    """

    async def body():
        # Counted from the first byte to the end, whether the task ended or the client went away.
        with ACTIVE_STREAMS.track_inprogress():
            try:
                async for item in events:
                    if item is HEARTBEAT:
                        yield b": keep-alive\n\n"
                        continue
                    seq, payload = item
                    head = f"id: {seq}\n" if seq is not None else ""
                    name = event_name(payload) if event_name else None
                    if name:
                        head += f"event: {name}\n"
                    # Bytes as orjson writes them: no decoding to text for the response to encode again.
                    yield head.encode() + b"data: " + json_bytes(frame(payload)) + b"\n\n"
            except CallerRefused as exc:
                if refused is None:
                    raise
                # No id: nothing to resume from, and the client must authenticate again.
                yield b"data: " + json_bytes(refused(exc)) + b"\n\n"

    response = StreamingHttpResponse(body(), content_type="text/event-stream")
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    return response
