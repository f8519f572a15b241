"""The preamble every binding and dialect runs before an operation, in one place.

The JSON-RPC binding (jsonrpc.py), HTTP+JSON (rest.py) and the older dialects
(legacy/) each find the agent, check the A2A version, accept a JSON body and
resolve the caller through these; each then frames the answer (and a refusal:
401 or 403 with a Bearer challenge) in its own wire format. For the operations
that take one, JSON-RPC and REST hand over a PendingCall instead (gRPC its
own, grpc_binding.py): the agent lookup and the caller's checks then run in the
operation's own first trip to a database thread.
"""

import re
from dataclasses import dataclass

from a2a.utils.errors import A2AError, InvalidParamsError, VersionNotSupportedError
from django.conf import settings
from django.core.exceptions import RequestDataTooBig

from agents.access import get_enabled_agent
from agents.cards import public_base_url, requested_version, version_major
from agents.models import Agent
from tasks_app.access import Caller
from tasks_app.db import db
from tasks_app.protocol.auth import (
    CALLER_REFUSED,
    CallerRefused,
    resolve_caller,
)
from tasks_app.protocol.call import Call, Pending
from tasks_app.protocol.sse import last_event_id
from tasks_app.quotas import quota_admit, quota_check

JSON_CONTENT_TYPES = {"application/json", "application/json-rpc", "application/jsonrequest"}


def is_json_content_type(content_type: str) -> bool:
    return not content_type or content_type in JSON_CONTENT_TYPES or content_type.endswith("+json")


def payload_too_large_message() -> str:
    return f"Payload too large: the request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


def check_version_1(request) -> None:
    check_version_value_1(requested_version(request))


def check_version_value_1(sent: str) -> None:
    """The A2A version a request names (HTTP header or gRPC `a2a-version` metadata) must be 1.x."""
    version = sent or "0.3"
    if version_major(version) != "1":
        hint = "" if sent else " (no A2A-Version header means 0.3)"
        raise VersionNotSupportedError(
            message=f"A2A version '{version}'{hint} is not supported for this method; send 'A2A-Version: 1.0'"
        )


def check_version_legacy(request, method: str) -> None:
    """An older dialect's method (0.3, the draft) is served with no version, or a 0.x one.

    A request naming 1.x is processed with 1.x semantics (spec §3.6), which have
    no such method; a2a-sdk refuses it as an unsupported version too. So it is
    -32009, as is a version this endpoint does not speak at all (2.0, 'abc'),
    as on the 1.0 methods and the card. Its code is the 1.0 one: a client that
    names a version knows it.
    """
    sent = requested_version(request)
    major = version_major(sent) if sent else "0"
    if major == "1":
        raise VersionNotSupportedError(
            message=f"A2A version '{sent}' is not supported for '{method}', a method of A2A 0.3 and older: "
            "call its 1.0 twin (SendMessage, GetTask, ...), or send it without an A2A-Version header"
        )
    if major != "0":
        raise VersionNotSupportedError(
            message=f"A2A version '{sent}' is not supported; this endpoint speaks 1.0 and 0.3"
        )


async def find_agent(tenant_slug: str, agent_slug: str) -> Agent | None:
    """The enabled agent at /a2a/<tenant>/<agent>/, or None (the binding answers "no agent")."""
    return await db(get_enabled_agent, tenant_slug, agent_slug)


# The methods an Idempotency-Key applies to.
SEND_METHODS = frozenset({"SendMessage", "SendStreamingMessage"})
# The methods a Last-Event-ID resumes (they answer a stream). Any other ignores the header, as
# HTTP ignores a header that means nothing to it: a client whose shared headers carry one still gets its task.
STREAMING_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})
# An sf-string (RFC 8941) as the httpapi draft sends it, or the bare token many clients send.
IDEMPOTENCY_KEY_RE = re.compile(r'"([\x20-\x21\x23-\x5b\x5d-\x7e]{1,255})"|([\x21\x23-\x7e]{1,255})')


