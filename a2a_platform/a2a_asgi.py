"""The ASGI handler of the A2A bindings' routes: Django's, without a thread hop per middleware.

Under ASGI, Django runs each hook of a MiddlewareMixin middleware (Security,
Session, Common, Csrf, Authentication, Messages, XFrameOptions: seven of them,
with process_request, process_view and process_response) through
sync_to_async, and sends request_started / request_finished the same way: a
dozen hops per request onto a thread created for that request. Profiled under
load (bench/README.md), that was about a quarter of the web process's CPU per
A2A call.

The A2A views are coroutines that do their database work on the db() threads
(tasks_app/db.py), and those hooks only read and write headers, cookies and
lazy attributes (request.session and request.user are loaded later, on a db()
thread, when a session caller is resolved). So here they are called on the
event loop, in the order settings.MIDDLEWARE gives, with the same behaviour:
the same headers, host validation, slash redirects and request ids. The
request signals are sent inline too: their receivers (close_old_connections
and friends) find no database connection on the loop's thread.

That holds only while the views under these routes reach the database
through db() alone, never through sync_to_async: a thread-sensitive call
would open a connection on the request's own thread, which nothing here
closes (a connection lost to the pool per request). So only the JSON-RPC
and HTTP+JSON endpoints (/a2a/<tenant>/<agent>/ and .../rest/...) come here;
the agent cards, the catalog and every other path keep Django's own
ASGIHandler.
"""

import asyncio
import contextlib
import re

from asgiref.sync import markcoroutinefunction
from django.conf import settings
from django.core import signals
from django.core.exceptions import MiddlewareNotUsed, RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.urls import set_script_prefix
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string

# /a2a/<tenant>/<agent>/ and /a2a/<tenant>/<agent>/rest[/...], not the cards under .well-known/.
BINDING_ROUTE = re.compile(r"^/a2a/[^/]+/[^/]+(?:/?$|/rest(?:/|$))")
# Middleware with nothing to do on these routes. The messages framework carries the
# console's one-time notices; an A2A view adds none, so its response is the same
# without it, and building its cookie and session stores cost about 6% of a
# GetTask's CPU in the web process (py-spy, bench/README.md).
# The bindings answer a query Django will not read in their own wire formats.
NOT_ON_BINDING_ROUTES = {
    "django.contrib.messages.middleware.MessageMiddleware",
    "a2a_platform.middleware.QueryFieldsMiddleware",
}


def _on_loop(hook):
    """A middleware's synchronous hook as a coroutine function that calls it in place."""

    async def call(*args):
        return hook(*args)

    return call


class _HooksOnLoop:
    """A MiddlewareMixin run the way its __acall__ runs it, but with its hooks called in place."""

    def __init__(self, middleware: MiddlewareMixin):
        self.middleware = middleware
        markcoroutinefunction(self)

    async def __call__(self, request):
        middleware = self.middleware
        response = None
        if hasattr(middleware, "process_request"):
            response = middleware.process_request(request)
        response = response or await middleware.get_response(request)
        if hasattr(middleware, "process_response"):
            response = middleware.process_response(request, response)
        return response


class A2AHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response_async)
        for path in reversed(settings.MIDDLEWARE):
            if path in NOT_ON_BINDING_ROUTES:
                continue
            middleware_class = import_string(path)
            if not issubclass(middleware_class, MiddlewareMixin) and not getattr(
                middleware_class, "async_capable", False
            ):
                raise TypeError(f"{path} must be a MiddlewareMixin or async-capable for the A2A routes")
            try:
                middleware = middleware_class(handler)
            except MiddlewareNotUsed:
                continue
            if hasattr(middleware, "process_view"):
                self._view_middleware.insert(0, _on_loop(middleware.process_view))
            if hasattr(middleware, "process_template_response"):
                self._template_response_middleware.append(_on_loop(middleware.process_template_response))
            if hasattr(middleware, "process_exception"):
                # Django calls the exception hooks from a thread (they stay synchronous).
                self._exception_middleware.append(middleware.process_exception)
            if isinstance(middleware, MiddlewareMixin):
                middleware = _HooksOnLoop(middleware)
            handler = convert_exception_to_response(middleware)
        self._middleware_chain = handler

    async def handle(self, scope, receive, send):
        try:
            body = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, refusal = self.create_request(scope, body)
        if request is None:
            body.close()
            await self.send_response(refusal, send)
            refusal.close()
            return
        # As Django does: a client that goes away cancels the view (a stream ends).
        listening = asyncio.create_task(self.listen_for_disconnect(receive))
        answering = asyncio.create_task(self._answer(request, send))
        tasks = (listening, answering)
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RequestAborted):
                await task
        if answering.cancelled():
            signals.request_finished.send(sender=self.__class__)
        else:
            # Runs the response's closers and sends request_finished.
            answering.result().close()
        body.close()

    async def _answer(self, request, send):
        response = await self.run_get_response(request)
        with contextlib.suppress(asyncio.CancelledError):
            # The client went away while the answer was being sent.
            await self.send_response(response, send)
        return response


def http_router(a2a_app, default_app):
    """The HTTP application: the A2A bindings' routes on a2a_app, everything else on default_app."""

    async def route(scope, receive, send):
        app = a2a_app if BINDING_ROUTE.match(scope["path"]) else default_app
        await app(scope, receive, send)

    return route
