"""A2A errors in the shapes each binding sends them."""

import json

from a2a.utils.error_handlers import A2A_DOMAIN, build_error_details
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2A_ERROR_REASONS,
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ContentTypeNotSupportedError,
    ErrorMapping,
    InternalError,
    InvalidParamsError,
)
from a2a.utils.proto_utils import validation_errors_to_bad_request
from google.rpc import code_pb2, error_details_pb2, status_pb2

from tasks_app.commits import CommitUnknown
from tasks_app.quotas import QuotaExceeded
from tasks_app.services import IdempotencyKeyReused

# Seconds a client is told to wait before retrying when the store is unavailable.
RETRY_AFTER_SECONDS = 5


class StoreUnavailable(InternalError):
    """The database could not be reached: nothing was stored. A system error (-32603, HTTP 503)."""

    def __init__(self, message: str | None = None):
        super().__init__(
            message=message or "The task store (database) is unavailable; nothing was stored. Retry later."
        )


MAY_BE_STORED = (
    "The task store (database) went away as this request was being stored, and it may have been. "
    "Read the task (or its webhook configs) once the store is back, before sending it again."
)


def store_unavailable(exc: Exception) -> StoreUnavailable:
    """The answer to a request the store failed: nothing was stored, or after a COMMIT that got no
    answer and could not be checked since (commits.CommitUnknown), it may have been."""
    return StoreUnavailable(MAY_BE_STORED if isinstance(exc, CommitUnknown) else None)


# The JSON-RPC code of QuotaExceeded: in the server-error range the spec leaves to
# implementations (-32000 to -32099), clear of A2A's own -32001 to -32009.
QUOTA_EXCEEDED_CODE = -32029


class RequestContentTypeNotSupported(ContentTypeNotSupportedError):
    """The request body's Content-Type is not one we read (-32005; HTTP 415 on REST)."""


def unavailable_headers(error: A2AError) -> dict:
    """Retry-After for a store outage or a quota refusal, nothing for other errors."""
    if isinstance(error, QuotaExceeded):
        return {"Retry-After": str(error.retry_after)}
    return {"Retry-After": str(RETRY_AFTER_SECONDS)} if isinstance(error, StoreUnavailable) else {}


def jsonrpc_http_status(error: A2AError) -> int:
    """JSON-RPC errors travel with HTTP 200, but for a store outage (503) and a quota refusal (429)."""
    if isinstance(error, QuotaExceeded):
        return 429
    return 503 if isinstance(error, StoreUnavailable) else 200


def protocol_error(error: A2AError) -> A2AError:
    """The error as the SDK's own class nearest to it, whose codes the SDK's tables know.

    Our subclasses (IdempotencyKeyReused, StoreUnavailable) are not in those
    tables, which look errors up by their exact type.
    """
    for cls in type(error).__mro__:
        if cls in JSON_RPC_ERROR_CODE_MAP:
            return error if cls is type(error) else cls(message=error.message, data=error.data)
    return error


def jsonrpc_error(error: A2AError) -> dict:
    """The JSON-RPC error object, with an ErrorInfo detail where the error has a reason."""
    if isinstance(error, QuotaExceeded):
        return {"code": QUOTA_EXCEEDED_CODE, "message": error.message, "data": error.data}
    error = protocol_error(error)
    body = {"code": JSON_RPC_ERROR_CODE_MAP.get(type(error), -32603), "message": error.message}
    if type(error) in A2A_ERROR_REASONS:
        body["data"] = build_error_details(error)
    return body


def rest_error(error: A2AError) -> tuple[int, dict]:
    """HTTP status and google.rpc.Status body for the HTTP+JSON binding."""
    if isinstance(error, QuotaExceeded):
        status = 429
        body = {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "message": error.message,
            "details": error.details(),
        }
        return status, {"error": body}
    special = error
    error = protocol_error(error)
    mapping = A2A_ERROR_MAPPING.get(type(error))
    status, grpc_status = (mapping.http_code, mapping.grpc_status) if mapping else (500, "INTERNAL")
    if isinstance(special, StoreUnavailable):
        status, grpc_status = 503, "UNAVAILABLE"
    elif isinstance(special, IdempotencyKeyReused):
        # The httpapi draft's answer to a key reused with another body.
        status = 422
    elif isinstance(special, RequestContentTypeNotSupported):
        status = 415
    return status, {
        "error": {
            "code": status,
            "status": grpc_status,
            "message": error.message,
            "details": build_error_details(error),
        }
    }


def _mapping(error: A2AError) -> ErrorMapping:
    """The spec's codes for an error, through its class's bases (StoreUnavailable is an InternalError)."""
    for cls in type(error).__mro__:
        if cls in A2A_ERROR_MAPPING:
            return A2A_ERROR_MAPPING[cls]
    return A2A_ERROR_MAPPING[InternalError]


def grpc_status(error: A2AError) -> status_pb2.Status:
    """The google.rpc.Status of the gRPC binding: the spec's code, the message, an ErrorInfo detail.

    ErrorInfo.metadata holds strings only: other values of the error's data go as JSON.
    An InvalidParams with field errors also carries a google.rpc.BadRequest, as in the SDK.
    """
    if isinstance(error, QuotaExceeded):
        return _quota_grpc_status(error)
    mapping = _mapping(error)
    code = "UNAVAILABLE" if isinstance(error, StoreUnavailable) else mapping.grpc_status
    data = error.data if isinstance(error.data, dict) else {}
    info = error_details_pb2.ErrorInfo(
        reason=mapping.reason,
        domain=A2A_DOMAIN,
        metadata={k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items()},
    )
    status = status_pb2.Status(code=code_pb2.Code.Value(code), message=error.message)
    status.details.add().Pack(info)
    if isinstance(error, InvalidParamsError) and data.get("errors"):
        status.details.add().Pack(validation_errors_to_bad_request(data["errors"]))
    return status


def _quota_grpc_status(error: QuotaExceeded) -> status_pb2.Status:
    """RESOURCE_EXHAUSTED with the refusal's ErrorInfo and a RetryInfo, as over REST."""
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=error.message)
    info = error_details_pb2.ErrorInfo(
        reason=error.reason,
        domain=A2A_DOMAIN,
        metadata={"retryAfter": str(error.retry_after), "limit": str(error.limit)},
    )
    status.details.add().Pack(info)
    retry = error_details_pb2.RetryInfo()
    retry.retry_delay.seconds = error.retry_after
    status.details.add().Pack(retry)
    return status
