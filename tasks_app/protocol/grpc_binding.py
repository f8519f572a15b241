"""The gRPC binding: lf.a2a.v1.A2AService on a port of its own, for every agent of every tenant.

The request's `tenant` field addresses the agent as "<tenant>/<agent>" (the card's
GRPC interface carries exactly that, agents.cards.grpc_tenant); the bearer token
travels in the `authorization` metadata and the A2A version in `a2a-version`.
Each rpc runs the preamble the HTTP bindings run (agent, version, caller, quotas:
PendingCall, in the operation's first trip to a database thread) and the same
operation (operations.py), and turns its ProtoJSON answer back into the
proto. Errors are a google.rpc.Status with an ErrorInfo detail in the
`grpc-status-details-bin` trailer, with the status codes the spec maps them to.
"""

import logging
import re
import time
from dataclasses import dataclass

import grpc
from a2a.types import a2a_pb2 as pb
from a2a.types import a2a_pb2_grpc
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, MethodNotFoundError
from a2a.utils.grpc_status import status_to_grpc
from django.conf import settings
from google.protobuf import empty_pb2
from google.protobuf.json_format import ParseDict
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2

from agents.cards import agent_url
from agents.models import Agent
from tasks_app import metrics
from tasks_app.db import UNAVAILABLE_ERRORS, db
from tasks_app.events import HEARTBEAT
from tasks_app.protocol import operations
from tasks_app.protocol.auth import (
    CALLER_REFUSED,
    CallerRefused,
    authorization_caller,
)
from tasks_app.protocol.call import Call, Pending
from tasks_app.protocol.errors import grpc_status, store_unavailable
from tasks_app.protocol.http import SEND_METHODS, check_version_value_1, idempotency_key_value
from tasks_app.protocol.validation import check_request, check_required_fields
from tasks_app.quotas import quota_check
from tenants.forwarded import entries, trusted_proxies

logger = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["A2AService"].full_name
# What each unary rpc answers; the streaming ones answer StreamResponse.
RESPONSE_TYPES = {
    "SendMessage": pb.SendMessageResponse,
    "GetTask": pb.Task,
    "CancelTask": pb.Task,
    "ListTasks": pb.ListTasksResponse,
    "CreateTaskPushNotificationConfig": pb.TaskPushNotificationConfig,
    "GetTaskPushNotificationConfig": pb.TaskPushNotificationConfig,
    "ListTaskPushNotificationConfigs": pb.ListTaskPushNotificationConfigsResponse,
    "DeleteTaskPushNotificationConfig": empty_pb2.Empty,
    "GetExtendedAgentCard": pb.AgentCard,
}
MAX_STATUS_MESSAGE_BYTES = 1024  # of an error's message, UTF-8, in its trailers
ADDRESS_HINT = "the tenant field must name the agent as '<tenant>/<agent>', as its card's GRPC interface says"


def _metadata(context) -> dict[str, str]:
    """The request's text metadata, by lowercase key (gRPC keys are lowercase already)."""
    return {
        key.lower(): value for key, value in (context.invocation_metadata() or ()) if isinstance(value, str)
    }


def _address(tenant: str) -> tuple[str, str]:
    tenant_slug, _, agent_slug = tenant.partition("/")
    if not tenant_slug or not agent_slug:
        raise InvalidParamsError(message=f"Invalid params: {ADDRESS_HINT}")
    return tenant_slug, agent_slug


