"""What the 0.3 and draft dialects share: operation calls, task lookup, errors, SSE framing.

Task lookup knows the draft dialect's client-chosen ids (DraftTaskAlias): a
mapping that lives here and in draft.py only, never in the 1.0 core.

Both dialects translate their requests to A2A 1.0 protos, run the 1.0
operations from operations.METHODS and translate the results back; nothing
here decides anything the 1.0 operations do not.
"""

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError, InvalidParamsError
from django.db.models import Case, When
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from tasks_app.access import get_task_for_caller, tasks_visible_to
from tasks_app.events import HEARTBEAT
from tasks_app.metrics import error_outcome
from tasks_app.models import Artifact, DraftTaskAlias, Task
from tasks_app.protocol import operations
from tasks_app.protocol.auth import CallerRefused
from tasks_app.protocol.call import Call
from tasks_app.protocol.errors import QuotaExceeded, jsonrpc_error, protocol_error
from tasks_app.protocol.http import call_for
from tasks_app.protocol.sse import sse_response
from tasks_app.protocol.validation import (
    check_request,
    check_required_fields,
    check_text,
    check_values,
    parse_dict,
)
from tasks_app.protocol.wire_json import JsonAnswer

logger = logging.getLogger(__name__)

STANDARD_CODES = frozenset({-32700, -32600, -32601, -32602, -32603})


@dataclass
class Exchange:
    """One legacy JSON-RPC request on its way through a dialect."""

    request: object
    agent: object
    request_id: str | int | None
    method: str
    params: dict
    error_codes: frozenset[int]
    # Our task ids -> the ids the client knows them by (draft tasks), for error messages.
    task_aliases: dict[str, str] = field(default_factory=dict)

    def show_client_id(self, task: Task) -> None:
        """Errors about this task name it by the client's own id (a draft task's), not our UUID."""
        if draft_id(task):
            self.task_aliases[str(task.pk)] = draft_id(task)

    async def call(self, method: str) -> Call:
        """The Call for the 1.0 operation `method` (its scope decides what the caller needs)."""
        return await call_for(self.request, self.agent, method)

    def result(self, result) -> JsonAnswer:
        return JsonAnswer({"jsonrpc": "2.0", "id": self.request_id, "result": result})

    def error(self, error: A2AError, status: int = 200, headers: dict | None = None) -> JsonAnswer:
        wire = legacy_error(error, self.error_codes, self.task_aliases)
        body = {"jsonrpc": "2.0", "id": self.request_id, "error": wire}
        return error_outcome(JsonAnswer(body, status=status, headers=headers), error, status)

    def stream(self, items: AsyncIterator, event_name: Callable[[dict], str | None] | None = None):
        """SSE of (seq, {"result": ...}) items; an error after the first event ends it with an error frame."""
        codes = self.error_codes
        aliases = self.task_aliases
        request_id = self.request_id

        async def guarded():
            try:
                async for item in items:
                    yield item
            except A2AError as error:
                yield None, {"error": legacy_error(error, codes, aliases)}
            except CallerRefused as refused:
                # The caller's credentials went away while the stream was open (operations.Recheck).
                error = refused.answer()[1]
                yield None, {"error": legacy_error(error, codes, aliases)}
            except Exception:
                logger.exception("Legacy stream %r failed", request_id)
                yield None, {"error": {"code": -32603, "message": "Internal error"}}

        return sse_response(
            guarded(), lambda payload: {"jsonrpc": "2.0", "id": request_id, **payload}, event_name
        )


def legacy_error(error: A2AError, codes: frozenset[int], task_aliases: dict[str, str] | None = None) -> dict:
    """A JSON-RPC error as the old dialects sent it: `data` a plain object, only codes they knew.

    task_aliases (our id -> the client's) rewrites task ids in the message and data.
    """

    def shown(value):
        if isinstance(value, str):
            for ours, theirs in (task_aliases or {}).items():
                value = value.replace(ours, theirs)
        return value

    if isinstance(error, QuotaExceeded):
        # No old dialect had a quota error: ours, with its plain-object data, is the clearest answer.
        return jsonrpc_error(error)
    code = JSON_RPC_ERROR_CODE_MAP.get(type(protocol_error(error)), -32603)
    body = {"code": code if code in codes else -32603, "message": shown(error.message)}
    if isinstance(error.data, dict) and error.data:
        body["data"] = {key: shown(value) for key, value in error.data.items()}
    return body


def parse_model(model, params: dict):
    """Validate params with a pydantic model; a mismatch is -32602 with the fields named.

    Their strings are checked first (validation.check_values): pydantic takes a NUL
    or an unpaired surrogate, which the lookups and protos made of them do not.
    """
    check_values(params)
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'params'}: {error['msg']}"
            for error in exc.errors()[:5]
        )
        raise InvalidParamsError(message=f"Invalid params: {problems}") from None


def parse_proto(data: dict, proto):
    """ProtoJSON into a fresh proto; bad base64, wrong types or unknown enum names are -32602."""
    return parse_dict(data, proto)


def has_operation(name: str) -> bool:
    return name in operations.METHODS


async def run(name: str, call: Call, request, missing: A2AError | None = None, **options):
    """Run the 1.0 operation `name`, looked up now: push operations register themselves later.

    A request built as a different (but field-compatible) proto is carried
    over through ProtoJSON, so a changed request type does not break us.
    `options` go to the operation (the draft's tasks/send passes its own `send`).
    """
    entry = operations.METHODS.get(name)
    if entry is None:
        raise missing or InvalidParamsError(message=f"{name} is not available on this platform")
    request_type, operation, _streaming = entry
    if not isinstance(request, request_type):
        request = parse_proto(MessageToDict(request), request_type())
    check_required_fields(request)
    check_request(request)  # the same checks the 1.0 bindings make
    return await operation(call, request, **options)


def find_task(caller, task_id: str) -> Task | None:
    """A draft client's own id first (it may even look like a UUID), then the platform's id.

    Loads the task's draft id too, so draft_id() needs no query (callers are async).
    """
    check_text(task_id, "id")
    # The caller's own first: an operator sees every caller's tasks, and two may share an id.
    alias = (
        DraftTaskAlias.objects.filter(task__in=tasks_visible_to(caller), client_task_id=task_id)
        .order_by(Case(When(owner=caller.principal, then=0), default=1))
        .first()
    )
    task = get_task_for_caller(caller, str(alias.task_id) if alias else task_id)
    if task is not None:
        draft_id(task)
    return task


def draft_id(task: Task) -> str | None:
    """The id a draft client named this task by, or None for a task made any other way."""
    # A missing alias raises RelatedObjectDoesNotExist, an AttributeError: getattr answers None.
    alias = getattr(task, "draft_alias", None)
    return alias.client_task_id if alias else None


def artifact_ids(task_pk) -> list[str]:
    """The task's artifact ids in the order snapshots list them."""
    return list(
        Artifact.objects.filter(task_id=task_pk)
        .order_by("created_at", "pk")
        .values_list("artifact_id", flat=True)
    )


async def translated(events: AsyncIterator, convert: Callable[[dict], list[dict]]) -> AsyncIterator:
    """Turn (seq, StreamResponse) items into (seq, {"result": ...}) items of a dialect.

    When one 1.0 event becomes several old ones, only the last carries the seq,
    so a client resuming with Last-Event-ID never skips the rest of them.
    """
    async for item in events:
        if item is HEARTBEAT:
            yield item
            continue
        seq, payload = item
        results = convert(payload)
        for index, result in enumerate(results):
            yield (seq if index == len(results) - 1 else None), {"result": result}
