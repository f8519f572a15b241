"""A2A errors in the shapes each binding sends them."""

from a2a.utils.error_handlers import build_error_details
from a2a.utils.errors import A2A_ERROR_MAPPING, A2A_ERROR_REASONS, JSON_RPC_ERROR_CODE_MAP, A2AError


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
    return status, {
        "error": {
            "code": status,
            "status": grpc_status,
            "message": error.message,
            "details": build_error_details(error),
        }
    }
