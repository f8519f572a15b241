"""Who is calling: resolves the Caller of an A2A request and checks its scopes.

Three kinds of callers, checked in this order:
- a bearer token (OAuth2, django-oauth-toolkit) of the agent's tenant: the
  caller is that client (or, for an interactive token, that person), with the
  token's scopes. A token of another tenant is an invalid token, exactly like
  an unknown one, so it reveals nothing about the tenant it belongs to;
- a logged-in member of the tenant (console session), with a valid CSRF token;
- nobody: accepted on public agents only (all anonymous callers share one scope,
  as in the SDK).
"""

import functools

from a2a.utils.errors import A2AError, InvalidParamsError, InvalidRequestError
from django.contrib.auth import get_user_model
from django.http.multipartparser import MultiPartParserError
from django.utils.encoding import escape_uri_path
from rest_framework.authentication import CSRFCheck

from agents.approvals import APPROVE_SCOPE
from agents.models import Agent
from tasks_app.access import Caller
from tenants.access import session_holds
from tenants.models import Membership
from tenants.oauth import bearer_token_verify, is_bearer

# Which OAuth2 scope each A2A 1.0 operation needs.
METHOD_SCOPES = {
    "SendMessage": "a2a:invoke",
    "SendStreamingMessage": "a2a:invoke",
    "CancelTask": "a2a:invoke",
    "GetTask": "a2a:read",
    "ListTasks": "a2a:read",
    "SubscribeToTask": "a2a:read",
    "CreateTaskPushNotificationConfig": "a2a:push",
    "GetTaskPushNotificationConfig": "a2a:push",
    "ListTaskPushNotificationConfigs": "a2a:push",
    "DeleteTaskPushNotificationConfig": "a2a:push",
    "GetExtendedAgentCard": None,
}
# Roles whose members see every caller's tasks of the tenant.
SEES_ALL_ROLES = {Membership.Role.OWNER, Membership.Role.OPERATOR}


