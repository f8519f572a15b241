"""The HTTP+JSON binding at /a2a/<tenant>/<agent>/rest/..., with the /{tenant} prefix form.

Paths follow the proto's google.api.http rules. Bodies and answers are 1.0
ProtoJSON; errors are google.rpc.Status JSON with an ErrorInfo detail.
"""

import json
import logging
import re

from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
)
from a2a.utils.proto_utils import parse_params, validate_proto_required_fields
from asgiref.sync import sync_to_async
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents.access import get_enabled_agent
from agents.cards import public_base_url
from tasks_app.protocol import operations
from tasks_app.protocol.auth import CallerForbidden, CallerUnauthenticated, resolve_caller, www_authenticate
from tasks_app.protocol.errors import rest_error
from tasks_app.protocol.jsonrpc import _is_json_content_type, check_version_1
from tasks_app.protocol.jsonrpc import parse_params as parse_body
from tasks_app.protocol.operations import Call
from tasks_app.protocol.sse import last_event_id, sse_response

logger = logging.getLogger(__name__)
A2A_JSON = "application/a2a+json"

# (HTTP verbs, path pattern, 1.0 method). Path parameters become request fields.
ROUTES = [
    ({"POST"}, r"message:send", "SendMessage"),
    ({"POST"}, r"message:stream", "SendStreamingMessage"),
    ({"POST"}, r"tasks/(?P<id>[^/:]+):cancel", "CancelTask"),
    # The proto says GET, the spec prose says POST: accept both (A2A #1574).
    ({"GET", "POST"}, r"tasks/(?P<id>[^/:]+):subscribe", "SubscribeToTask"),
    ({"GET"}, r"tasks/(?P<id>[^/:]+)", "GetTask"),
    ({"GET"}, r"tasks", "ListTasks"),
    ({"POST"}, r"tasks/(?P<taskId>[^/:]+)/pushNotificationConfigs", "CreateTaskPushNotificationConfig"),
    ({"GET"}, r"tasks/(?P<taskId>[^/:]+)/pushNotificationConfigs", "ListTaskPushNotificationConfigs"),
    (
        {"GET"},
        r"tasks/(?P<taskId>[^/:]+)/pushNotificationConfigs/(?P<id>[^/]+)",
        "GetTaskPushNotificationConfig",
    ),
    (
        {"DELETE"},
        r"tasks/(?P<taskId>[^/:]+)/pushNotificationConfigs/(?P<id>[^/]+)",
        "DeleteTaskPushNotificationConfig",
    ),
    ({"GET"}, r"extendedAgentCard", "GetExtendedAgentCard"),
]
PATH_FIELDS = {"taskId": "task_id"}
COMPILED = [(verbs, re.compile(pattern + "$"), method) for verbs, pattern, method in ROUTES]


def _match(path: str, verb: str):
    """(method, path params) for a path, or (None, None); ('', None) when only the verb is wrong."""
    verb_mismatch = False
    for verbs, pattern, method in COMPILED:
        found = pattern.match(path)
        if found:
            if verb in verbs:
                return method, found.groupdict()
            verb_mismatch = True
    return ("", None) if verb_mismatch else (None, None)


def _route(rest: str, verb: str, tenant: str):
    """Resolve a path, with or without the `/{tenant}` prefix of the 1.0 REST bindings."""
    method, params = _match(rest, verb)
    if method is None and "/" in rest:
        prefix, _, remainder = rest.partition("/")
        method, params = _match(remainder, verb)
        if method and prefix != tenant:
            raise InvalidParamsError(message=f"tenant '{prefix}' does not match this endpoint's tenant")
    return method, params


def error_response(error: A2AError, status: int | None = None, headers: dict | None = None) -> JsonResponse:
    code, body = rest_error(error)
    if status is not None:
        code = body["error"]["code"] = status
        body["error"]["status"] = {
            401: "UNAUTHENTICATED",
            403: "PERMISSION_DENIED",
            405: "UNIMPLEMENTED",
        }.get(status, body["error"]["status"])
    return JsonResponse(body, status=code, headers=headers)


def _body(request) -> dict:
    if not request.body.strip():
        return {}
    if not _is_json_content_type(request.content_type):
        raise ContentTypeNotSupportedError(
            message=f"Content-Type '{request.content_type}' is not supported; send {A2A_JSON}"
        )
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(message=f"Invalid JSON payload: {exc}") from None
    # A JSON null body (seen from some clients on :cancel) means "no fields".
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidRequestError(message="The request body must be a JSON object")
    return body


def _parse(request, request_type, path_params: dict):
    """The request proto: path parameters plus the query (GET, DELETE) or the JSON body."""
    if request.method not in ("GET", "DELETE"):
        return parse_body({**_body(request), **path_params}, request_type)
    parsed = request_type()
    try:
        parse_params(request.GET, parsed)
    except Exception as exc:  # protobuf's parse errors on query values
        raise InvalidParamsError(message=f"Invalid query parameters: {exc}") from None
    for name, value in path_params.items():
        setattr(parsed, PATH_FIELDS.get(name, name), value)
    validate_proto_required_fields(parsed)
    return parsed


@csrf_exempt
async def rest_endpoint(request, tenant: str, agent: str, rest: str):
    try:
        method_name, path_params = _route(rest, request.method, tenant)
        if method_name == "":
            return error_response(MethodNotFoundError(message=f"{request.method} is not allowed here"), 405)
        if method_name is None:
            return error_response(MethodNotFoundError(message=f"No A2A operation at '{rest}'"))
        found = await sync_to_async(get_enabled_agent)(tenant, agent)
        if found is None:
            return error_response(MethodNotFoundError(message="No agent at this URL"))
        check_version_1(request)
        request_type, operation, streaming = operations.METHODS[method_name]
        params = _parse(request, request_type, path_params)
        try:
            caller = await sync_to_async(resolve_caller)(request, found, method_name)
        except CallerUnauthenticated as exc:
            challenge = {"WWW-Authenticate": www_authenticate(found, "invalid_token")}
            return error_response(InvalidRequestError(message=exc.message), 401, challenge)
        except CallerForbidden as exc:
            challenge = {"WWW-Authenticate": www_authenticate(found, "insufficient_scope")}
            return error_response(InvalidRequestError(message=exc.message), 403, challenge)
        call = Call(caller=caller, last_event_id=last_event_id(request), base_url=public_base_url(request))
        if streaming:
            return sse_response(await operation(call, params), lambda payload: payload)
        return JsonResponse(await operation(call, params), content_type=A2A_JSON)
    except A2AError as error:
        return error_response(error)
    except Exception:
        logger.exception("Unhandled error in REST request %s %s", request.method, rest)
        return error_response(InternalError(message="Internal error"))