def idempotency_key(request) -> str:
    """The Idempotency-Key header's key ('' without one); a malformed one is InvalidParams."""
    return idempotency_key_value(request.headers.get("Idempotency-Key", ""))


def idempotency_key_value(value: str) -> str:
    """The key of an Idempotency-Key header (or gRPC `idempotency-key` metadata) value."""
    value = value.strip()
    if not value:
        return ""
    found = IDEMPOTENCY_KEY_RE.fullmatch(value)
    if found is None:
        raise InvalidParamsError(
            message="Idempotency-Key must be a quoted string (or a token) of 1-255 printable ASCII characters"
        )
    return found.group(1) or found.group(2)


async def call_for(request, agent: Agent, method: str) -> Call:
    """The Call for the 1.0 operation `method`.

    Raises one of CALLER_REFUSED if the caller may not call, and QuotaExceeded
    if the tenant's quotas refuse it (before the operation stores anything).
    """
    if request.headers.get("Authorization") or settings.SESSION_COOKIE_NAME in request.COOKIES:
        caller = await db(resolve_caller, request, agent, method)
    else:
        # No token and no session: nothing to look up, so no trip to a database thread.
        caller = resolve_caller(request, agent, method)
    # Judged after the caller: one who may not call hears that first, whatever the request says.
    key = idempotency_key(request) if method in SEND_METHODS else ""
    # REMOTE_ADDR: the peer, or behind trusted proxies the caller they name (a2a_platform/forwarded.py).
    await quota_admit(caller, method, request.META.get("REMOTE_ADDR", ""))
    return _call(request, caller, key, method)


def _call(request, caller: Caller, key: str, method: str) -> Call:
    return Call(
        caller=caller,
        last_event_id=last_event_id(request) if method in STREAMING_METHODS else None,
        base_url=public_base_url(request),
        idempotency_key=key,
    )


class NoAgent(Exception):
    """No enabled agent at the request's URL: the binding answers "No agent at this URL"."""


async def call_and_params(request, tenant_slug: str, agent_slug: str, method: str, operation, parse):
    """The call and the request proto (`parse()`) for the 1.0 operation `method`.

    In the bindings' order of checks: no agent first, then the version and the
    request, then the caller and its quotas. An operation marked
    takes_pending_call gets a PendingCall: its own first trip to a database
    thread looks the agent up and resolves the caller, one hand-off fewer. The
    version and the parse need no database, so they run before that trip;
    when either fails the agent is looked up after all, so that "no agent"
    still comes first. Raises NoAgent and CallerRefused, which the binding
    answers.
    """
    if getattr(operation, "takes_pending_call", False):
        try:
            check_version_1(request)
            params = parse()
        except (A2AError, RequestDataTooBig):
            if await find_agent(tenant_slug, agent_slug) is None:
                raise NoAgent() from None
            raise
        return PendingCall(request, tenant_slug, agent_slug, method), params
    agent = await find_agent(tenant_slug, agent_slug)
    if agent is None:
        raise NoAgent()
    check_version_1(request)
    params = parse()
    try:
        return await call_for(request, agent, method), params
    except CALLER_REFUSED as exc:
        raise CallerRefused(agent, exc) from None


@dataclass(frozen=True)
class PendingCall(Pending):
    """The Call of a request whose agent is not looked up yet (operations.takes_pending_call).

    What find_agent and call_for do, left to the operation's first trip to a
    database thread: one hand-off per request instead of two or three.
    resolve() raises NoAgent and CallerRefused, which the binding answers.
    """

    request: object
    tenant_slug: str
    agent_slug: str
    method: str

    def resolve_for(self, agent: Agent | None) -> Call:
        if agent is None:
            raise NoAgent()
        request, method = self.request, self.method
        try:
            caller = resolve_caller(request, agent, method)
        except CALLER_REFUSED as exc:
            raise CallerRefused(agent, exc) from None
        key = idempotency_key(request) if method in SEND_METHODS else ""
        quota_check(caller, method, request.META.get("REMOTE_ADDR", ""))
        return _call(request, caller, key, method)
