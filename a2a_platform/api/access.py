"""Who is calling the management API, and what they may do in one tenant.

A person (session, or an interactive OAuth2 token) acts with the role of their
membership. A program (client-credentials token) acts as an admin of its own
tenant, but cannot mint credentials, change members or act on tasks: those
need a person, so every credential change and operator action has one behind it.

Tokens, a person's or a program's, also need the scope of what they touch
(least privilege): `agents:manage` for agents and the tenant's setup,
`tasks:read` for task content (and `tasks:act` too to answer or cancel a task,
`a2a:approve` to grant or deny one), and a program needs `agents:publish` as well
to make an agent public or private. Any tenant the principal has no access to
answers 404, like a tenant that does not exist.
"""

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from oauth2_provider.models import AccessToken
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import BasePermission

from tenants.access import get_membership, role_allows
from tenants.models import Membership, Tenant

MANAGE_SCOPE = "agents:manage"
TASKS_READ_SCOPE = "tasks:read"
# With tasks:read: answer and cancel tasks in the person's name (grant and deny take a2a:approve).
TASKS_ACT_SCOPE = "tasks:act"
PUBLISH_SCOPE = "agents:publish"
API_SCOPES = (MANAGE_SCOPE, TASKS_READ_SCOPE, PUBLISH_SCOPE)


@dataclass(frozen=True)
class Admin:
    tenant: Tenant
    role: str
    # "user:<username>" or "client:<client_id>", as the audit log records it.
    actor: str
    # None for a program's token.
    user: AbstractBaseUser | None = None
    # The token's scopes; None for a session (a person at the console, judged by role alone).
    scopes: frozenset[str] | None = None

    def has_role(self, role: str) -> bool:
        return role_allows(self.role, role)

    @property
    def may_publish(self) -> bool:
        """Whether this principal may change an agent's visibility: a person, or a program with the scope."""
        return self.user is not None or PUBLISH_SCOPE in (self.scopes or ())


def request_token(request) -> AccessToken | None:
    return request.auth if isinstance(request.auth, AccessToken) else None


class IsAuthenticatedPrincipal(BasePermission):
    """A valid token (with or without a user) or a logged-in session."""

    def has_permission(self, request, view) -> bool:
        if request_token(request) is not None:
            return True
        return bool(request.user and request.user.is_authenticated)


def _not_found() -> NotFound:
    return NotFound()


def admin_resolve(request, tenant_slug: str, scopes: tuple[str, ...] = (MANAGE_SCOPE,)) -> Admin:
    """The Admin acting in tenant `tenant_slug`; NotFound if they have no access to it.

    A token needs one of `scopes` (PermissionDenied otherwise).
    """
    token = request_token(request)
    token_scopes = None
    if token is not None:
        client = token.application
        if client is None or client.tenant.slug != tenant_slug:
            raise _not_found()
        token_scopes = frozenset(token.scope.split())
        if not token_scopes & set(scopes):
            needed = " or ".join(f"'{scope}'" for scope in scopes)
            raise PermissionDenied(f"This needs a token with the {needed} scope")
        if token.user_id is None:
            return Admin(
                tenant=client.tenant,
                role=Membership.Role.OWNER,
                actor=f"client:{client.client_id}",
                scopes=token_scopes,
            )
        user = token.user
    else:
        user = request.user
    membership = get_membership(user, tenant_slug)
    if membership is None:
        raise _not_found()
    return Admin(
        tenant=membership.tenant,
        role=membership.role,
        actor=f"user:{user.username}",
        user=user,
        scopes=token_scopes,
    )


def tenants_of(request) -> list[tuple[Tenant, str]]:
    """The tenants the principal can manage, with its role in each."""
    token = request_token(request)
    if token is not None and not set(token.scope.split()) & set(API_SCOPES):
        return []
    if token is not None and token.user_id is None:
        if token.application is None:
            return []
        return [(token.application.tenant, Membership.Role.OWNER)]
    user = token.user if token is not None else request.user
    memberships = Membership.objects.select_related("tenant").filter(user=user).order_by("tenant__slug")
    if token is not None:
        # An interactive token is bound to its client's tenant, whatever else its person belongs to.
        if token.application is None:
            return []
        memberships = memberships.filter(tenant_id=token.application.tenant_id)
    return [(m.tenant, m.role) for m in memberships]
