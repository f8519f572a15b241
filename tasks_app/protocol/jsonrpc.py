"""The JSON-RPC 2.0 binding at /a2a/<tenant>/<agent>/."""

import logging

from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    VersionNotSupportedError,
)
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents.access import get_enabled_agent
from agents.cards import public_base_url
from tasks_app.db import UNAVAILABLE_ERRORS
from tasks_app.protocol import legacy, operations
from tasks_app.protocol.auth import CallerForbidden, CallerUnauthenticated, resolve_caller, www_authenticate
from tasks_app.protocol.errors import (
    StoreUnavailable,
    jsonrpc_error,
    jsonrpc_http_status,
    unavailable_headers,
)
from tasks_app.protocol.operations import Call
from tasks_app.protocol.sse import last_event_id, sse_response
from tasks_app.protocol.validation import load_json, parse_request

logger = logging.getLogger(__name__)

JSON_CONTENT_TYPES = {"application/json", "application/json-rpc", "application/jsonrequest"}


def _is_json_content_type(content_type: str) -> bool:
    return not content_type or content_type in JSON_CONTENT_TYPES or content_type.endswith("+json")


def _sent_version(request) -> str:
    """The A2A-Version a request names: header, else query parameter; '' when it names none."""
    value = request.headers.get("A2A-Version") or request.GET.get("A2A-Version") or ""
    return value.strip()


def requested_version(request) -> str:
    """The A2A-Version of a request: header, else query parameter; missing means 0.3."""
    return _sent_version(request) or "0.3"


def check_version_1(request) -> None:
    sent = _sent_version(request)
    version = sent or "0.3"
    if version.split(".")[0] != "1":
        hint = "" if sent else " (no A2A-Version header means 0.3)"
        raise VersionNotSupportedError(
            message=f"A2A version '{version}'{hint} is not supported for this method; send 'A2A-Version: 1.0'"
        )


def payload_too_large_message() -> str:
    return f"Payload too large: the request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


def error_response(request_id, error: A2AError, status: int = 200) -> JsonResponse:
    body = {"jsonrpc": "2.0", "id": request_id, "error": jsonrpc_error(error)}
    return JsonResponse(body, status=status, headers=unavailable_headers(error))


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
    if "params" in body and not isinstance(body["params"], dict | None):
        return InvalidRequestError(message="Invalid request: 'params' must be an object")
    return None


def parse_params(params: dict | None, request_type):
    return parse_request(params or {}, request_type)


@csrf_exempt
async def jsonrpc_endpoint(request, tenant: str, agent: str):
    if request.method != "POST":
        response = error_response(None, InvalidRequestError(message="JSON-RPC requests are POSTed"), 405)
        response["Allow"] = "POST"
        return response
    try:
        body = load_json(request.body)
    except RequestDataTooBig:
        # Over DATA_UPLOAD_MAX_MEMORY_SIZE (the A2A_MAX_REQUEST_BYTES setting): Django refuses to read it.
        return error_response(None, InvalidRequestError(message=payload_too_large_message()), 413)
    except (ValueError, UnicodeDecodeError) as exc:
        return error_response(None, JSONParseError(message=f"Invalid JSON payload: {exc}"))
    request_id = _request_id(body)
    try:
        if not _is_json_content_type(request.content_type):
            raise ContentTypeNotSupportedError(
                message=f"Content-Type '{request.content_type}' is not supported; send application/json"
            )
        envelope_error = _envelope_error(body)
        if envelope_error:
            raise envelope_error
        found = await sync_to_async(get_enabled_agent)(tenant, agent)
        if found is None:
            return error_response(request_id, MethodNotFoundError(message="No agent at this URL"), 404)
        if body["method"] in legacy.LEGACY_METHODS:
            return await legacy.dispatch(request, body, found, request_id)
        method = operations.METHODS.get(body["method"])
        if method is None:
            raise MethodNotFoundError(message=f"Method '{body['method']}' not found")
        request_type, operation, streaming = method
        check_version_1(request)
        params = parse_params(body.get("params"), request_type)
        try:
            caller = await sync_to_async(resolve_caller)(request, found, body["method"])
        except CallerUnauthenticated as exc:
            response = error_response(request_id, InvalidRequestError(message=exc.message), 401)
            response["WWW-Authenticate"] = www_authenticate(found, exc.error)
            return response
        except CallerForbidden as exc:
            response = error_response(request_id, InvalidRequestError(message=exc.message), 403)
            response["WWW-Authenticate"] = www_authenticate(found, "insufficient_scope")
            return response
        call = Call(caller=caller, last_event_id=last_event_id(request), base_url=public_base_url(request))
        if streaming:
            events = await operation(call, params)
            return sse_response(
                events, lambda payload: {"jsonrpc": "2.0", "id": request_id, "result": payload}
            )
        result = await operation(call, params)
        return JsonResponse({"jsonrpc": "2.0", "id": request_id, "result": result})
    except A2AError as error:
        return error_response(request_id, error, jsonrpc_http_status(error))
    except UNAVAILABLE_ERRORS as exc:
        logger.warning("JSON-RPC request %r: the database is unavailable: %r", request_id, exc)
        return error_response(request_id, StoreUnavailable(), 503)
    except Exception:
        logger.exception("Unhandled error in JSON-RPC request %r", request_id)
        return error_response(request_id, InternalError(message="Internal error"))