def _peer_address(context) -> str:
    """The caller's address from gRPC's peer string ('ipv4:127.0.0.1:5555', 'ipv6:[::1]:5555')."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")]
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return ""


class Refused(Exception):
    """The caller may not call: UNAUTHENTICATED or PERMISSION_DENIED, with the HTTP bindings' challenge.

    Not A2A errors, so no ErrorInfo in the A2A domain: the code says it all. The
    Bearer challenge goes in the `www-authenticate` trailer.
    """

    def __init__(self, refused: CallerRefused):
        message = refused.reason.message
        super().__init__(message)
        code = code_pb2.UNAUTHENTICATED if refused.unauthenticated else code_pb2.PERMISSION_DENIED
        self.status = status_pb2.Status(code=code, message=message)
        self.trailer = (("www-authenticate", refused.challenge()),)


@dataclass(frozen=True)
class PendingCall(Pending):
    """A gRPC request's Call, before its agent is looked up: the gRPC twin of http.PendingCall.

    resolve() runs on a database thread, in the operation's first trip there
    (or in a trip of its own for an operation that needs a resolved Call), in
    the order every binding checks: the agent (no agent tells nothing), the
    A2A version, the caller (UNAUTHENTICATED, PERMISSION_DENIED), its quotas.
    """

    tenant: str  # as the request sent it
    tenant_slug: str
    agent_slug: str
    method: str
    version: str
    authorization: str
    peer: str
    idempotency_key: str  # as sent: judged once the caller is
    base_url: str

    def resolve_for(self, agent: Agent | None) -> Call:
        if agent is None:
            # Missing, disabled, or another tenant's: the same answer, which tells nothing.
            raise MethodNotFoundError(message=f"No agent at tenant '{self.tenant}'")
        check_version_value_1(self.version)
        uri = agent_url(agent, self.base_url)
        try:
            caller = authorization_caller(self.authorization, agent, self.method, uri=uri)
        except CALLER_REFUSED as exc:
            raise Refused(CallerRefused(agent, exc)) from None
        key = idempotency_key_value(self.idempotency_key)
        # The same quotas as the HTTP bindings, before anything is stored (RESOURCE_EXHAUSTED).
        quota_check(caller, self.method, self.peer)
        return Call(caller=caller, base_url=self.base_url, idempotency_key=key)


class A2AServicer(a2a_pb2_grpc.A2AServiceServicer):
    """The A2AService of the generated stubs, on the platform's operations.

    `base_url` is the HTTP base the extended card's URLs are built on (PUBLIC_BASE_URL,
    or the address of the web process next to this one).
    """

    def __init__(self, base_url: str):
        self.base_url = base_url
        # Behind a proxy: the caller is who its `x-forwarded-for` names (tenants/forwarded.py).
        self.proxies = trusted_proxies(settings.GRPC_TRUSTED_PROXY_COUNT)

    async def _call(self, method: str, request, context):
        """The preamble: the checked request, then the Call (agent, version, caller, quotas).

        Sets request.tenant to the tenant's slug. An operation marked
        takes_pending_call gets a PendingCall, which it resolves in its own
        first trip to a database thread; any other gets the resolved Call.
        """
        check_required_fields(request)
        check_request(request)
        tenant_slug, agent_slug = _address(request.tenant)
        metadata = _metadata(context)
        key = metadata.get("idempotency-key", "") if method in SEND_METHODS else ""
        pending = PendingCall(
            tenant=request.tenant,
            tenant_slug=tenant_slug,
            agent_slug=agent_slug,
            method=method,
            version=metadata.get("a2a-version", "").strip(),
            authorization=metadata.get("authorization", ""),
            peer=self._caller_address(context),
            idempotency_key=key,
            base_url=self.base_url,
        )
        # The operations check `tenant` against the caller's tenant, as on the HTTP bindings.
        request.tenant = tenant_slug
        _request_type, operation, _streaming = operations.METHODS[method]
        if getattr(operation, "takes_pending_call", False):
            return pending
        return await db(pending.resolve)

    def _caller_address(self, context) -> str:
        """The peer's address; behind trusted proxies, the caller their `x-forwarded-for` names."""
        peer = _peer_address(context)
        if self.proxies is None:
            return peer
        forwarded = [
            value
            for key, value in (context.invocation_metadata() or ())
            if key.lower() == "x-forwarded-for" and isinstance(value, str)
        ]
        return self.proxies.caller(peer, entries(forwarded))

    async def _unary(self, method: str, request, context):
        started = time.perf_counter()
        try:
            call = await self._call(method, request, context)
            _request_type, operation, _streaming = operations.METHODS[method]
            result = await operation(call, request)
            answer = ParseDict(result, RESPONSE_TYPES[method](), ignore_unknown_fields=True)
            metrics.request_done("grpc", method, "ok", time.perf_counter() - started)
            return answer
        except Exception as exc:
            status, trailer = _failure(exc, method)
            metrics.request_done("grpc", method, _outcome(exc), time.perf_counter() - started)
        await _abort(context, status, trailer)

    async def _stream(self, method: str, request, context):
        started = time.perf_counter()
        try:
            call = await self._call(method, request, context)
            _request_type, operation, _streaming = operations.METHODS[method]
            events = await operation(call, request)
            # A stream counts once it is accepted; its duration is the time to that answer.
            metrics.request_done("grpc", method, "ok", time.perf_counter() - started)
            started = None
            async for item in events:
                # gRPC keeps its connections alive with HTTP/2 pings: no keep-alive messages.
                if item is HEARTBEAT:
                    continue
                _seq, payload = item
                yield ParseDict(payload, pb.StreamResponse(), ignore_unknown_fields=True)
            return
        except Exception as exc:
            if isinstance(exc, CallerRefused):
                # The caller's credentials went away while the stream was open (operations.Recheck).
                exc = Refused(exc)
            status, trailer = _failure(exc, method)
            if started is not None:
                metrics.request_done("grpc", method, _outcome(exc), time.perf_counter() - started)
        await _abort(context, status, trailer)

    async def SendMessage(self, request, context):
        return await self._unary("SendMessage", request, context)

    async def SendStreamingMessage(self, request, context):
        async for event in self._stream("SendStreamingMessage", request, context):
            yield event

    async def GetTask(self, request, context):
        return await self._unary("GetTask", request, context)

    async def ListTasks(self, request, context):
        return await self._unary("ListTasks", request, context)

    async def CancelTask(self, request, context):
        return await self._unary("CancelTask", request, context)

    async def SubscribeToTask(self, request, context):
        async for event in self._stream("SubscribeToTask", request, context):
            yield event

    async def CreateTaskPushNotificationConfig(self, request, context):
        return await self._unary("CreateTaskPushNotificationConfig", request, context)

    async def GetTaskPushNotificationConfig(self, request, context):
        return await self._unary("GetTaskPushNotificationConfig", request, context)

    async def ListTaskPushNotificationConfigs(self, request, context):
        return await self._unary("ListTaskPushNotificationConfigs", request, context)

    async def DeleteTaskPushNotificationConfig(self, request, context):
        return await self._unary("DeleteTaskPushNotificationConfig", request, context)

    async def GetExtendedAgentCard(self, request, context):
        return await self._unary("GetExtendedAgentCard", request, context)


