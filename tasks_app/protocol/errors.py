"""A2A errors in the shapes each binding sends them."""

import math

from a2a.utils.error_handlers import A2A_DOMAIN, ERROR_INFO_TYPE, build_error_details
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2A_ERROR_REASONS,
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    InternalError,
)

# Seconds a client is told to wait before retrying when the store is unavailable.
RETRY_AFTER_SECONDS = 5


class StoreUnavailable(InternalError):
    """The database could not be reached: nothing was stored. A system error (-32603, HTTP 503)."""

    def __init__(self, message: str | None = None):
        super().__init__(
            message=message or "The task store (database) is unavailable; nothing was stored. Retry later."
        )


# The JSON-RPC code of QuotaExceeded: in the server-error range the spec leaves to
# implementations (-32000 to -32099), clear of A2A's own -32001 to -32009.
QUOTA_EXCEEDED_CODE = -32029
RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"


class QuotaExceeded(A2AError):
    """A tenant's quota refuses the request before anything is stored (tasks_app/quotas.py).

    `reason` is "RATE_LIMIT_EXCEEDED" (requests per minute) or "RUNNING_TURNS_EXCEEDED";
    `retry_after` the whole seconds to wait; `limit` the limit that refused. Every
    binding answers it as "too many requests": HTTP 429 with Retry-After (REST and
    JSON-RPC), JSON-RPC code QUOTA_EXCEEDED_CODE with data {"retryAfter", "reason",
    "limit"}, gRPC RESOURCE_EXHAUSTED (with ErrorInfo and RetryInfo details).
    """

    RATE = "RATE_LIMIT_EXCEEDED"
    RUNNING_TURNS = "RUNNING_TURNS_EXCEEDED"

    def __init__(self, message: str, *, reason: str, retry_after: float, limit: int):
        self.reason = reason
        # Whole seconds, at least one: Retry-After takes an integer.
        self.retry_after = max(1, math.ceil(retry_after))
        self.limit = limit
        super().__init__(
            message=message, data={"retryAfter": self.retry_after, "reason": reason, "limit": limit}
        )

    def details(self) -> list[dict]:
        """google.rpc details: ErrorInfo (reason, domain, metadata) and RetryInfo."""
        metadata = {"retryAfter": str(self.retry_after), "limit": str(self.limit)}
        return [
            {"@type": ERROR_INFO_TYPE, "reason": self.reason, "domain": A2A_DOMAIN, "metadata": metadata},
            {"@type": RETRY_INFO_TYPE, "retryDelay": f"{self.retry_after}s"},
        ]


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


def jsonrpc_error(error: A2AError) -> dict:
    """The JSON-RPC error object, with an ErrorInfo detail where the error has a reason."""
    if isinstance(error, QuotaExceeded):
        return {"code": QUOTA_EXCEEDED_CODE, "message": error.message, "data": error.data}
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
