"""The JSON-RPC 2.0 binding at /a2a/<tenant>/<agent>/."""

import functools
import logging

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
)
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.views.decorators.csrf import csrf_exempt

from tasks_app.db import UNAVAILABLE_ERRORS
from tasks_app.metrics import error_outcome, name_method, observe_requests
from tasks_app.protocol import legacy, operations
from tasks_app.protocol.auth import CallerRefused
from tasks_app.protocol.errors import (
    RequestContentTypeNotSupported,
    jsonrpc_error,
    jsonrpc_http_status,
    store_unavailable,
    unavailable_headers,
)
from tasks_app.protocol.http import (
    NoAgent,
    call_and_params,
    check_version_legacy,
    find_agent,
    is_json_content_type,
    payload_too_large_message,
)
from tasks_app.protocol.sse import sse_response
from tasks_app.protocol.validation import load_json, parse_request
from tasks_app.protocol.wire_json import JsonAnswer

logger = logging.getLogger(__name__)
# Method names counted by name in the metrics; anything else counts as "unknown".
KNOWN_METHODS = frozenset(operations.METHODS) | legacy.LEGACY_METHODS


def error_response(request_id, error: A2AError, status: int = 200, headers: dict | None = None) -> JsonAnswer:
    body = {"jsonrpc": "2.0", "id": request_id, "error": jsonrpc_error(error)}
    return error_outcome(JsonAnswer(body, status=status, headers=headers), error, status)


def _refused_frame(request_id, refused: CallerRefused) -> dict:
    """The last event of a stream whose caller may no longer call: the refusal, as a JSON-RPC error."""
    _status, error, _challenge = refused.answer()
    return {"jsonrpc": "2.0", "id": request_id, "error": jsonrpc_error(error)}


def _request_id(body) -> str | int | None:
    request_id = body.get("id") if isinstance(body, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | None):
        return None
    return request_id


def _envelope_error(body) -> InvalidRequestError | None:
    if isinstance(body, list):
        return InvalidRequestError(message="Batch requests are not supported")
    if not isinstance(body, dict):
        return InvalidRequestError(message="The request must be a JSON object")
    if body.get("jsonrpc") != "2.0":
        return InvalidRequestError(message="Invalid request: 'jsonrpc' must be exactly '2.0'")
    if "id" in body and (isinstance(body["id"], bool) or not isinstance(body["id"], str | int | None)):
        return InvalidRequestError(message="Invalid request: id must be a string, integer, or null")
    if not isinstance(body.get("method"), str) or not body["method"]:
        return InvalidRequestError(message="Invalid request: 'method' must be a non-empty string")
    # An array is a JSON-RPC request; the method (parse_params, legacy.dispatch) refuses it.
    if "params" in body and not isinstance(body["params"], dict | list | None):
        return InvalidRequestError(message="Invalid request: 'params' must be an object")
    return None


def parse_params(params: dict | list | None, request_type):
    if isinstance(params, list) and params:
        raise InvalidParamsError(message=legacy.BY_NAME)
    return parse_request(params or {}, request_type)


@csrf_exempt
@observe_requests("jsonrpc")
async def jsonrpc_endpoint(request, tenant: str, agent: str):
    if request.method != "POST":
        response = error_response(None, InvalidRequestError(message="JSON-RPC requests are POSTed"), 405)
        response["Allow"] = "POST"
        return response
    try:
        raw = request.body
    except RequestDataTooBig:
        # Over DATA_UPLOAD_MAX_MEMORY_SIZE (the A2A_MAX_REQUEST_BYTES setting): Django refuses to read it.
        return error_response(None, InvalidRequestError(message=payload_too_large_message()), 413)
    if not is_json_content_type(request.content_type):
        # Refused before the body is read as JSON; its id is echoed if it has one.
        try:
            request_id = _request_id(load_json(raw))
        except (ValueError, UnicodeDecodeError):
            request_id = None
        error = RequestContentTypeNotSupported(
            message=f"Content-Type '{request.content_type}' is not supported; send application/json"
        )
        return error_response(request_id, error)
    try:
        body = load_json(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return error_response(None, JSONParseError(message=f"Invalid JSON payload: {exc}"))
    request_id = _request_id(body)
    try:
        envelope_error = _envelope_error(body)
        if envelope_error:
            raise envelope_error
        name_method(request, body["method"], KNOWN_METHODS)
        method = operations.METHODS.get(body["method"])
        if method is None:
            found = await find_agent(tenant, agent)
            if found is None:
                raise NoAgent()
            if body["method"] in legacy.LEGACY_METHODS:
                check_version_legacy(request, body["method"])
                return await legacy.dispatch(request, body, found, request_id)
            raise MethodNotFoundError(message=f"Method '{body['method']}' not found")
        request_type, operation, streaming = method
        call, params = await call_and_params(
            request,
            tenant,
            agent,
            body["method"],
            operation,
            lambda: parse_params(body.get("params"), request_type),
        )
        if streaming:
            events = await operation(call, params)
            return sse_response(
                events,
                lambda payload: {"jsonrpc": "2.0", "id": request_id, "result": payload},
                refused=functools.partial(_refused_frame, request_id),
            )
        result = await operation(call, params)
        return JsonAnswer({"jsonrpc": "2.0", "id": request_id, "result": result})
    except TooManyFieldsSent as exc:
        # Django will not read a query with more fields than that (the A2A-Version lookup reads it).
        return error_response(request_id, InvalidRequestError(message=f"Bad request: {exc}"), 400)
    except NoAgent:
        return error_response(request_id, MethodNotFoundError(message="No agent at this URL"), 404)
    except CallerRefused as refused:
        status, error, challenge = refused.answer()
        return error_response(request_id, error, status, challenge)
    except A2AError as error:
        return error_response(request_id, error, jsonrpc_http_status(error), unavailable_headers(error))
    except UNAVAILABLE_ERRORS as exc:
        logger.warning("JSON-RPC request %r: the database is unavailable: %r", request_id, exc)
        error = store_unavailable(exc)
        return error_response(request_id, error, 503, unavailable_headers(error))
    except Exception:
        logger.exception("Unhandled error in JSON-RPC request %r", request_id)
        return error_response(request_id, InternalError(message="Internal error"))