def _outcome(exc: Exception) -> str:
    """The requests counter's outcome label of a failed rpc, as the HTTP bindings name it."""
    if isinstance(exc, Refused):
        return "unauthenticated" if exc.status.code == code_pb2.UNAUTHENTICATED else "forbidden"
    name = type(exc).__name__.removesuffix("Error") or "Error"
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _failure(exc: Exception, method: str) -> tuple[status_pb2.Status, tuple]:
    """The status that answers an rpc that raised `exc` (a cancellation, the client gone, is not caught)."""
    if isinstance(exc, Refused):
        return exc.status, exc.trailer
    if isinstance(exc, A2AError):
        return grpc_status(exc), ()
    if isinstance(exc, UNAVAILABLE_ERRORS):
        logger.warning("gRPC %s: the database is unavailable: %r", method, exc)
        return grpc_status(store_unavailable(exc)), ()
    logger.exception("Unhandled error in gRPC %s", method)
    return grpc_status(InternalError(message="Internal error")), ()


async def _abort(context, status: status_pb2.Status, trailer: tuple) -> None:
    """End the rpc with `status`, the rich status in the grpc-status-details-bin trailer.

    The message goes out twice in the trailers (grpc-message, where each byte
    outside ASCII is percent-encoded into three, and inside the base64 of the rich
    status), which a client refuses above 8 KiB or so: a message that quotes a long
    request value (a 10,000-character tenant) is cut short, or the client would
    see RESOURCE_EXHAUSTED instead of the answer.
    """
    encoded = status.message.encode()
    if len(encoded) > MAX_STATUS_MESSAGE_BYTES:
        ellipsis = "…"
        kept = encoded[: MAX_STATUS_MESSAGE_BYTES - len(ellipsis.encode())].decode(errors="ignore")
        status = status_pb2.Status(code=status.code, message=kept + ellipsis, details=status.details)
    code, details, rich_trailer = status_to_grpc(status)
    await context.abort(code, details, trailing_metadata=(*rich_trailer, *trailer))


class _UnreadableRequests(grpc.aio.ServerInterceptor):
    """A request whose bytes are no message of its type is INVALID_ARGUMENT, not UNKNOWN.

    The generated handlers decode the request before any code of ours runs, and
    grpc answers their DecodeError (bad UTF-8 in a string field, a truncated
    message) with UNKNOWN. Here the unary-request handlers take the bytes and
    decode them themselves.
    """

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer

        async def request_of(raw: bytes, context):
            try:
                return decode(raw)
            except DecodeError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"The request cannot be read: {exc}")

        if handler.response_streaming:
            stream = handler.unary_stream

            async def unary_stream(raw, context):
                async for response in stream(await request_of(raw, context), context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, response_serializer=handler.response_serializer
            )
        unary = handler.unary_unary

        async def unary_unary(raw, context):
            return await unary(await request_of(raw, context), context)

        serialize = handler.response_serializer
        return grpc.unary_unary_rpc_method_handler(unary_unary, response_serializer=serialize)


def grpc_server(base_url: str) -> grpc.aio.Server:
    """A grpc.aio server with the A2AService and reflection (for grpcurl); the caller adds ports.

    Create it on the loop that will run it. Requests up to A2A_MAX_REQUEST_BYTES, as on HTTP.
    """
    from grpc_reflection.v1alpha import reflection

    size = settings.A2A_MAX_REQUEST_BYTES
    options = [("grpc.max_receive_message_length", size), ("grpc.max_send_message_length", -1)]
    # grpc binds with SO_REUSEPORT by default: a second platform on the same port would
    # silently take half of the connections instead of failing to start.
    options.append(("grpc.so_reuseport", 0))
    server = grpc.aio.server(options=options, interceptors=[_UnreadableRequests()])
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(A2AServicer(base_url), server)
    reflection.enable_server_reflection([SERVICE_NAME, reflection.SERVICE_NAME], server)
    return server
