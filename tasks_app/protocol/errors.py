"""A2A errors in the shapes each binding sends them."""

import json

from a2a.utils.error_handlers import A2A_DOMAIN, build_error_details
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2A_ERROR_REASONS,
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ErrorMapping,
    InternalError,
    InvalidParamsError,
)
from a2a.utils.proto_utils import validation_errors_to_bad_request
from google.rpc import code_pb2, error_details_pb2, status_pb2

# Seconds a client is told to wait before retrying when the store is unavailable.
RETRY_AFTER_SECONDS = 5


class StoreUnavailable(InternalError):
    """The database could not be reached: nothing was stored. A system error (-32603, HTTP 503)."""

    def __init__(self, message: str | None = None):
        super().__init__(
            message=message or "The task store (database) is unavailable; nothing was stored. Retry later."
        )


def unavailable_headers(error: A2AError) -> dict:
    """Retry-After for a store outage, nothing for other errors."""
    return {"Retry-After": str(RETRY_AFTER_SECONDS)} if isinstance(error, StoreUnavailable) else {}


def jsonrpc_http_status(error: A2AError) -> int:
    """JSON-RPC errors travel with HTTP 200, but for a store outage (503, as the spec's system errors)."""
    return 503 if isinstance(error, StoreUnavailable) else 200


def jsonrpc_error(error: A2AError) -> dict:
    """The JSON-RPC error object, with an ErrorInfo detail where the error has a reason."""
    body = {"code": JSON_RPC_ERROR_CODE_MAP.get(type(error), -32603), "message": error.message}
    if type(error) in A2A_ERROR_REASONS:
        body["data"] = build_error_details(error)
    return body


def rest_error(error: A2AError) -> tuple[int, dict]:
    """HTTP status and google.rpc.Status body for the HTTP+JSON binding."""
    mapping = A2A_ERROR_MAPPING.get(type(error))
    status, grpc_status = (mapping.http_code, mapping.grpc_status) if mapping else (500, "INTERNAL")
    if isinstance(error, StoreUnavailable):
        status, grpc_status = 503, "UNAVAILABLE"
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
