"""The HTTP+JSON binding at /a2a/<tenant>/<agent>/rest/..., with the /{tenant} prefix form.

Paths follow the proto's google.api.http rules. Bodies and answers are 1.0
ProtoJSON; errors are google.rpc.Status JSON with an ErrorInfo detail.
"""

import functools
import logging
import re

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
)
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.views.decorators.csrf import csrf_exempt

from tasks_app.db import UNAVAILABLE_ERRORS
from tasks_app.metrics import error_outcome, name_method, observe_requests
from tasks_app.protocol import operations
from tasks_app.protocol.auth import CallerRefused
from tasks_app.protocol.errors import (
    RequestContentTypeNotSupported,
    rest_error,
    store_unavailable,
    unavailable_headers,
)
from tasks_app.protocol.http import (
    NoAgent,
    call_and_params,
    is_json_content_type,
    payload_too_large_message,
)
from tasks_app.protocol.sse import sse_response
from tasks_app.protocol.validation import load_json, parse_request
from tasks_app.protocol.wire_json import JsonAnswer

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
COMPILED = [(verbs, re.compile(pattern + "$"), method) for verbs, pattern, method in ROUTES]


def _match(path: str, verb: str):
    """(method, path params, verbs the path allows); method None when nothing matches the verb.

    A path some route knows under other verbs answers 405 with those verbs in `Allow`.
    """
    allowed: set[str] = set()
    for verbs, pattern, method in COMPILED:
        found = pattern.match(path)
        if found:
            if verb in verbs:
                return method, found.groupdict(), verbs
            allowed |= verbs
    return None, None, allowed


def _route(rest: str, verb: str, tenant: str):
    """Resolve a path, with or without the `/{tenant}` prefix of the 1.0 REST bindings.

    A path led by the endpoint's own tenant is read as prefixed first, as SDK clients send it:
    a tenant may be named like a route ("tasks/tasks" at tenant `tasks` lists its tasks; a task's
    id is never "tasks"). Any other path is read as it is, then as prefixed by another tenant.
    """
    prefix, slash, remainder = rest.partition("/")
    if slash and prefix == tenant:
        method, params, allowed = _match(remainder, verb)
        if method or allowed:
            return method, params, allowed
    method, params, allowed = _match(rest, verb)
    if method is None and not allowed and slash:
        method, params, allowed = _match(remainder, verb)
        if method and prefix != tenant:
            raise InvalidParamsError(message=f"tenant '{prefix}' does not match this endpoint's tenant")
    return method, params, allowed


def error_response(error: A2AError, status: int | None = None, headers: dict | None = None) -> JsonAnswer:
    code, body = _error_body(error, status)
    return error_outcome(JsonAnswer(body, status=code, headers=headers), error, status)


def _error_body(error: A2AError, status: int | None) -> tuple[int, dict]:
    """The HTTP status and google.rpc.Status body of `error`, answered with `status` if given."""
    code, body = rest_error(error)
    if status is not None:
        code = body["error"]["code"] = status
        body["error"]["status"] = {
            401: "UNAUTHENTICATED",
            403: "PERMISSION_DENIED",
            405: "UNIMPLEMENTED",
        }.get(status, body["error"]["status"])
    return code, body


def _refused_frame(refused: CallerRefused) -> dict:
    """The last event of a stream whose caller's credentials went away: the refusal's Status body."""
    status, error, _challenge = refused.answer()
    return _error_body(error, status)[1]


