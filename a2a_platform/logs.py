"""Log lines: plain text by default, one JSON object a line with LOG_FORMAT=json.

Every module logs through the standard library's logging; structlog's
ProcessorFormatter renders the records (settings.LOGGING) and adds what is
bound in the context: the request id on every line of a request (bound here,
by RequestIdMiddleware) and the task id on every line of a turn or push
delivery (bound by tasks_app). Context variables follow the work onto the
database threads (tasks_app/db.py), the engine loop and a turn's database
calls (tasks_app/engine.py), so a line written there carries the ids too. A
call may add fields of its own with `extra=`.
"""

import logging
import re
import time
import uuid

import structlog
from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from structlog.contextvars import bind_contextvars, clear_contextvars

access_logger = logging.getLogger("a2a_platform.access")

REQUEST_ID_HEADER = "X-Request-ID"
# An incoming id is kept if it is a plain token of sane length; anything else is replaced.
_SENT_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
# Probes answer every few seconds: their lines are debug, not info.
_PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


def formatter(log_format: str = "text") -> structlog.stdlib.ProcessorFormatter:
    """The logging.Formatter of settings.LOGGING: 'text' for people, 'json' for collectors."""
    if log_format == "json":
        renderers = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        renderers = [
            structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
        ]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderers],
    )


def request_id_of(request) -> str:
    """The caller's X-Request-ID if it sent a usable one, else a new id."""
    sent = request.headers.get(REQUEST_ID_HEADER, "")
    return sent if _SENT_ID.fullmatch(sent) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Binds a request id for every log line of the request, returns it as X-Request-ID, logs the answer.

    First in MIDDLEWARE, so whatever runs after it logs with the id. Each
    request runs in a context of its own (an asyncio task under ASGI), and the
    id is cleared first, so no id outlives its request.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        started = self._start(request)
        return self._finish(request, self.get_response(request), started)

    async def __acall__(self, request):
        started = self._start(request)
        return self._finish(request, await self.get_response(request), started)

    def _start(self, request) -> float:
        clear_contextvars()
        request.request_id = request_id_of(request)
        bind_contextvars(request_id=request.request_id)
        return time.perf_counter()

    def _finish(self, request, response, started: float):
        response[REQUEST_ID_HEADER] = request.request_id
        if settings.A2A_ACCESS_LOG:
            # For a stream, the time to its first byte; the stream goes on after this line.
            level = logging.DEBUG if request.path in _PROBES else logging.INFO
            access_logger.log(
                level,
                "request answered",
                extra={
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )
        return response
