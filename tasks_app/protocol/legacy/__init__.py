"""Older A2A dialects (0.3 and the 0.1 draft) on the JSON-RPC endpoint.

A legacy request is recognised by its method name (old names contain '/'),
with no A2A-Version header or a 0.x one (any other version, 1.x too, is -32009:
http.check_version_legacy). Which dialect answers:

- `message/*`, `tasks/pushNotificationConfig/*`, `agent/getAuthenticatedExtendedCard`: 0.3.
- `tasks/send`, `tasks/sendSubscribe`, `tasks/pushNotification/*`: the draft.
- `tasks/get`, `tasks/cancel`, `tasks/resubscribe` exist in both with the same
  params. The task decides: one created by a draft client (it has a draft id,
  common.draft_id) is answered in the draft shape, every other one in 0.3.
"""

import logging

from a2a.compat.v0_3 import types as types_v03
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, TaskNotFoundError

from tasks_app.db import UNAVAILABLE_ERRORS, db
from tasks_app.protocol.auth import CALLER_REFUSED, CallerRefused
from tasks_app.protocol.errors import (
    QuotaExceeded,
    StoreUnavailable,
    jsonrpc_http_status,
    store_unavailable,
    unavailable_headers,
)
from tasks_app.protocol.legacy import draft, v03
from tasks_app.protocol.legacy.common import Exchange, draft_id, find_task, parse_model
from tasks_app.protocol.validation import check_int32
from tasks_app.protocol.wire_json import JsonAnswer

logger = logging.getLogger(__name__)

# The 1.0 operation (and so the scope) behind each method both dialects share.
SHARED_TASK_METHODS = {
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
}

# Params by position (a JSON-RPC array): no A2A method, of any dialect, takes them.
BY_NAME = "Invalid params: this method takes its params by name, in an object"

LEGACY_METHODS: frozenset[str] = frozenset({*v03.HANDLERS, *draft.HANDLERS, *SHARED_TASK_METHODS})


async def dispatch(request, body: dict, agent, request_id) -> JsonAnswer:
    method = body["method"]
    dialect = draft if method in draft.HANDLERS else v03
    params = body.get("params") or {}
    ex = Exchange(
        request=request,
        agent=agent,
        request_id=request_id,
        method=method,
        params=params if isinstance(params, dict) else {},
        error_codes=dialect.ERROR_CODES,
    )
    try:
        if not isinstance(params, dict):
            raise InvalidParamsError(message=BY_NAME)
        if method in SHARED_TASK_METHODS:
            return await _task_method(ex)
        return await dialect.HANDLERS[method](ex)
    except CALLER_REFUSED as exc:
        status, error, challenge = CallerRefused(agent, exc).answer()
        return ex.error(error, status, challenge)
    except (QuotaExceeded, StoreUnavailable) as error:
        # A quota refusal is 429 and a store outage 503, with Retry-After, here too; other errors
        # travel with 200.
        return ex.error(error, jsonrpc_http_status(error), unavailable_headers(error))
    except UNAVAILABLE_ERRORS as exc:
        error = store_unavailable(exc)
        return ex.error(error, jsonrpc_http_status(error), unavailable_headers(error))
    except A2AError as error:
        return ex.error(error)
    except Exception:
        logger.exception("Unhandled error in legacy JSON-RPC request %r (%s)", request_id, method)
        return ex.error(InternalError(message="Internal error"))


async def _task_method(ex: Exchange):
    # TaskQueryParams covers both dialects' {id, historyLength, metadata}.
    params = parse_model(types_v03.TaskQueryParams, ex.params)
    check_int32(params.history_length, "historyLength")  # both dialects copy it into an int32 field
    call = await ex.call(SHARED_TASK_METHODS[ex.method])
    task = await db(find_task, call.caller, params.id)
    if task is None:
        raise TaskNotFoundError()
    ex.show_client_id(task)
    dialect = draft if draft_id(task) else v03
    ex.error_codes = dialect.ERROR_CODES
    return await dialect.TASK_HANDLERS[ex.method](ex, call, task, params)