def _body(request) -> dict:
    raw = request.body  # RequestDataTooBig over the size limit: the endpoint answers 413
    if not raw.strip():
        return {}
    if not is_json_content_type(request.content_type):
        raise RequestContentTypeNotSupported(
            message=f"Content-Type '{request.content_type}' is not supported; send {A2A_JSON}"
        )
    try:
        body = load_json(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(message=f"Invalid JSON payload: {exc}") from None
    # A JSON null body (seen from some clients on :cancel) means "no fields".
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidRequestError(message="The request body must be a JSON object")
    return body


def _query(request, request_type) -> dict:
    """The query parameters a request type knows, as ProtoJSON (the spec's query encoding).

    Booleans must be true or false; repeated fields take repeated or comma-separated
    values; everything else (numbers, enum names, timestamps) is checked by the parse.
    """
    fields = {field.camelcase_name: field for field in request_type.DESCRIPTOR.fields}
    data: dict = {}
    for name in request.GET:
        field = fields.get(name)
        if field is None:
            continue  # A2A-Version and anything a newer client adds
        values = request.GET.getlist(name)
        if field.is_repeated:
            data[name] = [item for value in values for item in value.split(",") if item]
        elif field.type == field.TYPE_BOOL:
            if values[-1].lower() not in ("true", "false"):
                raise InvalidParamsError(message=f"Invalid params: {name} must be true or false")
            data[name] = values[-1].lower() == "true"
        else:
            data[name] = values[-1]
    return data


def _parse(request, request_type, path_params: dict):
    """The request proto: path parameters plus the query (GET, DELETE) or the JSON body."""
    if request.method in ("GET", "DELETE"):
        fields = _query(request, request_type)
    else:
        fields = _body(request)
    return parse_request({**fields, **path_params}, request_type)


def response_type(request) -> str:
    """application/a2a+json for a client whose Accept names it, else application/json."""
    accepted = {item.split(";")[0].strip().lower() for item in request.headers.get("Accept", "").split(",")}
    return A2A_JSON if A2A_JSON in accepted else "application/json"


@csrf_exempt
@observe_requests("rest")
async def rest_endpoint(request, tenant: str, agent: str, rest: str = ""):
    response = await _answer(request, tenant, agent, rest)
    if isinstance(response, JsonAnswer):
        response["Content-Type"] = response_type(request)
    return response


async def _answer(request, tenant: str, agent: str, rest: str):
    try:
        method_name, path_params, allowed = _route(rest, request.method, tenant)
        name_method(request, method_name, operations.METHODS)
        if method_name is None and allowed:
            return error_response(
                MethodNotFoundError(message=f"{request.method} is not allowed here"),
                405,
                {"Allow": ", ".join(sorted(allowed))},
            )
        if method_name is None:
            return error_response(MethodNotFoundError(message=f"No A2A operation at '{rest}'"))
        request_type, operation, streaming = operations.METHODS[method_name]
        parse = functools.partial(_parse, request, request_type, path_params)
        call, params = await call_and_params(request, tenant, agent, method_name, operation, parse)
        if streaming:
            events = await operation(call, params)
            return sse_response(events, lambda payload: payload, refused=_refused_frame)
        return JsonAnswer(await operation(call, params))
    except RequestDataTooBig:
        # Over DATA_UPLOAD_MAX_MEMORY_SIZE (the A2A_MAX_REQUEST_BYTES setting): Django refuses to read it.
        return error_response(InvalidRequestError(message=payload_too_large_message()), 413)
    except TooManyFieldsSent as exc:
        # Django will not read a query with more fields than DATA_UPLOAD_MAX_NUMBER_FIELDS.
        return error_response(InvalidRequestError(message=f"Bad request: {exc}"), 400)
    except NoAgent:
        return error_response(MethodNotFoundError(message="No agent at this URL"))
    except CallerRefused as refused:
        status, error, challenge = refused.answer()
        return error_response(error, status, challenge)
    except A2AError as error:
        return error_response(error, headers=unavailable_headers(error) or None)
    except UNAVAILABLE_ERRORS as exc:
        logger.warning("REST request %s %s: the database is unavailable: %r", request.method, rest, exc)
        error = store_unavailable(exc)
        return error_response(error, headers=unavailable_headers(error))
    except Exception:
        logger.exception("Unhandled error in REST request %s %s", request.method, rest)
        return error_response(InternalError(message="Internal error"))
