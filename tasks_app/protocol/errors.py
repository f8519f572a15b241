"""A2A errors in the shapes each binding sends them."""

from a2a.utils.error_handlers import build_error_details
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2A_ERROR_REASONS,
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
)

from tasks_app.services import IdempotencyKeyReused

# Seconds a client is told to wait before retrying when the store is unavailable.
RETRY_AFTER_SECONDS = 5


class StoreUnavailable(InternalError):
    """The database could not be reached: nothing was stored. A system error (-32603, HTTP 503)."""

    def __init__(self, message: str | None = None):
        super().__init__(
            message=message or "The task store (database) is unavailable; nothing was stored. Retry later."
        )


class RequestContentTypeNotSupported(ContentTypeNotSupportedError):
    """The request body's Content-Type is not one we read (-32005; HTTP 415 on REST)."""


def unavailable_headers(error: A2AError) -> dict:
    """Retry-After for a store outage, nothing for other errors."""
    return {"Retry-After": str(RETRY_AFTER_SECONDS)} if isinstance(error, StoreUnavailable) else {}


def jsonrpc_http_status(error: A2AError) -> int:
    """JSON-RPC errors travel with HTTP 200, but for a store outage (503, as the spec's system errors)."""
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
    error = protocol_error(error)
    body = {"code": JSON_RPC_ERROR_CODE_MAP.get(type(error), -32603), "message": error.message}
    if type(error) in A2A_ERROR_REASONS:
        body["data"] = build_error_details(error)
    return body


def rest_error(error: A2AError) -> tuple[int, dict]:
    """HTTP status and google.rpc.Status body for the HTTP+JSON binding."""
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
