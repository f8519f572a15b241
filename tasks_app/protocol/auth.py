"""Who is calling: resolves the Caller of an A2A request and checks its scopes.

Public agents accept anonymous callers (who share one scope, as in the SDK).
Authenticated agents need an OAuth2 bearer token of the agent's tenant with the
scope the method needs.
"""

from agents.models import Agent
from tasks_app.access import Caller

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


class CallerUnauthenticated(Exception):
    """No valid credentials: HTTP 401 with a WWW-Authenticate challenge."""

    def __init__(self, message: str = "Authentication required: send 'Authorization: Bearer <token>'"):
        super().__init__(message)
        self.message = message


class CallerForbidden(Exception):
    """Valid credentials without the needed scope: HTTP 403."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def www_authenticate(agent: Agent, error: str | None = None) -> str:
    value = f'Bearer realm="a2a/{agent.tenant.slug}/{agent.slug}"'
    if error:
        value += f', error="{error}"'
    return value


def resolve_caller(request, agent: Agent, method: str) -> Caller:
    """The Caller for one request to `agent`'s `method`. Runs in a sync thread."""
    if agent.is_public:
        return Caller(tenant=agent.tenant, agent=agent)
    raise CallerUnauthenticated()