class CallerUnauthenticated(Exception):
    """No valid credentials: HTTP 401 with a WWW-Authenticate challenge.

    `error` is the RFC 6750 error code of the challenge: "invalid_token" when a
    bearer token was sent and is no good, None when the request had no
    credentials or used another scheme (§3.1: then the challenge names no error).
    """

    def __init__(
        self,
        message: str = "Authentication required: send 'Authorization: Bearer <token>'",
        error: str | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.error = error


class CallerForbidden(Exception):
    """Valid credentials without the needed scope: HTTP 403."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


# What resolve_caller raises when the caller may not call; CallerRefused.answer() says how to answer.
CALLER_REFUSED = (CallerUnauthenticated, CallerForbidden)


class CallerRefused(Exception):
    """One of CALLER_REFUSED (`reason`), with the agent the binding's answer names in its challenge.

    Raised when the agent is known: resolving a call, or checking a stream's caller again.
    Each binding frames answer() (HTTP) or its parts (gRPC) its own way.
    """

    def __init__(self, agent: Agent, reason: CallerUnauthenticated | CallerForbidden):
        super().__init__(str(reason))
        self.agent = agent
        self.reason = reason

    @property
    def unauthenticated(self) -> bool:
        """No valid credentials (401, UNAUTHENTICATED), rather than not the scope (403, PERMISSION_DENIED)."""
        return isinstance(self.reason, CallerUnauthenticated)

    def challenge(self) -> str:
        """The WWW-Authenticate value the answer carries."""
        return www_authenticate(
            self.agent, self.reason.error if self.unauthenticated else "insufficient_scope"
        )

    def answer(self) -> tuple[int, A2AError, dict[str, str]]:
        """The HTTP bindings' answer: status, error and the Bearer challenge header."""
        error = InvalidRequestError(message=self.reason.message)
        return (401 if self.unauthenticated else 403), error, {"WWW-Authenticate": self.challenge()}


def check_tenant(call, request) -> None:
    """A request that names a tenant (the 1.0 `tenant` field) must name the endpoint's own."""
    tenant = getattr(request, "tenant", "")
    if tenant and tenant != call.caller.tenant.slug:
        raise InvalidParamsError(message=f"tenant '{tenant}' does not match this endpoint's tenant")


def www_authenticate(agent: Agent, error: str | None = None) -> str:
    """The Bearer challenge for a 401 or 403 from `agent`'s endpoints.

    Pass CallerUnauthenticated.error for a 401: a request that sent no token
    gets a challenge without an error code (RFC 6750 section 3.1).
    """
    value = f'Bearer realm="a2a/{agent.tenant.slug}/{agent.slug}"'
    if error:
        value += f', error="{error}"'
    return value


def _member_role(user, agent: Agent) -> str | None:
    return (
        Membership.objects.filter(user=user, tenant_id=agent.tenant_id).values_list("role", flat=True).first()
    )


def _token_caller(authorization: str, uri: str, agent: Agent, method: str) -> Caller:
    token = bearer_token_verify(authorization, uri)
    # Same message for unknown, expired, revoked and other-tenant tokens: nothing to learn from it.
    invalid = CallerUnauthenticated("The access token is invalid, expired or revoked", error="invalid_token")
    if token is None or token.application is None or token.application.tenant_id != agent.tenant_id:
        raise invalid
    scopes = frozenset(token.scope.split())
    needed = METHOD_SCOPES.get(method)
    if needed and needed not in scopes:
        raise CallerForbidden(
            f"{method} needs the '{needed}' scope; this token has: {' '.join(sorted(scopes))}"
        )
    approver = APPROVE_SCOPE in scopes
    # Judged again the same way: a token revoked or expired since, its client's or person's access gone.
    recheck = functools.partial(_token_recheck, authorization, uri, agent, method)
    if token.user_id is None:
        client = token.application
        # An approving client sees the tasks it is asked to decide on, like an operator does.
        return Caller(
            tenant=agent.tenant,
            agent=agent,
            principal=f"client:{client.client_id}",
            scopes=scopes,
            sees_all=approver,
            may_approve=approver,
            name=client.name or client.client_id,
            recheck=recheck,
        )
    # An interactive token acts for its person, who must still belong to the tenant.
    role = _member_role(token.user, agent)
    if role is None:
        raise invalid
    return Caller(
        tenant=agent.tenant,
        agent=agent,
        principal=f"user:{token.user_id}",
        scopes=scopes,
        sees_all=role in SEES_ALL_ROLES,
        # Both: the person's role gives the right, the token's scope lets this program use it.
        may_approve=approver and role in SEES_ALL_ROLES,
        name=token.user.get_username(),
        recheck=recheck,
    )


def _session_caller(request, agent: Agent) -> Caller | None:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    # The A2A endpoints skip Django's CSRF middleware (programs post there); a
    # browser session only counts with a valid CSRF token, so another site
    # cannot act with the operator's cookie.
    check = CSRFCheck(lambda _request: None)
    check.process_request(request)
    try:
        if check.process_view(request, None, (), {}) is not None:
            return None
    except MultiPartParserError:
        # A form body Django cannot read (multipart with no boundary) carries no token it can see.
        return None
    role = _member_role(user, agent)
    if role is None:
        return None
    return Caller(
        tenant=agent.tenant,
        agent=agent,
        principal=f"user:{user.pk}",
        scopes=frozenset(s for s in METHOD_SCOPES.values() if s),
        sees_all=role in SEES_ALL_ROLES,
        may_approve=role in SEES_ALL_ROLES,
        name=user.get_username(),
        recheck=functools.partial(_session_recheck, user.pk, request.session.session_key, agent),
    )


def _token_recheck(authorization: str, uri: str, agent: Agent, method: str) -> None:
    """Raises what a new request with the same token would be refused with."""
    _token_caller(authorization, uri, agent, method)


def _session_recheck(user_pk, session_key: str, agent: Agent) -> None:
    """Raises CallerUnauthenticated once the session that called is over or its user left the tenant."""
    user = get_user_model().objects.filter(pk=user_pk, is_active=True).first()
    if user is None or not session_holds(session_key, user) or _member_role(user, agent) is None:
        raise CallerUnauthenticated("The session is over, or no longer has this agent's tenant")


def judged_again(caller: Caller) -> bool:
    """For a stream that outlives its request: whether its agent is still served and its caller may call.

    False once the agent is disabled or deleted; raises one of CALLER_REFUSED
    once the caller's credentials no longer let it call (Caller.recheck).
    """
    if not Agent.objects.filter(pk=caller.agent.pk, enabled=True).exists():
        return False
    caller.recheck()
    return True


def _still_public(agent_pk) -> None:
    """Raises CallerUnauthenticated once the agent an anonymous caller called is no longer public."""
    if not Agent.objects.filter(pk=agent_pk, visibility=Agent.Visibility.PUBLIC).exists():
        raise CallerUnauthenticated()


def resolve_caller(request, agent: Agent, method: str) -> Caller:
    """The Caller for one HTTP request to `agent`'s `method`. Runs in a sync thread."""
    authorization = request.headers.get("Authorization", "")
    if not authorization:
        caller = _session_caller(request, agent)
        if caller is not None:
            return caller
    # The resource a token is checked against (RFC 8707) is the endpoint, not its query: oauthlib
    # decodes the query, and refuses one with "[" or a bad %-escape with a ValueError.
    uri = request.build_absolute_uri(escape_uri_path(request.path))  # as sent: "%3F" stays no "?"
    return authorization_caller(authorization, agent, method, uri=uri)


def authorization_caller(authorization: str, agent: Agent, method: str, *, uri: str) -> Caller:
    """The Caller from an `Authorization` value alone: what every binding checks for a token.

    The gRPC binding calls this with its `authorization` metadata (it has no
    sessions). Runs in a sync thread when a token was sent (it is looked up).
    """
    if is_bearer(authorization):
        # A caller that presents a token is judged by it, on public agents too.
        return _token_caller(authorization, uri, agent, method)
    if authorization:
        raise CallerUnauthenticated("Only 'Authorization: Bearer <token>' is accepted")
    if agent.is_public:
        return Caller(tenant=agent.tenant, agent=agent, recheck=functools.partial(_still_public, agent.pk))
    raise CallerUnauthenticated()
